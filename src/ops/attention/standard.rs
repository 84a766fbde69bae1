//! ONNX `Attention` (opsets 23 and 24).
//!
//! Inputs Q, K, V (3-D `[B, L, heads·D]` with `q_num_heads`/`kv_num_heads`, or 4-D
//! `[B, heads, L, D]`), attn_mask?, past_key?, past_value? (`[B, Hkv, P, D]`),
//! nonpad_kv_seqlen? (opset 24, `[B]`). Semantics, as onnxruntime's CPU kernel computes them:
//! - keys/values are `past ++ new` along the sequence axis (`T = P + L_kv`); they are also the
//!   `present_key`/`present_value` outputs;
//! - query head `h` reads kv head `h / (Hq / Hkv)`;
//! - score = `softcap(scale · q·k)` (scale defaults to `1/sqrt(D)`), then the mask is added:
//!   a bool mask (true = attend) adds 0/−inf, a float mask is added as is; both broadcast to
//!   `[B, Hq, S, T]` and must have the full last dimension `T`;
//! - `is_causal` lets query `i` see key `j ≤ i + offset` where the offset is the past length
//!   `P` (0 without a past, i.e. top-left when `S ≠ T` and no past), or, with
//!   `nonpad_kv_seqlen`, `nonpad_kv_seqlen[b] − S`; a single query (`S = 1`) over a non-empty
//!   past sees every key (onnxruntime skips the causal mask there, even when `K` brings
//!   several new tokens);
//! - keys at or beyond `nonpad_kv_seqlen[b]` are masked (not combinable with a past);
//! - a row whose every key is masked (by `is_causal`, `nonpad_kv_seqlen`, a false bool or a
//!   float mask value at or below the lowest finite value of the dtype) has zero
//!   probabilities, whatever its scores; otherwise a NaN score makes the row's probabilities NaN
//!   (a NaN under a causal or float mask too: the mask is added), as does `+inf`;
//! - the output is `probs · V` over every key, so a NaN or infinite value under a masked key
//!   still gives NaN (`0 · inf`);
//! - for f16 (and bf16) inputs the scores are rounded to that dtype after `scale · q·k + mask`
//!   (without softcap) or after `scale · q·k`, after softcap and after adding the mask (with
//!   softcap), and the softmax probabilities are rounded too, as onnxruntime's f16 kernel does;
//! - `left_window_size` / `right_window_size` (≥ 0) mask the keys more than that many
//!   positions before / after the query's position (its index after the past, or after
//!   `nonpad_kv_seqlen[b] − S` valid keys), as the causal mask does;
//! - a mask narrower than the keys masks the keys past its end;
//! - the optional 4th output, `[B, Hq, S, T]`, is by `qk_matmul_output_mode`: 0 `scale · q·k`;
//!   1 that after softcap; 2 the scores after softcap and every mask (what the softmax sees;
//!   a key a bool, causal or window mask hides holds −inf, as ONNX's reference and conformance
//!   cases have it, where onnxruntime writes the lowest finite float); 3 the probabilities (a
//!   fully masked row's zeros).

use super::{dot, head_count, lowest, round_to, soft_cap, softmax, weighted_sum};
use crate::ops::tensor::{broadcast_index, broadcast_shape};
use crate::ops::{OpCall, Tensor};
use crate::Result;

/// A 4-D `[batch, heads, seq, dim]` view of Q, K or V.
struct Heads {
    values: Vec<f32>,
    heads: usize,
    seq: usize,
    dim: usize,
}

/// Reads a 3-D `[B, L, heads·D]` tensor (given `heads`) or a 4-D `[B, heads, L, D]` tensor as
/// `[B, heads, L, D]`.
fn to_heads(call: &OpCall<'_>, t: &Tensor, heads: Option<usize>, what: &str) -> Result<Heads> {
    let v = t.floats()?;
    match (t.shape.as_slice(), heads) {
        (&[batch, seq, width], Some(heads)) if heads > 0 && width % heads == 0 => {
            let dim = width / heads;
            let mut values = vec![0.0; v.len()];
            // (No element: skip the loops, whose counts may be large.)
            for b in 0..if v.is_empty() { 0 } else { batch } {
                for l in 0..seq {
                    for h in 0..heads {
                        let src = ((b * seq + l) * heads + h) * dim;
                        let dst = ((b * heads + h) * seq + l) * dim;
                        values[dst..dst + dim].copy_from_slice(&v[src..src + dim]);
                    }
                }
            }
            Ok(Heads {
                values,
                heads,
                seq,
                dim,
            })
        }
        (&[_, heads, seq, dim], _) => Ok(Heads {
            values: v.to_vec(),
            heads,
            seq,
            dim,
        }),
        _ => Err(call.error(format!(
            "{what} of shape {:?} must be 4-D, or 3-D with a head count that divides its width",
            t.shape
        ))),
    }
}

/// Concatenates `past` (`[B, H, P, D]`) and `new` (`[B, H, L, D]`) along the sequence axis.
fn concat(
    call: &OpCall<'_>,
    past: Option<&Tensor>,
    new: &Heads,
    batch: usize,
    what: &str,
) -> Result<Heads> {
    let Some(past) = past else {
        return Ok(Heads {
            values: new.values.clone(),
            ..*new
        });
    };
    let p = match *past.shape.as_slice() {
        [b, h, p, d] if b == batch && h == new.heads && d == new.dim => p,
        _ => {
            return Err(call.error(format!(
                "{what} of shape {:?} must be [{batch}, {}, P, {}]",
                past.shape, new.heads, new.dim
            )))
        }
    };
    let pv = past.floats()?;
    let (seq, dim) = (p + new.seq, new.dim);
    let n = call.alloc(&[batch, new.heads, seq, dim])?;
    let mut values = Vec::with_capacity(n);
    for bh in 0..if n == 0 { 0 } else { batch * new.heads } {
        values.extend_from_slice(&pv[bh * p * dim..(bh + 1) * p * dim]);
        values.extend_from_slice(&new.values[bh * new.seq * dim..(bh + 1) * new.seq * dim]);
    }
    Ok(Heads {
        values,
        heads: new.heads,
        seq,
        dim,
    })
}

/// Evaluates ONNX `Attention`.
pub fn attention(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (left, right) = (
        call.int("left_window_size", -1),
        call.int("right_window_size", -1),
    );
    if left < -1 || right < -1 {
        return Err(call.error(format!(
            "left_window_size ({left}) and right_window_size ({right}) must be -1 or nonnegative"
        )));
    }
    let (q_in, k_in, v_in) = (call.input(0)?, call.input(1)?, call.input(2)?);
    if k_in.shape.len() != q_in.shape.len() || v_in.shape.len() != q_in.shape.len() {
        return Err(call.error("Q, K and V must have the same rank"));
    }
    let three_d = q_in.shape.len() == 3;
    let (q_heads, kv_heads) = (
        head_count(call, "q_num_heads")?,
        head_count(call, "kv_num_heads")?,
    );
    let q = to_heads(call, q_in, q_heads, "Q")?;
    let k = to_heads(call, k_in, kv_heads, "K")?;
    let v = to_heads(call, v_in, kv_heads, "V")?;
    let batch = q_in.shape[0];
    if k_in.shape[0] != batch || v_in.shape[0] != batch {
        return Err(call.error("Q, K and V must share the batch size"));
    }
    if k.dim != q.dim || v.heads != k.heads || v.seq != k.seq {
        return Err(call.error("K must match Q's head size and V must match K's heads and length"));
    }
    if k.heads == 0 || q.heads % k.heads != 0 {
        return Err(call.error(format!(
            "{} query heads are not a multiple of {} kv heads",
            q.heads, k.heads
        )));
    }
    let (past_k, past_v) = (call.optional(4), call.optional(5));
    if past_k.is_some() != past_v.is_some() {
        return Err(call.error("past_key and past_value must be given together"));
    }
    let present_k = concat(call, past_k, &k, batch, "past_key")?;
    let present_v = concat(call, past_v, &v, batch, "past_value")?;
    let (hq, hkv, s_len, t_len, dim, dv) = (q.heads, k.heads, q.seq, present_k.seq, q.dim, v.dim);
    let past_len = t_len - k.seq;

    let nonpad = match call.optional(6) {
        Some(_) if past_k.is_some() => {
            return Err(call.error("nonpad_kv_seqlen cannot be combined with past_key/past_value"))
        }
        Some(t) if t.numel() == batch => {
            let n = t.ints()?;
            if let Some((b, len)) = n.iter().enumerate().find(|(_, &len)| len < 0) {
                return Err(call.error(format!(
                    "nonpad_kv_seqlen[{b}] = {len} must not be negative"
                )));
            }
            Some(n)
        }
        Some(t) => {
            return Err(call.error(format!(
                "nonpad_kv_seqlen of shape {:?} must be [{batch}]",
                t.shape
            )))
        }
        None => None,
    };
    let score_shape = [batch, hq, s_len, t_len];
    let scores = call.alloc(&score_shape)?;
    call.alloc(&[batch, hq, s_len, dv])?;
    let mask = match call.optional(3) {
        Some(m) => {
            // A mask shorter than the keys masks the keys past its end.
            let width = m.shape.last().copied().unwrap_or(1);
            let padded = width < t_len && width != 1;
            let mut shape = m.shape.clone();
            if padded {
                *shape
                    .last_mut()
                    .expect("a mask narrower than the keys has a dim") = t_len;
            }
            if shape.len() > 4 || broadcast_shape(&[&shape, &score_shape])? != score_shape {
                return Err(call.error(format!(
                    "attn_mask of shape {:?} does not broadcast to {score_shape:?}",
                    m.shape
                )));
            }
            let index = broadcast_index(&shape, &score_shape);
            // The mask's own element for a broadcast index, or none past its end.
            let source = |i: usize| -> Option<usize> {
                if !padded {
                    return Some(i);
                }
                let (row, col) = (i / t_len, i % t_len);
                (col < width).then_some(row * width + col)
            };
            let bias: Vec<f32> = match m.bools() {
                Ok(b) => index
                    .iter()
                    .map(|&i| match source(i) {
                        Some(j) if b[j] => 0.0,
                        _ => f32::NEG_INFINITY,
                    })
                    .collect(),
                Err(_) => {
                    let f = m.floats()?;
                    index
                        .iter()
                        .map(|&i| source(i).map_or(f32::NEG_INFINITY, |j| f[j]))
                        .collect()
                }
            };
            Some(bias)
        }
        None => None,
    };

    let want_qk = call.node.outputs.get(3).is_some_and(|n| !n.is_empty());
    let mode = call.int("qk_matmul_output_mode", 0);
    if !(0..=3).contains(&mode) {
        return Err(call.error(format!(
            "qk_matmul_output_mode {mode}: expected 0 (scores), 1 (after softcap), 2 (after \
             softcap and the masks) or 3 (probabilities)"
        )));
    }
    let causal = call.int("is_causal", 0) != 0;
    let scale = call.float("scale", 1.0 / (dim as f32).sqrt());
    let softcap = call.float("softcap", 0.0);
    let group = hq / hkv;
    let dtype = q_in.dtype;
    // A mask value at or below this masks its key.
    let masked_below = lowest(dtype);

    let mut out = vec![0f32; batch * hq * s_len * dv];
    let mut qk = if want_qk {
        vec![0f32; batch * hq * s_len * t_len]
    } else {
        Vec::new()
    };
    // One row of scores; none when there are no scores (then `t_len` is unchecked: K and V
    // may hold no elements with any length).
    let mut row = vec![0f32; if scores == 0 { 0 } else { t_len }];
    // Without scores every output row is zero: skip the loops, whose counts may be large.
    for b in 0..if scores == 0 { 0 } else { batch } {
        let valid = nonpad.map_or(t_len as i64, |n| n[b]);
        let offset = match nonpad {
            Some(n) => n[b] - s_len as i64,
            None if s_len == 1 && past_len > 0 => t_len as i64,
            None => past_len as i64,
        };
        // A query's position for the sliding window: after the past, or the row's valid keys.
        let window_offset = match nonpad {
            Some(n) => n[b] - s_len as i64,
            None => past_len as i64,
        };
        for h in 0..hq {
            let kv = b * hkv + h / group;
            let keys = &present_k.values[kv * t_len * dim..(kv + 1) * t_len * dim];
            let values = &present_v.values[kv * t_len * dv..(kv + 1) * t_len * dv];
            for s in 0..s_len {
                let qrow = ((b * hq + h) * s_len + s) * dim;
                let query = &q.values[qrow..qrow + dim];
                let flat = ((b * hq + h) * s_len + s) * t_len;
                let mut fully_masked = true;
                let position = s as i64 + window_offset;
                for (t, score) in row.iter_mut().enumerate() {
                    let raw = dot(query, &keys[t * dim..(t + 1) * dim]) * scale;
                    if want_qk {
                        qk[flat + t] = match mode {
                            1 if softcap > 0.0 => soft_cap(raw, softcap),
                            _ => raw,
                        };
                    }
                    let outside_window = (left >= 0 && position - t as i64 > left)
                        || (right >= 0 && t as i64 - position > right);
                    let beyond_causal = (causal && t as i64 > s as i64 + offset) || outside_window;
                    let beyond_valid = t as i64 >= valid;
                    // The causal mask replaces the mask's value; both are added to the score,
                    // so a NaN score stays NaN under them. Keys beyond nonpad_kv_seqlen are
                    // overwritten instead.
                    let bias = if beyond_causal {
                        f32::NEG_INFINITY
                    } else {
                        mask.as_ref().map_or(0.0, |m| m[flat + t])
                    };
                    fully_masked &= beyond_valid || bias <= masked_below;
                    *score = if beyond_valid {
                        f32::NEG_INFINITY
                    } else if softcap > 0.0 {
                        let capped = round_to(dtype, soft_cap(round_to(dtype, raw), softcap));
                        round_to(dtype, capped + bias)
                    } else {
                        round_to(dtype, raw + bias)
                    };
                }
                if want_qk && mode == 2 {
                    qk[flat..flat + t_len].copy_from_slice(&row);
                }
                if fully_masked {
                    // onnxruntime decides this from the mask alone: the scores (NaN, +inf or
                    // a large value added to the lowest mask value) do not matter.
                    row.fill(0.0);
                } else {
                    softmax(&mut row, false, dtype);
                }
                if want_qk && mode == 3 {
                    qk[flat..flat + t_len].copy_from_slice(&row);
                }
                let o = ((b * hq + h) * s_len + s) * dv;
                weighted_sum(&row, values, &mut out[o..o + dv]);
            }
        }
    }

    let y = if three_d {
        let mut y = vec![0f32; out.len()];
        for b in 0..if out.is_empty() { 0 } else { batch } {
            for h in 0..hq {
                for s in 0..s_len {
                    let src = ((b * hq + h) * s_len + s) * dv;
                    let dst = ((b * s_len + s) * hq + h) * dv;
                    y[dst..dst + dv].copy_from_slice(&out[src..src + dv]);
                }
            }
        }
        Tensor::float(q_in.dtype, vec![batch, s_len, hq * dv], y)
    } else {
        Tensor::float(q_in.dtype, vec![batch, hq, s_len, dv], out)
    };
    let mut outputs = vec![
        y,
        Tensor::float(k_in.dtype, vec![batch, hkv, t_len, dim], present_k.values),
        Tensor::float(v_in.dtype, vec![batch, hkv, t_len, dv], present_v.values),
    ];
    if want_qk {
        outputs.push(Tensor::float(q_in.dtype, score_shape.to_vec(), qk));
    }
    outputs.truncate(call.node.outputs.len().max(1));
    Ok(outputs)
}
