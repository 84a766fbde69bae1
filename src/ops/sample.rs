//! `GridSample` (opset 16: 4-D, modes `bilinear`, `nearest`, `bicubic`; opset 20+: any spatial
//! rank, modes `linear`, `nearest`, `cubic`): each output position reads the input at the
//! normalised coordinates its grid row holds (the grid's last axis lists them innermost spatial
//! axis first: x, y, z), with `padding_mode` `zeros`, `border` or `reflection` and
//! `align_corners`. Computed in f64, rounded to the input's dtype.
//!
//! A coordinate `n` in [-1, 1] denormalises to `(n + 1)·(len − 1)/2` with `align_corners`, else
//! `((n + 1)·len − 1)/2`. Border padding clamps it into `[0, len − 1]` (not for cubic
//! interpolation, whose taps are clamped: onnxruntime's choice; ONNX's reference clamps both,
//! and its conformance cases agree with either) and reflection folds it
//! into `[0, len − 1]` (`align_corners`) or `[−0.5, len − 0.5]`. The taps around it (1 for
//! nearest, rounding halves to even; 2 for linear; 4 for cubic with coefficient −0.75) read the
//! input padded the same way: zeros beyond the edges, the edge element, or the reflected one.
//! NaN in the input flows through its taps; a non-finite coordinate gives a NaN weight.
//!
//! `AffineGrid` (opset 20) makes such a grid: each output position's normalised coordinates
//! (`−1 + 2i/(len − 1)` with `align_corners`, else `−1 + (2i + 1)/len`; x innermost) mapped by
//! its batch's `theta` (`[N, 2, 3]` for 2-D, `[N, 3, 4]` for 3-D).
//!
//! [`OPS`] registers the ops with their attribute schemas, type inference and cost facts
//! beside their evaluators.

use super::types::TensorType;
use super::{OpCall, OpDef, Tensor, Values};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("AffineGrid", &["align_corners"])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .since(20)
        .eval(affine_grid),
    OpDef::onnx("GridSample", &["align_corners", "mode", "padding_mode"])
        .infer(|c| {
            let (x, grid) = (c.ty(0), c.ty(1));
            let shape = match (&x.shape, &grid.shape) {
                (Some(xs), Some(gs)) if xs.len() >= 2 && gs.len() >= 2 => {
                    Some([&xs[..2], &gs[1..gs.len() - 1]].concat())
                }
                _ => None,
            };
            vec![TensorType {
                dtype: x.dtype,
                shape,
            }]
        })
        .since(16)
        .eval(grid_sample),
];

/// How taps beyond the input's edges read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Padding {
    /// Zero.
    Zeros,
    /// The edge element.
    Border,
    /// The element reflected about the edges.
    Reflection,
}

/// The interpolation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// `x` folded into `[lo, hi]` by reflecting it about the bounds.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let fold = |dx: f64| {
        let n = (dx / range).trunc();
        (dx - n * range, n % 2.0 == 0.0)
    };
    if x < lo {
        let (r, even) = fold(lo - x);
        if even {
            lo + r
        } else {
            hi - r
        }
    } else if x > hi {
        let (r, even) = fold(x - hi);
        if even {
            hi - r
        } else {
            lo + r
        }
    } else {
        x
    }
}

/// The cubic coefficients (a = −0.75) of the four taps around a coordinate whose distance to
/// the tap before it is `t`.
fn cubic(t: f64) -> [f64; 4] {
    let a = -0.75;
    let far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    let near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// An index as i64, finite or not (NaN gives 0; its weight is NaN).
fn index(x: f64) -> i64 {
    x.clamp(-1e15, 1e15) as i64
}

/// `GridSample(X, grid)`.
fn grid_sample(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (x, grid) = (call.input(0)?, call.input(1)?);
    let rank = x.shape.len();
    if rank < 3 {
        return Err(call.error(format!(
            "X must be (N, C, D1, …) with at least one spatial axis, got shape {:?}",
            x.shape
        )));
    }
    let spatial = rank - 2;
    let (n, c) = (x.shape[0], x.shape[1]);
    if grid.shape.len() != rank || grid.shape[0] != n || grid.shape[rank - 1] != spatial {
        return Err(call.error(format!(
            "grid must be (N, D1_out, …, {spatial}) for X of shape {:?}, got shape {:?}",
            x.shape, grid.shape
        )));
    }
    // Opset 16's names (`bilinear`, its default, and `bicubic`) mean opset 20's.
    let mode = match call.string("mode").unwrap_or("linear") {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        other => {
            return Err(call.error(format!(
                "mode must be linear, nearest or cubic (bilinear, bicubic), got `{other}`"
            )))
        }
    };
    let padding = match call.string("padding_mode").unwrap_or("zeros") {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => {
            return Err(call.error(format!(
                "padding_mode must be zeros, border or reflection, got `{other}`"
            )))
        }
    };
    let align = match call.int("align_corners", 0) {
        0 => false,
        1 => true,
        other => return Err(call.error(format!("align_corners must be 0 or 1, got {other}"))),
    };
    let Values::Float(data) = &x.values else {
        return Err(call.error(format!("X must be a float tensor, got {}", x.dtype)));
    };
    let coords = grid.as_f64();
    let dims = &x.shape[2..];
    let out_spatial = &grid.shape[1..rank - 1];
    let mut out_shape = vec![n, c];
    out_shape.extend_from_slice(out_spatial);
    call.alloc(&out_shape)?;
    let points: usize = out_spatial.iter().product();
    let plane: usize = dims.iter().product();
    let strides = super::tensor::strides(dims);
    // The bounds reflection folds coordinates and taps into, per spatial axis.
    let bounds: Vec<(f64, f64)> = dims
        .iter()
        .map(|&d| match align {
            true => (0.0, d as f64 - 1.0),
            false => (-0.5, d as f64 - 0.5),
        })
        .collect();
    // The element offset of tap `i` along axis `a`, or None for a zero.
    let tap = |a: usize, i: i64| -> Option<usize> {
        let d = dims[a] as i64;
        let i = match padding {
            Padding::Zeros => (0..d).contains(&i).then_some(i)?,
            Padding::Border => i.clamp(0, d - 1),
            Padding::Reflection => {
                let (lo, hi) = bounds[a];
                index(reflect(i as f64, lo, hi)).clamp(0, d - 1)
            }
        };
        Some(i as usize * strides[a])
    };
    let mut out = vec![0.0f32; n * c * points];
    let mut taps: Vec<Vec<(Option<usize>, f64)>> = vec![Vec::new(); spatial];
    for b in 0..n {
        for p in 0..points {
            let row = &coords[(b * points + p) * spatial..(b * points + p + 1) * spatial];
            for (a, axis_taps) in taps.iter_mut().enumerate() {
                let len = dims[a] as f64;
                let g = row[spatial - 1 - a];
                let mut v = match align {
                    true => (g + 1.0) / 2.0 * (len - 1.0),
                    false => ((g + 1.0) * len - 1.0) / 2.0,
                };
                v = match padding {
                    Padding::Zeros => v,
                    // Cubic taps clamp on their own (as onnxruntime's): clamping the coordinate
                    // too would move the taps inwards.
                    Padding::Border if mode == Mode::Cubic => v,
                    Padding::Border => v.clamp(0.0, len - 1.0),
                    Padding::Reflection => reflect(v, bounds[a].0, bounds[a].1),
                };
                axis_taps.clear();
                if dims[a] == 0 {
                    continue;
                }
                let weight = |w: f64| if v.is_finite() { w } else { f64::NAN };
                match mode {
                    Mode::Nearest => {
                        axis_taps.push((tap(a, index(v.round_ties_even())), weight(1.0)))
                    }
                    Mode::Linear => {
                        let (f, t) = (index(v.floor()), v - v.floor());
                        axis_taps.push((tap(a, f), weight(1.0 - t)));
                        axis_taps.push((tap(a, f + 1), weight(t)));
                    }
                    Mode::Cubic => {
                        let (f, t) = (index(v.floor()), v - v.floor());
                        for (k, w) in cubic(t).into_iter().enumerate() {
                            axis_taps.push((tap(a, f - 1 + k as i64), weight(w)));
                        }
                    }
                }
            }
            if taps.iter().any(Vec::is_empty) {
                continue;
            }
            for ch in 0..c {
                let base = &data[(b * c + ch) * plane..(b * c + ch + 1) * plane];
                out[(b * c + ch) * points + p] = gather(base, &taps, 0, 0) as f32;
            }
        }
    }
    Ok(vec![Tensor::float(x.dtype, out_shape, out)])
}

/// The weighted sum of the taps of axes `a..` at element offset `offset` of `plane`.
fn gather(plane: &[f32], taps: &[Vec<(Option<usize>, f64)>], a: usize, offset: usize) -> f64 {
    if a == taps.len() {
        return f64::from(plane[offset]);
    }
    taps[a]
        .iter()
        .map(|&(at, w)| match at {
            Some(at) => w * gather(plane, taps, a + 1, offset + at),
            None => 0.0,
        })
        .sum()
}

/// `AffineGrid(theta, size)`.
fn affine_grid(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (theta, size) = (call.input(0)?, call.input(1)?);
    let size: Vec<usize> = size
        .ints()
        .map_err(|e| call.error(e))?
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| call.error(format!("size holds {d}"))))
        .collect::<Result<_>>()?;
    let spatial = size.len().saturating_sub(2);
    if !(2..=3).contains(&spatial) || theta.shape != [size[0], spatial, spatial + 1] {
        return Err(call.error(format!(
            "theta must be [N, 2, 3] with size [N, C, H, W], or [N, 3, 4] with size \
             [N, C, D, H, W]; got theta {:?} and size {size:?}",
            theta.shape
        )));
    }
    let align = match call.int("align_corners", 0) {
        0 => false,
        1 => true,
        other => return Err(call.error(format!("align_corners must be 0 or 1, got {other}"))),
    };
    let dims = &size[2..];
    let mut out_shape = vec![size[0]];
    out_shape.extend_from_slice(dims);
    out_shape.push(spatial);
    call.alloc(&out_shape)?;
    let coordinate = |i: usize, len: usize| match (align, len) {
        (true, 1) => -1.0,
        (true, _) => -1.0 + 2.0 * i as f64 / (len - 1) as f64,
        (false, _) => -1.0 + (2 * i + 1) as f64 / len as f64,
    };
    let t = theta.as_f64();
    let points: usize = dims.iter().product();
    let strides = super::tensor::strides(dims);
    let mut out = Vec::with_capacity(size[0] * points * spatial);
    for b in 0..size[0] {
        let m = &t[b * spatial * (spatial + 1)..(b + 1) * spatial * (spatial + 1)];
        for p in 0..points {
            // (x, y[, z], 1): the innermost axis first.
            let mut base: Vec<f64> = (0..spatial)
                .map(|k| {
                    let a = spatial - 1 - k;
                    coordinate((p / strides[a]) % dims[a], dims[a])
                })
                .collect();
            base.push(1.0);
            for row in m.chunks(spatial + 1) {
                out.push(row.iter().zip(&base).map(|(w, v)| w * v).sum::<f64>() as f32);
            }
        }
    }
    Ok(vec![Tensor::float(theta.dtype, out_shape, out)])
}
