//! Reductions (`ReduceSum`, `ReduceMean`, `ReduceMax`), `Softmax` and `CumSum`. Float sums accumulate in
//! f64; edge cases follow onnxruntime (see [`reduce`]).

use super::elementwise::wrap_int;
use super::tensor::{axis, broadcast_index};
use super::{FamilyResult, OpCall, Tensor, Values};
use crate::ir::DType;
use crate::Result;

/// Evaluates the ops of this family.
pub fn eval(domain: &str, op: &str, call: &OpCall<'_>) -> FamilyResult {
    if !(domain.is_empty() || domain == "ai.onnx") {
        return None;
    }
    let result = match op {
        "ReduceSum" => reduce(call, Kind::Sum),
        "ReduceMean" => reduce(call, Kind::Mean),
        "ReduceMax" => reduce(call, Kind::Max),
        "Softmax" => softmax(call),
        "CumSum" => cumsum(call),
        _ => return None,
    };
    Some(result)
}

/// The reductions.
#[derive(Clone, Copy)]
enum Kind {
    Sum,
    Mean,
    Max,
}

/// A reduction over the axes given by input 1 (opset 18+; the pre-18 `axes` attribute is read
/// when the input is absent). No axes means every axis, or the identity when
/// `noop_with_empty_axes` is set; repeated axes count once; `keepdims` defaults to 1.
///
/// As in onnxruntime: an empty mean is 0 and an empty max the dtype's lowest value; integer
/// means truncate; `ReduceMax` starts from the first element and replaces it only by greater
/// ones, so a NaN propagates only when it comes first.
fn reduce(call: &OpCall<'_>, kind: Kind) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let rank = x.shape.len();
    let axes: Vec<i64> = match call.optional(1) {
        Some(t) => t.ints().map_err(|e| call.error(e))?.to_vec(),
        None => call.ints("axes").map(<[i64]>::to_vec).unwrap_or_default(),
    };
    if axes.is_empty() && call.int("noop_with_empty_axes", 0) != 0 {
        return Ok(vec![x.clone()]);
    }
    let mut reduced = vec![axes.is_empty(); rank];
    for &a in &axes {
        reduced[axis(a, rank).map_err(|e| call.error(e))?] = true;
    }
    let kept: Vec<usize> = x
        .shape
        .iter()
        .zip(&reduced)
        .map(|(&d, &r)| if r { 1 } else { d })
        .collect();
    let count: usize = x
        .shape
        .iter()
        .zip(&reduced)
        .filter(|(_, &r)| r)
        .map(|(&d, _)| d)
        .product();
    let shape = if call.int("keepdims", 1) != 0 {
        kept.clone()
    } else {
        x.shape
            .iter()
            .zip(&reduced)
            .filter(|(_, &r)| !r)
            .map(|(&d, _)| d)
            .collect()
    };
    let groups: usize = kept.iter().product();
    // For each input element, the output element it contributes to.
    let target = broadcast_index(&kept, &x.shape);
    let out = match (&x.values, kind) {
        (Values::Float(v), Kind::Sum | Kind::Mean) => {
            let mut acc = vec![0f64; groups];
            for (&t, &p) in target.iter().zip(v) {
                acc[t] += p as f64;
            }
            let values = acc
                .into_iter()
                .map(|s| match kind {
                    Kind::Mean if count == 0 => 0.0,
                    Kind::Mean => (s / count as f64) as f32,
                    _ => s as f32,
                })
                .collect();
            Tensor::float(x.dtype, shape, values)
        }
        (Values::Float(v), Kind::Max) => {
            let values = max_by_group(v, &target, groups, |p, q| p > q)
                .into_iter()
                .map(|m| m.unwrap_or(f32::NEG_INFINITY))
                .collect();
            Tensor::float(x.dtype, shape, values)
        }
        (Values::Int(v), Kind::Sum | Kind::Mean) => {
            let mut acc = vec![0i64; groups];
            for (&t, &p) in target.iter().zip(v) {
                acc[t] = acc[t].wrapping_add(p);
            }
            let values = acc
                .into_iter()
                .map(|s| {
                    let s = wrap_int(x.dtype, s);
                    match kind {
                        Kind::Mean if count == 0 => 0,
                        Kind::Mean => s / count as i64,
                        _ => s,
                    }
                })
                .collect();
            Tensor::int(x.dtype, shape, values)
        }
        (Values::Int(v), Kind::Max) => {
            let lowest = match x.dtype {
                DType::I32 => i32::MIN as i64,
                DType::I8 => i8::MIN as i64,
                DType::U8 => 0,
                _ => i64::MIN,
            };
            let values = max_by_group(v, &target, groups, |p, q| p > q)
                .into_iter()
                .map(|m| m.unwrap_or(lowest))
                .collect();
            Tensor::int(x.dtype, shape, values)
        }
        (Values::Bool(v), Kind::Max) => {
            let values = max_by_group(v, &target, groups, |p, q| p & !q)
                .into_iter()
                .map(|m| m.unwrap_or(false))
                .collect();
            Tensor::bool(shape, values)
        }
        (Values::Bool(_), _) => return Err(call.error("unsupported dtype bool")),
    };
    Ok(vec![out])
}

/// Per group, the first element replaced by each later one that is `greater` (`None` for an
/// empty group).
fn max_by_group<T: Copy>(
    values: &[T],
    target: &[usize],
    groups: usize,
    greater: impl Fn(T, T) -> bool,
) -> Vec<Option<T>> {
    let mut best: Vec<Option<T>> = vec![None; groups];
    for (&t, &p) in target.iter().zip(values) {
        match best[t] {
            Some(b) if !greater(p, b) => {}
            _ => best[t] = Some(p),
        }
    }
    best
}

/// `Softmax` (opset 13+) along `axis` (default -1), computed stably: `exp(x - max) / sum`, in
/// f64. A slice that is all -inf, or holds +inf or NaN, gives NaN, as in onnxruntime.
fn softmax(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let v = x.floats().map_err(|e| call.error(e))?;
    let ax = axis(call.int("axis", -1), x.shape.len()).map_err(|e| call.error(e))?;
    let n = x.shape[ax];
    let inner: usize = x.shape[ax + 1..].iter().product();
    let outer: usize = x.shape[..ax].iter().product();
    let mut out = vec![0f32; v.len()];
    let mut exps = vec![0f64; n];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * n * inner + j * inner + i;
            let max = (0..n).map(|j| v[at(j)]).fold(f32::NEG_INFINITY, f32::max) as f64;
            for (j, e) in exps.iter_mut().enumerate() {
                *e = (v[at(j)] as f64 - max).exp();
            }
            let sum: f64 = exps.iter().sum();
            for (j, e) in exps.iter().enumerate() {
                out[at(j)] = (e / sum) as f32;
            }
        }
    }
    Ok(vec![Tensor::float(x.dtype, x.shape.clone(), out)])
}

/// `CumSum(x, axis)` (opset 14): running sums along `axis` (a scalar or 1-element tensor),
/// `exclusive` leaving out the current element, `reverse` summing from the end. Integers wrap
/// to their dtype; floats accumulate in f64.
fn cumsum(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let axis_values = call.input(1)?.ints().map_err(|e| call.error(e))?;
    let &[a] = axis_values else {
        return Err(call.error(format!(
            "axis must hold one value, found {}",
            axis_values.len()
        )));
    };
    let ax = axis(a, x.shape.len()).map_err(|e| call.error(e))?;
    let (exclusive, reverse) = (call.int("exclusive", 0) != 0, call.int("reverse", 0) != 0);
    let n = x.shape[ax];
    let inner: usize = x.shape[ax + 1..].iter().product();
    let outer: usize = x.shape[..ax].iter().product();
    // Visits every line along the axis in summation order, giving (read, write) positions.
    let scan = |mut step: Box<dyn FnMut(usize, bool) + '_>| {
        for o in 0..outer {
            for i in 0..inner {
                for j in 0..n {
                    let j = if reverse { n - 1 - j } else { j };
                    step(
                        o * n * inner + j * inner + i,
                        j == if reverse { n - 1 } else { 0 },
                    );
                }
            }
        }
    };
    let out = match &x.values {
        Values::Float(v) => {
            let mut out = vec![0f32; v.len()];
            let mut acc = 0f64;
            scan(Box::new(|at, first| {
                if first {
                    acc = 0.0;
                }
                if exclusive {
                    out[at] = acc as f32;
                    acc += v[at] as f64;
                } else {
                    acc += v[at] as f64;
                    out[at] = acc as f32;
                }
            }));
            Tensor::float(x.dtype, x.shape.clone(), out)
        }
        Values::Int(v) => {
            let mut out = vec![0i64; v.len()];
            let mut acc = 0i64;
            scan(Box::new(|at, first| {
                if first {
                    acc = 0;
                }
                let before = acc;
                acc = wrap_int(x.dtype, acc.wrapping_add(v[at]));
                out[at] = if exclusive { before } else { acc };
            }));
            Tensor::int(x.dtype, x.shape.clone(), out)
        }
        Values::Bool(_) => return Err(call.error("unsupported dtype bool")),
    };
    Ok(vec![out])
}
