//! Lookup tables kept in their checkpoint's narrower float type: a float initializer read only
//! as `Gather`'s data (a token-embedding table left in float, a position table) whose
//! checkpoint stores it in bf16 or f16 while the model computes in f32 is stored as it is in
//! the checkpoint, and the gathered rows are cast to f32. Widening bf16 or f16 to f32 is exact,
//! so the model computes the same values, and the table takes half the bytes.
//!
//! Applied to `--quant` builds for EPs that gather and cast those types (onnxruntime's CPU EP:
//! `tests/ort/test_quant.py` checks it), where the table is most of what stays float: a
//! 32k-token, 1024-wide table is 128 MiB in f32, as much as all the int4 weights of a 300M
//! model. A table that anything else reads (a tied LM head kept in float reads its transpose)
//! stays as it is.

use std::collections::HashSet;

use super::fresh;
use crate::ep::EpCapabilities;
use crate::ir::{Attr, Attrs, DType, Graph, Node, TensorSource};
use crate::weights::eval::Evaluator;
use crate::weights::store::TensorStore;

/// Whether `caps` runs `Gather` on bf16 and f16 tables and `Cast` from them to f32:
/// onnxruntime's CPU EP (its kernels take every tensor type).
pub fn gathers_narrow_floats(caps: &EpCapabilities) -> bool {
    caps.name == "cpu"
}

/// The stored type of a source as [`narrow_gathered_tables`] asks for it: what `store` holds
/// when the weights are loaded, else (a graph-only build) the checkpoint's dtype as its config
/// states it, for checkpoint tensors.
pub fn stored_dtype<'a>(
    store: Option<&'a TensorStore>,
    declared: Option<DType>,
) -> impl Fn(&TensorSource) -> Option<DType> + 'a {
    move |source| match store {
        Some(store) => Evaluator::new(Some(store))
            .describe(source)
            .ok()
            .map(|info| info.dtype),
        None => matches!(source, TensorSource::Checkpoint(_))
            .then_some(declared)
            .flatten(),
    }
}

/// Narrows the f32 tables of `graph` that only `Gather` reads and whose source `stored` says is
/// held in bf16 or f16 (`None`: unknown, left alone), as the [module doc](self) says; returns
/// the names of the tables narrowed, with their new type.
pub fn narrow_gathered_tables(
    graph: &mut Graph,
    stored: &dyn Fn(&TensorSource) -> Option<DType>,
) -> Vec<(String, DType)> {
    let outputs: HashSet<&str> = graph.outputs.iter().map(|o| o.name.as_str()).collect();
    let inputs: HashSet<&str> = graph.inputs.iter().map(|i| i.name.as_str()).collect();
    let gathered = |name: &str| {
        let mut readers = graph
            .nodes
            .iter()
            .filter(|n| n.inputs.iter().any(|i| i == name))
            .peekable();
        readers.peek().is_some()
            && readers.all(|n| {
                n.domain.is_empty()
                    && n.op_type == "Gather"
                    && n.inputs.iter().skip(1).all(|i| i != name)
            })
    };
    let narrowed: Vec<(String, DType)> = graph
        .initializers
        .iter()
        .filter(|i| i.dtype == DType::F32 && i.shape.len() == 2)
        .filter(|i| !inputs.contains(i.name.as_str()) && !outputs.contains(i.name.as_str()))
        .filter_map(|i| {
            let narrow = stored(i.source.as_ref()?)?;
            matches!(narrow, DType::BF16 | DType::F16).then(|| (i.name.clone(), narrow))
        })
        .filter(|(name, _)| gathered(name))
        .collect();
    if narrowed.is_empty() {
        return narrowed;
    }
    let mut used: HashSet<String> = graph
        .inputs
        .iter()
        .map(|v| v.name.clone())
        .chain(graph.initializers.iter().map(|i| i.name.clone()))
        .chain(graph.nodes.iter().flat_map(|n| n.outputs.iter().cloned()))
        .chain(graph.nodes.iter().map(|n| n.name.clone()))
        .collect();
    for init in &mut graph.initializers {
        if let Some((_, narrow)) = narrowed.iter().find(|(name, _)| *name == init.name) {
            init.dtype = *narrow;
        }
    }
    let is_narrowed = |name: &str| narrowed.iter().any(|(n, _)| n == name);
    let mut nodes = Vec::with_capacity(graph.nodes.len() + narrowed.len());
    for mut node in std::mem::take(&mut graph.nodes) {
        if !(node.op_type == "Gather" && node.domain.is_empty() && is_narrowed(&node.inputs[0])) {
            nodes.push(node);
            continue;
        }
        // The Gather now yields narrow rows under a new name; the Cast takes over its output.
        let output = node.outputs[0].clone();
        let rows = fresh(&mut used, format!("{output}.narrow"));
        node.outputs[0] = rows.clone();
        let cast = Node {
            name: fresh(&mut used, format!("{}.widen", node.name)),
            domain: String::new(),
            op_type: "Cast".into(),
            inputs: vec![rows],
            outputs: vec![output],
            attrs: Attrs::from([(
                "to".to_string(),
                Attr::Int(i64::from(DType::F32.onnx_code())),
            )]),
        };
        nodes.push(node);
        nodes.push(cast);
    }
    graph.nodes = nodes;
    narrowed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Initializer, Shape, ValueInfo};

    fn node(op: &str, inputs: &[&str], output: &str) -> Node {
        Node {
            name: format!("{output}_node"),
            domain: String::new(),
            op_type: op.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![output.into()],
            attrs: Attrs::new(),
        }
    }

    fn table(name: &str) -> Initializer {
        Initializer {
            name: name.into(),
            dtype: DType::F32,
            shape: vec![10, 4],
            source: Some(TensorSource::Checkpoint(name.into())),
        }
    }

    fn graph(nodes: Vec<Node>, tables: &[&str]) -> Graph {
        Graph {
            inputs: vec![ValueInfo::new("ids", DType::I64, Shape::new([3i64]))],
            outputs: vec![ValueInfo::new("y", DType::F32, Shape::new([3i64, 4]))],
            nodes,
            initializers: tables.iter().map(|t| table(t)).collect(),
            ..Graph::default()
        }
    }

    #[test]
    fn gathered_tables_keep_the_stored_type_and_the_rows_are_widened() {
        let mut g = graph(
            vec![
                node("Gather", &["embed", "ids"], "x"),
                node("Gather", &["wpe", "ids"], "p"),
                node("Add", &["x", "p"], "y"),
            ],
            &["embed", "wpe"],
        );
        let stored = |s: &TensorSource| match s {
            TensorSource::Checkpoint(n) if n == "embed" => Some(DType::BF16),
            TensorSource::Checkpoint(_) => Some(DType::F16),
            _ => None,
        };
        let narrowed = narrow_gathered_tables(&mut g, &stored);
        assert_eq!(
            narrowed,
            vec![("embed".into(), DType::BF16), ("wpe".into(), DType::F16)]
        );
        assert_eq!(g.initializers[0].dtype, DType::BF16);
        assert_eq!(g.initializers[1].dtype, DType::F16);
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Gather", "Cast", "Gather", "Cast", "Add"]);
        assert_eq!(g.nodes[1].inputs, [g.nodes[0].outputs[0].clone()]);
        assert_eq!(g.nodes[1].outputs, ["x"]);
        assert_eq!(
            g.nodes[1].attrs["to"],
            Attr::Int(i64::from(DType::F32.onnx_code()))
        );
        g.validate().unwrap();
    }

    #[test]
    fn tables_read_otherwise_or_stored_wide_stay_float() {
        let nodes = vec![
            // A tied head kept in float reads the table's transpose.
            node("Gather", &["embed", "ids"], "x"),
            node("Transpose", &["embed"], "t"),
            node("MatMul", &["x", "t"], "l"),
            // A table used as indices, one stored in f32, one of unknown type.
            node("Gather", &["x", "pos"], "a"),
            node("Gather", &["wide", "ids"], "b"),
            node("Gather", &["unknown", "ids"], "c"),
            node("Add", &["a", "b"], "d"),
            node("Add", &["c", "d"], "y"),
        ];
        let mut g = graph(nodes, &["embed", "pos", "wide", "unknown"]);
        let before = g.clone();
        let stored = |s: &TensorSource| match s {
            TensorSource::Checkpoint(n) if n == "wide" => Some(DType::F32),
            TensorSource::Checkpoint(n) if n == "unknown" => None,
            _ => Some(DType::BF16),
        };
        assert!(narrow_gathered_tables(&mut g, &stored).is_empty());
        assert_eq!(g, before);
    }
}
