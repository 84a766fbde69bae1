//! Normalizations over the channels or spatial positions of `[N, C, D…]` tensors, which no
//! decoder build emits: `BatchNormalization` (inference, and training mode's batch statistics
//! with the running ones updated), `InstanceNormalization`, `GroupNormalization`,
//! `LpNormalization`, `LRN` and `MeanVarianceNormalization`. Statistics accumulate in f64. No
//! rule rewrites them.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use super::elementwise::first_type;
use super::tensor::axis;
use super::{OpCall, OpDef, Tensor};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx(
        "BatchNormalization",
        &["epsilon", "momentum", "training_mode"],
    )
    .infer(|c| {
        let mut types = first_type(c);
        types.extend((3..5).map(|i| c.ty(i)));
        types
    })
    .eval(batch_norm),
    OpDef::onnx("InstanceNormalization", &["epsilon"])
        .infer(first_type)
        .eval(|c| {
            let x = c.input(0)?;
            let channels = x.shape.get(1).copied().unwrap_or(0);
            group_norm(c, channels, false)
        }),
    OpDef::onnx(
        "GroupNormalization",
        &["epsilon", "num_groups", "stash_type"],
    )
    .infer(first_type)
    .eval(|c| {
        let groups = usize::try_from(c.int("num_groups", 0))
            .ok()
            .filter(|&g| g >= 1)
            .ok_or_else(|| c.error("num_groups must be positive"))?;
        group_norm(c, groups, true)
    }),
    OpDef::onnx("LpNormalization", &["axis", "p"])
        .infer(first_type)
        .eval(lp_norm),
    OpDef::onnx("LRN", &["alpha", "beta", "bias", "size"])
        .infer(first_type)
        .eval(lrn),
    OpDef::onnx("MeanVarianceNormalization", &["axes"])
        .infer(first_type)
        .eval(mvn),
];

/// `MeanVarianceNormalization(x; axes = [0, 2, 3])`: `(x − mean) / (√(E[x²] − mean²) + 1e-9)`
/// over the elements that share the coordinates off `axes`, as the op's function body writes
/// it.
fn mvn(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let rank = x.shape.len();
    let listed = call
        .ints("axes")
        .map_or_else(|| vec![0, 2, 3], <[i64]>::to_vec);
    let mut reduced = vec![false; rank];
    for &a in &listed {
        reduced[axis(a, rank).map_err(|e| call.error(e))?] = true;
    }
    let strides = super::tensor::strides(&x.shape);
    // The group of each element: its coordinates on the kept axes, flattened.
    let group = |flat: usize| -> usize {
        (0..rank)
            .filter(|&a| !reduced[a])
            .fold(0, |g, a| g * x.shape[a] + flat / strides[a] % x.shape[a])
    };
    let groups: usize = (0..rank)
        .filter(|&a| !reduced[a])
        .map(|a| x.shape[a])
        .product();
    let v = x.as_f64();
    let (mut sum, mut sq, mut count) = (vec![0f64; groups], vec![0f64; groups], vec![0f64; groups]);
    for (i, &e) in v.iter().enumerate() {
        let g = group(i);
        sum[g] += e;
        sq[g] += e * e;
        count[g] += 1.0;
    }
    let out = v
        .iter()
        .enumerate()
        .map(|(i, &e)| {
            let g = group(i);
            let mean = sum[g] / count[g];
            let std = (sq[g] / count[g] - mean * mean).sqrt();
            ((e - mean) / (std + 1e-9)) as f32
        })
        .collect();
    Ok(vec![Tensor::float(x.dtype, x.shape.clone(), out)])
}

/// `[N, C, area]` of a rank-2-or-more input.
fn planes(call: &OpCall<'_>, x: &Tensor) -> Result<(usize, usize, usize)> {
    if x.shape.len() < 2 {
        return Err(call.error(format!("input must be [N, C, ...], got {:?}", x.shape)));
    }
    Ok((x.shape[0], x.shape[1], x.shape[2..].iter().product()))
}

/// Input `i` as `len` values (a per-channel scale, bias, mean or variance).
fn per_channel(call: &OpCall<'_>, i: usize, len: usize) -> Result<Vec<f64>> {
    let t = call.input(i)?;
    match t.numel() == len {
        true => Ok(t.as_f64()),
        false => Err(call.error(format!(
            "input {i} must hold {len} values (one per channel), found shape {:?}",
            t.shape
        ))),
    }
}

/// `BatchNormalization(X, scale, B, mean, var)`: `scale · (x − mean) / √(var + ε) + B` per
/// channel. With `training_mode`, the mean and (biased) variance are the batch's, and the
/// running mean and variance are also returned: `input · momentum + batch · (1 − momentum)`.
fn batch_norm(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let (n, c, area) = planes(call, x)?;
    let (scale, bias) = (per_channel(call, 1, c)?, per_channel(call, 2, c)?);
    let (running_mean, running_var) = (per_channel(call, 3, c)?, per_channel(call, 4, c)?);
    let eps = call.float("epsilon", 1e-5) as f64;
    let training = call.int("training_mode", 0) != 0;
    let v = x.as_f64();
    let (mean, var) = match training {
        false => (running_mean.clone(), running_var.clone()),
        true => {
            let count = (n * area) as f64;
            let stats = (0..c).map(|ch| {
                let values = (0..n).flat_map(|b| {
                    let start = (b * c + ch) * area;
                    v[start..start + area].iter().copied()
                });
                let mean = values.clone().sum::<f64>() / count;
                let var = values.map(|p| (p - mean) * (p - mean)).sum::<f64>() / count;
                (mean, var)
            });
            stats.unzip()
        }
    };
    let out = v
        .iter()
        .enumerate()
        .map(|(f, &p)| {
            let ch = (f / area.max(1)) % c;
            (scale[ch] * (p - mean[ch]) / (var[ch] + eps).sqrt() + bias[ch]) as f32
        })
        .collect();
    let mut outputs = vec![Tensor::float(x.dtype, x.shape.clone(), out)];
    if training {
        let momentum = call.float("momentum", 0.9) as f64;
        let blend = |running: &[f64], batch: &[f64]| -> Vec<f32> {
            running
                .iter()
                .zip(batch)
                .map(|(r, b)| (r * momentum + b * (1.0 - momentum)) as f32)
                .collect()
        };
        let like = |i: usize, values: Vec<f32>| -> Result<Tensor> {
            let t = call.input(i)?;
            Ok(Tensor::float(t.dtype, t.shape.clone(), values))
        };
        outputs.push(like(3, blend(&running_mean, &mean))?);
        outputs.push(like(4, blend(&running_var, &var))?);
    }
    Ok(outputs)
}

/// The channels split into `groups` groups, each normalized over its channels and positions
/// (`(x − mean) / √(var + ε)`), then scaled and shifted per channel: `InstanceNormalization` is
/// one group per channel; `GroupNormalization` (`group_op`) takes its scale and bias per
/// channel (opset 21) or, when they hold one value per group, per group (opset 18).
fn group_norm(call: &OpCall<'_>, groups: usize, group_op: bool) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let (n, c, area) = planes(call, x)?;
    if groups == 0 || c % groups != 0 {
        return Err(call.error(format!("{c} channels do not split into {groups} groups")));
    }
    let params = if group_op && call.input(1)?.numel() == groups && groups != c {
        // opset 18: one scale and bias per group
        let (s, b) = (per_channel(call, 1, groups)?, per_channel(call, 2, groups)?);
        let per = c / groups;
        (0..c)
            .map(|ch| (s[ch / per], b[ch / per]))
            .collect::<Vec<_>>()
    } else {
        let (s, b) = (per_channel(call, 1, c)?, per_channel(call, 2, c)?);
        s.into_iter().zip(b).collect()
    };
    let eps = call.float("epsilon", 1e-5) as f64;
    let v = x.as_f64();
    let span = c / groups * area;
    let mut out = vec![0f32; v.len()];
    for b in 0..n {
        for g in 0..groups {
            let start = (b * c + g * (c / groups)) * area;
            let values = &v[start..start + span];
            let mean = values.iter().sum::<f64>() / span as f64;
            let var = values.iter().map(|p| (p - mean) * (p - mean)).sum::<f64>() / span as f64;
            let inv = 1.0 / (var + eps).sqrt();
            for (k, &p) in values.iter().enumerate() {
                let (scale, bias) = params[g * (c / groups) + k / area.max(1)];
                out[start + k] = ((p - mean) * inv * scale + bias) as f32;
            }
        }
    }
    Ok(vec![Tensor::float(x.dtype, x.shape.clone(), out)])
}

/// `LpNormalization(x; axis = -1, p = 2)`: each line along `axis` divided by its L1 or L2 norm
/// (a zero line stays zero).
fn lp_norm(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let ax = axis(call.int("axis", -1), x.shape.len()).map_err(|e| call.error(e))?;
    let p = call.int("p", 2);
    if p != 1 && p != 2 {
        return Err(call.error(format!("p must be 1 or 2, got {p}")));
    }
    let (outer, len, inner): (usize, usize, usize) = (
        x.shape[..ax].iter().product(),
        x.shape[ax],
        x.shape[ax + 1..].iter().product(),
    );
    let v = x.as_f64();
    let mut out = vec![0f32; v.len()];
    for o in 0..if v.is_empty() { 0 } else { outer } {
        for i in 0..inner {
            let at = |j: usize| (o * len + j) * inner + i;
            let norm = match p {
                1 => (0..len).map(|j| v[at(j)].abs()).sum::<f64>(),
                _ => (0..len).map(|j| v[at(j)] * v[at(j)]).sum::<f64>().sqrt(),
            };
            for j in 0..len {
                out[at(j)] = if norm == 0.0 {
                    0.0
                } else {
                    (v[at(j)] / norm) as f32
                };
            }
        }
    }
    Ok(vec![Tensor::float(x.dtype, x.shape.clone(), out)])
}

/// `LRN(x; alpha, beta, bias, size)`: `x / (bias + α/size · Σ x²)^β`, the sum over the `size`
/// channels around each one (`⌊(size−1)/2⌋` before, `⌈(size−1)/2⌉` after).
fn lrn(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let (n, c, area) = planes(call, x)?;
    let size = usize::try_from(call.int("size", 0))
        .ok()
        .filter(|&s| s >= 1)
        .ok_or_else(|| call.error("size must be positive"))?;
    let (alpha, beta, bias) = (
        call.float("alpha", 1e-4) as f64,
        call.float("beta", 0.75) as f64,
        call.float("bias", 1.0) as f64,
    );
    let (before, after) = ((size - 1) / 2, (size - 1).div_ceil(2));
    let v = x.as_f64();
    let mut out = vec![0f32; v.len()];
    for b in 0..n {
        for ch in 0..c {
            let (lo, hi) = (ch.saturating_sub(before), (ch + after).min(c - 1));
            for k in 0..area {
                let sum: f64 = (lo..=hi).map(|j| v[(b * c + j) * area + k].powi(2)).sum();
                let f = (b * c + ch) * area + k;
                out[f] = (v[f] / (bias + alpha / size as f64 * sum).powf(beta)) as f32;
            }
        }
    }
    Ok(vec![Tensor::float(x.dtype, x.shape.clone(), out)])
}
