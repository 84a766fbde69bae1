//! Ops that join or pick parts of tensors: Concat, Split, Slice, Gather, GatherND.

use super::{dims, index_map, int_input, norm_axes, norm_axis, take};
use crate::ops::tensor::strides;
use crate::ops::{OpCall, Tensor, Values};
use crate::Result;

/// `Concat`: joins inputs of one dtype and rank along `axis`; the other dims must agree.
pub(super) fn concat(call: &OpCall<'_>) -> Result<Tensor> {
    let parts = (0..call.inputs.len())
        .map(|i| call.input(i))
        .collect::<Result<Vec<_>>>()?;
    let first = *parts
        .first()
        .ok_or_else(|| call.error("needs at least one input"))?;
    let rank = first.shape.len();
    let ax = norm_axis(call, call.int("axis", 0), rank)?;
    let mut joined_shape = first.shape.clone();
    joined_shape[ax] = parts.iter().try_fold(0usize, |acc, p| {
        p.shape
            .get(ax)
            .and_then(|&d| acc.checked_add(d))
            .ok_or_else(|| call.error(format!("cannot join {:?} along axis {ax}", p.shape)))
    })?;
    call.alloc(&joined_shape)?;
    let mut all = first.values.clone();
    let mut offsets = vec![0];
    for p in &parts[1..] {
        let same_dims =
            p.shape.len() == rank && (0..rank).all(|i| i == ax || p.shape[i] == first.shape[i]);
        if p.dtype != first.dtype || !same_dims {
            return Err(call.error(format!(
                "cannot join {} {:?} with {} {:?} along axis {ax}",
                first.dtype, first.shape, p.dtype, p.shape
            )));
        }
        offsets.push(len(&all));
        match (&mut all, &p.values) {
            (Values::Float(a), Values::Float(b)) => a.extend_from_slice(b),
            (Values::Int(a), Values::Int(b)) => a.extend_from_slice(b),
            (Values::Bool(a), Values::Bool(b)) => a.extend_from_slice(b),
            _ => return Err(call.error(format!("input storage differs for dtype {}", p.dtype))),
        }
    }
    let outer: usize = first.shape[..ax].iter().product();
    let inner: usize = first.shape[ax + 1..].iter().product();
    let mut idx = Vec::with_capacity(len(&all));
    // (No element: skip the loop, whose `outer` may be large.)
    for o in 0..if len(&all) == 0 { 0 } else { outer } {
        for (p, off) in parts.iter().zip(&offsets) {
            let chunk = p.shape[ax] * inner;
            idx.extend(off + o * chunk..off + (o + 1) * chunk);
        }
    }
    let joined = Tensor {
        dtype: first.dtype,
        shape: vec![len(&all)],
        values: all,
    };
    Ok(take(&joined, joined_shape, &idx))
}

/// Number of elements held.
fn len(v: &Values) -> usize {
    match v {
        Values::Float(v) => v.len(),
        Values::Int(v) => v.len(),
        Values::Bool(v) => v.len(),
    }
}

/// `Split` (opsets 11–18): as many parts as the node has outputs, sized by the `split` input
/// (opset 13+) or attribute (before 13); with `num_outputs` (opset 18), `ceil(dim / n)` each and
/// the remainder (possibly 0) last; with neither, `dim / n` each, which must divide evenly (the
/// opset 13–17 form, which onnxruntime also runs at 18).
pub(super) fn split(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let ax = norm_axis(call, call.int("axis", 0), x.shape.len())?;
    let dim = x.shape[ax];
    let n = call.node.outputs.len();
    let num_outputs = call
        .attrs()
        .contains_key("num_outputs")
        .then(|| call.int("num_outputs", 0));
    let listed = match (call.optional(1), call.ints("split")) {
        (Some(_), Some(_)) => {
            return Err(call.error("takes a `split` input or a `split` attribute, not both"))
        }
        (Some(_), None) => Some(int_input(call, 1)?),
        (None, attr) => attr.map(<[i64]>::to_vec),
    };
    let sizes = match (listed, num_outputs) {
        (Some(_), Some(_)) => {
            return Err(call.error("takes `split` sizes or `num_outputs`, not both"))
        }
        (Some(listed), None) => {
            let sizes = dims(call, &listed)?;
            let total = sizes.iter().try_fold(0usize, |acc, &d| acc.checked_add(d));
            if sizes.len() != n || total != Some(dim) {
                return Err(call.error(format!(
                    "split {sizes:?} does not cut dim {dim} into {n} parts"
                )));
            }
            sizes
        }
        (None, Some(k)) => {
            if k < 1 || k as usize != n {
                return Err(call.error(format!("num_outputs {k} does not match the {n} outputs")));
            }
            let chunk = dim.div_ceil(n);
            let last = (dim + chunk).checked_sub(chunk * n).ok_or_else(|| {
                call.error(format!(
                    "num_outputs {k} leaves a negative last part of dim {dim}"
                ))
            })?;
            let mut sizes = vec![chunk; n - 1];
            sizes.push(last);
            sizes
        }
        (None, None) => {
            if n == 0 || dim % n != 0 {
                return Err(call.error(format!(
                    "without `split` sizes or `num_outputs` the parts are equal, but dim {dim} \
                     does not split evenly into {n} outputs"
                )));
            }
            vec![dim / n; n]
        }
    };
    let st = strides(&x.shape);
    let mut start = 0;
    Ok(sizes
        .into_iter()
        .map(|size| {
            let mut shape = x.shape.clone();
            shape[ax] = size;
            let first = start;
            let index = index_map(&shape, |i, c| (if i == ax { first + c } else { c }) * st[i]);
            start += size;
            take(x, shape, &index)
        })
        .collect())
}

/// `Slice`: `starts`/`ends` (clamped as ONNX specifies, negative values counting from the
/// end), optional `axes` (default the first axes) and `steps` (default 1, may be negative).
/// As in onnxruntime, an `end` of `i32::MAX` or `i64::MAX` with a negative step runs through
/// index 0 (the spec's clamping would stop before it).
pub(super) fn slice(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let rank = x.shape.len();
    let starts = int_input(call, 1)?;
    let ends = int_input(call, 2)?;
    let axes = match call.optional(3) {
        Some(_) => int_input(call, 3)?,
        None => (0..starts.len() as i64).collect(),
    };
    let axes = norm_axes(call, &axes, rank)?;
    let steps = match call.optional(4) {
        Some(_) => int_input(call, 4)?,
        None => vec![1; starts.len()],
    };
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(call.error("starts, ends, axes and steps must have the same length"));
    }
    // Per axis: first index and step (i128: steps and bounds may be near the i64 limits).
    let mut first = vec![0i128; rank];
    let mut step = vec![1i128; rank];
    let mut shape = x.shape.clone();
    for (k, &a) in axes.iter().enumerate() {
        let d = x.shape[a] as i128;
        let s = steps[k] as i128;
        if s == 0 {
            return Err(call.error("steps must not be 0"));
        }
        let resolve = |v: i64| if v < 0 { v as i128 + d } else { v as i128 };
        let (lo, hi) = if s > 0 { (0, d) } else { (-1, d - 1) };
        let b = resolve(starts[k]).max(0).min(hi);
        let e = if ends[k] == i64::MAX || ends[k] == i32::MAX as i64 {
            // onnxruntime reads an INT_MAX end as "to the end in the step's direction".
            if s > 0 {
                d
            } else {
                -1
            }
        } else {
            resolve(ends[k]).max(lo).min(hi)
        };
        let n = if s > 0 {
            (e - b + s - 1) / s
        } else {
            (b - e - s - 1) / -s
        };
        first[a] = b;
        step[a] = s;
        shape[a] = n.max(0) as usize;
    }
    let st = strides(&x.shape);
    let index = index_map(&shape, |i, c| {
        (first[i] + c as i128 * step[i]) as usize * st[i]
    });
    Ok(take(x, shape, &index))
}

/// `Gather`: picks entries along `axis` by index (negative counting from the end); the output
/// shape is `data[..axis] + indices + data[axis+1..]`.
pub(super) fn gather(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let indices = call.input(1)?;
    let ax = norm_axis(call, call.int("axis", 0), x.shape.len())?;
    let d = x.shape[ax];
    let picks = indices
        .ints()
        .map_err(|_| call.error(format!("indices must be integers, found {}", indices.dtype)))?
        .iter()
        .map(|&i| {
            let v = if i < 0 { i + d as i64 } else { i };
            usize::try_from(v)
                .ok()
                .filter(|&v| v < d)
                .ok_or_else(|| call.error(format!("index {i} is out of range for dim {d}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let shape = [&x.shape[..ax], &indices.shape[..], &x.shape[ax + 1..]].concat();
    let outer: usize = x.shape[..ax].iter().product();
    let inner: usize = x.shape[ax + 1..].iter().product();
    let n = call.alloc(&shape)?;
    let mut idx = Vec::with_capacity(n);
    // (No element: skip the loop, whose `outer` may be large.)
    for o in 0..if n == 0 { 0 } else { outer } {
        for &p in &picks {
            let base = (o * d + p) * inner;
            idx.extend(base..base + inner);
        }
    }
    Ok(take(x, shape, &idx))
}

/// `GatherND`: slices of `data` at the index tuples of the last axis of `indices` (negative
/// indices count from the end), the first `batch_dims` dims shared by both.
pub(super) fn gather_nd(call: &OpCall<'_>) -> Result<Tensor> {
    let (x, indices) = (call.input(0)?, call.input(1)?);
    let batch = usize::try_from(call.int("batch_dims", 0))
        .map_err(|_| call.error("batch_dims must not be negative"))?;
    let picks = indices
        .ints()
        .map_err(|_| call.error(format!("indices must be integers, found {}", indices.dtype)))?;
    let (r, q) = (x.shape.len(), indices.shape.len());
    let k = indices.shape.last().copied().unwrap_or(0);
    if q < 1 || batch >= q || batch > r || k < 1 || batch + k > r {
        return Err(call.error(format!(
            "indices {:?} with batch_dims {batch} do not index data {:?}",
            indices.shape, x.shape
        )));
    }
    if x.shape[..batch] != indices.shape[..batch] {
        return Err(call.error(format!(
            "the first {batch} dims of data {:?} and indices {:?} differ",
            x.shape, indices.shape
        )));
    }
    let shape = [&indices.shape[..q - 1], &x.shape[batch + k..]].concat();
    let inner: usize = x.shape[batch + k..].iter().product();
    let per_batch: usize = x.shape[batch..].iter().product();
    let tuples_per_batch: usize = indices.shape[batch..q - 1].iter().product();
    let x_strides = strides(&x.shape[batch..batch + k]);
    let n = call.alloc(&shape)?;
    let mut idx = Vec::with_capacity(n);
    for (t, tuple) in picks.chunks_exact(k).enumerate() {
        let b = t.checked_div(tuples_per_batch).unwrap_or(0);
        let mut offset = 0;
        for (axis, &i) in tuple.iter().enumerate() {
            let d = x.shape[batch + axis];
            let v = if i < 0 { i + d as i64 } else { i };
            let v = usize::try_from(v)
                .ok()
                .filter(|&v| v < d)
                .ok_or_else(|| call.error(format!("index {i} is out of range for dim {d}")))?;
            offset += v * x_strides[axis] * inner;
        }
        let base = b * per_batch + offset;
        idx.extend(base..base + inner);
    }
    Ok(take(x, shape, &idx))
}

/// The flat positions in `data` that `GatherElements` / `ScatterElements` address: for every
/// element of `indices` (same rank as `data`, each dim no longer than data's except along
/// `axis`), `data`'s position with the coordinate along `axis` replaced by the index there
/// (negative counting from the end). An index outside the axis is an error.
pub(super) fn element_positions(
    call: &OpCall<'_>,
    data: &Tensor,
    indices: &Tensor,
    ax: usize,
) -> Result<Vec<usize>> {
    let idx = indices
        .ints()
        .map_err(|_| call.error(format!("indices must be integers, found {}", indices.dtype)))?;
    if indices.shape.len() != data.shape.len() {
        return Err(call.error(format!(
            "indices of shape {:?} must have the rank of data {:?}",
            indices.shape, data.shape
        )));
    }
    let fits = |(i, (&n, &d)): (usize, (&usize, &usize))| i == ax || n <= d;
    if !indices.shape.iter().zip(&data.shape).enumerate().all(fits) {
        return Err(call.error(format!(
            "indices of shape {:?} exceed data {:?} outside axis {ax}",
            indices.shape, data.shape
        )));
    }
    let (stride, d) = (strides(&data.shape), data.shape[ax] as i64);
    // Position of every index element with its own coordinate along `axis` taken as 0.
    let base = index_map(
        &indices.shape,
        |i, c| if i == ax { 0 } else { c * stride[i] },
    );
    base.iter()
        .zip(idx)
        .map(|(&b, &i)| {
            let at = if i < 0 { i + d } else { i };
            match (0..d).contains(&at) {
                true => Ok(b + at as usize * stride[ax]),
                false => Err(call.error(format!("index {i} is out of range for dim {d}"))),
            }
        })
        .collect()
}

/// `GatherElements(data, indices; axis = 0)`: an output of `indices`' shape, each element
/// taken from `data` at its own coordinates, with the one along `axis` given by the index.
pub(super) fn gather_elements(call: &OpCall<'_>) -> Result<Tensor> {
    let (x, indices) = (call.input(0)?, call.input(1)?);
    let ax = norm_axis(call, call.int("axis", 0), x.shape.len())?;
    call.alloc(&indices.shape)?;
    let positions = element_positions(call, x, indices, ax)?;
    Ok(take(x, indices.shape.clone(), &positions))
}
