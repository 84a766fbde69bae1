//! `DeformConv` (opset 19), 2-D: a convolution whose every tap reads the input at its position
//! moved by a learned `(Δh, Δw)` (input `offset`, one pair per tap, output position and offset
//! group of channels), bilinearly interpolated (zero beyond the input), optionally scaled by
//! `mask`, plus the bias `B`; with `group`, `offset_group`, `dilations`, `pads` and `strides`.
//! Accumulated in f64.
//!
//! [`OPS`] registers the op with its attribute schema, type inference and cost facts beside its
//! evaluator.

use super::{OpCall, OpDef, Tensor};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[OpDef::onnx(
    "DeformConv",
    &[
        "dilations",
        "group",
        "kernel_shape",
        "offset_group",
        "pads",
        "strides",
    ],
)
.infer(|c| vec![c.ty(0).with_unknown_shape()])
.since(19)
.eval(deform_conv)];

/// The plane `p` (`h × w`) at `(y, x)`, bilinearly, zero beyond it.
fn bilinear(p: &[f64], h: usize, w: usize, y: f64, x: f64) -> f64 {
    if !(y > -1.0 && y < h as f64 && x > -1.0 && x < w as f64) {
        return 0.0;
    }
    let (y0, x0) = (y.floor(), x.floor());
    let (ly, lx) = (y - y0, x - x0);
    let (y0, x0) = (y0 as i64, x0 as i64);
    let at = |r: i64, c: i64| {
        if r >= 0 && c >= 0 && (r as usize) < h && (c as usize) < w {
            p[r as usize * w + c as usize]
        } else {
            0.0
        }
    };
    (1.0 - ly) * (1.0 - lx) * at(y0, x0)
        + (1.0 - ly) * lx * at(y0, x0 + 1)
        + ly * (1.0 - lx) * at(y0 + 1, x0)
        + ly * lx * at(y0 + 1, x0 + 1)
}

/// `DeformConv(X, W, offset, B?, mask?)`.
fn deform_conv(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (x, wt, offset) = (call.input(0)?, call.input(1)?, call.input(2)?);
    let [n, c, h, w] = x.shape[..] else {
        return Err(call.error(format!("X must be [N, C, H, W], got {:?}", x.shape)));
    };
    let [oc, cg, kh, kw] = wt.shape[..] else {
        return Err(call.error(format!(
            "W must be [M, C/group, kH, kW], got {:?}",
            wt.shape
        )));
    };
    let positive = |name: &str, v: i64| {
        usize::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| call.error(format!("{name} must be positive, got {v}")))
    };
    let group = positive("group", call.int("group", 1))?;
    let og = positive("offset_group", call.int("offset_group", 1))?;
    if cg * group != c || oc % group != 0 || c % og != 0 {
        return Err(call.error(format!(
            "W {:?} does not fit X {:?} with group {group} and offset_group {og}",
            wt.shape, x.shape
        )));
    }
    let pair = |name: &str, len: usize, default: i64| -> Result<Vec<usize>> {
        let v = call.ints(name).map_or(vec![default; len], <[i64]>::to_vec);
        if v.len() != len {
            return Err(call.error(format!("{name} must hold {len} values, got {v:?}")));
        }
        v.iter()
            .map(|&d| {
                usize::try_from(d)
                    .ok()
                    .filter(|&d| d >= default as usize)
                    .ok_or_else(|| call.error(format!("{name} holds {d}")))
            })
            .collect()
    };
    let (dil, pads, strides) = (
        pair("dilations", 2, 1)?,
        pair("pads", 4, 0)?,
        pair("strides", 2, 1)?,
    );
    if let Some(ks) = call.ints("kernel_shape") {
        if ks != [kh as i64, kw as i64] {
            return Err(call.error(format!("kernel_shape {ks:?} is not W's [{kh}, {kw}]")));
        }
    }
    let extent = |len: usize, pb: usize, pe: usize, d: usize, k: usize, s: usize| {
        let span = d.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
        let padded = len.checked_add(pb)?.checked_add(pe)?;
        padded.checked_sub(span).map(|r| r / s + 1)
    };
    let (oh, ow) = match (
        extent(h, pads[0], pads[2], dil[0], kh, strides[0]),
        extent(w, pads[1], pads[3], dil[1], kw, strides[1]),
    ) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err(call.error("the kernel does not fit the padded input")),
    };
    let taps = kh * kw;
    if offset.shape != [n, og * 2 * taps, oh, ow] {
        return Err(call.error(format!(
            "offset must be [{n}, {}, {oh}, {ow}], got {:?}",
            og * 2 * taps,
            offset.shape
        )));
    }
    let mask = call.optional(4);
    if mask.is_some_and(|m| m.shape != [n, og * taps, oh, ow]) {
        return Err(call.error(format!("mask must be [{n}, {}, {oh}, {ow}]", og * taps)));
    }
    let bias = match call.optional(3) {
        Some(b) if b.numel() != oc => return Err(call.error(format!("B must hold {oc} values"))),
        Some(b) => b.as_f64(),
        None => vec![0.0; oc],
    };
    let out_shape = vec![n, oc, oh, ow];
    call.alloc(&out_shape)?;
    let (xv, wv, ov) = (x.as_f64(), wt.as_f64(), offset.as_f64());
    let mv = mask.map(Tensor::as_f64);
    let area = oh * ow;
    let mut out = Vec::with_capacity(n * oc * area);
    let per_group = oc / group;
    for b in 0..n {
        for o in 0..oc {
            let g = o / per_group;
            for p in 0..area {
                let (py, px) = (p / ow, p % ow);
                let mut acc = bias[o];
                for ic in 0..cg {
                    let ch = g * cg + ic;
                    let gi = ch / (c / og);
                    let plane = &xv[(b * c + ch) * h * w..(b * c + ch + 1) * h * w];
                    for t in 0..taps {
                        let (ty, tx) = (t / kw, t % kw);
                        let at = |k: usize| ((b * og * 2 * taps + gi * 2 * taps + k) * area) + p;
                        let (dy, dx) = (ov[at(2 * t)], ov[at(2 * t + 1)]);
                        let y = (py * strides[0] + ty * dil[0]) as f64 - pads[0] as f64 + dy;
                        let xx = (px * strides[1] + tx * dil[1]) as f64 - pads[1] as f64 + dx;
                        let m = mv
                            .as_ref()
                            .map_or(1.0, |m| m[((b * og + gi) * taps + t) * area + p]);
                        acc += wv[(o * cg + ic) * taps + t] * m * bilinear(plane, h, w, y, xx);
                    }
                }
                out.push(acc as f32);
            }
        }
    }
    Ok(vec![Tensor::float(x.dtype, out_shape, out)])
}
