//! Image rearrangements: `CenterCropPad` (opset 18: each of `axes` (default all) cropped about
//! its centre to the target extent, or zero-padded about it; an odd difference leaves the extra
//! element at the end) and `Col2Im` (opset 18: the inverse of an unfold, summing each column of
//! `[N, C·∏block, L]` back into the `[N, C, image…]` positions its block covered, under
//! `dilations`, `pads` and `strides`) and `MaxUnpool` (opset 9: each input element written at
//! the flat position its index names in the unpooled extents `(in − 1)·stride + kernel − pads`,
//! zeros elsewhere; a larger `output_shape` pads them with zeros at the end, as ONNX's
//! reference does — onnxruntime instead reads the indices as positions in `output_shape`).
//!
//! [`OPS`] registers the ops with their attribute schemas, type inference and cost facts beside
//! their evaluators.

use super::{OpCall, OpDef, Tensor, Values};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("CenterCropPad", &["axes"])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .since(18)
        .eval(center_crop_pad),
    OpDef::onnx("MaxUnpool", &["kernel_shape", "pads", "strides"])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .since(9)
        .eval(max_unpool),
    OpDef::onnx("Col2Im", &["dilations", "pads", "strides"])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .since(18)
        .eval(col2im),
];

/// Input `i`'s values as extents (non-negative integers).
fn extents(call: &OpCall<'_>, i: usize, what: &str) -> Result<Vec<usize>> {
    call.input(i)?
        .ints()
        .map_err(|e| call.error(e))?
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| call.error(format!("{what} holds {d}: negative"))))
        .collect()
}

/// The elements of `x` at `picks`, in `x`'s storage.
fn gather(x: &Tensor, picks: &[Option<usize>]) -> Values {
    match &x.values {
        Values::Float(v) => Values::Float(picks.iter().map(|p| p.map_or(0.0, |p| v[p])).collect()),
        Values::Int(v) => Values::Int(picks.iter().map(|p| p.map_or(0, |p| v[p])).collect()),
        Values::Bool(v) => Values::Bool(picks.iter().map(|p| p.is_some_and(|p| v[p])).collect()),
    }
}

/// `CenterCropPad(input_data, shape)`.
fn center_crop_pad(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let target = extents(call, 1, "shape")?;
    let rank = x.shape.len();
    let axes: Vec<usize> = match call.ints("axes") {
        Some(a) => a
            .iter()
            .map(|&v| super::tensor::axis(v, rank).map_err(|e| call.error(e)))
            .collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    if target.len() != axes.len() {
        return Err(call.error(format!(
            "shape holds {} extents for {} axes",
            target.len(),
            axes.len()
        )));
    }
    let mut out_shape = x.shape.clone();
    // Per axis, the output index's offset into the input (negative: padding before).
    let mut offset = vec![0i64; rank];
    for (&a, &t) in axes.iter().zip(&target) {
        if t < x.shape[a] {
            offset[a] = ((x.shape[a] - t) / 2) as i64;
        } else {
            offset[a] = -(((t - x.shape[a]) / 2) as i64);
        }
        out_shape[a] = t;
    }
    call.alloc(&out_shape)?;
    let (in_strides, out_strides) = (
        super::tensor::strides(&x.shape),
        super::tensor::strides(&out_shape),
    );
    let total: usize = out_shape.iter().product();
    let picks: Vec<Option<usize>> = (0..total)
        .map(|k| {
            let mut at = 0;
            for a in 0..rank {
                let i = ((k / out_strides[a]) % out_shape[a]) as i64 + offset[a];
                if i < 0 || i >= x.shape[a] as i64 {
                    return None;
                }
                at += i as usize * in_strides[a];
            }
            Some(at)
        })
        .collect();
    Ok(vec![Tensor {
        dtype: x.dtype,
        shape: out_shape,
        values: gather(x, &picks),
    }])
}

/// `Col2Im(input, image_shape, block_shape)`.
fn col2im(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let image = extents(call, 1, "image_shape")?;
    let block = extents(call, 2, "block_shape")?;
    let k = image.len();
    if block.len() != k || k == 0 {
        return Err(call.error(format!(
            "image_shape {image:?} and block_shape {block:?} must name the same spatial axes"
        )));
    }
    let list = |name: &str, len: usize, default: usize| -> Result<Vec<usize>> {
        match call.ints(name) {
            None => Ok(vec![default; len]),
            Some(v) if v.len() == len => v
                .iter()
                .map(|&d| {
                    usize::try_from(d)
                        .ok()
                        .filter(|&d| d >= default)
                        .ok_or_else(|| call.error(format!("{name} holds {d}")))
                })
                .collect(),
            Some(v) => Err(call.error(format!("{name} holds {} values; expected {len}", v.len()))),
        }
    };
    let (dilations, pads, strides) = (
        list("dilations", k, 1)?,
        list("pads", 2 * k, 0)?,
        list("strides", k, 1)?,
    );
    let block_size: usize = block.iter().product();
    let [n, rows, l] = x.shape[..] else {
        return Err(call.error(format!(
            "input must be [N, C·∏block_shape, L], got shape {:?}",
            x.shape
        )));
    };
    if block_size == 0 || rows % block_size != 0 {
        return Err(call.error(format!(
            "input's {rows} rows are not a multiple of the block's {block_size} elements"
        )));
    }
    let c = rows / block_size;
    // The sliding positions along each axis.
    let mut positions = Vec::with_capacity(k);
    for a in 0..k {
        let span = dilations[a]
            .checked_mul(block[a].saturating_sub(1))
            .and_then(|s| s.checked_add(1));
        let padded = image[a]
            .checked_add(pads[a])
            .and_then(|p| p.checked_add(pads[a + k]));
        match (span, padded) {
            (Some(s), Some(p)) if p >= s => positions.push((p - s) / strides[a] + 1),
            _ => {
                return Err(call.error(format!(
                    "the block {block:?} (dilations {dilations:?}) does not fit the padded \
                     image {image:?} (pads {pads:?})"
                )))
            }
        }
    }
    if positions.iter().try_fold(1usize, |a, &p| a.checked_mul(p)) != Some(l) {
        return Err(call.error(format!(
            "input holds {l} blocks; the image gives {positions:?} positions"
        )));
    }
    let mut out_shape = vec![n, c];
    out_shape.extend_from_slice(&image);
    call.alloc(&out_shape)?;
    let v = x.as_f64();
    let area: usize = image.iter().product();
    let (image_strides, block_strides, position_strides) = (
        super::tensor::strides(&image),
        super::tensor::strides(&block),
        super::tensor::strides(&positions),
    );
    let mut out = vec![0.0f64; n * c * area];
    for b in 0..n {
        for ch in 0..c {
            for t in 0..block_size {
                for p in 0..l {
                    let mut at = Some(0usize);
                    for a in 0..k {
                        let ti = (t / block_strides[a]) % block[a];
                        let pi = (p / position_strides[a]) % positions[a];
                        let i = (pi * strides[a] + ti * dilations[a]) as i64 - pads[a] as i64;
                        at = match at {
                            Some(o) if (0..image[a] as i64).contains(&i) => {
                                Some(o + i as usize * image_strides[a])
                            }
                            _ => None,
                        };
                    }
                    if let Some(o) = at {
                        out[(b * c + ch) * area + o] +=
                            v[((b * rows) + ch * block_size + t) * l + p];
                    }
                }
            }
        }
    }
    Ok(vec![match x.values {
        Values::Float(_) => Tensor::float(
            x.dtype,
            out_shape,
            out.into_iter().map(|v| v as f32).collect(),
        ),
        _ => Tensor::int(
            x.dtype,
            out_shape,
            out.into_iter().map(|v| v as i64).collect(),
        ),
    }])
}

/// `MaxUnpool(X, I, output_shape?)`.
fn max_unpool(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (x, indices) = (call.input(0)?, call.input(1)?);
    if x.shape.len() < 3 || indices.shape != x.shape {
        return Err(call.error(format!(
            "X must be [N, C, D1, …] and I of its shape, got {:?} and {:?}",
            x.shape, indices.shape
        )));
    }
    let k = x.shape.len() - 2;
    let kernel = call
        .ints("kernel_shape")
        .ok_or_else(|| call.error("kernel_shape is required"))?;
    let list = |name: &str, len: usize, default: i64| -> Vec<i64> {
        call.ints(name).map_or(vec![default; len], <[i64]>::to_vec)
    };
    let (pads, strides) = (list("pads", 2 * k, 0), list("strides", k, 1));
    if kernel.len() != k || pads.len() != 2 * k || strides.len() != k {
        return Err(call.error(format!(
            "kernel_shape {kernel:?}, pads {pads:?} and strides {strides:?} must fit {k} spatial \
             axes"
        )));
    }
    // The inferred extents: the indices address them, and `output_shape` pads them at the end.
    let mut inferred = x.shape[..2].to_vec();
    for a in 0..k {
        let d = (x.shape[a + 2] as i64 - 1)
            .checked_mul(strides[a])
            .and_then(|v| v.checked_add(kernel[a]))
            .and_then(|v| v.checked_sub(pads[a]))
            .and_then(|v| v.checked_sub(pads[a + k]))
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| {
                call.error(format!(
                    "kernel_shape {kernel:?}, pads {pads:?} and strides {strides:?} give no \
                     output extent"
                ))
            })?;
        inferred.push(d);
    }
    let out_shape = match call.optional(2) {
        Some(_) => {
            let s = extents(call, 2, "output_shape")?;
            if s.len() != x.shape.len() || s.iter().zip(&inferred).any(|(o, i)| o < i) {
                return Err(call.error(format!(
                    "output_shape {s:?} is not at least the inferred {inferred:?}"
                )));
            }
            s
        }
        None => inferred.clone(),
    };
    let total = call.alloc(&inferred)?;
    call.alloc(&out_shape)?;
    let mut scattered: Vec<Option<usize>> = vec![None; total];
    for (i, &at) in indices
        .ints()
        .map_err(|e| call.error(e))?
        .iter()
        .enumerate()
    {
        let slot = usize::try_from(at)
            .ok()
            .and_then(|a| scattered.get_mut(a))
            .ok_or_else(|| {
                call.error(format!(
                    "index {at} is outside the unpooled {inferred:?} ({total} elements)"
                ))
            })?;
        *slot = Some(i);
    }
    let (from, to) = (
        super::tensor::strides(&inferred),
        super::tensor::strides(&out_shape),
    );
    let picks: Vec<Option<usize>> = (0..out_shape.iter().product::<usize>())
        .map(|o| {
            let mut at = 0;
            for a in 0..out_shape.len() {
                let i = (o / to[a]) % out_shape[a];
                if i >= inferred[a] {
                    return None;
                }
                at += i * from[a];
            }
            scattered[at]
        })
        .collect();
    Ok(vec![Tensor {
        dtype: x.dtype,
        shape: out_shape,
        values: gather(x, &picks),
    }])
}
