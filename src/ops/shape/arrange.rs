//! Ops that rearrange, filter or locate elements: Pad (every mode, negative pads crop),
//! DepthToSpace, SpaceToDepth, Compress, ReverseSequence and NonZero. Each but NonZero computes,
//! per output element, the input element it copies (Pad's constant fill aside).

use super::{index_map, int_input, norm_axes, norm_axis, take};
use crate::ops::tensor::strides;
use crate::ops::{OpCall, Tensor, Values};
use crate::Result;

/// `Pad(data, pads, constant_value?, axes?; mode)`: `pads` holds the begin counts then the end
/// counts of each padded axis (every axis, or those of `axes`); a negative count crops. The new
/// elements are `constant_value` (0 when absent) in `constant` mode, or copies of the input's
/// mirror image without its edge (`reflect`), its edge (`edge`) or its other end (`wrap`).
pub(super) fn pad(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let rank = x.shape.len();
    let pads = int_input(call, 1)?;
    let axes = match call.optional(3) {
        Some(_) => norm_axes(call, &int_input(call, 3)?, rank)?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(call.error(format!(
            "pads holds {} values, expected {} (begin and end for each of {} axes)",
            pads.len(),
            2 * axes.len(),
            axes.len()
        )));
    }
    let (mut begin, mut end) = (vec![0i64; rank], vec![0i64; rank]);
    for (k, &a) in axes.iter().enumerate() {
        (begin[a], end[a]) = (pads[k], pads[k + axes.len()]);
    }
    let mut shape = Vec::with_capacity(rank);
    for a in 0..rank {
        let d = x.shape[a] as i64 + begin[a] + end[a];
        shape.push(usize::try_from(d).map_err(|_| {
            call.error(format!(
                "axis {a} of size {} padded by {} and {} is negative",
                x.shape[a], begin[a], end[a]
            ))
        })?);
    }
    let mode = call.string("mode").unwrap_or("constant");
    if !matches!(mode, "constant" | "reflect" | "edge" | "wrap") {
        return Err(call.error(format!(
            "mode must be constant, reflect, edge or wrap, got `{mode}`"
        )));
    }
    call.alloc(&shape)?;
    // Per output coordinate along each axis, the input coordinate it copies (None: the fill).
    let source = |a: usize, c: usize| -> Result<Option<usize>> {
        let (d, i) = (x.shape[a] as i64, c as i64 - begin[a]);
        if (0..d).contains(&i) {
            return Ok(Some(i as usize));
        }
        Ok(match mode {
            "constant" => None,
            _ if d == 0 => {
                return Err(call.error(format!(
                    "axis {a} is empty: {mode} padding has nothing to copy"
                )))
            }
            "edge" => Some(i.clamp(0, d - 1) as usize),
            "wrap" => Some(i.rem_euclid(d) as usize),
            _ if d == 1 => Some(0),
            _ => {
                // reflect: the mirror without the edge, period 2(d − 1)
                let p = 2 * (d - 1);
                let m = i.rem_euclid(p);
                Some(if m < d { m } else { p - m } as usize)
            }
        })
    };
    let tables = (0..rank)
        .map(|a| {
            (0..shape[a])
                .map(|c| source(a, c))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let stride = strides(&x.shape);
    let filled = index_map(&shape, |a, c| match tables[a][c] {
        Some(i) => i * stride[a],
        None => usize::MAX / (2 * rank.max(1)),
    });
    let total = x.numel();
    let fill = call.optional(2);
    if fill.is_some_and(|f| f.dtype != x.dtype || f.numel() > 1) {
        return Err(call.error("constant_value must be one value of the input's dtype"));
    }
    let values = match &x.values {
        Values::Float(v) => {
            let c = fill
                .map(|f| f.floats().map(|f| f.first().copied().unwrap_or(0.0)))
                .transpose()?
                .unwrap_or(0.0);
            Values::Float(
                filled
                    .iter()
                    .map(|&i| if i < total { v[i] } else { c })
                    .collect(),
            )
        }
        Values::Int(v) => {
            let c = fill
                .map(|f| f.ints().map(|f| f.first().copied().unwrap_or(0)))
                .transpose()?
                .unwrap_or(0);
            Values::Int(
                filled
                    .iter()
                    .map(|&i| if i < total { v[i] } else { c })
                    .collect(),
            )
        }
        Values::Bool(v) => {
            let c = fill
                .map(|f| f.bools().map(|f| f.first().copied().unwrap_or(false)))
                .transpose()?
                .unwrap_or(false);
            Values::Bool(
                filled
                    .iter()
                    .map(|&i| if i < total { v[i] } else { c })
                    .collect(),
            )
        }
    };
    Ok(Tensor {
        dtype: x.dtype,
        shape,
        values,
    })
}

/// `DepthToSpace(x; blocksize, mode)` of a `[N, C, H, W]` input: `[N, C/b², H·b, W·b]`, the
/// channels read as `[b, b, C/b²]` (`DCR`, the default) or `[C/b², b, b]` (`CRD`).
pub(super) fn depth_to_space(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let b = block(call)?;
    let [n, c, h, w] = four_dims(call, x)?;
    if c % (b * b) != 0 {
        return Err(call.error(format!(
            "channels {c} are not a multiple of blocksize² {}",
            b * b
        )));
    }
    let cout = c / (b * b);
    let crd = match call.string("mode").unwrap_or("DCR") {
        "DCR" => false,
        "CRD" => true,
        other => return Err(call.error(format!("mode must be DCR or CRD, got `{other}`"))),
    };
    let shape = vec![n, cout, h * b, w * b];
    call.alloc(&shape)?;
    let mut idx = Vec::with_capacity(shape.iter().product());
    for bn in 0..n {
        for co in 0..cout {
            for y in 0..h * b {
                for xx in 0..w * b {
                    let (by, bx) = (y % b, xx % b);
                    let ci = match crd {
                        false => (by * b + bx) * cout + co,
                        true => (co * b + by) * b + bx,
                    };
                    idx.push(((bn * c + ci) * h + y / b) * w + xx / b);
                }
            }
        }
    }
    Ok(take(x, shape, &idx))
}

/// `SpaceToDepth(x; blocksize, mode)` of a `[N, C, H, W]` input: `[N, C·b², H/b, W/b]`, each
/// b×b block's elements moved to the channels, in (block row, block column, channel) order
/// (`DCR`, the default) or (channel, block row, block column) order (`CRD`).
pub(super) fn space_to_depth(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let b = block(call)?;
    let [n, c, h, w] = four_dims(call, x)?;
    if h % b != 0 || w % b != 0 {
        return Err(call.error(format!(
            "height {h} and width {w} must be multiples of blocksize {b}"
        )));
    }
    let crd = match call.string("mode").unwrap_or("DCR") {
        "DCR" => false,
        "CRD" => true,
        other => return Err(call.error(format!("mode must be DCR or CRD, got `{other}`"))),
    };
    let shape = vec![n, c * b * b, h / b, w / b];
    call.alloc(&shape)?;
    let mut idx = Vec::with_capacity(shape.iter().product());
    for bn in 0..n {
        for co in 0..c * b * b {
            let (by, bx, ci) = match crd {
                false => (co / (b * c), (co / c) % b, co % c),
                true => ((co / b) % b, co % b, co / (b * b)),
            };
            for y in 0..h / b {
                for xx in 0..w / b {
                    idx.push(((bn * c + ci) * h + y * b + by) * w + xx * b + bx);
                }
            }
        }
    }
    Ok(take(x, shape, &idx))
}

/// The `blocksize` attribute, which must be positive.
fn block(call: &OpCall<'_>) -> Result<usize> {
    let b = call.int("blocksize", 0);
    usize::try_from(b)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| call.error(format!("blocksize must be positive, got {b}")))
}

/// The four dims of a rank-4 input.
fn four_dims(call: &OpCall<'_>, x: &Tensor) -> Result<[usize; 4]> {
    <[usize; 4]>::try_from(x.shape.as_slice())
        .map_err(|_| call.error(format!("input must have rank 4, got shape {:?}", x.shape)))
}

/// `Compress(x, condition; axis?)`: the slices of `x` along `axis` (of the flattened `x` when
/// absent) where the bool `condition` is true; a condition shorter than the axis keeps none of
/// the rest.
pub(super) fn compress(call: &OpCall<'_>) -> Result<Tensor> {
    let (x, cond) = (call.input(0)?, call.input(1)?);
    let keep = cond.bools().map_err(|e| call.error(e))?;
    let (outer, d, inner, lead) = match call.attrs().get("axis") {
        Some(_) => {
            let a = norm_axis(call, call.int("axis", 0), x.shape.len())?;
            let outer: usize = x.shape[..a].iter().product();
            let inner: usize = x.shape[a + 1..].iter().product();
            (outer, x.shape[a], inner, Some(a))
        }
        None => (1, x.numel(), 1, None),
    };
    if keep.len() > d {
        return Err(call.error(format!(
            "condition holds {} values, more than the axis' {d}",
            keep.len()
        )));
    }
    let picked: Vec<usize> = (0..keep.len()).filter(|&j| keep[j]).collect();
    let shape = match lead {
        Some(a) => {
            let mut s = x.shape.clone();
            s[a] = picked.len();
            s
        }
        None => vec![picked.len()],
    };
    call.alloc(&shape)?;
    let mut idx = Vec::with_capacity(shape.iter().product());
    for o in 0..if x.numel() == 0 { 0 } else { outer } {
        for &j in &picked {
            let base = (o * d + j) * inner;
            idx.extend(base..base + inner);
        }
    }
    Ok(take(x, shape, &idx))
}

/// `ReverseSequence(x, sequence_lens; batch_axis = 1, time_axis = 0)`: for each batch entry
/// `b`, its first `sequence_lens[b]` steps along `time_axis` in reverse order, the rest as
/// they are.
pub(super) fn reverse_sequence(call: &OpCall<'_>) -> Result<Tensor> {
    let (x, lens) = (call.input(0)?, call.input(1)?);
    let rank = x.shape.len();
    if rank < 2 {
        return Err(call.error(format!("input must have rank 2 or more, got {:?}", x.shape)));
    }
    let batch_axis = norm_axis(call, call.int("batch_axis", 1), rank)?;
    let time_axis = norm_axis(call, call.int("time_axis", 0), rank)?;
    if batch_axis == time_axis || batch_axis > 1 || time_axis > 1 {
        return Err(call.error(format!(
            "batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1, in either order"
        )));
    }
    let lens = lens.ints().map_err(|e| call.error(e))?;
    let (batch, time) = (x.shape[batch_axis], x.shape[time_axis]);
    if lens.len() != batch {
        return Err(call.error(format!(
            "sequence_lens holds {} values for a batch of {batch}",
            lens.len()
        )));
    }
    if let Some(l) = lens.iter().find(|&&l| l < 0 || l as usize > time) {
        return Err(call.error(format!("a sequence length {l} lies outside 0..={time}")));
    }
    let strides = strides(&x.shape);
    let idx: Vec<usize> = (0..x.numel())
        .map(|flat| {
            let b = flat / strides[batch_axis] % batch;
            let t = flat / strides[time_axis] % time;
            let len = lens[b] as usize;
            if t < len {
                flat - t * strides[time_axis] + (len - 1 - t) * strides[time_axis]
            } else {
                flat
            }
        })
        .collect();
    Ok(take(x, x.shape.clone(), &idx))
}

/// `NonZero(x)`: the coordinates of the nonzero elements, `[rank, count]` int64, in row-major
/// order (a NaN counts as nonzero).
pub(super) fn non_zero(call: &OpCall<'_>) -> Result<Tensor> {
    let x = call.input(0)?;
    let nonzero: Vec<usize> = match &x.values {
        Values::Float(v) => (0..v.len()).filter(|&i| v[i] != 0.0).collect(),
        Values::Int(v) => (0..v.len()).filter(|&i| v[i] != 0).collect(),
        Values::Bool(v) => (0..v.len()).filter(|&i| v[i]).collect(),
    };
    let rank = x.shape.len();
    let shape = vec![rank, nonzero.len()];
    call.alloc(&shape)?;
    let strides = strides(&x.shape);
    let mut out = vec![0i64; rank * nonzero.len()];
    for (j, &flat) in nonzero.iter().enumerate() {
        for a in 0..rank {
            out[a * nonzero.len() + j] = (flat / strides[a] % x.shape[a]) as i64;
        }
    }
    Ok(Tensor::int(crate::ir::DType::I64, shape, out))
}
