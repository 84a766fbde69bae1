//! Ops that rearrange or repeat one tensor: Transpose, Reshape, Flatten, Squeeze, Unsqueeze,
//! Expand, Tile.

use super::{dims, index_map, int_input, norm_axes, norm_axis, take, with_shape};
use crate::ops::tensor::{broadcast_index, broadcast_shape, strides};
use crate::ops::{OpCall, Tensor};
use crate::Result;

/// `Transpose`: `perm` (default: the axes reversed) must be a permutation of the axes.
pub(super) fn transpose(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let rank = x.shape.len();
    let perm: Vec<usize> = match call.ints("perm") {
        Some(p) => {
            let mut seen = vec![false; rank];
            let mut perm = Vec::with_capacity(rank);
            for &a in p {
                let v = usize::try_from(a).ok().filter(|&v| v < rank && !seen[v]);
                let v = v.ok_or_else(|| {
                    call.error(format!("perm {p:?} is not a permutation of {rank} axes"))
                })?;
                seen[v] = true;
                perm.push(v);
            }
            if perm.len() != rank {
                return Err(call.error(format!("perm {p:?} is not a permutation of {rank} axes")));
            }
            perm
        }
        None => (0..rank).rev().collect(),
    };
    let st = strides(&x.shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let index = index_map(&out_shape, |i, c| c * st[perm[i]]);
    Ok(take(x, out_shape, &index))
}

/// `Reshape`: a 0 copies the input dim at that position (a literal 0 with `allowzero=1`), one
/// -1 is inferred. Like onnxruntime, with `allowzero=1` a literal 0 next to a -1 is accepted
/// for an empty input, the -1 then taking the product of the input's non-zero dims divided by
/// that of the other requested non-zero dims.
pub(super) fn reshape(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let mut req = int_input(call, 1)?;
    let allow_zero = call.int("allowzero", 0) == 1;
    let numel = x.numel() as i64;
    let mut unknown = None;
    let (mut size, mut nonzero_size, mut literal_zero) = (1i64, 1i64, false);
    for i in 0..req.len() {
        match req[i] {
            -1 if unknown.is_none() => unknown = Some(i),
            -1 => return Err(call.error(format!("shape {req:?} has more than one -1"))),
            d if d < -1 => {
                return Err(call.error(format!("shape {req:?} has a dimension below -1")))
            }
            d => {
                if d == 0 && !allow_zero {
                    let copied = x.shape.get(i).ok_or_else(|| {
                        call.error(format!(
                            "shape {req:?}: a 0 at position {i} exceeds the input rank {}",
                            x.shape.len()
                        ))
                    })?;
                    req[i] = *copied as i64;
                } else if d == 0 {
                    literal_zero = true;
                }
                size = size.saturating_mul(req[i]);
                if req[i] != 0 {
                    nonzero_size = nonzero_size.saturating_mul(req[i]);
                }
            }
        }
    }
    let mismatch = || call.error(format!("cannot reshape {:?} to {req:?}", x.shape));
    match unknown {
        Some(u) if literal_zero => {
            // At most usize::MAX (the run checked the input's shape), but maybe past i64.
            let input_nonzero = x
                .shape
                .iter()
                .filter(|&&d| d != 0)
                .try_fold(1i64, |acc, &d| acc.checked_mul(i64::try_from(d).ok()?))
                .ok_or_else(mismatch)?;
            if numel != 0 || input_nonzero % nonzero_size != 0 {
                return Err(mismatch());
            }
            req[u] = input_nonzero / nonzero_size;
        }
        Some(u) => {
            if size == 0 || numel % size != 0 {
                return Err(mismatch());
            }
            req[u] = numel / size;
        }
        None if size != numel => return Err(mismatch()),
        None => {}
    }
    Ok(with_shape(x, dims(call, &req)?))
}

/// `Flatten`: `[prod(dims[..axis]), prod(dims[axis..])]`, `axis` in `[-rank, rank]`.
pub(super) fn flatten(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let rank = x.shape.len() as i64;
    let a = call.int("axis", 1);
    let a = if a < 0 { a + rank } else { a };
    if !(0..=rank).contains(&a) {
        return Err(call.error(format!(
            "axis {} is out of range for rank {rank}",
            call.int("axis", 1)
        )));
    }
    let (outer, inner) = x.shape.split_at(a as usize);
    Ok(with_shape(
        x,
        vec![outer.iter().product(), inner.iter().product()],
    ))
}

/// `Squeeze`: removes the listed axes (each of size 1; repeats allowed, as onnxruntime does),
/// or every size-1 axis when `axes` is absent or empty.
pub(super) fn squeeze(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let rank = x.shape.len();
    // Before opset 13 the axes were an attribute.
    let axes = match (call.optional(1), call.ints("axes")) {
        (Some(_), _) => int_input(call, 1)?,
        (None, Some(axes)) => axes.to_vec(),
        (None, None) => Vec::new(),
    };
    let axes = axes
        .iter()
        .map(|&a| norm_axis(call, a, rank))
        .collect::<Result<Vec<_>>>()?;
    if let Some(&a) = axes.iter().find(|&&a| x.shape[a] != 1) {
        return Err(call.error(format!("cannot squeeze axis {a} of size {}", x.shape[a])));
    }
    let keep = |a: &usize| {
        if axes.is_empty() {
            x.shape[*a] != 1
        } else {
            !axes.contains(a)
        }
    };
    Ok(with_shape(
        x,
        (0..rank).filter(keep).map(|a| x.shape[a]).collect(),
    ))
}

/// `Unsqueeze`: inserts size-1 axes at the listed positions of the output.
pub(super) fn unsqueeze(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    // Before opset 13 the axes were an attribute.
    let axes = match (call.optional(1), call.ints("axes")) {
        (None, Some(axes)) => axes.to_vec(),
        _ => int_input(call, 1)?,
    };
    let out_rank = x.shape.len() + axes.len();
    let axes = norm_axes(call, &axes, out_rank)?;
    let mut rest = x.shape.iter();
    let shape = (0..out_rank)
        .map(|a| {
            if axes.contains(&a) {
                1
            } else {
                *rest.next().expect("rank adds up")
            }
        })
        .collect();
    Ok(with_shape(x, shape))
}

/// `Expand`: broadcasts the input and the requested shape against each other.
pub(super) fn expand(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let target = dims(call, &int_input(call, 1)?)?;
    let out_shape = broadcast_shape(&[&x.shape, &target])
        .map_err(|_| call.error(format!("cannot expand {:?} to {target:?}", x.shape)))?;
    call.alloc(&out_shape)?;
    Ok(take(
        x,
        out_shape.clone(),
        &broadcast_index(&x.shape, &out_shape),
    ))
}

/// `Tile`: repeats the input `repeats[i]` times along each axis `i`.
pub(super) fn tile(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let repeats = int_input(call, 1)?;
    if repeats.len() != x.shape.len() {
        return Err(call.error(format!(
            "repeats {repeats:?} must have one entry per axis of {:?}",
            x.shape
        )));
    }
    let repeats = dims(call, &repeats)?;
    let st = strides(&x.shape);
    let out_shape = x
        .shape
        .iter()
        .zip(&repeats)
        .map(|(d, r)| d.checked_mul(*r))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| call.error(format!("repeats {repeats:?} overflow {:?}", x.shape)))?;
    call.alloc(&out_shape)?;
    let index = index_map(&out_shape, |i, c| (c % x.shape[i]) * st[i]);
    Ok(take(x, out_shape, &index))
}
