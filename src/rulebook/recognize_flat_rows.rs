//! The side conditions of `rewrites/recognize/flat_rows.rules`: hidden states flattened to rows
//! (`Reshape(x, [−1, D])`) around row-wise ops and reshaped back to their own dims are read on
//! x's own dims (OPT's decoder MLP as torch.onnx exports it).

use egg::Id;

use super::head_layout::reshaped_dims;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::shape_value::shape_value;

/// The dims of class `id` when its shape is inferred and no dim is unknown.
fn known_dims(g: &OnnxGraph, id: Id) -> Option<Vec<SymDim>> {
    let dims = g[id].data.tensor()?.shape.clone()?;
    (!dims.contains(&SymDim::Unknown)).then_some(dims)
}

/// `?x ?flat ?flat_zero ?y ?shape`: `y` has the dims of `Reshape(x, flat)` (so an `Add` of the
/// two does not broadcast), and `shape` reads as exactly x's dims, none of them 0 or −1 (so
/// `Shape(x)` holds the same values, and reshaping to it gives x's dims back).
pub fn rows_restored_by(g: &OnnxGraph, [x, flat, flat_zero, y, shape]: [Id; 5]) -> bool {
    let Some(xd) = known_dims(g, x) else {
        return false;
    };
    let plain = |d: &SymDim| !matches!(d, SymDim::Known(v) if *v <= 0);
    xd.iter().all(plain)
        && reshaped_dims(g, &xd, flat, flat_zero).is_some_and(|rows| Some(rows) == known_dims(g, y))
        && shape_value(g, shape).is_some_and(|target| target == xd)
}

/// `?x ?flat ?flat_zero`: `Reshape(x, flat)` keeps x's last dim, a known number (so every row of
/// that many elements stays whole).
pub fn reshape_keeps_last_dim(g: &OnnxGraph, [x, flat, flat_zero]: [Id; 3]) -> bool {
    let Some(xd) = known_dims(g, x) else {
        return false;
    };
    let last = xd.last().and_then(SymDim::known);
    last.is_some()
        && reshaped_dims(g, &xd, flat, flat_zero)
            .is_some_and(|out| out.last().and_then(SymDim::known) == last)
}

/// `?axis ?scale ?bias`: a LayerNormalization over the last axis (`axis` −1 or unset, the last
/// axis of any rank), its scale and bias of rank ≤ 1 (broadcast alike on any rank).
pub fn norm_on_last_axis_of_rows(g: &OnnxGraph, [axis, scale, bias]: [Id; 3]) -> bool {
    let low_rank = |id: Id| {
        g[id]
            .data
            .tensor()
            .and_then(|t| t.rank())
            .is_some_and(|r| r <= 1)
    };
    matches!(
        g[axis].data.attr(),
        Some(AttrValue::Unset) | Some(AttrValue::Int(-1))
    ) && low_rank(scale)
        && low_rank(bias)
}
