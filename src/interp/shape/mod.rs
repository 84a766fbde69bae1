//! Shape and data-movement ops (ONNX opset 24): Transpose, Reshape, Flatten, Squeeze,
//! Unsqueeze, Expand, Tile (`layout`); Concat, Split, Slice, Gather (`select`); Shape, Size,
//! Range, ConstantOfShape, Constant (`make`); ScatterND, TensorScatter (`scatter`).
//!
//! Every op that only moves elements is a gather: it computes, for each output element, the
//! flat position of the input element it copies, so one code path serves float, integer and
//! bool tensors alike.

mod layout;
mod make;
mod scatter;
mod select;

use super::tensor::axis;
use super::{OpCall, OpImpl, Tensor, Values};
use crate::Result;

/// The ops of this family (standard domain only).
pub const OPS: &[OpImpl] = &[
    OpImpl::onnx("Transpose", |c| layout::transpose(c).map(|t| vec![t])),
    OpImpl::onnx("Reshape", |c| layout::reshape(c).map(|t| vec![t])),
    OpImpl::onnx("Flatten", |c| layout::flatten(c).map(|t| vec![t])),
    OpImpl::onnx("Squeeze", |c| layout::squeeze(c).map(|t| vec![t])),
    OpImpl::onnx("Unsqueeze", |c| layout::unsqueeze(c).map(|t| vec![t])),
    OpImpl::onnx("Expand", |c| layout::expand(c).map(|t| vec![t])),
    OpImpl::onnx("Tile", |c| layout::tile(c).map(|t| vec![t])),
    OpImpl::onnx("Concat", |c| select::concat(c).map(|t| vec![t])),
    OpImpl::onnx("Split", select::split),
    OpImpl::onnx("Slice", |c| select::slice(c).map(|t| vec![t])),
    OpImpl::onnx("Gather", |c| select::gather(c).map(|t| vec![t])),
    OpImpl::onnx("GatherND", |c| select::gather_nd(c).map(|t| vec![t])),
    OpImpl::onnx("Shape", |c| make::shape(c).map(|t| vec![t])),
    OpImpl::onnx("Size", |c| make::size(c).map(|t| vec![t])),
    OpImpl::onnx("Range", |c| make::range(c).map(|t| vec![t])),
    OpImpl::onnx("ConstantOfShape", |c| {
        make::constant_of_shape(c).map(|t| vec![t])
    }),
    OpImpl::onnx("Constant", |c| make::constant(c).map(|t| vec![t])),
    OpImpl::onnx("ScatterND", |c| scatter::scatter_nd(c).map(|t| vec![t])),
    OpImpl::onnx("TensorScatter", |c| {
        scatter::tensor_scatter(c).map(|t| vec![t])
    }),
];

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
