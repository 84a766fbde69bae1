//! Ops that pick positions along an axis or by position: `ArgMax`, `ArgMin`, `Hardmax`
//! (the one-hot of the first maximum) and `Trilu` (the lower or upper triangle of the last two
//! axes). No rule rewrites them: the e-graph carries them as they are.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use super::elementwise::first_type;
use super::infer::{input_type, normal_axis, shape_dims, InputView};
use super::tensor::axis;
use super::types::{SymDim, TensorType};
use super::{OpCall, OpDef, Tensor, Values};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("ArgMax", ARG_ATTRS)
        .infer(|c| vec![arg_type(c.inputs, c.int("axis"), c.int("keepdims"))])
        .eval(|c| arg_extreme(c, true)),
    OpDef::onnx("ArgMin", ARG_ATTRS)
        .infer(|c| vec![arg_type(c.inputs, c.int("axis"), c.int("keepdims"))])
        .eval(|c| arg_extreme(c, false)),
    OpDef::onnx("Hardmax", &["axis"])
        .infer(first_type)
        .eval(hardmax),
    OpDef::onnx("Trilu", &["upper"])
        .infer(first_type)
        .eval(trilu),
];

/// The attributes of `ArgMax` / `ArgMin`.
const ARG_ATTRS: &[&str] = &["axis", "keepdims", "select_last_index"];

/// `ArgMax`/`ArgMin`'s type: int64, the input's shape with `axis` kept as 1 or dropped.
fn arg_type(inputs: &[InputView<'_>], ax: Option<i64>, keepdims: Option<i64>) -> TensorType {
    let t = input_type(inputs, 0);
    let shape = shape_dims(&t).and_then(|d| {
        let a = normal_axis(ax.unwrap_or(0), d.len())?;
        let mut d = d.to_vec();
        match keepdims.unwrap_or(1) != 0 {
            true => d[a] = SymDim::Known(1),
            false => {
                d.remove(a);
            }
        }
        Some(d)
    });
    TensorType {
        dtype: Some(DType::I64),
        shape,
    }
}

/// The lines of a tensor of `shape` along axis `ax`: `(outer, n, inner)` with element
/// `(o, j, i)` at `o·n·inner + j·inner + i`.
fn lines(shape: &[usize], ax: usize) -> (usize, usize, usize) {
    let outer = shape[..ax].iter().product();
    let inner = shape[ax + 1..].iter().product();
    (outer, shape[ax], inner)
}

/// Per line along `axis`, the index of the greatest (`max`) or least element: the first one,
/// or the last with `select_last_index`. As in onnxruntime, the first element is replaced
/// only by one that compares greater (less): a NaN first in its line wins, a later one never.
fn arg_extreme(call: &OpCall<'_>, max: bool) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let ax = axis(call.int("axis", 0), x.shape.len()).map_err(|e| call.error(e))?;
    let (outer, n, inner) = lines(&x.shape, ax);
    if n == 0 {
        return Err(call.error("the reduced axis has length 0: no element to pick"));
    }
    let last = call.int("select_last_index", 0) != 0;
    let mut shape = x.shape.clone();
    match call.int("keepdims", 1) != 0 {
        true => shape[ax] = 1,
        false => {
            shape.remove(ax);
        }
    }
    call.alloc(&shape)?;
    let values = x.as_f64();
    // `p` beats the best so far `b`: strictly, or on a tie when the last index is wanted (a
    // NaN compares false, so a NaN first in its line stays and a later one is passed over).
    let beats = |p: f64, b: f64| match max {
        true => p > b || (last && p == b),
        false => p < b || (last && p == b),
    };
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| values[o * n * inner + j * inner + i];
            let mut best = 0;
            for j in 1..n {
                if beats(at(j), at(best)) {
                    best = j;
                }
            }
            out.push(best as i64);
        }
    }
    Ok(vec![Tensor::int(DType::I64, shape, out)])
}

/// `Hardmax(x; axis = -1)`: 1 at the first greatest element of each line along `axis`, 0
/// elsewhere, in the input's dtype.
fn hardmax(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let ax = axis(call.int("axis", -1), x.shape.len()).map_err(|e| call.error(e))?;
    let (outer, n, inner) = lines(&x.shape, ax);
    let v = x.floats().map_err(|e| call.error(e))?;
    let mut out = vec![0f32; v.len()];
    for o in 0..if v.is_empty() { 0 } else { outer } {
        for i in 0..inner {
            let at = |j: usize| o * n * inner + j * inner + i;
            let best = (1..n).fold(0, |b, j| if v[at(j)] > v[at(b)] { j } else { b });
            out[at(best)] = 1.0;
        }
    }
    Ok(vec![Tensor::float(x.dtype, x.shape.clone(), out)])
}

/// `Trilu(x, k = 0; upper = 1)`: of each matrix in the last two axes, the elements on and
/// above (`upper`) or on and below the `k`-th diagonal; the others 0.
fn trilu(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let rank = x.shape.len();
    if rank < 2 {
        return Err(call.error(format!("input must have rank 2 or more, got {rank}")));
    }
    let k = match call.optional(1) {
        Some(t) => match t.ints().map_err(|e| call.error(e))? {
            [k] => *k,
            other => return Err(call.error(format!("k must hold one value, found {other:?}"))),
        },
        None => 0,
    };
    let upper = call.int("upper", 1) != 0;
    let (rows, cols) = (x.shape[rank - 2], x.shape[rank - 1]);
    let keep = |flat: usize| {
        let (r, c) = (
            ((flat / cols.max(1)) % rows.max(1)) as i64,
            (flat % cols.max(1)) as i64,
        );
        match upper {
            true => c - r >= k,
            false => c - r <= k,
        }
    };
    let values = match &x.values {
        Values::Float(v) => Values::Float(
            v.iter()
                .enumerate()
                .map(|(f, &p)| if keep(f) { p } else { 0.0 })
                .collect(),
        ),
        Values::Int(v) => Values::Int(
            v.iter()
                .enumerate()
                .map(|(f, &p)| if keep(f) { p } else { 0 })
                .collect(),
        ),
        Values::Bool(v) => Values::Bool(v.iter().enumerate().map(|(f, &p)| p && keep(f)).collect()),
    };
    Ok(vec![Tensor {
        dtype: x.dtype,
        shape: x.shape.clone(),
        values,
    }])
}
