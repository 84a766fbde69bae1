//! Ops that write an update into a copy of a tensor: ScatterND, ScatterElements and
//! TensorScatter (opset 24, the KV-cache update of a static cache), as onnxruntime's CPU kernels
//! compute them.

use super::norm_axis;
use super::select::element_positions;
use crate::ops::tensor::strides;
use crate::ops::{OpCall, Tensor, Values};
use crate::Result;

/// Copies `len` elements of `src` from `from` over `out` at `to`.
fn place(out: &mut Values, src: &Values, (to, from, len): (usize, usize, usize)) {
    match (out, src) {
        (Values::Float(o), Values::Float(s)) => {
            o[to..to + len].copy_from_slice(&s[from..from + len])
        }
        (Values::Int(o), Values::Int(s)) => o[to..to + len].copy_from_slice(&s[from..from + len]),
        (Values::Bool(o), Values::Bool(s)) => o[to..to + len].copy_from_slice(&s[from..from + len]),
        _ => unreachable!("the callers check that both tensors have one dtype"),
    }
}

/// `data` with its values replaced by `values` (f16/bf16 results rounded to the dtype).
fn rebuilt(data: &Tensor, values: Values) -> Tensor {
    let mut t = Tensor {
        dtype: data.dtype,
        shape: data.shape.clone(),
        values,
    };
    t.round_to_dtype();
    t
}

/// How a scatter combines an update `u` with the value `v` already there (`reduction`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduction {
    /// `u` replaces `v`.
    None,
    /// `v + u`.
    Add,
    /// `v · u`.
    Mul,
    /// `max(v, u)`.
    Max,
    /// `min(v, u)`.
    Min,
}

impl Reduction {
    /// The node's `reduction` attribute.
    fn read(call: &OpCall<'_>) -> Result<Reduction> {
        Ok(match call.string("reduction").unwrap_or("none") {
            "none" => Reduction::None,
            "add" => Reduction::Add,
            "mul" => Reduction::Mul,
            "max" => Reduction::Max,
            "min" => Reduction::Min,
            other => {
                return Err(call.error(format!(
                    "reduction must be none, add, mul, max or min, got `{other}`"
                )))
            }
        })
    }

    /// `out[to..to + len]` combined with `src[from..from + len]`.
    fn apply(self, out: &mut Values, src: &Values, (to, from, len): (usize, usize, usize)) {
        if self == Reduction::None {
            return place(out, src, (to, from, len));
        }
        fn combine<T: Copy + PartialOrd>(
            r: Reduction,
            o: &mut [T],
            s: &[T],
            add: fn(T, T) -> T,
            mul: fn(T, T) -> T,
        ) {
            for (o, &u) in o.iter_mut().zip(s) {
                *o = match r {
                    Reduction::Add => add(*o, u),
                    Reduction::Mul => mul(*o, u),
                    Reduction::Max if u > *o => u,
                    Reduction::Min if u < *o => u,
                    _ => *o,
                };
            }
        }
        match (out, src) {
            (Values::Float(o), Values::Float(s)) => combine(
                self,
                &mut o[to..to + len],
                &s[from..from + len],
                |a, b| a + b,
                |a, b| a * b,
            ),
            (Values::Int(o), Values::Int(s)) => combine(
                self,
                &mut o[to..to + len],
                &s[from..from + len],
                i64::wrapping_add,
                i64::wrapping_mul,
            ),
            (Values::Bool(o), Values::Bool(s)) => combine(
                self,
                &mut o[to..to + len],
                &s[from..from + len],
                |a, b| a | b,
                |a, b| a & b,
            ),
            _ => unreachable!("the callers check that both tensors have one dtype"),
        }
    }
}

/// `ScatterND(data, indices, updates; reduction)`: each row of the last axis of `indices`
/// (`k` coordinates, negative ones counted from the end) names a slice `data[i₀, …, iₖ₋₁]` that
/// the matching slice of `updates` (shape `indices.shape[..-1] ++ data.shape[k..]`) replaces
/// or, with a `reduction` (`add`, `mul`, `max`, `min`), is combined into, in the order of the
/// rows. An index outside its dim is an error, as in onnxruntime.
pub(super) fn scatter_nd(call: &OpCall<'_>) -> Result<Tensor> {
    let (data, indices, updates) = (call.input(0)?, call.input(1)?, call.input(2)?);
    let reduction = Reduction::read(call)?;
    let idx = indices
        .ints()
        .map_err(|_| call.error(format!("indices must be int64, found {}", indices.dtype)))?;
    let Some((&k, rows_shape)) = indices.shape.split_last() else {
        return Err(call.error("indices must have rank 1 or more"));
    };
    let rank = data.shape.len();
    if k == 0 || k > rank {
        return Err(call.error(format!(
            "the last dim of indices ({k}) must be from 1 to the rank of data ({rank})"
        )));
    }
    let want: Vec<usize> = rows_shape.iter().chain(&data.shape[k..]).copied().collect();
    if updates.shape != want || updates.dtype != data.dtype {
        return Err(call.error(format!(
            "updates of {} {:?} must be {} {want:?}",
            updates.dtype, updates.shape, data.dtype
        )));
    }
    call.alloc(&data.shape)?;
    let slice: usize = data.shape[k..].iter().product();
    let stride = strides(&data.shape);
    let mut out = data.values.clone();
    let rows: usize = rows_shape.iter().product();
    for row in 0..if data.numel() == 0 { 0 } else { rows } {
        let mut to = 0;
        for (axis, &i) in idx[row * k..(row + 1) * k].iter().enumerate() {
            let dim = data.shape[axis] as i64;
            let at = if i < 0 { i + dim } else { i };
            if !(0..dim).contains(&at) {
                return Err(call.error(format!(
                    "index {i} (row {row} of indices) is outside axis {axis} of size {dim}"
                )));
            }
            to += at as usize * stride[axis];
        }
        reduction.apply(&mut out, &updates.values, (to, row * slice, slice));
    }
    Ok(rebuilt(data, out))
}

/// `ScatterElements(data, indices, updates; axis = 0, reduction)`: a copy of `data` in which
/// each element of `updates` (the shape of `indices`) replaces, or with a `reduction` is
/// combined into, the element at its own coordinates with the one along `axis` given by the
/// index (negative counting from the end), in row-major order of the updates.
pub(super) fn scatter_elements(call: &OpCall<'_>) -> Result<Tensor> {
    let (data, indices, updates) = (call.input(0)?, call.input(1)?, call.input(2)?);
    let reduction = Reduction::read(call)?;
    if updates.shape != indices.shape || updates.dtype != data.dtype {
        return Err(call.error(format!(
            "updates of {} {:?} must be {} {:?} (the shape of indices)",
            updates.dtype, updates.shape, data.dtype, indices.shape
        )));
    }
    let ax = norm_axis(call, call.int("axis", 0), data.shape.len())?;
    call.alloc(&data.shape)?;
    let positions = element_positions(call, data, indices, ax)?;
    let mut out = data.values.clone();
    for (from, &to) in positions.iter().enumerate() {
        reduction.apply(&mut out, &updates.values, (to, from, 1));
    }
    Ok(rebuilt(data, out))
}

/// `TensorScatter(past_cache, update, write_indices?; axis = -2, mode = linear)`: the cache
/// with `update` written along the sequence axis `axis` (not the batch axis 0) of each batch
/// row `b` from slot `write_indices[b]` (0 when absent): `present[b, …, w + s, …] =
/// update[b, …, s, …]`. The update matches the cache in every other dim and is no longer along
/// `axis`. `linear` needs `0 ≤ w` and `w + S ≤ N`; `circular` writes at `(w + s) mod N` and
/// needs `0 ≤ w`; anything else is an error, as in onnxruntime.
pub(super) fn tensor_scatter(call: &OpCall<'_>) -> Result<Tensor> {
    let (cache, update) = (call.input(0)?, call.input(1)?);
    let circular = match call.string("mode").unwrap_or("linear") {
        "linear" => false,
        "circular" => true,
        other => return Err(call.error(format!("unknown mode `{other}`"))),
    };
    let rank = cache.shape.len();
    let axis = norm_axis(call, call.int("axis", -2), rank)?;
    if axis == 0 {
        return Err(call.error("axis must not be the batch axis 0"));
    }
    let fits = update.shape.len() == rank
        && (0..rank).all(|i| i == axis || update.shape[i] == cache.shape[i])
        && update.shape[axis] <= cache.shape[axis];
    if !fits || update.dtype != cache.dtype {
        return Err(call.error(format!(
            "update of {} {:?} must be {} {:?} with at most {} along axis {axis}",
            update.dtype, update.shape, cache.dtype, cache.shape, cache.shape[axis]
        )));
    }
    let batch = cache.shape[0];
    let starts: Vec<i64> = match call.optional(2) {
        Some(w) if w.shape == [batch] => w
            .ints()
            .map_err(|_| call.error(format!("write_indices must be int64, found {}", w.dtype)))?
            .to_vec(),
        Some(w) => {
            return Err(call.error(format!(
                "write_indices of shape {:?} must be [{batch}]",
                w.shape
            )))
        }
        None => vec![0; batch],
    };
    let (max_len, len) = (cache.shape[axis], update.shape[axis]);
    for (b, &w) in starts.iter().enumerate() {
        if w < 0 {
            return Err(call.error(format!("write_indices[{b}] = {w} is negative")));
        }
        if !circular && w.saturating_add(len as i64) > max_len as i64 {
            return Err(call.error(format!(
                "write_indices[{b}] = {w} plus {len} new entries exceeds the {max_len} slots of axis {axis}"
            )));
        }
    }
    call.alloc(&cache.shape)?;
    let inner: usize = cache.shape[axis + 1..].iter().product();
    let outer: usize = cache.shape[..axis].iter().product();
    let mut out = cache.values.clone();
    // (No element written: skip the loops, whose counts may be large.)
    for o in 0..if update.numel() == 0 { 0 } else { outer } {
        let w = starts[o / (outer / batch)] as usize;
        for s in 0..len {
            let slot = if circular {
                (w % max_len + s) % max_len
            } else {
                w + s
            };
            let to = (o * max_len + slot) * inner;
            let from = (o * len + s) * inner;
            place(&mut out, &update.values, (to, from, inner));
        }
    }
    Ok(rebuilt(cache, out))
}
