//! Reductions (`ReduceSum`, `ReduceMean`, `ReduceMax`, `ReduceMin`, `ReduceL1`, `ReduceL2`,
//! `ReduceLogSum`, `ReduceLogSumExp`, `ReduceProd`, `ReduceSumSquare`), `CumSum`, `CumProd`,
//! `Softmax` and `LogSoftmax`. Float sums
//! accumulate in f64; edge cases follow onnxruntime (see [`reduce`]).
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use super::elementwise::first_type;
use super::elementwise::wrap_int;
use super::infer::{input_type, literal_ints, normal_axis, shape_dims, Attrs, InputView};
use super::tensor::{axis, broadcast_index};
use super::types::{SymDim, TensorType};
use super::value::AttrValue;
use super::{OpCall, OpDef, Tensor, Values};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("ReduceSum", REDUCE_ATTRS)
        .infer(|c| vec![reduce_type(c.inputs, c.attrs)])
        .eval(|c| reduce(c, Kind::Sum)),
    OpDef::onnx("ReduceMean", REDUCE_ATTRS)
        .infer(|c| vec![reduce_type(c.inputs, c.attrs)])
        .eval(|c| reduce(c, Kind::Mean)),
    OpDef::onnx("ReduceMax", REDUCE_ATTRS)
        .infer(|c| vec![reduce_type(c.inputs, c.attrs)])
        .eval(|c| reduce(c, Kind::Max)),
    OpDef::onnx("ReduceMin", REDUCE_ATTRS)
        .infer(|c| vec![reduce_type(c.inputs, c.attrs)])
        .eval(|c| reduce(c, Kind::Min)),
    OpDef::onnx("ReduceL1", REDUCE_ATTRS)
        .infer(|c| vec![reduce_type(c.inputs, c.attrs)])
        .eval(|c| reduce(c, Kind::L1)),
    OpDef::onnx("ReduceL2", REDUCE_ATTRS)
        .infer(|c| vec![reduce_type(c.inputs, c.attrs)])
        .eval(|c| reduce(c, Kind::L2)),
    OpDef::onnx("ReduceLogSum", REDUCE_ATTRS)
        .infer(|c| vec![reduce_type(c.inputs, c.attrs)])
        .eval(|c| reduce(c, Kind::LogSum)),
    OpDef::onnx("ReduceLogSumExp", REDUCE_ATTRS)
        .infer(|c| vec![reduce_type(c.inputs, c.attrs)])
        .eval(|c| reduce(c, Kind::LogSumExp)),
    OpDef::onnx("ReduceProd", REDUCE_ATTRS)
        .infer(|c| vec![reduce_type(c.inputs, c.attrs)])
        .eval(|c| reduce(c, Kind::Prod)),
    OpDef::onnx("ReduceSumSquare", REDUCE_ATTRS)
        .infer(|c| vec![reduce_type(c.inputs, c.attrs)])
        .eval(|c| reduce(c, Kind::SumSquare)),
    OpDef::onnx("Softmax", &["axis"])
        .infer(first_type)
        .eval(|c| softmax(c, false)),
    OpDef::onnx("LogSoftmax", &["axis"])
        .infer(first_type)
        .eval(|c| softmax(c, true)),
    OpDef::onnx("CumSum", &["exclusive", "reverse"])
        .infer(first_type)
        .eval(|c| cumulative(c, false)),
    OpDef::onnx("CumProd", &["exclusive", "reverse"])
        .infer(first_type)
        .eval(|c| cumulative(c, true)),
];

/// The attributes of the reductions.
const REDUCE_ATTRS: &[&str] = &["keepdims", "noop_with_empty_axes"];

/// The reductions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    /// Σ|x|.
    L1,
    /// √Σx².
    L2,
    /// ln Σx.
    LogSum,
    /// ln Σeˣ, computed as `max + ln Σe^(x − max)`.
    LogSumExp,
    /// Πx.
    Prod,
    /// Σx².
    SumSquare,
}

/// A reduction over the axes given by input 1 (opset 18+; the pre-18 `axes` attribute is read
/// when the input is absent). No axes means every axis, or the identity when
/// `noop_with_empty_axes` is set; repeated axes count once; `keepdims` defaults to 1.
///
/// As in onnxruntime: an empty mean is 0, an empty max the dtype's lowest value and an empty
/// min its highest (an empty bool max or min is an error); integer means truncate.
/// `ReduceMax` (`ReduceMin`) starts from the first element and replaces it only by greater
/// (smaller) ones, so a NaN propagates only when it comes first in its group and is skipped
/// elsewhere; infinities compare as usual.
///
/// Not reproduced: in a contiguous group of 4 or more elements, onnxruntime's vectorized
/// reduction also loses, after a NaN at position `p` in 1..=7, the later elements of the
/// group's first multiple of 4 at positions congruent to `p` modulo the power of two above `p`
/// (`ReduceMax [1, NaN, 2, 3]` gives 2, `ReduceMin [2, NaN, 0, -1, 5]` gives 0; here 3 and
/// -1). That depends on its tiling, not on the values.
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
    // The output, and the accumulators: one per kept element (checked before allocating, as
    // an empty input may have large dimensions).
    let groups = call.alloc(&kept)?;
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
        (Values::Float(v), Kind::L1 | Kind::L2 | Kind::LogSum | Kind::SumSquare | Kind::Prod) => {
            let (start, map): (f64, fn(f64) -> f64) = match kind {
                Kind::L1 => (0.0, f64::abs),
                Kind::L2 | Kind::SumSquare => (0.0, |p| p * p),
                Kind::Prod => (1.0, |p| p),
                _ => (0.0, |p| p),
            };
            let mut acc = vec![start; groups];
            for (&t, &p) in target.iter().zip(v) {
                acc[t] = match kind {
                    Kind::Prod => acc[t] * p as f64,
                    _ => acc[t] + map(p as f64),
                };
            }
            let values = acc
                .into_iter()
                .map(|a| match kind {
                    Kind::L2 => a.sqrt() as f32,
                    Kind::LogSum => a.ln() as f32,
                    _ => a as f32,
                })
                .collect();
            Tensor::float(x.dtype, shape, values)
        }
        (Values::Float(v), Kind::LogSumExp) => {
            let max = extreme_by_group(v, &target, groups, |p, q| p > q || p.is_nan());
            let mut acc = vec![0f64; groups];
            for (&t, &p) in target.iter().zip(v) {
                if let Some(m) = max[t].filter(|m| m.is_finite()) {
                    acc[t] += (p as f64 - m as f64).exp();
                }
            }
            let values = max
                .iter()
                .zip(acc)
                .map(|(m, a)| match m {
                    None => f32::NEG_INFINITY,
                    Some(m) if !m.is_finite() => *m,
                    Some(m) => (*m as f64 + a.ln()) as f32,
                })
                .collect();
            Tensor::float(x.dtype, shape, values)
        }
        (Values::Float(v), Kind::Max | Kind::Min) => {
            let (better, empty): (fn(f32, f32) -> bool, f32) = match kind {
                Kind::Max => (|p, q| p > q, f32::NEG_INFINITY),
                _ => (|p, q| p < q, f32::INFINITY),
            };
            let values = extreme_by_group(v, &target, groups, better)
                .into_iter()
                .map(|m| m.unwrap_or(empty))
                .collect();
            Tensor::float(x.dtype, shape, values)
        }
        (Values::Int(v), Kind::L1 | Kind::SumSquare | Kind::Prod) => {
            let start: i64 = if kind == Kind::Prod { 1 } else { 0 };
            let mut acc = vec![start; groups];
            for (&t, &p) in target.iter().zip(v) {
                acc[t] = match kind {
                    Kind::L1 => acc[t].wrapping_add(p.wrapping_abs()),
                    Kind::SumSquare => acc[t].wrapping_add(p.wrapping_mul(p)),
                    _ => acc[t].wrapping_mul(p),
                };
            }
            let values = acc.into_iter().map(|a| wrap_int(x.dtype, a)).collect();
            Tensor::int(x.dtype, shape, values)
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
        (Values::Int(_), Kind::L2 | Kind::LogSum | Kind::LogSumExp) => {
            return Err(call.error(format!("unsupported dtype {}", x.dtype)))
        }
        (Values::Int(v), Kind::Max | Kind::Min) => {
            let (lowest, highest) = match x.dtype {
                DType::I32 => (i32::MIN as i64, i32::MAX as i64),
                DType::I8 => (i8::MIN as i64, i8::MAX as i64),
                DType::U8 => (0, u8::MAX as i64),
                DType::I16 => (i16::MIN as i64, i16::MAX as i64),
                DType::U16 => (0, u16::MAX as i64),
                DType::U32 => (0, u32::MAX as i64),
                // u64::MAX's bits.
                DType::U64 => (0, -1),
                _ => (i64::MIN, i64::MAX),
            };
            let (better, empty): (fn(i64, i64) -> bool, i64) = match (kind, x.dtype) {
                (Kind::Max, DType::U64) => (|p, q| (p as u64) > (q as u64), lowest),
                (Kind::Max, _) => (|p, q| p > q, lowest),
                (_, DType::U64) => (|p, q| (p as u64) < (q as u64), highest),
                _ => (|p, q| p < q, highest),
            };
            let values = extreme_by_group(v, &target, groups, better)
                .into_iter()
                .map(|m| m.unwrap_or(empty))
                .collect();
            Tensor::int(x.dtype, shape, values)
        }
        (Values::Bool(v), Kind::Max | Kind::Min) => {
            // An empty set's maximum is the least value, false; its minimum true.
            let (better, empty): (fn(bool, bool) -> bool, bool) = match kind {
                Kind::Max => (|p, q| p & !q, false),
                _ => (|p, q| !p & q, true),
            };
            let values = extreme_by_group(v, &target, groups, better)
                .into_iter()
                .map(|m| m.unwrap_or(empty))
                .collect();
            Tensor::bool(shape, values)
        }
        (Values::Bool(_), _) => return Err(call.error("unsupported dtype bool")),
    };
    Ok(vec![out])
}

/// Per group, the first element replaced by each later one that is `better` (`None` for an
/// empty group).
fn extreme_by_group<T: Copy>(
    values: &[T],
    target: &[usize],
    groups: usize,
    better: impl Fn(T, T) -> bool,
) -> Vec<Option<T>> {
    let mut best: Vec<Option<T>> = vec![None; groups];
    for (&t, &p) in target.iter().zip(values) {
        match best[t] {
            Some(b) if !better(p, b) => {}
            _ => best[t] = Some(p),
        }
    }
    best
}

/// `CumSum(x, axis)` (`CumProd` with `product`): running sums (products) along `axis` (a
/// scalar or 1-element tensor), `exclusive` shifting them by one (starting from 0, or 1) and
/// `reverse` running from the end. Floats accumulate in f32 in order, as onnxruntime does;
/// integers wrap to their width.
fn cumulative(call: &OpCall<'_>, product: bool) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let ax = match call.input(1)?.ints().map_err(|e| call.error(e))? {
        [a] => axis(*a, x.shape.len()).map_err(|e| call.error(e))?,
        other => return Err(call.error(format!("axis must hold one value, found {other:?}"))),
    };
    let (exclusive, reverse) = (call.int("exclusive", 0) != 0, call.int("reverse", 0) != 0);
    let n = x.shape[ax];
    let inner: usize = x.shape[ax + 1..].iter().product();
    let outer: usize = x.shape[..ax].iter().product();
    // Visits every line along `axis` in running order, handing `step` (index, running sum).
    fn scan<T: Copy>(
        v: &[T],
        (outer, n, inner): (usize, usize, usize),
        (exclusive, reverse): (bool, bool),
        zero: T,
        add: impl Fn(T, T) -> T,
    ) -> Vec<T> {
        let mut out = vec![zero; v.len()];
        // (No element: skip the loops, whose `outer` and `inner` may be large.)
        for o in 0..if v.is_empty() { 0 } else { outer } {
            for i in 0..inner {
                let mut acc = zero;
                for step in 0..n {
                    let j = if reverse { n - 1 - step } else { step };
                    let at = o * n * inner + j * inner + i;
                    if exclusive {
                        out[at] = acc;
                        acc = add(acc, v[at]);
                    } else {
                        acc = add(acc, v[at]);
                        out[at] = acc;
                    }
                }
            }
        }
        out
    }
    let dims = (outer, n, inner);
    let flags = (exclusive, reverse);
    let out = match &x.values {
        Values::Float(v) => {
            let mut t = Tensor::float(
                x.dtype,
                x.shape.clone(),
                match product {
                    true => scan(v, dims, flags, 1.0, |a, b| a * b),
                    false => scan(v, dims, flags, 0.0, |a, b| a + b),
                },
            );
            t.round_to_dtype();
            t
        }
        Values::Int(v) => {
            let dtype = x.dtype;
            let summed = match product {
                true => scan(v, dims, flags, 1, |a, b| wrap_int(dtype, a.wrapping_mul(b))),
                false => scan(v, dims, flags, 0, |a, b| wrap_int(dtype, a.wrapping_add(b))),
            };
            Tensor::int(dtype, x.shape.clone(), summed)
        }
        Values::Bool(_) => return Err(call.error("unsupported dtype bool")),
    };
    Ok(vec![out])
}

/// `Softmax` (opset 13+) along `axis` (default -1), computed stably: `exp(x - max) / sum`, in
/// f64; with `log`, `LogSoftmax`: `x - max - ln(sum)`. A slice that is all -inf, or holds +inf
/// or NaN, gives NaN, as in onnxruntime.
fn softmax(call: &OpCall<'_>, log: bool) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let v = x.floats().map_err(|e| call.error(e))?;
    let ax = axis(call.int("axis", -1), x.shape.len()).map_err(|e| call.error(e))?;
    let n = x.shape[ax];
    let inner: usize = x.shape[ax + 1..].iter().product();
    let outer: usize = x.shape[..ax].iter().product();
    let mut out = vec![0f32; v.len()];
    // One row along the axis. (No element: no row and no loop, as the axes may be long.)
    let mut exps = vec![0f64; if v.is_empty() { 0 } else { n }];
    for o in 0..if v.is_empty() { 0 } else { outer } {
        for i in 0..inner {
            let at = |j: usize| o * n * inner + j * inner + i;
            let max = (0..n).map(|j| v[at(j)]).fold(f32::NEG_INFINITY, f32::max) as f64;
            for (j, e) in exps.iter_mut().enumerate() {
                *e = (v[at(j)] as f64 - max).exp();
            }
            let sum: f64 = exps.iter().sum();
            for (j, e) in exps.iter().enumerate() {
                out[at(j)] = match log {
                    true => (v[at(j)] as f64 - max - sum.ln()) as f32,
                    false => (e / sum) as f32,
                };
            }
        }
    }
    Ok(vec![Tensor::float(x.dtype, x.shape.clone(), out)])
}

/// A reduction's type: the input's, its reduced axes (the constant `axes` input or the
/// pre-18 attribute; all when neither is given) kept as 1 or dropped by `keepdims`.
fn reduce_type(inputs: &[InputView<'_>], attr: &Attrs<'_>) -> TensorType {
    let t = input_type(inputs, 0);
    let axes = match (inputs.get(1), attr.get("axes")) {
        (Some(v), None) => v.konst.and_then(literal_ints),
        (None, Some(AttrValue::Ints(a))) => Some(a.clone()),
        (None, None) => Some(Vec::new()),
        _ => None,
    };
    let keep = attr.int("keepdims").unwrap_or(1) != 0;
    let shape = match (shape_dims(&t), axes) {
        (Some(d), Some(axes)) if axes.is_empty() && attr.int("noop_with_empty_axes") == Some(1) => {
            Some(d.to_vec())
        }
        (Some(d), Some(axes)) => {
            let positions: Option<Vec<usize>> = match axes.is_empty() {
                true => Some((0..d.len()).collect()),
                false => axes.iter().map(|&a| normal_axis(a, d.len())).collect(),
            };
            positions.map(|p| {
                d.iter()
                    .enumerate()
                    .filter_map(|(i, dim)| match (p.contains(&i), keep) {
                        (false, _) => Some(dim.clone()),
                        (true, true) => Some(SymDim::Known(1)),
                        (true, false) => None,
                    })
                    .collect()
            })
        }
        _ => None,
    };
    TensorType {
        dtype: t.dtype,
        shape,
    }
}

#[cfg(test)]
mod tests {
    use crate::interp::eval_op;
    use crate::ir::{Attr, Attrs, DType};
    use crate::limits::InterpLimits;
    use crate::ops::Tensor;

    #[test]
    fn uint64_extrema_read_the_values_as_unsigned() {
        // 2^64 − 1, 2^63, 5 as i64 bits.
        let x = Tensor::int(DType::U64, vec![3], vec![-1, i64::MIN, 5]);
        let attrs: Attrs = [("keepdims".to_string(), Attr::Int(0))]
            .into_iter()
            .collect();
        let run = |op| {
            let limits = InterpLimits::default();
            eval_op("t", ("", op), attrs.clone(), &[Some(&x)], &["y"], &limits).unwrap()
        };
        assert_eq!(run("ReduceMax")[0].ints().unwrap(), [-1]);
        assert_eq!(run("ReduceMin")[0].ints().unwrap(), [5]);
        let empty = Tensor::int(DType::U64, vec![0], vec![]);
        let limits = InterpLimits::default();
        let min = eval_op(
            "t",
            ("", "ReduceMin"),
            attrs.clone(),
            &[Some(&empty)],
            &["y"],
            &limits,
        );
        assert_eq!(
            min.unwrap()[0].ints().unwrap(),
            [-1],
            "u64::MAX, the empty minimum"
        );
    }
}
