//! Shape tensors read symbolically: the values of a small int64 class that exporters compute
//! for `Reshape`/`Expand` from `Shape`, constants, `Slice`, `Concat`, `Gather`,
//! `Squeeze`/`Unsqueeze`/`Reshape` of one element, `Cast`, and `Add` of one-element values, as
//! [`SymDim`]s that appliers compare with inferred dims (`Shape(x)` gives `x`'s inferred dims).

use egg::Id;

use super::analysis::OnnxGraph;
use super::lang::{AttrValue, OpNode};
use super::query::const_ints;
use super::types::SymDim;
use crate::ir::DType;

/// How many ops deep [`shape_value`] follows a value (the e-graph may be cyclic).
const MAX_DEPTH: usize = 16;

/// The values of class `id` (a 0-D or 1-D integer tensor) as dims, when every one is read.
pub fn shape_value(g: &OnnxGraph, id: Id) -> Option<Vec<SymDim>> {
    value(g, id, MAX_DEPTH)
}

fn value(g: &OnnxGraph, id: Id, depth: usize) -> Option<Vec<SymDim>> {
    if let Some(ints) = const_ints(g, id) {
        return Some(ints.into_iter().map(SymDim::Known).collect());
    }
    let depth = depth.checked_sub(1)?;
    g[id]
        .nodes
        .iter()
        .filter_map(|n| n.as_op())
        .find_map(|op| op_value(g, op, depth))
}

/// The value `op` computes, for the ops listed in the module doc.
fn op_value(g: &OnnxGraph, op: &OpNode, depth: usize) -> Option<Vec<SymDim>> {
    let inputs = op.input_ids();
    let arg = |i: usize| value(g, *inputs.get(i)?, depth);
    let attr = |name: &str| g[op.attr_id(name)?].data.attr().cloned();
    let one = |v: Vec<SymDim>| (v.len() == 1).then_some(v);
    match op.op.as_str() {
        "Shape" => {
            let dims = g[inputs[0]].data.tensor()?.shape.clone()?;
            let bound = |name: &str, default: i64| match attr(name)? {
                AttrValue::Unset => Some(default),
                AttrValue::Int(v) => Some(v),
                _ => None,
            };
            let rank = dims.len() as i64;
            let (start, end) = (bound("start", 0)?, bound("end", rank)?);
            let part = dims[clamp(start, rank)..clamp(end, rank).max(clamp(start, rank))].to_vec();
            part.iter().all(|d| *d != SymDim::Unknown).then_some(part)
        }
        "Slice" => {
            let data = arg(0)?;
            let len = data.len() as i64;
            let at = |i: usize| -> Option<Option<Vec<i64>>> {
                match inputs.get(i) {
                    None => Some(None),
                    Some(&c) => const_ints(g, c).map(Some),
                }
            };
            let (starts, ends) = (at(1)??, at(2)??);
            let ([start], [end]) = (starts.as_slice(), ends.as_slice()) else {
                return None;
            };
            let axes_ok = at(3)?.is_none_or(|a| a == [0] || a == [-1]);
            let steps_ok = at(4)?.is_none_or(|s| s == [1]);
            let (s, e) = (clamp(*start, len), clamp(*end, len));
            (axes_ok && steps_ok).then(|| data[s..e.max(s)].to_vec())
        }
        "Concat" => {
            let axis = attr("axis")?.int()?;
            if axis != 0 && axis != -1 {
                return None;
            }
            let mut out = Vec::new();
            for i in 0..inputs.len() {
                out.extend(arg(i)?);
            }
            Some(out)
        }
        "Gather" => {
            let axis_ok = matches!(attr("axis")?, AttrValue::Unset | AttrValue::Int(0));
            let data = arg(0)?;
            let [index] = const_ints(g, inputs[1])?[..] else {
                return None;
            };
            let len = data.len() as i64;
            let i = if index < 0 { index + len } else { index };
            (axis_ok && (0..len).contains(&i)).then(|| vec![data[i as usize].clone()])
        }
        "Squeeze" | "Unsqueeze" | "Reshape" => one(arg(0)?),
        "Identity" => arg(0),
        "Cast" => {
            let to = attr("to")?.int()?;
            (to == DType::I64.onnx_code() as i64)
                .then(|| arg(0))
                .flatten()
        }
        "Add" => {
            let (a, b) = (one(arg(0)?)?, one(arg(1)?)?);
            let sum = a[0].add(&b[0]);
            (sum != SymDim::Unknown).then(|| vec![sum])
        }
        _ => None,
    }
}

/// A Slice/Shape bound `v` on a length `len` (negative counts from the end), clamped to it.
fn clamp(v: i64, len: i64) -> usize {
    let v = if v < 0 { v.saturating_add(len) } else { v };
    v.clamp(0, len) as usize
}
