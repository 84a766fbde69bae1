//! Object detection: `NonMaxSuppression` (opset 10+), greedy selection of the boxes of each
//! batch and class by descending score (ties to the lower index), dropping those whose
//! intersection over union with a selected box exceeds `iou_threshold`, as onnxruntime's
//! kernel computes it in f32 (boxes as corners `[y1, x1, y2, x2]` in either order, or
//! `center_point_box` `[x_center, y_center, width, height]`; a box of no area suppresses
//! nothing). A NaN score is never above the threshold and sorts last.
//!
//! [`OPS`] registers the ops with their attribute schemas, type inference and cost facts
//! beside their evaluators.

use super::types::{SymDim, TensorType};
use super::{OpCall, OpDef, Tensor};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[OpDef::onnx("NonMaxSuppression", &["center_point_box"])
    .infer(|_| {
        vec![TensorType::new(
            DType::I64,
            vec![SymDim::Unknown, SymDim::Known(3)],
        )]
    })
    .since(10)
    .eval(non_max_suppression)];

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
