//! Dims an imported graph declares under names of its producer's choosing: a torch.onnx export
//! with `dynamic_axes={"present.0.key": {2: "total"}, "attention_mask": {1: "total"}}`
//! declares `total` where its graph computes `past + seq`. onnxruntime runs such a file; the
//! names are promises of the model's user (`total` will be `past + seq`), not contradictions.
//!
//! [`reconcile`] checks every declared output against the type inferred on the graph: two
//! different constants, a rank or a dtype that differs, or dims that differ by a constant
//! (`total` against `total + 1`) can never hold and are refused; any other difference is
//! recorded as an equality. A promised name is then read as what the graph computes wherever
//! the graph declares it (the mask's `total` becomes `past + seq`, which lets the rules that
//! need the mask to cover the cache fire), and [`Declared::restore`] puts the names back on
//! the inputs and outputs of the optimized graph. Input dims that the graph requires to be equal
//! (a Concat's off-axis dims, a MatMul's contracted ones) but that the inputs name apart are
//! read under one name first ([`aliases`]). Intermediate types (`value_info`) named in
//! terms the inputs do not declare are forgotten.

use std::collections::{BTreeMap, BTreeSet};

use super::lift::{output_types, value_types};
use crate::ir::{Attr, Dim, Graph, ValueInfo};
use crate::ops::types::SymDim;
use crate::{Error, Result};

/// The graph's inputs and outputs as the file declares them, to put back after optimizing.
#[derive(Debug, Clone)]
pub struct Declared {
    inputs: Vec<ValueInfo>,
    outputs: Vec<ValueInfo>,
}

impl Declared {
    /// Gives the inputs and outputs of `graph` that the file declared their declared shapes
    /// again (by name; values the optimizer added or removed are left as they are).
    pub fn restore(&self, graph: &mut Graph) {
        let put_back = |values: &mut Vec<ValueInfo>, declared: &[ValueInfo]| {
            for v in values.iter_mut() {
                if let Some(d) = declared.iter().find(|d| d.name == v.name) {
                    v.shape = d.shape.clone();
                }
            }
        };
        put_back(&mut graph.inputs, &self.inputs);
        put_back(&mut graph.outputs, &self.outputs);
    }
}

/// Reconciles the declared output types of `graph` with the types inferred on it (module
/// docs): errors name the output and dim that can never match; otherwise the graph's inputs
/// and outputs are rewritten with the promised equalities (an output dim that is not a name,
/// such as `past + 1` where the graph computes `seq + past`, takes the computed form) and the
/// shapes as declared are returned for [`Declared::restore`].
pub fn reconcile(graph: &mut Graph) -> Result<Declared> {
    let declared = Declared {
        inputs: graph.inputs.clone(),
        outputs: graph.outputs.clone(),
    };
    forget_unrelated_names(graph);
    let fed = graph.inputs.iter().flat_map(|v| &v.shape.0).count();
    for _ in 0..=fed {
        let aliases = aliases(graph)?;
        if aliases.is_empty() {
            break;
        }
        substitute(graph, &aliases);
    }
    // Each round replaces at least one name that the graph then no longer declares, so the
    // rounds end; a name promised in terms of another promised name takes one more round.
    let names = graph
        .outputs
        .iter()
        .flat_map(|o| &o.shape.0)
        .filter(|d| matches!(d, Dim::Sym(_)))
        .count();
    for _ in 0..=names {
        let promises = promises(graph)?;
        if promises.is_empty() {
            break;
        }
        substitute(graph, &promises);
    }
    // What is left differs in dims that are not plain names, or names the computed dim
    // mentions (`total` against `total + past`): take the computed form.
    let inferred = output_types(graph)?;
    for (output, got) in graph.outputs.iter_mut().zip(inferred) {
        let Some(shape) = got.and_then(|t| t.shape) else {
            continue;
        };
        if graph.unshaped.contains(&output.name) {
            continue;
        }
        for (d, g) in output.shape.0.iter_mut().zip(&shape) {
            if !SymDim::from(&*d).compatible(g) {
                *d = dim_of(g);
            }
        }
    }
    Ok(declared)
}

/// Input dims named apart that the graph requires to be equal, each mapped to the name of its
/// group the inputs declare first: the dims of a Concat's inputs off its axis (a cache's batch
/// and heads, concatenated with the new keys), and the contracted dims of a MatMul. An
/// export's inputs named independently then read as one consistent set of names, so that no
/// value is typed with two names that stand for one size. Dims that only broadcast against
/// each other (a mask's batch may be 1) are not equated.
fn aliases(graph: &Graph) -> Result<BTreeMap<String, SymDim>> {
    let mut order: Vec<String> = Vec::new();
    for d in graph.inputs.iter().flat_map(|v| &v.shape.0) {
        if let Dim::Sym(name) = d {
            if is_name(name) && !order.contains(name) {
                order.push(name.clone());
            }
        }
    }
    let types = value_types(graph)?;
    let shape = |name: &String| types.get(name).and_then(|t| t.shape.as_deref());
    let mut pairs: Vec<(&SymDim, &SymDim)> = Vec::new();
    for node in graph.nodes.iter().filter(|n| n.domain.is_empty()) {
        let shapes: Option<Vec<&[SymDim]>> = node.inputs.iter().map(shape).collect();
        match (node.op_type.as_str(), shapes.as_deref()) {
            ("Concat", Some([first, rest @ ..])) => {
                let Some(Attr::Int(axis)) = node.attrs.get("axis") else {
                    continue;
                };
                let rank = first.len() as i64;
                let axis = if *axis < 0 { axis + rank } else { *axis };
                for other in rest.iter().filter(|o| o.len() == first.len()) {
                    let off_axis = (0..first.len()).filter(|&i| i as i64 != axis);
                    pairs.extend(off_axis.map(|i| (&first[i], &other[i])));
                }
            }
            ("MatMul", Some([a, b])) if a.len() >= 2 && b.len() >= 2 => {
                pairs.push((&a[a.len() - 1], &b[b.len() - 2]));
            }
            _ => {}
        }
    }
    // Union-find over the input names, the earlier-declared name at the root of each group.
    let mut parent: Vec<usize> = (0..order.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let index = |d: &SymDim| match d {
        SymDim::Sym(s) => order.iter().position(|n| n == s.as_str()),
        _ => None,
    };
    for (a, b) in pairs {
        if let (Some(i), Some(j)) = (index(a), index(b)) {
            let (ri, rj) = (root(&mut parent, i), root(&mut parent, j));
            parent[ri.max(rj)] = ri.min(rj);
        }
    }
    Ok((0..order.len())
        .filter_map(|i| {
            let r = root(&mut parent, i);
            (r != i).then(|| (order[i].clone(), SymDim::expr(&order[r])))
        })
        .collect())
}

/// Intermediate types (`value_info`) fill in what inference leaves unknown; a dim named there
/// with a name no graph input declares relates to nothing the graph is fed (an export whose
/// inputs were renamed afterwards) and would give two computations of the same value different
/// types. Such dims are left unknown, and so are expressions mobius does not read as sums of
/// products (`Min(128, seq)`: one opaque name that no input declares).
fn forget_unrelated_names(graph: &mut Graph) {
    let fed: BTreeSet<String> = graph
        .inputs
        .iter()
        .flat_map(|v| &v.shape.0)
        .flat_map(|d| SymDim::from(d).names())
        .collect();
    for value in &mut graph.value_info {
        for d in &mut value.shape.0 {
            if SymDim::from(&*d).names().iter().any(|n| !fed.contains(n)) {
                *d = Dim::Sym(String::new());
            }
        }
    }
}

/// The equalities the declared outputs promise: each output dim declared as a plain name that
/// the graph computes otherwise, name → computed dim (the first output's, in output order).
/// A difference that can never hold is an error.
fn promises(graph: &Graph) -> Result<BTreeMap<String, SymDim>> {
    let mut promised = BTreeMap::new();
    for (output, got) in graph.outputs.iter().zip(output_types(graph)?) {
        let Some(got) = got else { continue };
        if graph.unshaped.contains(&output.name) {
            continue;
        }
        let want = crate::ops::types::TensorType::of(output.dtype, &output.shape);
        let contradiction = |what: String| {
            Error::Graph(format!(
                "output `{}` is declared {want} but the input graph computes {got}: {what}",
                output.name
            ))
        };
        if let (Some(a), Some(b)) = (want.dtype, got.dtype) {
            if a != b {
                return Err(contradiction("the element types differ".into()));
            }
        }
        let Some(shape) = &got.shape else { continue };
        if shape.len() != output.shape.0.len() {
            return Err(contradiction("the ranks differ".into()));
        }
        for (i, (d, g)) in output.shape.0.iter().zip(shape).enumerate() {
            let declared = SymDim::from(d);
            if declared.compatible(g) {
                continue;
            }
            if declared.never_equal(g) {
                return Err(contradiction(format!("dim {i} can never be {declared}")));
            }
            if let Dim::Sym(name) = d {
                if is_name(name) && !g.names().contains(name) {
                    promised.entry(name.clone()).or_insert_with(|| g.clone());
                }
            }
        }
    }
    Ok(promised)
}

/// Whether a declared dim is one plain name (`total`, `present.0.key_dim_2`), not an
/// expression.
fn is_name(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && text
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | ':' | '/'))
}

/// Replaces every input, output and intermediate dim declared as a promised name by what it
/// was promised to be.
fn substitute(graph: &mut Graph, promises: &BTreeMap<String, SymDim>) {
    let values = graph.inputs.iter_mut().chain(&mut graph.outputs);
    for value in values.chain(&mut graph.value_info) {
        for d in &mut value.shape.0 {
            if let Dim::Sym(name) = d {
                if let Some(p) = promises.get(name.as_str()) {
                    *d = dim_of(p);
                }
            }
        }
    }
}

/// The IR dim of an inferred dim (unknown dims as the empty name, which imports as unknown).
fn dim_of(d: &SymDim) -> Dim {
    match d {
        SymDim::Known(v) => Dim::Fixed(*v),
        other => Dim::Sym(match other {
            SymDim::Unknown => String::new(),
            sym => sym.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, GraphBuilder, Shape};

    /// `past` `[batch, past, 4]` concatenated with `new` `[batch_new, seq, 4]` on axis 1,
    /// declared as `out` of `shape`; the mask `[batch, total]` is an input read by nothing.
    fn cache(declared: Vec<Dim>) -> Graph {
        let mut b = GraphBuilder::new("g");
        let past = b.input(
            "past",
            DType::F32,
            Shape::new([Dim::sym("batch"), Dim::sym("past"), Dim::Fixed(4)]),
        );
        let new = b.input(
            "new",
            DType::F32,
            Shape::new([Dim::sym("batch_new"), Dim::sym("seq"), Dim::Fixed(4)]),
        );
        b.input(
            "mask",
            DType::I64,
            Shape::new([Dim::sym("batch"), Dim::sym("total")]),
        );
        b.output("out", DType::F32, Shape(declared));
        b.op_into(
            "Concat",
            &[&past, &new],
            vec![("axis", Attr::Int(1))],
            "out",
        );
        b.finish()
    }

    fn dims(values: &[ValueInfo], name: &str) -> Vec<String> {
        let v = values.iter().find(|v| v.name == name).unwrap();
        v.shape.0.iter().map(|d| d.to_string()).collect()
    }

    #[test]
    fn a_name_the_output_declares_is_promised_where_the_inputs_declare_it() {
        let mut g = cache(vec![Dim::sym("batch"), Dim::sym("total"), Dim::Fixed(4)]);
        let declared = reconcile(&mut g).unwrap();
        // The Concat equates the two batches; `total` is what the graph computes.
        assert_eq!(dims(&g.inputs, "new"), ["batch", "seq", "4"]);
        assert_eq!(dims(&g.inputs, "mask"), ["batch", "past + seq"]);
        assert_eq!(dims(&g.outputs, "out"), ["batch", "past + seq", "4"]);
        super::super::pipeline::check_output_types(&g, "the graph").unwrap();
        declared.restore(&mut g);
        assert_eq!(dims(&g.inputs, "new"), ["batch_new", "seq", "4"]);
        assert_eq!(dims(&g.inputs, "mask"), ["batch", "total"]);
        assert_eq!(dims(&g.outputs, "out"), ["batch", "total", "4"]);
    }

    #[test]
    fn only_what_can_never_hold_is_refused() {
        let refused = |declared: Vec<Dim>, why: &str| {
            let err = reconcile(&mut cache(declared)).unwrap_err().to_string();
            assert!(
                err.contains("output `out` is declared") && err.contains(why),
                "{err}"
            );
        };
        refused(
            vec![Dim::sym("batch"), Dim::sym("total"), Dim::Fixed(5)],
            "dim 2 can never be 5",
        );
        refused(
            vec![Dim::sym("batch"), Dim::sym("past + seq + 1"), Dim::Fixed(4)],
            "dim 1 can never be past + seq + 1",
        );
        refused(vec![Dim::sym("batch"), Dim::Fixed(4)], "the ranks differ");
        // A size the graph computes symbolically may be the declared constant.
        let mut g = cache(vec![Dim::sym("batch"), Dim::Fixed(7), Dim::Fixed(4)]);
        reconcile(&mut g).unwrap();
        assert_eq!(dims(&g.outputs, "out"), ["batch", "past + seq", "4"]);
    }
}
