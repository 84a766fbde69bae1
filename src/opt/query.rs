//! What conditions and appliers read of one e-class: an op node of a given type, an integer
//! constant or attribute, a float constant, a graph input, an inferred shape.

use egg::Id;
use half::{bf16, f16};

use super::analysis::OnnxGraph;
use super::lang::{Onnx, OpNode};
use crate::ir::DType;
use crate::ops::infer::literal_ints;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;

/// The first e-node of class `id` that is an op named `op`.
pub fn find_op(g: &OnnxGraph, id: Id, op: &str) -> Option<OpNode> {
    g[id]
        .nodes
        .iter()
        .find_map(|n| n.as_op().filter(|o| o.op.as_str() == op).cloned())
}

/// Every e-node of class `id` that is an op named `op`.
pub fn ops_named(g: &OnnxGraph, id: Id, op: &str) -> Vec<OpNode> {
    g[id]
        .nodes
        .iter()
        .filter_map(|n| n.as_op().filter(|o| o.op.as_str() == op).cloned())
        .collect()
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
    g[id].data.konst.as_deref().and_then(literal_ints)
}

/// The values of a float (f32, f16, bf16) constant class, widened to f64.
pub fn const_floats(g: &OnnxGraph, id: Id) -> Option<Vec<f64>> {
    let lit = g[id].data.konst.as_deref()?;
    let bytes = &lit.bytes;
    Some(match lit.dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DType::F16 => bytes
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        _ => return None,
    })
}

/// The value of a float constant class holding exactly one element (any rank).
pub fn scalar_float(g: &OnnxGraph, id: Id) -> Option<f64> {
    match const_floats(g, id)?.as_slice() {
        [v] => Some(*v),
        _ => None,
    }
}

/// The inferred dims of class `id` when its rank is `rank` and no dim is unknown.
pub fn known_dims(g: &OnnxGraph, id: Id, rank: usize) -> Option<Vec<SymDim>> {
    let dims = g[id].data.tensor()?.shape.clone()?;
    (dims.len() == rank && dims.iter().all(|d| *d != SymDim::Unknown)).then_some(dims)
}
