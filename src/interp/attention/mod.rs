//! Attention: ONNX `Attention` (opsets 23/24, in [`standard`]) and `com.microsoft`
//! `GroupQueryAttention` (in [`gqa`]), matching onnxruntime's CPU kernels. Scores, softmax and
//! the weighted sum are computed in f32 with f64 dot products; outputs are rounded to their
//! dtype, and f16/bf16 intermediates are rounded where onnxruntime stores them in that dtype.

pub mod gqa;
pub mod standard;

use half::{bf16, f16};

use super::{OpCall, OpImpl};
use crate::ir::DType;
use crate::limits::config::MAX_HEADS;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpImpl] = &[
    OpImpl::onnx("Attention", standard::attention),
    OpImpl::ms("GroupQueryAttention", gqa::group_query_attention),
];

/// Head-count attribute `name` (`num_heads`, `kv_num_heads`, …): `None` when absent or 0, else
/// a count in `1..=MAX_HEADS`; a negative or larger value is an error naming the node and the
/// attribute, so sums and products of head counts and head sizes cannot overflow.
pub(crate) fn head_count(call: &OpCall<'_>, name: &str) -> Result<Option<usize>> {
    let v = call.int(name, 0);
    match usize::try_from(v) {
        Ok(0) => Ok(None),
        Ok(n) if n <= MAX_HEADS => Ok(Some(n)),
        _ => Err(call.error(format!(
            "attribute `{name}` = {v} is not a head count (expected 0 to {MAX_HEADS})"
        ))),
    }
}

/// Dot product with f64 accumulation, returned in f32.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x as f64 * y as f64)
        .sum::<f64>() as f32
}

/// `softcap · tanh(x / softcap)` when `softcap > 0`, else `x`.
fn soft_cap(x: f32, softcap: f32) -> f32 {
    if softcap > 0.0 {
        softcap * (x / softcap).tanh()
    } else {
        x
    }
}

/// `x` rounded to the precision of `dtype` (f16, bf16; unchanged for other dtypes).
fn round_to(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::F16 => f16::from_f32(x).to_f32(),
        DType::BF16 => bf16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// The lowest finite value of `dtype` (f32's for dtypes other than f16 and bf16): the value
/// onnxruntime fills masked attention scores with.
fn lowest(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => f16::MIN.to_f32(),
        DType::BF16 => bf16::MIN.to_f32(),
        _ => f32::MIN,
    }
}

/// Turns a row of scores held in `dtype` precision into softmax probabilities (rounded to
/// `dtype`) in place, as onnxruntime does: a row holding a NaN becomes all NaN (a NaN is never
/// taken for a masked score); otherwise a row whose maximum is at or below the lowest finite
/// value of `dtype` (every key masked, by `-inf` or by that lowest value) becomes all zeros, and
/// a `+inf` score makes the row NaN (`inf - inf`). `smooth` adds a virtual zero logit to the
/// denominator (`smooth_softmax`).
fn softmax(row: &mut [f32], smooth: bool, dtype: DType) {
    if row.iter().any(|p| p.is_nan()) {
        row.fill(f32::NAN);
        return;
    }
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max <= lowest(dtype) {
        row.iter_mut().for_each(|p| *p = 0.0);
        return;
    }
    let mut sum = 0f64;
    for p in row.iter_mut() {
        *p = (*p - max).exp();
        sum += *p as f64;
    }
    if smooth {
        sum += (-max as f64).exp();
    }
    row.iter_mut()
        .for_each(|p| *p = round_to(dtype, (*p as f64 / sum) as f32));
}

/// [`softmax`] in f32 of a row joined by one more logit, `sink`, whose probability is dropped
/// (GroupQueryAttention's `head_sink`), as onnxruntime computes it: the maximum is taken over
/// the row and the sink, so a row holding a NaN, a NaN sink or a `+inf` sink (`inf − inf`)
/// becomes all NaN, and a row of `-inf` scores gets zeros (the sink takes the weight).
fn softmax_with_sink(row: &mut [f32], sink: f32) {
    if sink.is_nan() || row.iter().any(|p| p.is_nan()) {
        row.fill(f32::NAN);
        return;
    }
    let max = row.iter().copied().fold(sink, f32::max);
    let mut sum = ((sink - max).exp()) as f64;
    for p in row.iter_mut() {
        *p = (*p - max).exp();
        sum += *p as f64;
    }
    row.iter_mut().for_each(|p| *p = (*p as f64 / sum) as f32);
}

/// Writes `Σ_t probs[t] · values[t]` to `out` (`values` rows of `out.len()` elements). Every
/// row takes part, zero probabilities included: as in onnxruntime's matrix product, a NaN or
/// infinite value under a masked key still makes that output element NaN (`0 · inf`).
fn weighted_sum(probs: &[f32], values: &[f32], out: &mut [f32]) {
    let dim = out.len();
    let mut acc = vec![0f64; dim];
    for (t, &p) in probs.iter().enumerate() {
        for (a, &v) in acc.iter_mut().zip(&values[t * dim..(t + 1) * dim]) {
            *a += p as f64 * v as f64;
        }
    }
    out.iter_mut().zip(acc).for_each(|(o, a)| *o = a as f32);
}
