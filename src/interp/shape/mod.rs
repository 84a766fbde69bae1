//! Shape and data-movement ops (ONNX opset 24): Transpose, Reshape, Flatten, Squeeze,
//! Unsqueeze, Expand, Tile (`layout`); Concat, Split, Slice, Gather (`select`); Shape, Size,
//! Range, ConstantOfShape, Constant (`make`).
//!
//! Every op that only moves elements is a gather: it computes, for each output element, the
//! flat position of the input element it copies, so one code path serves float, integer and
//! bool tensors alike.

mod layout;
mod make;
mod select;

use super::tensor::axis;
use super::{FamilyResult, OpCall, Tensor, Values};
use crate::Result;

/// Evaluates the ops of this family (standard domain only).
pub fn eval(domain: &str, op: &str, call: &OpCall<'_>) -> FamilyResult {
    if !domain.is_empty() && domain != "ai.onnx" {
        return None;
    }
    let single: fn(&OpCall<'_>) -> Result<Tensor> = match op {
        "Transpose" => layout::transpose,
        "Reshape" => layout::reshape,
        "Flatten" => layout::flatten,
        "Squeeze" => layout::squeeze,
        "Unsqueeze" => layout::unsqueeze,
        "Expand" => layout::expand,
        "Tile" => layout::tile,
        "Concat" => select::concat,
        "Split" => return Some(select::split(call)),
        "Slice" => select::slice,
        "Gather" => select::gather,
        "Shape" => make::shape,
        "Size" => make::size,
        "Range" => make::range,
        "ConstantOfShape" => make::constant_of_shape,
        "Constant" => make::constant,
        _ => return None,
    };
    Some(single(call).map(|t| vec![t]))
}

/// A tensor of `t`'s dtype and the given shape holding `t`'s elements at flat positions `idx`.
fn take(t: &Tensor, shape: Vec<usize>, idx: &[usize]) -> Tensor {
    let values = match &t.values {
        Values::Float(v) => Values::Float(idx.iter().map(|&i| v[i]).collect()),
        Values::Int(v) => Values::Int(idx.iter().map(|&i| v[i]).collect()),
        Values::Bool(v) => Values::Bool(idx.iter().map(|&i| v[i]).collect()),
    };
    Tensor {
        dtype: t.dtype,
        shape,
        values,
    }
}

/// `t`'s elements, in order, under another shape with the same element count.
fn with_shape(t: &Tensor, shape: Vec<usize>) -> Tensor {
    Tensor {
        dtype: t.dtype,
        shape,
        values: t.values.clone(),
    }
}

/// For every element of `out_shape` in row-major order, the flat input position
/// `Σᵢ offset(i, cᵢ)`, where `cᵢ` is the element's coordinate along output axis `i`. The
/// per-axis offsets are tabulated only when the output has elements: an empty output may have
/// long axes.
fn index_map(out_shape: &[usize], offset: impl Fn(usize, usize) -> usize) -> Vec<usize> {
    let n: usize = out_shape.iter().product();
    if n == 0 {
        return Vec::new();
    }
    let tables: Vec<Vec<usize>> = out_shape
        .iter()
        .enumerate()
        .map(|(i, &d)| (0..d).map(|c| offset(i, c)).collect())
        .collect();
    let mut out = Vec::with_capacity(n);
    let mut coord = vec![0; out_shape.len()];
    for _ in 0..n {
        out.push(coord.iter().zip(&tables).map(|(&c, t)| t[c]).sum());
        for i in (0..coord.len()).rev() {
            coord[i] += 1;
            if coord[i] < out_shape[i] {
                break;
            }
            coord[i] = 0;
        }
    }
    out
}

/// The values of integer input `i` (shape, axes, starts, repeats, …).
fn int_input(call: &OpCall<'_>, i: usize) -> Result<Vec<i64>> {
    let t = call.input(i)?;
    t.ints().map(<[i64]>::to_vec).map_err(|_| {
        call.error(format!(
            "input {i} must be an integer tensor, found {}",
            t.dtype
        ))
    })
}

/// Non-negative dims from integer values.
fn dims(call: &OpCall<'_>, values: &[i64]) -> Result<Vec<usize>> {
    values
        .iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| call.error(format!("negative dimension {d} in {values:?}")))
        })
        .collect()
}

/// Resolves a possibly negative axis against `rank`, with the node named in the error.
fn norm_axis(call: &OpCall<'_>, a: i64, rank: usize) -> Result<usize> {
    axis(a, rank).map_err(|_| call.error(format!("axis {a} is out of range for rank {rank}")))
}

/// Resolves a list of axes against `rank`, rejecting duplicates.
fn norm_axes(call: &OpCall<'_>, axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out: Vec<usize> = Vec::with_capacity(axes.len());
    for &a in axes {
        let v = norm_axis(call, a, rank)?;
        if out.contains(&v) {
            return Err(call.error(format!("axes {axes:?} repeat axis {v}")));
        }
        out.push(v);
    }
    Ok(out)
}
