//! Ops that create tensors: Shape, Size, Range, ConstantOfShape, Constant.

use half::{bf16, f16};

use super::{dims, int_input, take};
use crate::ir::{Attr, DType};
use crate::ops::{OpCall, Tensor};
use crate::Result;

/// `Shape`: the input's dims `start..end` as int64 (both clamped to `[0, rank]` after
/// counting negative values from the end).
pub(super) fn shape(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let rank = x.shape.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
    let start = clamp(call.int("start", 0));
    let end = clamp(call.int("end", rank)).max(start);
    let values: Vec<i64> = x.shape[start..end].iter().map(|&d| d as i64).collect();
    Ok(Tensor::int(DType::I64, vec![values.len()], values))
}

/// `Size`: the element count as an int64 scalar.
pub(super) fn size(call: &OpCall<'_>) -> Result<Tensor> {
    Ok(Tensor::int(
        DType::I64,
        vec![],
        vec![call.input(0)?.numel() as i64],
    ))
}

/// `Range`: `start, start + delta, …` while short of `limit`, `ceil((limit - start) / delta)`
/// values (at least 0). Floats are accumulated (each step adds `delta` to the previous value in
/// the output dtype), as onnxruntime and the ONNX function body do.
pub(super) fn range(call: &OpCall<'_>) -> Result<Tensor> {
    let [start, limit, delta] = [0, 1, 2].map(|i| call.input(i));
    let (start, limit, delta) = (start?, limit?, delta?);
    for t in [start, limit, delta] {
        if t.numel() != 1 || t.shape.len() > 1 || t.dtype != start.dtype {
            return Err(call.error(format!(
                "start, limit and delta must be scalars of one dtype, found {} {:?}",
                t.dtype, t.shape
            )));
        }
    }
    let dtype = start.dtype;
    if dtype.is_float() {
        let first = |t: &Tensor| t.floats().map(|v| v[0]);
        let (s, l, d) = (first(start)?, first(limit)?, first(delta)?);
        if d == 0.0 || d.is_nan() {
            return Err(call.error(format!("delta must be a non-zero number, found {d}")));
        }
        let count = ((l - s) as f64 / d as f64).ceil();
        if !count.is_finite() {
            return Err(call.error(format!("range {s}..{l} by {d} has no finite length")));
        }
        // `as` saturates: a count beyond usize fails the budget check.
        let n = call.alloc(&[count.max(0.0) as usize])?;
        let values: Vec<f32> = match dtype {
            DType::F64 => (0..n)
                .scan(s as f64, |acc, _| {
                    Some(std::mem::replace(acc, *acc + d as f64) as f32)
                })
                .collect(),
            DType::F16 => accumulate(s, d, n, |v| f16::from_f32(v).to_f32()),
            DType::BF16 => accumulate(s, d, n, |v| bf16::from_f32(v).to_f32()),
            _ => accumulate(s, d, n, |v| v),
        };
        Ok(Tensor::float(dtype, vec![n], values))
    } else {
        let first = |t: &Tensor| {
            t.ints()
                .map(|v| v[0] as i128)
                .map_err(|_| call.error(format!("unsupported dtype {dtype}")))
        };
        let (s, l, d) = (first(start)?, first(limit)?, first(delta)?);
        if d == 0 {
            return Err(call.error("delta must not be 0"));
        }
        let n = if d > 0 {
            (l - s + d - 1) / d
        } else {
            (s - l - d - 1) / -d
        }
        .max(0);
        let n = call.alloc(&[usize::try_from(n).unwrap_or(usize::MAX)])?;
        let values = (0..n as i128)
            .map(|i| (s + i * d) as i64)
            .collect::<Vec<_>>();
        Ok(Tensor::int(dtype, vec![values.len()], values))
    }
}

/// `n` values from `start`, each the previous plus `delta`, rounded by `round`.
fn accumulate(start: f32, delta: f32, n: usize, round: fn(f32) -> f32) -> Vec<f32> {
    (0..n)
        .scan(start, |acc, _| {
            Some(std::mem::replace(acc, round(*acc + delta)))
        })
        .collect()
}

/// `ConstantOfShape`: the one-element `value` attribute (default float32 0) repeated to the
/// shape given by the input (an empty shape gives a scalar).
pub(super) fn constant_of_shape(call: &OpCall<'_>) -> Result<Tensor> {
    if call.input(0)?.shape.len() != 1 {
        return Err(call.error("the shape input must be 1-D"));
    }
    let shape = dims(call, &int_input(call, 0)?)?;
    let value = match call.attrs().get("value") {
        Some(Attr::Tensor(t)) => Tensor::from_data(t)?,
        Some(_) => return Err(call.error("attribute `value` must be a tensor")),
        None => Tensor::float(DType::F32, vec![1], vec![0.0]),
    };
    if value.numel() != 1 {
        return Err(call.error(format!(
            "attribute `value` must hold one element, found {:?}",
            value.shape
        )));
    }
    let n = call.alloc(&shape)?;
    Ok(take(&value, shape, &vec![0; n]))
}

/// `Constant`: exactly one of `value` (a tensor), `value_float(s)` (float32 scalar / 1-D) or
/// `value_int(s)` (int64 scalar / 1-D).
pub(super) fn constant(call: &OpCall<'_>) -> Result<Tensor> {
    let mut found = call
        .attrs()
        .iter()
        .filter(|(k, _)| k.starts_with("value") || *k == "sparse_value");
    let (name, attr) = match (found.next(), found.next()) {
        (Some(one), None) => one,
        _ => return Err(call.error("needs exactly one value attribute")),
    };
    match (name.as_str(), attr) {
        ("value", Attr::Tensor(t)) => Tensor::from_data(t),
        ("value_float", Attr::Float(v)) => Ok(Tensor::float(DType::F32, vec![], vec![*v])),
        ("value_floats", Attr::Floats(v)) => {
            Ok(Tensor::float(DType::F32, vec![v.len()], v.clone()))
        }
        ("value_int", Attr::Int(v)) => Ok(Tensor::int(DType::I64, vec![], vec![*v])),
        ("value_ints", Attr::Ints(v)) => Ok(Tensor::int(DType::I64, vec![v.len()], v.clone())),
        _ => Err(call.error(format!("unsupported value attribute `{name}`"))),
    }
}

/// `OneHot(indices, depth, values; axis = -1)`: a new axis of `depth` at `axis` holding
/// `values[1]` where the position equals the index (negative indices count from the end) and
/// `values[0]` elsewhere; an index outside `-depth..depth` is all `values[0]`.
pub(super) fn one_hot(call: &OpCall<'_>) -> Result<Tensor> {
    let (indices, depth, values) = (call.input(0)?, call.input(1)?, call.input(2)?);
    let idx: Vec<i64> = indices.as_f64().iter().map(|&v| v as i64).collect();
    let depth = match depth.as_f64().as_slice() {
        [d] if *d >= 1.0 => *d as usize,
        other => {
            return Err(call.error(format!(
                "depth must be one value of 1 or more, got {other:?}"
            )))
        }
    };
    if values.numel() != 2 {
        return Err(call.error(format!(
            "values must hold 2 elements, found {:?}",
            values.shape
        )));
    }
    let rank = indices.shape.len() + 1;
    let a = super::norm_axis(call, call.int("axis", -1), rank)?;
    let mut shape = indices.shape.clone();
    shape.insert(a, depth);
    call.alloc(&shape)?;
    let outer: usize = indices.shape[..a].iter().product();
    let inner: usize = indices.shape[a..].iter().product();
    let mut pick = Vec::with_capacity(outer * depth * inner);
    for o in 0..if idx.is_empty() { 0 } else { outer } {
        for k in 0..depth as i64 {
            for i in 0..inner {
                let t = idx[o * inner + i];
                let t = if t < 0 { t + depth as i64 } else { t };
                pick.push(usize::from(t == k));
            }
        }
    }
    Ok(take(values, shape, &pick))
}

/// `EyeLike(x; dtype, k = 0)`: a 2-D tensor of `x`'s shape, 1 on the `k`-th diagonal and 0
/// elsewhere, of `dtype` (`x`'s when absent).
pub(super) fn eye_like(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let [_, cols] = <[usize; 2]>::try_from(x.shape.as_slice())
        .map_err(|_| call.error(format!("input must be 2-D, got shape {:?}", x.shape)))?;
    let dtype = match call.attrs().get("dtype") {
        Some(_) => {
            let code = call.int("dtype", 0);
            i32::try_from(code)
                .ok()
                .and_then(DType::from_onnx_code)
                .ok_or_else(|| call.error(format!("unsupported dtype {code}")))?
        }
        None => x.dtype,
    };
    let k = call.int("k", 0);
    let n = call.alloc(&x.shape)?;
    let on: Vec<bool> = (0..n)
        .map(|f| (f % cols.max(1)) as i64 - (f / cols.max(1)) as i64 == k)
        .collect();
    let t = Tensor::bool(x.shape.clone(), on);
    Ok(crate::ops::elementwise::cast(&t, dtype))
}

/// The window functions `HannWindow`, `HammingWindow`, `BlackmanWindow`.
#[derive(Clone, Copy)]
pub(super) enum Window {
    /// `0.5 − 0.5·cos(2πn/N)`.
    Hann,
    /// `α − (1 − α)·cos(2πn/N)`, α = 25/46.
    Hamming,
    /// `0.42 − 0.5·cos(2πn/N) + 0.08·cos(4πn/N)`.
    Blackman,
}

/// A window of `size` (input 0, a scalar) values, `N` being the size when `periodic` (the
/// default) and one less otherwise, of `output_datatype` (float32 by default).
pub(super) fn window(call: &OpCall<'_>, kind: Window) -> Result<Tensor> {
    let size = match int_input(call, 0)?.as_slice() {
        [n] if *n >= 0 => *n as usize,
        other => {
            return Err(call.error(format!(
                "size must be one non-negative value, got {other:?}"
            )))
        }
    };
    let code = call.int("output_datatype", 1);
    let dtype = i32::try_from(code)
        .ok()
        .and_then(DType::from_onnx_code)
        .ok_or_else(|| call.error(format!("unsupported output_datatype {code}")))?;
    call.alloc(&[size])?;
    let n = match call.int("periodic", 1) != 0 {
        true => size as f64,
        false => size as f64 - 1.0,
    };
    let tau = std::f64::consts::TAU;
    let values: Vec<f32> = (0..size)
        .map(|i| {
            let x = tau * i as f64 / n;
            (match kind {
                Window::Hann => 0.5 - 0.5 * x.cos(),
                Window::Hamming => 25.0 / 46.0 - (21.0 / 46.0) * x.cos(),
                Window::Blackman => 0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos(),
            }) as f32
        })
        .collect();
    let t = Tensor::float(DType::F32, vec![size], values);
    Ok(crate::ops::elementwise::cast(&t, dtype))
}

/// `MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
/// upper_edge_hertz)`: `[dft_length / 2 + 1, num_mel_bins]` triangular filters, each peaking
/// at 1 on its centre bin, as ONNX's reference computes them: `num_mel_bins + 2` points evenly
/// spaced on the mel scale from the lower edge in steps of `(high − low) / (num_mel_bins + 2)`,
/// each mapped back to hertz and to the spectrogram bin `⌊(dft_length + 1)·f / sample_rate⌋`;
/// filter `i` rises from point `i` to `i + 1` and falls to `i + 2`. Of `output_datatype`.
pub(super) fn mel_weight_matrix(call: &OpCall<'_>) -> Result<Tensor> {
    let scalar_int = |i: usize, what: &str| -> Result<i64> {
        match int_input(call, i)?.as_slice() {
            [n] => Ok(*n),
            other => Err(call.error(format!("{what} must be one value, got {other:?}"))),
        }
    };
    let scalar_float = |i: usize, what: &str| -> Result<f64> {
        match call.input(i)?.as_f64().as_slice() {
            [v] => Ok(*v),
            other => Err(call.error(format!("{what} must be one value, got {other:?}"))),
        }
    };
    let bins = scalar_int(0, "num_mel_bins")?;
    let dft = scalar_int(1, "dft_length")?;
    let rate = scalar_int(2, "sample_rate")?;
    let (low, high) = (
        scalar_float(3, "lower_edge_hertz")?,
        scalar_float(4, "upper_edge_hertz")?,
    );
    if bins <= 0 || dft <= 0 || rate <= 0 {
        return Err(call.error(format!(
            "num_mel_bins ({bins}), dft_length ({dft}) and sample_rate ({rate}) must be positive"
        )));
    }
    if !(0.0 <= low && low <= high && high.is_finite()) {
        return Err(call.error(format!(
            "the edges must satisfy 0 ≤ lower_edge_hertz ({low}) ≤ upper_edge_hertz ({high})"
        )));
    }
    let (bins, spectrum) = (bins as usize, dft as usize / 2 + 1);
    let code = call.int("output_datatype", 1);
    let dtype = i32::try_from(code)
        .ok()
        .and_then(DType::from_onnx_code)
        .ok_or_else(|| call.error(format!("unsupported output_datatype {code}")))?;
    call.alloc(&[spectrum, bins])?;
    let mel = |f: f64| 2595.0 * (f / 700.0).ln_1p() / 10f64.ln();
    let (lo, hi) = (mel(low), mel(high));
    let step = (hi - lo) / (bins + 2) as f64;
    let points: Vec<usize> = (0..bins + 2)
        .map(|i| {
            let hz = 700.0 * ((i as f64 * step + lo) / 2595.0 * 10f64.ln()).exp_m1();
            (((dft + 1) as f64 * hz) / rate as f64).floor().max(0.0) as usize
        })
        .collect();
    // As onnxruntime: the last point must be a bin (the reference reads it only as a bound).
    if points[bins + 1] >= spectrum {
        return Err(call.error(format!(
            "upper_edge_hertz {high} maps past the {spectrum} spectrogram bins of dft_length {dft} \
             at sample_rate {rate}"
        )));
    }
    let mut out = vec![0.0f32; spectrum * bins];
    for i in 0..bins {
        let (left, centre, right) = (points[i], points[i + 1], points[i + 2]);
        if centre == left {
            out[centre * bins + i] = 1.0;
        } else {
            for j in left..=centre {
                out[j * bins + i] = (j - left) as f32 / (centre - left) as f32;
            }
        }
        for j in centre..right {
            out[j * bins + i] = (right - j) as f32 / (right - centre) as f32;
        }
    }
    let t = Tensor::float(DType::F32, vec![spectrum, bins], out);
    Ok(crate::ops::elementwise::cast(&t, dtype))
}
