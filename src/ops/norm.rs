//! Normalizations: ONNX `LayerNormalization` and `RMSNormalization`, `com.microsoft`
//! `SkipLayerNormalization` and `SkipSimplifiedLayerNormalization`, matching onnxruntime's CPU
//! kernels. Statistics are accumulated in f64 and the result rounded to the output dtype.
//! `LayerNormalization` and `RMSNormalization` sum values and squares; the `Skip*` ops follow
//! onnxruntime's running (Welford) mean and sum of squared deviations, so a row holding an
//! infinity before its last element has a NaN mean and one holding it last an infinite one.
//!
//! Not reproduced: onnxruntime accumulates the `Skip*` statistics in f32, so squares beyond
//! f32's range (elements of magnitude ≳ 1.8e19) make its deviation infinite (and `y` zero or
//! NaN) where the f64 accumulation here stays finite.
//!
//! Output details (as onnxruntime writes them):
//! - `LayerNormalization` `Mean`/`InvStdDev` keep the input rank with the normalized axes set
//!   to 1 (`[d0, …, d(axis−1), 1, …, 1]`), in the `stash_type` dtype (f32 by default).
//! - The `Skip*` ops normalize over the last axis; `mean`/`inv_std_var` are f32 of shape
//!   `[…, 1]` (input shape with the last dimension 1), `input_skip_bias_sum` is
//!   `input + skip (+ bias)` in the input dtype. `SkipSimplifiedLayerNormalization` writes zeros
//!   to `mean`. `skip` broadcasts against the input (`[B, S, H]`, `[1, S, H]` or `[S, H]`).
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use super::cost::Cost;
use super::elementwise::first_type;
use super::infer::shape_dims;
use super::tensor::{axis, broadcast_index, broadcast_shape};
use super::types::{SymDim, TensorType};
use super::{OpCall, OpDef, Tensor};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("LayerNormalization", NORM_ATTRS)
        .infer(first_type)
        .eval(|c| layer_norm(c, false))
        .since(17),
    OpDef::onnx("RMSNormalization", NORM_ATTRS)
        .infer(first_type)
        .cost(Cost::KERNEL.support(|c, _, rank| c.supports_rank4_rmsnorm || rank != Some(4)))
        .eval(|c| layer_norm(c, true))
        .since(23),
    OpDef::ms("SkipLayerNormalization", &["epsilon"])
        .infer(|c| skip_norm_types(&c.ty(0)))
        .cost(SKIP_NORM)
        .eval(|c| skip_norm(c, false)),
    OpDef::ms("SkipSimplifiedLayerNormalization", &["epsilon"])
        .infer(|c| skip_norm_types(&c.ty(0)))
        .cost(SKIP_NORM)
        .eval(|c| skip_norm(c, true)),
];

/// The attributes of the standard normalizations.
const NORM_ATTRS: &[&str] = &["axis", "epsilon", "stash_type"];

/// The cost of the fused skip normalizations.
const SKIP_NORM: Cost = Cost::KERNEL.support(|c, _, _| c.supports_skip_layer_norm);

/// Per-row statistics of `x` split in `rows` rows of `inner` elements: `(mean, 1/sqrt(var +
/// eps))`, where for the simplified (RMS) form the mean is 0 and `var` is the mean square. Rows
/// of no element (`inner` = 0) have NaN statistics.
fn row_stats(
    x: &[f32],
    rows: usize,
    inner: usize,
    epsilon: f32,
    simplified: bool,
) -> Vec<(f64, f64)> {
    (0..rows)
        .map(|r| &x[r * inner..(r + 1) * inner])
        .map(|row| {
            let n = inner as f64;
            let sum: f64 = row.iter().map(|&v| v as f64).sum();
            let sum_sq: f64 = row.iter().map(|&v| (v as f64) * (v as f64)).sum();
            let mean = if simplified { 0.0 } else { sum / n };
            let var = sum_sq / n - mean * mean;
            (mean, 1.0 / (var + epsilon as f64).sqrt())
        })
        .collect()
}

/// `tensor` broadcast to `shape`, or an error naming `what`.
fn broadcast_to(
    call: &OpCall<'_>,
    tensor: &Tensor,
    shape: &[usize],
    what: &str,
) -> Result<Vec<f32>> {
    if tensor.shape.len() > shape.len() || broadcast_shape(&[&tensor.shape, shape])? != shape {
        return Err(call.error(format!(
            "{what} of shape {:?} does not broadcast to {shape:?}",
            tensor.shape
        )));
    }
    let v = tensor.floats()?;
    Ok(broadcast_index(&tensor.shape, shape)
        .into_iter()
        .map(|i| v[i])
        .collect())
}

/// The dtype that `stash_type` names.
fn stash_dtype(call: &OpCall<'_>) -> Result<DType> {
    match call.int("stash_type", 1) {
        1 => Ok(DType::F32),
        10 => Ok(DType::F16),
        11 => Ok(DType::F64),
        16 => Ok(DType::BF16),
        t => Err(call.error(format!("unsupported stash_type {t}"))),
    }
}

/// `LayerNormalization` (X, Scale, B?) → Y, Mean, InvStdDev; or, when `rms`,
/// `RMSNormalization` (X, scale) → Y.
fn layer_norm(call: &OpCall<'_>, rms: bool) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let rank = x.shape.len();
    let ax = axis(call.int("axis", -1), rank)?;
    let inner: usize = x.shape[ax..].iter().product();
    let epsilon = call.float("epsilon", 1e-5);
    let stash = stash_dtype(call)?;
    let xv = x.floats()?;
    let scale = broadcast_to(call, call.input(1)?, &x.shape, "scale")?;
    let bias = match call.optional(2).filter(|_| !rms) {
        Some(b) => Some(broadcast_to(call, b, &x.shape, "bias")?),
        None => None,
    };
    let stat_shape: Vec<usize> = (0..rank)
        .map(|d| if d < ax { x.shape[d] } else { 1 })
        .collect();
    // One row of statistics per normalized row, as many as LayerNormalization outputs (checked
    // before allocating: an empty input may have long outer axes). RMSNormalization, whose
    // output is its only use of them, needs none for an empty input.
    let rows = if rms && xv.is_empty() {
        0
    } else {
        call.alloc(&stat_shape)?
    };
    let stats = row_stats(xv, rows, inner, epsilon, rms);
    let y = xv
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let (mean, inv) = stats[i / inner.max(1)];
            let n = (v as f64 - mean) * inv * scale[i] as f64;
            (n + bias.as_ref().map_or(0.0, |b| b[i] as f64)) as f32
        })
        .collect();
    let y = Tensor::float(x.dtype, x.shape.clone(), y);
    if rms {
        return Ok(vec![y]);
    }
    let means = stats.iter().map(|s| s.0 as f32).collect();
    let invs = stats.iter().map(|s| s.1 as f32).collect();
    Ok(vec![
        y,
        Tensor::float(stash, stat_shape.clone(), means),
        Tensor::float(stash, stat_shape, invs),
    ])
}

/// A 1-D per-channel parameter of length `hidden`, if the input is present.
fn channel<'a>(
    call: &OpCall<'a>,
    i: usize,
    hidden: usize,
    what: &str,
) -> Result<Option<&'a [f32]>> {
    match call.optional(i) {
        Some(t) if t.numel() == hidden => Ok(Some(t.floats()?)),
        Some(t) => Err(call.error(format!(
            "{what} of shape {:?} must hold {hidden} values",
            t.shape
        ))),
        None => Ok(None),
    }
}

/// The statistics of one row of a `Skip*` op, `(mean, standard deviation)`, in onnxruntime's
/// order of operations: for the simplified (RMS) form, mean 0 and `sqrt(Σx²/n + eps)`;
/// otherwise a running (Welford) mean and sum of squared deviations `m2`, and
/// `sqrt(m2/n + eps)`.
fn skip_row_stats(row: &[f32], epsilon: f32, simplified: bool) -> (f64, f64) {
    let (n, epsilon) = (row.len() as f64, epsilon as f64);
    if simplified {
        let sum_sq: f64 = row.iter().map(|&v| v as f64 * v as f64).sum();
        return (0.0, (sum_sq / n + epsilon).sqrt());
    }
    let (mut mean, mut m2) = (0.0f64, 0.0f64);
    for (k, &v) in row.iter().enumerate() {
        let v = v as f64;
        let delta = v - mean;
        mean += delta / (k + 1) as f64;
        m2 += delta * (v - mean);
    }
    (mean, (m2 / n + epsilon).sqrt())
}

/// `SkipLayerNormalization` (input, skip, gamma, beta?, bias?) or, when `simplified`,
/// `SkipSimplifiedLayerNormalization` (input, skip, gamma, bias?) → output, mean, inv_std_var,
/// input_skip_bias_sum.
fn skip_norm(call: &OpCall<'_>, simplified: bool) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let hidden = *x
        .shape
        .last()
        .ok_or_else(|| call.error("input must have rank ≥ 1"))?;
    let skip = broadcast_to(call, call.input(1)?, &x.shape, "skip")?;
    let gamma =
        channel(call, 2, hidden, "gamma")?.ok_or_else(|| call.error("gamma is required"))?;
    let (beta, bias) = if simplified {
        (None, channel(call, 3, hidden, "bias")?)
    } else {
        (
            channel(call, 3, hidden, "beta")?,
            channel(call, 4, hidden, "bias")?,
        )
    };
    let sum: Vec<f32> = x
        .floats()?
        .iter()
        .zip(&skip)
        .enumerate()
        .map(|(i, (&a, &b))| a + b + bias.map_or(0.0, |bias| bias[i % hidden]))
        .collect();
    let mut stat_shape = x.shape.clone();
    *stat_shape.last_mut().expect("rank ≥ 1") = 1;
    // One row of statistics per row of `hidden` elements (checked before allocating: an empty
    // input may have long outer axes).
    let rows = call.alloc(&stat_shape)?;
    let epsilon = call.float("epsilon", 1e-12);
    let stats: Vec<(f64, f64)> = (0..rows)
        .map(|r| skip_row_stats(&sum[r * hidden..(r + 1) * hidden], epsilon, simplified))
        .collect();
    let y = sum
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let (mean, std_dev) = stats[i / hidden];
            let n = (v as f64 - mean) / std_dev * gamma[i % hidden] as f64;
            (n + beta.map_or(0.0, |b| b[i % hidden] as f64)) as f32
        })
        .collect();
    let means = stats.iter().map(|s| s.0 as f32).collect();
    let invs = stats.iter().map(|s| (1.0 / s.1) as f32).collect();
    Ok(vec![
        Tensor::float(x.dtype, x.shape.clone(), y),
        Tensor::float(DType::F32, stat_shape.clone(), means),
        Tensor::float(DType::F32, stat_shape, invs),
        Tensor::float(x.dtype, x.shape.clone(), sum),
    ])
}

/// Skip*LayerNormalization: `output`, `mean`, `inv_std_var`, `input_skip_bias_sum`.
fn skip_norm_types(x: &TensorType) -> Vec<TensorType> {
    let stats = TensorType {
        dtype: Some(DType::F32),
        shape: shape_dims(x).map(|d| {
            let mut s = d.to_vec();
            if let Some(last) = s.last_mut() {
                *last = SymDim::Known(1);
            }
            s
        }),
    };
    vec![x.clone(), stats.clone(), stats, x.clone()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_stats_follow_a_running_mean_like_onnxruntime() {
        // an infinity before the row's end: the next step computes inf - inf (onnxruntime's mean
        // is NaN); as the last element: the mean is inf and the deviation NaN
        assert!(skip_row_stats(&[f32::INFINITY, 0.0, 0.0, 0.0], 1e-5, false)
            .0
            .is_nan());
        let (mean, std_dev) = skip_row_stats(&[0.0, 0.0, 0.0, f32::INFINITY], 1e-5, false);
        assert_eq!(mean, f64::INFINITY);
        assert!(std_dev.is_nan());
        assert!(skip_row_stats(&[f32::INFINITY; 4], 1e-5, false).0.is_nan());
        // the simplified form has no mean: an infinity makes the deviation infinite
        assert_eq!(
            skip_row_stats(&[1.0, f32::INFINITY], 1e-5, true),
            (0.0, f64::INFINITY)
        );
        let (mean, std_dev) = skip_row_stats(&[1.0, 2.0, 3.0, 4.0], 0.0, false);
        assert_eq!((mean, std_dev), (2.5, 1.25f64.sqrt()));
    }
}
