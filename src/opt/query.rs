//! What conditions and appliers read of one e-class: an op node of a given type, an integer
//! constant or attribute, a graph input.

use egg::Id;

use super::analysis::OnnxGraph;
use super::infer::literal_ints;
use super::lang::{AttrValue, Onnx, OpNode};

/// The first e-node of class `id` that is an op named `op`.
pub fn find_op(g: &OnnxGraph, id: Id, op: &str) -> Option<OpNode> {
    g[id]
        .nodes
        .iter()
        .find_map(|n| n.as_op().filter(|o| o.op.as_str() == op).cloned())
}

/// Whether class `id` holds the graph input `name` (any graph input when `name` is `None`).
pub fn is_input(g: &OnnxGraph, id: Id, name: Option<&str>) -> bool {
    g[id]
        .nodes
        .iter()
        .any(|n| matches!(n, Onnx::Input(s) if name.is_none_or(|w| s.as_str() == w)))
}

/// The value of an integer attribute class.
pub fn int_attr(g: &OnnxGraph, id: Id) -> Option<i64> {
    g[id].data.attr().and_then(AttrValue::int)
}

/// The values of an integer constant class.
pub fn const_ints(g: &OnnxGraph, id: Id) -> Option<Vec<i64>> {
    g[id].data.konst.as_ref().and_then(literal_ints)
}
