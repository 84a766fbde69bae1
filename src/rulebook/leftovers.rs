//! Decomposed computations that came in with the graph and left it unchanged: the shapes the
//! recognize stage knows how to read (norms, GELU, rotate-half RoPE, attention) when some
//! instance of them did not meet a rule's conditions. `--trace` lists them, so a user sees why
//! an imported graph stayed large.
//!
//! A shape counts as left over when its root node's output is computed by the same op in the
//! input graph and in the optimized graph (the optimizer keeps the names of values it does not
//! rewrite): shapes a lowering writes for an EP that lacks the fused op are not reported.

use std::collections::{BTreeMap, HashMap};

use crate::ir::{Graph, Node};
use crate::opt::rules::Leftover;

/// A shape: its description, the ops of its root node, and a test on a root node (with the
/// graph's producers).
type Signature = (
    &'static str,
    &'static [&'static str],
    fn(&Node, &Producers<'_>) -> bool,
);

/// The shapes looked for, by their root node.
const SIGNATURES: &[Signature] = &[
    (
        "RMSNorm / LayerNorm (ReduceMean of a square)",
        &["ReduceMean"],
        mean_of_square,
    ),
    ("GELU (Erf or Tanh of x)", &["Erf", "Tanh"], gelu_core),
    (
        "rotate-half RoPE (Concat of a Neg half)",
        &["Concat"],
        rotate_half,
    ),
    (
        "attention (Softmax of MatMul scores)",
        &["Softmax"],
        softmax_of_scores,
    ),
];

/// The producer of each value of a graph.
struct Producers<'a>(HashMap<&'a str, &'a Node>);

impl<'a> Producers<'a> {
    fn of(graph: &'a Graph) -> Producers<'a> {
        Producers(
            graph
                .nodes
                .iter()
                .flat_map(|n| n.outputs.iter().map(move |o| (o.as_str(), n)))
                .collect(),
        )
    }

    /// The op that computes `value` (None for graph inputs and initializers).
    fn op(&self, value: &str) -> Option<&'a str> {
        self.0.get(value).map(|n| n.op_type.as_str())
    }
}

fn mean_of_square(n: &Node, p: &Producers<'_>) -> bool {
    n.op_type == "ReduceMean"
        && n.inputs.first().is_some_and(|i| match p.0.get(i.as_str()) {
            Some(sq) if sq.op_type == "Pow" => true,
            Some(sq) if sq.op_type == "Mul" => sq.inputs.first() == sq.inputs.get(1),
            _ => false,
        })
}

fn gelu_core(n: &Node, _: &Producers<'_>) -> bool {
    n.op_type == "Erf" || n.op_type == "Tanh"
}

fn rotate_half(n: &Node, p: &Producers<'_>) -> bool {
    n.op_type == "Concat" && n.inputs.iter().any(|i| p.op(i) == Some("Neg"))
}

fn softmax_of_scores(n: &Node, p: &Producers<'_>) -> bool {
    n.op_type == "Softmax" && n.inputs.first().is_some_and(|s| scores(s, p, 3))
}

/// Whether `value` is a MatMul, possibly scaled (Mul/Div) and masked (Add) on the way
/// (`depth` ops at most).
fn scores(value: &str, p: &Producers<'_>, depth: usize) -> bool {
    match p.0.get(value) {
        Some(n) if n.op_type == "MatMul" => true,
        Some(n) if depth > 0 && matches!(n.op_type.as_str(), "Add" | "Mul" | "Div") => {
            n.inputs.iter().any(|i| scores(i, p, depth - 1))
        }
        _ => false,
    }
}

/// The decomposed shapes of `input` that are still in `output`, by kind (kinds with none left
/// are omitted), in [`SIGNATURES`] order.
pub fn leftovers(input: &Graph, output: &Graph) -> Vec<Leftover> {
    let is_root = |n: &&Node| {
        SIGNATURES
            .iter()
            .any(|(_, ops, _)| ops.contains(&n.op_type.as_str()))
    };
    let roots: Vec<&Node> = output.nodes.iter().filter(is_root).collect();
    if roots.is_empty() {
        // Most optimized graphs: nothing to index the producers of both graphs for.
        return Vec::new();
    }
    let (before, after) = (Producers::of(input), Producers::of(output));
    let mut found: BTreeMap<usize, Leftover> = BTreeMap::new();
    for node in roots {
        let Some(out) = node.outputs.first() else {
            continue;
        };
        if before.op(out) != Some(node.op_type.as_str()) {
            continue;
        }
        for (i, (shape, ops, matches)) in SIGNATURES.iter().enumerate() {
            if ops.contains(&node.op_type.as_str()) && matches(node, &after) {
                found
                    .entry(i)
                    .or_insert_with(|| Leftover {
                        shape,
                        count: 0,
                        example: out.clone(),
                    })
                    .count += 1;
            }
        }
    }
    found.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, GraphBuilder, Shape};

    fn softmax_graph(scaled: bool) -> Graph {
        let mut b = GraphBuilder::new("g");
        let q = b.input("q", DType::F32, Shape::new(vec![2i64, 4, 4]));
        let k = b.input("k", DType::F32, Shape::new(vec![2i64, 4, 4]));
        b.output("y", DType::F32, Shape::new(vec![2i64, 4, 4]));
        let mut scores = b.op("MatMul", &[&q, &k], vec![]);
        if scaled {
            let c = b.constant(crate::ir::TensorData::from_f32(vec![], &[0.5]));
            scores = b.op("Mul", &[&scores, &c], vec![]);
        }
        b.op_into("Softmax", &[&scores], vec![], "y");
        b.finish()
    }

    #[test]
    fn shapes_that_survive_are_listed_and_new_ones_are_not() {
        let g = softmax_graph(true);
        let left = leftovers(&g, &g);
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].count, 1);
        assert_eq!(left[0].example, "y");
        // The same shape written by the optimizer (absent from the input) is not a leftover.
        let empty = GraphBuilder::new("g").finish();
        assert!(leftovers(&empty, &g).is_empty());
    }

    #[test]
    fn a_softmax_of_something_else_is_not_attention() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, Shape::new(vec![2i64, 4]));
        b.output("y", DType::F32, Shape::new(vec![2i64, 4]));
        let e = b.op("Exp", &[&x], vec![]);
        b.op_into("Softmax", &[&e], vec![], "y");
        let g = b.finish();
        assert!(leftovers(&g, &g).is_empty());
        assert_eq!(
            leftovers(&softmax_graph(false), &softmax_graph(false)).len(),
            1
        );
    }
}
