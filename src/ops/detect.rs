//! Object detection: `NonMaxSuppression` (opset 10+), greedy selection of the boxes of each
//! batch and class by descending score (ties to the lower index), dropping those whose
//! intersection over union with a selected box exceeds `iou_threshold`, as onnxruntime's
//! kernel computes it in f32 (boxes as corners `[y1, x1, y2, x2]` in either order, or
//! `center_point_box` `[x_center, y_center, width, height]`; a box of no area suppresses
//! nothing). A NaN score is never above the threshold and sorts last.
//!
//! `RoiAlign` (opset 10; 16 adds `coordinate_transformation_mode`, default `half_pixel`, which a
//! node without it runs): each region of interest `[x1, y1, x2, y2]` (times `spatial_scale`,
//! less half a pixel with `half_pixel`) cut into `output_height × output_width` bins, each bin
//! sampled on a `sampling_ratio²` grid (or `ceil(bin extent)` per axis) by bilinear
//! interpolation, and the samples averaged (`avg`) or, as onnxruntime and ONNX's reference
//! compute `max`, the largest of the samples' largest weighted corner.
//!
//! [`OPS`] registers the ops with their attribute schemas, type inference and cost facts
//! beside their evaluators.

use super::types::{SymDim, TensorType};
use super::{OpCall, OpDef, Tensor};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("NonMaxSuppression", &["center_point_box"])
        .infer(|_| {
            vec![TensorType::new(
                DType::I64,
                vec![SymDim::Unknown, SymDim::Known(3)],
            )]
        })
        .since(10)
        .eval(non_max_suppression),
    OpDef::onnx(
        "RoiAlign",
        &[
            "coordinate_transformation_mode",
            "mode",
            "output_height",
            "output_width",
            "sampling_ratio",
            "spatial_scale",
        ],
    )
    .infer(|c| vec![c.ty(0).with_unknown_shape()])
    .since(10)
    .eval(roi_align),
];

/// A box's extent along x and y: (min, max) pairs.
type Extent = ((f32, f32), (f32, f32));

/// The extent of `b` (four coordinates) in the node's box format.
fn extent(b: &[f32], center: bool) -> Extent {
    let order = |p: f32, q: f32| if p <= q { (p, q) } else { (q, p) };
    if center {
        let (w, h) = (b[2] / 2.0, b[3] / 2.0);
        ((b[0] - w, b[0] + w), (b[1] - h, b[1] + h))
    } else {
        (order(b[1], b[3]), order(b[0], b[2]))
    }
}

/// Whether box `a` suppresses box `b`: their intersection over union exceeds `threshold`.
fn suppresses(a: Extent, b: Extent, threshold: f32) -> bool {
    let ((ax0, ax1), (ay0, ay1)) = a;
    let ((bx0, bx1), (by0, by1)) = b;
    let (ix0, ix1) = (ax0.max(bx0), ax1.min(bx1));
    if ix1 <= ix0 {
        return false;
    }
    let (iy0, iy1) = (ay0.max(by0), ay1.min(by1));
    if iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    if inter <= 0.0 {
        return false;
    }
    let (area_a, area_b) = ((ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0));
    let union = area_a + area_b - inter;
    if area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

/// `NonMaxSuppression(boxes, scores, max_output_boxes_per_class?, iou_threshold?,
/// score_threshold?)`.
fn non_max_suppression(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (boxes, scores) = (call.input(0)?, call.input(1)?);
    let (b, s) = match boxes.shape[..] {
        [b, s, 4] => (b, s),
        _ => {
            return Err(call.error(format!(
                "boxes must be (num_batches, spatial_dimension, 4), got shape {:?}",
                boxes.shape
            )))
        }
    };
    let classes = match scores.shape[..] {
        [sb, c, ss] if sb == b && ss == s => c,
        _ => {
            return Err(call.error(format!(
                "scores must be ({b}, num_classes, {s}) for boxes of shape {:?}, got shape {:?}",
                boxes.shape, scores.shape
            )))
        }
    };
    let scalar = |i: usize| -> Result<Option<f64>> {
        match call.optional(i) {
            None => Ok(None),
            Some(t) if t.numel() == 1 => Ok(Some(t.as_f64()[0])),
            Some(t) => Err(call.error(format!(
                "input {i} must hold one value, got shape {:?}",
                t.shape
            ))),
        }
    };
    let max_out = scalar(2)?.unwrap_or(0.0).max(0.0);
    let iou = scalar(3)?.unwrap_or(0.0) as f32;
    if !(0.0..=1.0).contains(&iou) {
        return Err(call.error(format!("iou_threshold must be in [0, 1], got {iou}")));
    }
    let score_threshold = scalar(4)?.map(|v| v as f32);
    let center = match call.int("center_point_box", 0) {
        0 => false,
        1 => true,
        other => return Err(call.error(format!("center_point_box must be 0 or 1, got {other}"))),
    };
    let (boxes, scores) = (boxes.floats()?, scores.floats()?);
    let max_out = max_out.min(s as f64) as usize;
    let mut selected: Vec<i64> = Vec::new();
    for batch in 0..b {
        let extents: Vec<Extent> = (0..s)
            .map(|i| extent(&boxes[(batch * s + i) * 4..(batch * s + i + 1) * 4], center))
            .collect();
        for class in 0..classes {
            let row = &scores[(batch * classes + class) * s..(batch * classes + class + 1) * s];
            let mut order: Vec<usize> = (0..s)
                .filter(|&i| score_threshold.is_none_or(|t| row[i] > t))
                .collect();
            order.sort_by(|&i, &j| {
                (row[i].is_nan().cmp(&row[j].is_nan()))
                    .then(row[j].total_cmp(&row[i]))
                    .then(i.cmp(&j))
            });
            let mut kept: Vec<usize> = Vec::new();
            for i in order {
                if kept.len() >= max_out {
                    break;
                }
                if kept
                    .iter()
                    .all(|&k| !suppresses(extents[k], extents[i], iou))
                {
                    kept.push(i);
                }
            }
            for k in kept {
                selected.extend([batch as i64, class as i64, k as i64]);
            }
        }
    }
    let n = selected.len() / 3;
    Ok(vec![Tensor::int(DType::I64, vec![n, 3], selected)])
}

/// `RoiAlign(X, rois, batch_indices)`.
fn roi_align(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (x, rois, batch) = (call.input(0)?, call.input(1)?, call.input(2)?);
    let [n, c, h, w] = x.shape[..] else {
        return Err(call.error(format!("X must be [N, C, H, W], got shape {:?}", x.shape)));
    };
    let r = match rois.shape[..] {
        [r, 4] if batch.shape == [r] => r,
        _ => {
            return Err(call.error(format!(
                "rois must be [num_rois, 4] and batch_indices [num_rois], got {:?} and {:?}",
                rois.shape, batch.shape
            )))
        }
    };
    let half = match call
        .string("coordinate_transformation_mode")
        .unwrap_or("half_pixel")
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(call.error(format!(
                "coordinate_transformation_mode must be half_pixel or output_half_pixel, got \
                 `{other}`"
            )))
        }
    };
    let max = match call.string("mode").unwrap_or("avg") {
        "avg" => false,
        "max" => true,
        other => return Err(call.error(format!("mode must be avg or max, got `{other}`"))),
    };
    let extent = |name: &str| {
        usize::try_from(call.int(name, 1))
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| call.error(format!("{name} must be positive")))
    };
    let (ph, pw) = (extent("output_height")?, extent("output_width")?);
    let ratio = usize::try_from(call.int("sampling_ratio", 0))
        .map_err(|_| call.error("sampling_ratio must be non-negative"))?;
    let scale = f64::from(call.float("spatial_scale", 1.0));
    let out_shape = vec![r, c, ph, pw];
    call.alloc(&out_shape)?;
    let (xv, rv, bv) = (x.as_f64(), rois.as_f64(), batch.as_f64());
    let mut out = Vec::with_capacity(r * c * ph * pw);
    for k in 0..r {
        let b = bv[k];
        if !(b >= 0.0 && b < n as f64) {
            return Err(call.error(format!("batch index {b} is not one of X's {n}")));
        }
        let b = b as usize;
        let offset = if half { 0.5 } else { 0.0 };
        let roi = &rv[k * 4..k * 4 + 4];
        let (x0, y0) = (roi[0] * scale - offset, roi[1] * scale - offset);
        let (mut rw, mut rh) = (roi[2] * scale - offset - x0, roi[3] * scale - offset - y0);
        if !half {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bh, bw) = (rh / ph as f64, rw / pw as f64);
        // The samples per bin along each axis (their table is checked like a tensor).
        let grid = |bin: f64| match ratio {
            0 => bin.ceil().clamp(0.0, 1e15) as usize,
            s => s,
        };
        let (gh, gw) = (grid(bh), grid(bw));
        call.limits.elements(
            &format!("{} sample table", call.tag()),
            &[ph, pw, gh, gw, 4],
        )?;
        let count = (gh * gw).max(1) as f64;
        // Each sample's four corners: (offset in a channel plane, weight).
        let mut samples: Vec<[(usize, f64); 4]> = Vec::with_capacity(ph * pw * gh * gw);
        for py in 0..ph {
            for px in 0..pw {
                for iy in 0..gh {
                    for ix in 0..gw {
                        let y = y0 + py as f64 * bh + (iy as f64 + 0.5) * bh / gh as f64;
                        let x = x0 + px as f64 * bw + (ix as f64 + 0.5) * bw / gw as f64;
                        samples.push(corners(y, x, h, w));
                    }
                }
            }
        }
        let per_bin = gh * gw;
        for ch in 0..c {
            let plane = &xv[(b * c + ch) * h * w..(b * c + ch + 1) * h * w];
            for bin in samples.chunks(per_bin.max(1)).take(ph * pw) {
                let values = bin.iter().map(|s| s.map(|(at, wt)| wt * plane[at]));
                let v = if max {
                    values
                        .map(|v| v.into_iter().fold(f64::NEG_INFINITY, f64::max))
                        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
                        .unwrap_or(0.0)
                } else {
                    values.map(|v| v.iter().sum::<f64>()).sum::<f64>() / count
                };
                out.push(v as f32);
            }
            if per_bin == 0 {
                out.extend(std::iter::repeat_n(0.0, ph * pw));
            }
        }
    }
    Ok(vec![Tensor::float(x.dtype, out_shape, out)])
}

/// The four bilinear corners of the point `(y, x)` in an `h × w` plane: their offsets and
/// weights (all 0 beyond a pixel outside the plane).
fn corners(y: f64, x: f64, h: usize, w: usize) -> [(usize, f64); 4] {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 || h == 0 || w == 0 {
        return [(0, 0.0); 4];
    }
    let axis = |v: f64, len: usize| {
        let v = v.max(0.0);
        let low = v as usize;
        if low >= len - 1 {
            (len - 1, len - 1, 0.0)
        } else {
            (low, low + 1, v - low as f64)
        }
    };
    let (yl, yh, ly) = axis(y, h);
    let (xl, xh, lx) = axis(x, w);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    [
        (yl * w + xl, hy * hx),
        (yl * w + xh, hy * lx),
        (yh * w + xl, ly * hx),
        (yh * w + xh, ly * lx),
    ]
}
