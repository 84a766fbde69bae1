//! `Unique` (opset 11): the distinct elements of a tensor (flattened), or with `axis` its
//! distinct slices along that axis, ascending (`sorted`, the default; slices compare
//! lexicographically in row-major order) or in order of first occurrence; with the index of each
//! one's first occurrence, each input element's (slice's) index into them and their counts.
//! Floats compare as numbers, −0 equal to +0, every NaN one value sorting last (numpy's
//! `unique`, ONNX's reference).
//!
//! [`OPS`] registers the op with its attribute schema, type inference and cost facts beside its
//! evaluator.

use std::cmp::Ordering;

use super::types::{SymDim, TensorType};
use super::{OpCall, OpDef, Tensor, Values};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[OpDef::onnx("Unique", &["axis", "sorted"])
    .infer(|c| {
        let index = TensorType::new(DType::I64, vec![SymDim::Unknown]);
        vec![
            c.ty(0).with_unknown_shape(),
            index.clone(),
            index.clone(),
            index,
        ]
    })
    .since(11)
    .eval(unique)];

/// `Unique(X)`: `Y`, `indices`, `inverse_indices`, `counts`.
fn unique(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let sorted = match call.int("sorted", 1) {
        0 => false,
        1 => true,
        other => return Err(call.error(format!("sorted must be 0 or 1, got {other}"))),
    };
    // The slices: `extent` of them along the axis, each `outer × inner` elements.
    let (axis, outer, extent, inner) = match call.attrs().get("axis") {
        None => (None, 1, x.numel(), 1),
        Some(_) => {
            let a = super::tensor::axis(call.int("axis", 0), x.shape.len())
                .map_err(|e| call.error(e))?;
            (
                Some(a),
                x.shape[..a].iter().product(),
                x.shape[a],
                x.shape[a + 1..].iter().product(),
            )
        }
    };
    let element = |k: usize, o: usize, i: usize| (o * extent + k) * inner + i;
    let compare_at = |p: usize, q: usize| -> Ordering {
        match &x.values {
            Values::Float(v) => {
                let key = |f: f32| match f {
                    _ if f.is_nan() => f32::NAN,
                    _ if f == 0.0 => 0.0,
                    _ => f,
                };
                key(v[p]).total_cmp(&key(v[q]))
            }
            Values::Int(v) => v[p].cmp(&v[q]),
            Values::Bool(v) => v[p].cmp(&v[q]),
        }
    };
    let compare = |&j: &usize, &k: &usize| -> Ordering {
        (0..outer)
            .flat_map(|o| (0..inner).map(move |i| (o, i)))
            .map(|(o, i)| compare_at(element(j, o, i), element(k, o, i)))
            .find(|c| c.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    let mut order: Vec<usize> = (0..extent).collect();
    order.sort_by(compare);
    // Runs of equal slices, each led by its first occurrence (the sort is stable).
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for k in order {
        match groups.last_mut() {
            Some(g) if compare(&g[0], &k).is_eq() => g.push(k),
            _ => groups.push(vec![k]),
        }
    }
    if !sorted {
        groups.sort_by_key(|g| g[0]);
    }
    let mut inverse = vec![0i64; extent];
    for (u, g) in groups.iter().enumerate() {
        for &k in g {
            inverse[k] = u as i64;
        }
    }
    let picks: Vec<usize> = (0..outer)
        .flat_map(|o| {
            groups
                .iter()
                .flat_map(move |g| (0..inner).map(move |i| element(g[0], o, i)))
        })
        .collect();
    let values = match &x.values {
        Values::Float(v) => Values::Float(picks.iter().map(|&p| v[p]).collect()),
        Values::Int(v) => Values::Int(picks.iter().map(|&p| v[p]).collect()),
        Values::Bool(v) => Values::Bool(picks.iter().map(|&p| v[p]).collect()),
    };
    let shape = match axis {
        None => vec![groups.len()],
        Some(a) => {
            let mut s = x.shape.clone();
            s[a] = groups.len();
            s
        }
    };
    let count = groups.len();
    let y = Tensor {
        dtype: x.dtype,
        shape,
        values,
    };
    let first = groups.iter().map(|g| g[0] as i64).collect();
    let counts = groups.iter().map(|g| g.len() as i64).collect();
    Ok(vec![
        y,
        Tensor::int(DType::I64, vec![count], first),
        Tensor::int(DType::I64, vec![extent], inverse),
        Tensor::int(DType::I64, vec![count], counts),
    ])
}
