//! `Resize` (opset 11+): nearest, N-linear and cubic interpolation, one axis at a time (the
//! interpolation is separable), every `coordinate_transformation_mode`, `antialias`,
//! `exclude_outside`, `keep_aspect_ratio_policy`, `axes`, and `tf_crop_and_resize`'s region and
//! extrapolation value. Computed in f64, rounded to the input's dtype (integers truncated toward
//! zero and saturated, as onnxruntime's integer kernels give).
//!
//! Each output coordinate `y` maps to a source coordinate `x` (the transformation mode); `n`
//! taps around it (2 for nearest and linear, 4 for cubic, more with antialias when shrinking)
//! take the coefficients of the fractional part of `x`; taps beyond the edges read the edge
//! element (or, with `exclude_outside`, weigh 0 and the rest are renormalised).
//!
//! [`OPS`] registers the op with its attribute schema, type inference and cost facts beside
//! its evaluator.

use super::{OpCall, OpDef, Tensor, Values};
use crate::ir::{Attr, Attrs, DType, Node};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx(
        "Resize",
        &[
            "antialias",
            "axes",
            "coordinate_transformation_mode",
            "cubic_coeff_a",
            "exclude_outside",
            "extrapolation_value",
            "keep_aspect_ratio_policy",
            "mode",
            "nearest_mode",
        ],
    )
    .infer(|c| vec![c.ty(0).with_unknown_shape()])
    .eval(resize),
    // `Upsample` (opsets 7–9, deprecated since 10): `Resize` of the `scales` attribute (opset 7)
    // or input (9), `mode` nearest (rounding down) or linear, on asymmetric coordinates.
    OpDef::onnx("Upsample", &["mode", "scales"])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(upsample),
];

fn upsample(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let scales = match (call.optional(1), call.attrs().get("scales")) {
        (Some(t), _) => Tensor::float(
            DType::F32,
            t.shape.clone(),
            t.as_f64().iter().map(|&v| v as f32).collect(),
        ),
        (None, Some(Attr::Floats(v))) => Tensor::float(DType::F32, vec![v.len()], v.clone()),
        _ => {
            return Err(
                call.error("scales (an input from opset 9, an attribute before) is required")
            )
        }
    };
    if scales.numel() != x.shape.len() || scales.floats()?.iter().any(|&s| s.is_nan() || s < 1.0) {
        return Err(call.error(format!(
            "scales must hold one value ≥ 1 per dimension of X {:?}, got {:?}",
            x.shape,
            scales.floats()?
        )));
    }
    let mode = match call.string("mode").unwrap_or("nearest") {
        m @ ("nearest" | "linear") => m,
        other => return Err(call.error(format!("mode must be nearest or linear, got `{other}`"))),
    };
    let attrs: Attrs = [
        ("coordinate_transformation_mode", "asymmetric"),
        ("mode", mode),
        ("nearest_mode", "floor"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Attr::String(v.to_string())))
    .collect();
    let node = Node {
        op_type: "Resize".to_string(),
        attrs,
        inputs: vec![
            call.node.inputs[0].clone(),
            String::new(),
            "scales".to_string(),
        ],
        ..call.node.clone()
    };
    resize(&OpCall {
        node: &node,
        inputs: vec![Some(x), None, Some(&scales)],
        limits: call.limits,
        scope: call.scope,
    })
}

/// The interpolation kernels.
#[derive(Clone, Copy, PartialEq)]
enum Kernel {
    /// Nearest, with its rounding of halves.
    Nearest(Round),
    /// Linear.
    Linear,
    /// Cubic with coefficient `a`.
    Cubic(f64),
}

/// `nearest_mode`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Round {
    PreferFloor,
    PreferCeil,
    Floor,
    Ceil,
}

impl Kernel {
    /// The coefficients of the taps around a source coordinate whose fractional part is
    /// `ratio` (1 for an integer coordinate), shrinking by `scale` when antialiasing.
    fn coefficients(self, ratio: f64, scale: Option<f64>) -> Vec<f64> {
        match (self, scale) {
            (Kernel::Nearest(round), _) => {
                let second = match round {
                    _ if ratio == 1.0 => true,
                    Round::PreferFloor => ratio > 0.5,
                    Round::PreferCeil => ratio >= 0.5,
                    Round::Floor => false,
                    Round::Ceil => true,
                };
                vec![f64::from(!second as u8), f64::from(second as u8)]
            }
            (Kernel::Linear, None) => vec![1.0 - ratio, ratio],
            (Kernel::Linear, Some(s)) => {
                let s = s.min(1.0);
                let start = (-1.0 / s).floor() as i64 + 1;
                let taps = 2 - 2 * start;
                let c: Vec<f64> = (start..start + taps)
                    .map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0))
                    .collect();
                normalised(c)
            }
            (Kernel::Cubic(a), None) => {
                let (r, q) = (ratio, 1.0 - ratio);
                vec![
                    ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                    ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                    ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0,
                    ((a * (q + 1.0) - 5.0 * a) * (q + 1.0) + 8.0 * a) * (q + 1.0) - 4.0 * a,
                ]
            }
            (Kernel::Cubic(a), Some(s)) => {
                let s = s.min(1.0);
                let weight = |x: f64| {
                    let x = x.abs();
                    match x {
                        _ if x <= 1.0 => ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
                        _ if x < 2.0 => ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a,
                        _ => 0.0,
                    }
                };
                let start = (-2.0 / s).floor() as i64 + 1;
                let c = (start..2 - start)
                    .map(|i| weight(s * (i as f64 - ratio)))
                    .collect();
                normalised(c)
            }
        }
    }
}

/// `c` divided by its sum.
fn normalised(c: Vec<f64>) -> Vec<f64> {
    let sum: f64 = c.iter().sum();
    c.into_iter().map(|v| v / sum).collect()
}

/// How the node maps output coordinates to source ones along an axis.
struct Mapping<'a> {
    /// `coordinate_transformation_mode`.
    mode: &'a str,
    /// The axis' `[start, end]` region (`tf_crop_and_resize`).
    roi: (f64, f64),
}

impl Mapping<'_> {
    /// The source coordinate of output coordinate `y` along an axis of `input` elements
    /// resized by `scale` to `output` elements; `None` outside the region of
    /// `tf_crop_and_resize` (the extrapolation value).
    fn source(&self, y: usize, input: usize, output: usize, scale: f64) -> Result<Option<f64>> {
        let (y, din, exact) = (y as f64, input as f64, scale * input as f64);
        Ok(Some(match self.mode {
            "half_pixel" => (y + 0.5) / scale - 0.5,
            "pytorch_half_pixel" if exact == 1.0 => -0.5,
            "pytorch_half_pixel" => (y + 0.5) / scale - 0.5,
            "align_corners" if exact == 1.0 => 0.0,
            "align_corners" => y * (din - 1.0) / (exact - 1.0),
            "asymmetric" => y / scale,
            "half_pixel_symmetric" => {
                let offset = din / 2.0 * (1.0 - output as f64 / exact);
                offset + (y + 0.5) / scale - 0.5
            }
            "tf_crop_and_resize" => {
                let (a, b) = self.roi;
                let x = match exact == 1.0 {
                    true => (b - a) * (din - 1.0) / 2.0,
                    false => y * (b - a) * (din - 1.0) / (exact - 1.0),
                } + a * (din - 1.0);
                if x < 0.0 || x > din - 1.0 {
                    return Ok(None);
                }
                x
            }
            other => {
                return Err(crate::Error::Graph(format!(
                    "coordinate_transformation_mode `{other}` is not one of half_pixel, \
                     pytorch_half_pixel, align_corners, asymmetric, half_pixel_symmetric, \
                     tf_crop_and_resize"
                )))
            }
        }))
    }
}

/// `Resize(X, roi?, scales?, sizes?)`.
fn resize(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let rank = x.shape.len();
    let axes: Vec<usize> = match call.ints("axes") {
        Some(a) => a
            .iter()
            .map(|&v| super::tensor::axis(v, rank).map_err(|e| call.error(e)))
            .collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    let floats_of = |i: usize| {
        call.optional(i)
            .map(|t| t.as_f64())
            .filter(|v| !v.is_empty())
    };
    let (scales, sizes) = (floats_of(2), floats_of(3));
    let mut scale = vec![1.0; rank];
    let mut out_shape = x.shape.clone();
    match (scales, sizes) {
        (Some(s), None) if s.len() == axes.len() => {
            for (k, &a) in axes.iter().enumerate() {
                if s[k].is_nan() || s[k] <= 0.0 {
                    return Err(call.error(format!("scales must be positive, got {s:?}")));
                }
                scale[a] = s[k];
                out_shape[a] = (s[k] * x.shape[a] as f64) as usize;
            }
        }
        (None, Some(z)) if z.len() == axes.len() => {
            for (k, &a) in axes.iter().enumerate() {
                scale[a] = z[k] / x.shape[a] as f64;
                out_shape[a] = z[k] as usize;
            }
            let policy = call.string("keep_aspect_ratio_policy").unwrap_or("stretch");
            let pick = match policy {
                "stretch" => None,
                "not_larger" => Some(f64::min as fn(f64, f64) -> f64),
                "not_smaller" => Some(f64::max as fn(f64, f64) -> f64),
                other => {
                    return Err(call.error(format!(
                        "keep_aspect_ratio_policy must be stretch, not_larger or not_smaller, \
                         got `{other}`"
                    )))
                }
            };
            if let Some(pick) = pick {
                let s = axes.iter().map(|&a| scale[a]).reduce(pick).unwrap_or(1.0);
                for &a in &axes {
                    scale[a] = s;
                    out_shape[a] = (s * x.shape[a] as f64 + 0.5) as usize;
                }
            }
        }
        _ => {
            return Err(call.error(format!(
                "exactly one of scales and sizes must be given, with one value per resized axis \
                 ({})",
                axes.len()
            )))
        }
    }
    let roi = floats_of(1);
    let roi_of = |k: usize| match &roi {
        Some(r) if r.len() == 2 * axes.len() => (r[k], r[axes.len() + k]),
        _ => (0.0, 1.0),
    };
    let kernel = match call.string("mode").unwrap_or("nearest") {
        "nearest" => Kernel::Nearest(
            match call.string("nearest_mode").unwrap_or("round_prefer_floor") {
                "round_prefer_floor" => Round::PreferFloor,
                "round_prefer_ceil" => Round::PreferCeil,
                "floor" => Round::Floor,
                "ceil" => Round::Ceil,
                other => return Err(call.error(format!("unknown nearest_mode `{other}`"))),
            },
        ),
        "linear" => Kernel::Linear,
        "cubic" => Kernel::Cubic(call.float("cubic_coeff_a", -0.75) as f64),
        other => {
            return Err(call.error(format!(
                "mode must be nearest, linear or cubic, got `{other}`"
            )))
        }
    };
    // Antialiasing widens the linear and cubic kernels only (nearest has none).
    let antialias = call.int("antialias", 0) != 0 && !matches!(kernel, Kernel::Nearest(_));
    let exclude_outside = call.int("exclude_outside", 0) != 0;
    let extrapolation = call.float("extrapolation_value", 0.0) as f64;
    let mode = call
        .string("coordinate_transformation_mode")
        .unwrap_or("half_pixel");
    call.alloc(&out_shape)?;
    let mut shape = x.shape.clone();
    let mut values = x.as_f64();
    for (k, &a) in axes.iter().enumerate() {
        let (input, output) = (shape[a], out_shape[a]);
        let mapping = Mapping {
            mode,
            roi: roi_of(k),
        };
        let unchanged = scale[a] == 1.0 && output == input && roi_of(k) == (0.0, 1.0);
        if unchanged {
            continue;
        }
        if input == 0 {
            return Err(call.error(format!("axis {a} is empty: nothing to interpolate")));
        }
        // Per output coordinate, (input index, coefficient) pairs, or None to extrapolate.
        let mut taps: Vec<Option<Vec<(usize, f64)>>> = Vec::with_capacity(output);
        for y in 0..output {
            let Some(src) = mapping
                .source(y, input, output, scale[a])
                .map_err(|e| call.error(e))?
            else {
                taps.push(None);
                continue;
            };
            let floor = src.floor();
            let ratio = if src == floor { 1.0 } else { src - floor };
            let mut c = kernel.coefficients(ratio, antialias.then_some(scale[a]));
            let n = c.len() as i64;
            let start = floor as i64 + if src == floor { -(n / 2) } else { -(n / 2) + 1 };
            let index: Vec<i64> = (start..start + n).collect();
            if exclude_outside {
                for (w, &i) in c.iter_mut().zip(&index) {
                    if i < 0 || i >= input as i64 {
                        *w = 0.0;
                    }
                }
                let sum: f64 = c.iter().sum();
                if sum != 0.0 {
                    c.iter_mut().for_each(|w| *w /= sum);
                }
            }
            let clamp = |i: i64| i.clamp(0, input as i64 - 1) as usize;
            let nearest = matches!(kernel, Kernel::Nearest(_));
            let picked = index.iter().map(|&i| clamp(i)).zip(c);
            // Nearest reads one element: its unpicked taps (weight 0) must not bring in a NaN.
            taps.push(Some(
                picked.filter(|&(_, w)| !nearest || w != 0.0).collect(),
            ));
        }
        let outer: usize = shape[..a].iter().product();
        let inner: usize = shape[a + 1..].iter().product();
        let mut next = Vec::with_capacity(outer * output * inner);
        for o in 0..outer {
            for t in &taps {
                for i in 0..inner {
                    next.push(match t {
                        None => extrapolation,
                        Some(t) => t
                            .iter()
                            .map(|&(j, w)| w * values[(o * input + j) * inner + i])
                            .sum(),
                    });
                }
            }
        }
        values = next;
        shape[a] = output;
    }
    let out = match &x.values {
        Values::Float(_) => {
            Tensor::float(x.dtype, shape, values.iter().map(|&v| v as f32).collect())
        }
        _ => {
            let (lo, hi) = match x.dtype {
                crate::ir::DType::U8 => (0.0, 255.0),
                crate::ir::DType::I8 => (-128.0, 127.0),
                _ => (i64::MIN as f64, i64::MAX as f64),
            };
            let v = values
                .iter()
                .map(|&v| v.trunc().clamp(lo, hi) as i64)
                .collect();
            Tensor::int(x.dtype, shape, v)
        }
    };
    Ok(vec![out])
}
