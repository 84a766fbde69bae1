//! Discrete Fourier transforms: `DFT` (opset 17: `axis` an attribute, default 1; opset 20+:
//! `axis` the third input, default −2; a node with neither runs opset 20's default) and `STFT`
//! (opset 17). Signals are `[..., 1]` (real) or `[..., 2]` (real and imaginary parts) along the
//! last axis; spectra are `[..., 2]`. Each line along the transformed axis is zero-padded or
//! truncated to `dft_length` and transformed directly (`X[k] = Σ x[j]·e^{∓2πi·jk/n}`, the inverse
//! divided by `n`), in f64 with twiddles of `jk mod n` (kept incrementally) so that long lines keep their accuracy,
//! as numpy's `fft` in ONNX's reference gives. `onesided` keeps the first `n/2 + 1` bins of a
//! forward transform; an inverse one-sided transform (numpy's `irfft`) takes `n/2 + 1` bins of
//! a Hermitian spectrum (`n` defaulting to `2·(bins − 1)`) to a real signal `[..., n, 1]`.
//!
//! [`OPS`] registers the ops with their attribute schemas, type inference and cost facts
//! beside their evaluators.

use std::f64::consts::TAU;

use super::{OpCall, OpDef, Tensor, Values};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("DFT", &["axis", "inverse", "onesided"])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .since(17)
        .eval(dft),
    OpDef::onnx("STFT", &["onesided"])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .since(17)
        .eval(stft),
];

/// A complex number as (real, imaginary).
type Complex = (f64, f64);

/// `e^{sign·2πi·m/n}` for `m = jk mod n`.
fn twiddle(m: usize, n: usize, sign: f64) -> Complex {
    let angle = TAU * m as f64 / n as f64;
    (angle.cos(), sign * angle.sin())
}

/// The first `bins` bins of the length-`n` transform of `x` (zero-padded or truncated to
/// `n`), inverse (`e^{+…}`, divided by `n`) or forward.
fn transform(x: &[Complex], n: usize, bins: usize, inverse: bool) -> Vec<Complex> {
    let sign = if inverse { 1.0 } else { -1.0 };
    let used = &x[..x.len().min(n)];
    (0..bins)
        .map(|k| {
            let (mut re, mut im, mut m) = (0.0, 0.0, 0);
            for &(a, b) in used {
                let (c, s) = twiddle(m, n, sign);
                re += a * c - b * s;
                im += a * s + b * c;
                m = (m + k) % n;
            }
            if inverse {
                (re / n as f64, im / n as f64)
            } else {
                (re, im)
            }
        })
        .collect()
}

/// The real length-`n` signal whose one-sided spectrum is `x` (its first `n/2 + 1` bins,
/// zero-padded; the imaginary parts of the bins that must be real are ignored), as numpy's
/// `irfft`.
fn inverse_real(x: &[Complex], n: usize) -> Vec<f64> {
    let half = n / 2 + 1;
    let bin = |k: usize| x.get(k).copied().unwrap_or((0.0, 0.0));
    (0..n)
        .map(|j| {
            let (mut sum, mut m) = (bin(0).0, 0);
            for k in 1..half {
                m = (m + j) % n;
                let (a, b) = bin(k);
                if 2 * k == n {
                    sum += a * if j % 2 == 0 { 1.0 } else { -1.0 };
                } else {
                    let (c, s) = twiddle(m, n, 1.0);
                    sum += 2.0 * (a * c - b * s);
                }
            }
            sum / n as f64
        })
        .collect()
}

/// The complex values of a signal tensor `[..., 1 | 2]`, and its shape without the last axis.
fn complex_signal(call: &OpCall<'_>, x: &Tensor) -> Result<(Vec<Complex>, Vec<usize>)> {
    let Values::Float(v) = &x.values else {
        return Err(call.error(format!(
            "the signal must be a float tensor, got {}",
            x.dtype
        )));
    };
    let parts = match x.shape.last() {
        Some(&p @ (1 | 2)) if x.shape.len() >= 2 => p,
        _ => {
            return Err(call.error(format!(
                "the signal must be [..., 1] (real) or [..., 2] (complex) with a signal axis, \
                 got shape {:?}",
                x.shape
            )))
        }
    };
    let values = v
        .chunks(parts)
        .map(|c| (f64::from(c[0]), c.get(1).map_or(0.0, |&i| f64::from(i))))
        .collect();
    Ok((values, x.shape[..x.shape.len() - 1].to_vec()))
}

/// A scalar integer input `i`, if present.
fn scalar(call: &OpCall<'_>, i: usize) -> Result<Option<i64>> {
    match call.optional(i) {
        None => Ok(None),
        Some(t) if t.numel() == 1 => Ok(Some(t.as_f64()[0] as i64)),
        Some(t) => Err(call.error(format!(
            "input {i} must hold one value, got shape {:?}",
            t.shape
        ))),
    }
}

/// A transform length: positive.
fn length(call: &OpCall<'_>, what: &str, v: i64) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| call.error(format!("{what} must be positive, got {v}")))
}

/// `DFT(input, dft_length?, axis?)`.
fn dft(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let (signal, dims) = complex_signal(call, x)?;
    let rank = x.shape.len();
    let axis = match (scalar(call, 2)?, call.attrs().get("axis")) {
        (Some(a), _) => a,
        (None, Some(_)) => call.int("axis", 1),
        (None, None) => -2,
    };
    let axis = match axis {
        a if (0..rank as i64 - 1).contains(&a) => a as usize,
        a if (-(rank as i64)..-1).contains(&a) => (a + rank as i64) as usize,
        a => {
            return Err(call.error(format!(
                "axis {a} is not a signal axis of an input of rank {rank} (the last axis holds \
                 the real and imaginary parts)"
            )))
        }
    };
    let flag = |name: &str| match call.int(name, 0) {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(call.error(format!("{name} must be 0 or 1, got {other}"))),
    };
    let (inverse, onesided) = (flag("inverse")?, flag("onesided")?);
    let len = dims[axis];
    let n = match scalar(call, 1)? {
        Some(v) => length(call, "dft_length", v)?,
        None if inverse && onesided => length(call, "2·(bins − 1)", 2 * (len as i64 - 1))?,
        None => length(call, "the signal length", len as i64)?,
    };
    let (bins, parts) = match (inverse, onesided) {
        (_, false) => (n, 2),
        (false, true) => (n / 2 + 1, 2),
        (true, true) => (n, 1),
    };
    let mut out_shape = dims.clone();
    out_shape[axis] = bins;
    out_shape.push(parts);
    call.alloc(&out_shape)?;
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let mut out = vec![0.0f32; outer * bins * inner * parts];
    let mut line = Vec::with_capacity(len);
    for o in 0..outer {
        for i in 0..inner {
            line.clear();
            line.extend((0..len).map(|j| signal[(o * len + j) * inner + i]));
            let at = |k: usize| ((o * bins + k) * inner + i) * parts;
            if inverse && onesided {
                for (k, v) in inverse_real(&line, n).into_iter().enumerate() {
                    out[at(k)] = v as f32;
                }
            } else {
                for (k, (re, im)) in transform(&line, n, bins, inverse).into_iter().enumerate() {
                    out[at(k)] = re as f32;
                    out[at(k) + 1] = im as f32;
                }
            }
        }
    }
    Ok(vec![Tensor::float(x.dtype, out_shape, out)])
}

/// `STFT(signal, frame_step, window?, frame_length?)`.
fn stft(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let (signal, dims) = complex_signal(call, x)?;
    let [batch, len] = dims[..] else {
        return Err(call.error(format!(
            "the signal must be [batch, signal_length, 1 | 2], got shape {:?}",
            x.shape
        )));
    };
    let step = length(
        call,
        "frame_step",
        scalar(call, 1)?.ok_or_else(|| call.error("frame_step is required"))?,
    )?;
    let window: Option<Vec<f64>> = call.optional(2).map(Tensor::as_f64);
    if call.optional(2).is_some_and(|w| w.shape.len() != 1) {
        return Err(call.error("window must be one-dimensional"));
    }
    let frame = match (scalar(call, 3)?, &window) {
        (Some(v), _) => length(call, "frame_length", v)?,
        (None, Some(w)) => length(call, "the window length", w.len() as i64)?,
        (None, None) => length(call, "the signal length", len as i64)?,
    };
    let width = window.as_ref().map_or(frame, Vec::len);
    if len < frame {
        return Err(call.error(format!(
            "frame_length {frame} is longer than the signal ({len})"
        )));
    }
    let frames = 1 + (len - frame) / step;
    let onesided = match call.int("onesided", 1) {
        0 => false,
        1 => true,
        other => return Err(call.error(format!("onesided must be 0 or 1, got {other}"))),
    };
    let bins = if onesided { frame / 2 + 1 } else { frame };
    let out_shape = vec![batch, frames, bins, 2];
    call.alloc(&out_shape)?;
    let mut out = Vec::with_capacity(batch * frames * bins * 2);
    for b in 0..batch {
        for f in 0..frames {
            let start = f * step;
            let piece: Vec<Complex> = (0..width)
                .map(|j| {
                    let (re, im) = match start + j < len {
                        true => signal[b * len + start + j],
                        false => (0.0, 0.0),
                    };
                    let w = window.as_ref().map_or(1.0, |w| w[j]);
                    (re * w, im * w)
                })
                .collect();
            for (re, im) in transform(&piece, frame, bins, false) {
                out.extend([re as f32, im as f32]);
            }
        }
    }
    Ok(vec![Tensor::float(x.dtype, out_shape, out)])
}
