//! `com.microsoft` `GroupQueryAttention`, as onnxruntime's CPU kernel computes it.
//!
//! Inputs: query `[B, S, Hq·D]` (or packed QKV `[B, S, (Hq + 2·Hkv)·D]` when key/value are
//! absent), key/value `[B, S, Hkv·D]`, past_key/past_value `[B, Hkv, P, D]` (P may be 0 or the
//! inputs absent), seqlens_k `[B]` (valid total length − 1 per batch), total_sequence_length
//! (scalar), cos_cache/sin_cache `[max_pos, rd/2]` when `do_rotary`, head_sink `[Hq]`, and
//! k_scale/v_scale (inputs 12/13) for a float8 cache. Other inputs beyond sin_cache
//! (position_ids, attention_bias, QK norms, query_seqlens), KV quantization other than
//! per-tensor float8 and the attributes `causal = 0`, `sliding_window_cache`, `qk_output` are
//! not supported.
//!
//! Semantics:
//! - first prompt when `S == total_sequence_length`: every batch starts at position 0;
//!   otherwise batch `b` has `past_b = seqlens_k[b] + 1 − S` cached tokens;
//! - present length is `max(P, total_sequence_length)`: `P + S` for a growing cache (onnxruntime
//!   requires `total_sequence_length == P + S` then), `P` for a fixed-size buffer; present rows
//!   `[0, past_b)` copy the past, rows `[past_b, past_b + S)` hold the new (rotated) keys and
//!   values, every other row is zero;
//! - with `do_rotary`, q and k of token `s` rotate at position `past_b + s` (rotary dim =
//!   `2·cos_cache.shape[1]`, halves or `rotary_interleaved` pairing), the rotated vectors
//!   rounded to the query dtype; scores and softmax stay in f32;
//! - query `s` of head `h` attends keys `[lo, hi)` of kv head `h / (Hq / Hkv)` with
//!   `end = past_b + s + 1`, `hi = min(end, seqlens_k[b] + 1)` (causal, and right padding
//!   masked: a padded query row of a first prompt sees all valid keys), `lo = end − W` when
//!   `local_window_size = W > 0` (the window counts the current token) else 0; an empty range
//!   has zero probabilities;
//! - a NaN score in `[lo, hi)` makes the row NaN, as onnxruntime's decoding kernel does (its
//!   prompt kernel drops a NaN on the diagonal of every row but the last, depending on its
//!   tiling: not reproduced); scores all `-inf` give zero probabilities;
//! - the output is `probs · V` over keys `[0, seqlens_k[b] + 1)`, so a NaN value under a key
//!   outside `[lo, hi)` still gives NaN (`0 · NaN`), as in onnxruntime;
//! - score = `softcap(scale · q·k)`, scale 0 meaning `1/sqrt(D)`; `smooth_softmax` adds a zero
//!   logit to the softmax denominator; `head_sink` (taking precedence over it) makes head
//!   `h`'s sink logit join every softmax of that head (the maximum taken over the sink too),
//!   so the attended keys share `1 − p_sink` of the weight; a NaN or `+inf` sink makes the
//!   head's rows NaN, a `-inf` one is no sink, and with every attended score `-inf` (or an
//!   empty range) the sink takes the whole weight (output 0);
//! - float8 cache (`k_quant_type = v_quant_type = "PER_TENSOR"`, `kv_cache_bit_width = 8`,
//!   past and present `FLOAT8E4M3FN`, one f32 scale each in k_scale/v_scale), as onnxruntime's
//!   CUDA kernel defines it: a new (rotated) key `x` is stored as
//!   `e4m3(clamp(x · (1/k_scale), ±448))` (f32 product, round to nearest even; NaN clamps to
//!   448 as `fminf` does), values likewise with v_scale; the attention reads every cached row,
//!   the new ones included, as `e4m3 · scale` rounded to the query dtype.

use super::{dot, head_count, round_to, soft_cap, softmax, softmax_with_sink, weighted_sum};
use crate::ir::{f8e4m3, DType};
use crate::ops::rope::rotate;
use crate::ops::{OpCall, Tensor};
use crate::Result;

/// Evaluates `com.microsoft` `GroupQueryAttention`.
pub fn group_query_attention(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let scales = float8_scales(call)?;
    // head_sink (input 11) and, for a float8 cache, k_scale/v_scale (12/13) are the inputs
    // beyond sin_cache this implementation takes.
    let supported = |i: usize| i == 11 || (scales.is_some() && (i == 12 || i == 13));
    if let Some(i) = (9..call.inputs.len()).find(|&i| call.optional(i).is_some() && !supported(i)) {
        return Err(call.error(format!("input {i} is not supported")));
    }
    for (name, default) in [("causal", 1), ("sliding_window_cache", 0), ("qk_output", 0)] {
        if call.int(name, default) != default {
            return Err(call.error(format!(
                "{name} = {} is not supported",
                call.int(name, default)
            )));
        }
    }
    let query = call.input(0)?;
    let hq = head_count(call, "num_heads")?.unwrap_or(0);
    let hkv = head_count(call, "kv_num_heads")?.unwrap_or(0);
    if hq == 0 || hkv == 0 || hq % hkv != 0 {
        return Err(call.error(format!(
            "num_heads {hq} must be a positive multiple of kv_num_heads {hkv}"
        )));
    }
    let [batch, s_len, width] = *query.shape.as_slice() else {
        return Err(call.error(format!("query must be 3-D, got {:?}", query.shape)));
    };
    let qv = query.floats()?;
    // The head size, and the separate key/value data unless QKV is packed into the query.
    let (dim, kv_in) = match (call.optional(1), call.optional(2)) {
        (Some(k), Some(v)) => {
            let dim = width / hq;
            if dim * hq != width || k.shape != [batch, s_len, hkv * dim] || v.shape != k.shape {
                return Err(call.error(format!(
                    "key/value of shapes {:?}/{:?} must be [{batch}, {s_len}, {}]",
                    k.shape,
                    v.shape,
                    hkv * dim
                )));
            }
            (dim, Some((k.floats()?, v.floats()?)))
        }
        (None, None) => {
            let dim = width / (hq + 2 * hkv);
            if dim * (hq + 2 * hkv) != width {
                return Err(call.error(format!("packed QKV width {width} is not (Hq + 2·Hkv)·D")));
            }
            (dim, None)
        }
        _ => return Err(call.error("key and value must be given together")),
    };
    if dim == 0 {
        return Err(call.error(format!(
            "query width {width} leaves no room for a head: the head size must be positive"
        )));
    }
    let q_at = |b: usize, s: usize, h: usize| -> &[f32] {
        let row = (b * s_len + s) * if kv_in.is_some() { hq * dim } else { width };
        &qv[row + h * dim..row + (h + 1) * dim]
    };
    let kv_at = |b: usize, s: usize, h: usize, value: bool| -> &[f32] {
        match kv_in {
            Some((k, v)) => {
                let o = ((b * s_len + s) * hkv + h) * dim;
                &(if value { v } else { k })[o..o + dim]
            }
            None => {
                let o = (b * s_len + s) * width + (hq + h + if value { hkv } else { 0 }) * dim;
                &qv[o..o + dim]
            }
        }
    };

    let cache_dtype = match scales {
        Some(_) => DType::F8E4M3FN,
        None => query.dtype,
    };
    let (past_k, past_v) = match (call.optional(3), call.optional(4)) {
        (Some(k), Some(v)) if k.dtype != cache_dtype || v.dtype != cache_dtype => {
            return Err(call.error(format!(
                "past_key/past_value are {}/{}, expected {cache_dtype} (k_quant_type {})",
                k.dtype,
                v.dtype,
                call.string("k_quant_type").unwrap_or("NONE")
            )))
        }
        (Some(k), Some(v)) => (Some(k.floats()?), Some(v.floats()?)),
        (None, None) => (None, None),
        _ => return Err(call.error("past_key and past_value must be given together")),
    };
    let past_len = match call.optional(3) {
        Some(p) if p.shape.len() == 4 && p.shape[..2] == [batch, hkv] && p.shape[3] == dim => {
            if call.input(4)?.shape != p.shape {
                return Err(call.error("past_value must have past_key's shape"));
            }
            p.shape[2]
        }
        Some(p) => {
            return Err(call.error(format!(
                "past_key of shape {:?} must be [{batch}, {hkv}, P, {dim}]",
                p.shape
            )))
        }
        None => 0,
    };
    let seqlens = call.input(5)?.ints()?;
    if seqlens.len() != batch {
        return Err(call.error(format!("seqlens_k must hold {batch} values")));
    }
    let total = match call.input(6)?.ints()? {
        [t] if *t >= 0 => *t as usize,
        _ => return Err(call.error("total_sequence_length must be a non-negative scalar")),
    };
    if total > past_len && total != past_len + s_len {
        return Err(call.error(format!(
            "total_sequence_length {total} must equal past length {past_len} + sequence length {s_len}, or not exceed the past length"
        )));
    }
    let present_len = past_len.max(total);
    let first_prompt = s_len == total;

    let rotary = if call.int("do_rotary", 0) != 0 {
        let (cos, sin) = (call.input(7)?, call.input(8)?);
        let half = cos.shape.get(1).copied().unwrap_or(0);
        if cos.shape.len() != 2 || sin.shape != cos.shape || half == 0 || 2 * half > dim {
            return Err(call.error(format!(
                "cos/sin caches {:?}/{:?} must be [max_pos, ≤ D/2]",
                cos.shape, sin.shape
            )));
        }
        Some((cos.floats()?, sin.floats()?, half, cos.shape[0]))
    } else {
        None
    };
    let interleaved = call.int("rotary_interleaved", 0) != 0;
    let rotated = |x: &[f32], pos: usize| -> Result<Vec<f32>> {
        let mut x = x.to_vec();
        if let Some((cos, sin, half, rows)) = rotary {
            if pos >= rows {
                return Err(call.error(format!(
                    "position {pos} is outside the cos/sin caches ({rows} rows)"
                )));
            }
            rotate(
                &mut x,
                &cos[pos * half..(pos + 1) * half],
                &sin[pos * half..(pos + 1) * half],
                interleaved,
            );
            x.iter_mut().for_each(|v| *v = round_to(query.dtype, *v));
        }
        Ok(x)
    };

    let scale = match call.float("scale", 0.0) {
        0.0 => 1.0 / (dim as f32).sqrt(),
        s => s,
    };
    let softcap = call.float("softcap", 0.0);
    let window = call.int("local_window_size", -1);
    let smooth = call.int("smooth_softmax", -1) == 1;
    let sinks = match call.optional(11) {
        Some(t) if t.shape == [hq] => Some(t.floats()?),
        Some(t) => {
            return Err(call.error(format!(
                "head_sink of shape {:?} must be [{hq}] (one per query head)",
                t.shape
            )))
        }
        None => None,
    };
    let group = hq / hkv;

    call.alloc(&[batch, s_len, hq, dim])?;
    let mut present_k = vec![0f32; call.alloc(&[batch, hkv, present_len, dim])?];
    let mut present_v = present_k.clone();
    // What the attention reads of a float8 cache: its rows dequantized.
    let (mut read_k, mut read_v) = match scales {
        Some(_) => (present_k.clone(), present_v.clone()),
        None => (Vec::new(), Vec::new()),
    };
    let mut out = vec![0f32; batch * s_len * hq * dim];
    for (b, &seqlen) in seqlens.iter().enumerate() {
        let valid = seqlen
            .checked_add(1)
            .and_then(|v| usize::try_from(v).ok())
            .unwrap_or(0);
        let past_b = if first_prompt {
            0
        } else {
            valid.checked_sub(s_len).unwrap_or(usize::MAX)
        };
        if valid == 0 || valid > present_len || past_b > past_len || past_b + s_len > present_len {
            return Err(call.error(format!(
                "seqlens_k[{b}] = {seqlen} is inconsistent with sequence length {s_len}, past length {past_len} and total length {total}"
            )));
        }
        // Present cache rows of this batch: copied past, then the new (rotated) tokens.
        for h in 0..hkv {
            let base = (b * hkv + h) * present_len * dim;
            let past_base = (b * hkv + h) * past_len * dim;
            if let (Some(pk), Some(pv)) = (past_k, past_v) {
                present_k[base..base + past_b * dim]
                    .copy_from_slice(&pk[past_base..past_base + past_b * dim]);
                present_v[base..base + past_b * dim]
                    .copy_from_slice(&pv[past_base..past_base + past_b * dim]);
            }
            for s in 0..s_len {
                let o = base + (past_b + s) * dim;
                present_k[o..o + dim].copy_from_slice(&rotated(kv_at(b, s, h, false), past_b + s)?);
                present_v[o..o + dim].copy_from_slice(kv_at(b, s, h, true));
                if let Some((ks, vs)) = scales {
                    quantize(&mut present_k[o..o + dim], ks);
                    quantize(&mut present_v[o..o + dim], vs);
                }
            }
            if let Some((ks, vs)) = scales {
                let rows = base..base + present_len * dim;
                dequantize(
                    &present_k[rows.clone()],
                    ks,
                    query.dtype,
                    &mut read_k[rows.clone()],
                );
                dequantize(&present_v[rows.clone()], vs, query.dtype, &mut read_v[rows]);
            }
        }
        let (keys, values) = match scales {
            Some(_) => (&read_k, &read_v),
            None => (&present_k, &present_v),
        };
        for h in 0..hq {
            let base = (b * hkv + h / group) * present_len * dim;
            for s in 0..s_len {
                let q = rotated(q_at(b, s, h), past_b + s)?;
                let end = past_b + s + 1;
                let hi = end.min(valid);
                let lo = if window > 0 {
                    end.saturating_sub(window as usize)
                } else {
                    0
                };
                let o = ((b * s_len + s) * hq + h) * dim;
                // Probabilities of keys [0, valid): zero outside [lo, hi).
                let mut probs = vec![0f32; valid];
                if lo < hi {
                    let row = &mut probs[lo..hi];
                    for (t, p) in (lo..hi).zip(row.iter_mut()) {
                        let raw = dot(&q, &keys[base + t * dim..base + (t + 1) * dim]);
                        *p = soft_cap(raw * scale, softcap);
                    }
                    match &sinks {
                        Some(sinks) => softmax_with_sink(row, sinks[h]),
                        None => softmax(row, smooth, DType::F32),
                    }
                }
                weighted_sum(
                    &probs,
                    &values[base..base + valid * dim],
                    &mut out[o..o + dim],
                );
            }
        }
    }
    let cache_shape = vec![batch, hkv, present_len, dim];
    let mut outputs = vec![
        Tensor::float(query.dtype, vec![batch, s_len, hq * dim], out),
        Tensor::float(cache_dtype, cache_shape.clone(), present_k),
        Tensor::float(cache_dtype, cache_shape, present_v),
    ];
    outputs.truncate(call.node.outputs.len().max(1));
    Ok(outputs)
}

/// The per-tensor (k_scale, v_scale) of a float8 cache, `None` for a cache in the query dtype
/// (both quant types `NONE`); an error for any other quantization.
fn float8_scales(call: &OpCall<'_>) -> Result<Option<(f32, f32)>> {
    let k_type = call.string("k_quant_type").unwrap_or("NONE");
    let v_type = call.string("v_quant_type").unwrap_or("NONE");
    match (k_type, v_type) {
        ("NONE", "NONE") => return Ok(None),
        ("PER_TENSOR", "PER_TENSOR") => {}
        _ => {
            return Err(call.error(format!(
                "k_quant_type {k_type} / v_quant_type {v_type} is not supported (only both \
                 NONE or both PER_TENSOR)"
            )))
        }
    }
    if call.int("kv_cache_bit_width", 0) != 8 {
        return Err(call.error("a PER_TENSOR cache needs kv_cache_bit_width = 8 (float8)"));
    }
    let scale = |i: usize, name: &str| -> Result<f32> {
        let t = call
            .optional(i)
            .ok_or_else(|| call.error(format!("{name} (input {i}) is required")))?;
        match (t.dtype, t.floats()?) {
            (DType::F32, [s]) => Ok(*s),
            _ => Err(call.error(format!(
                "{name} must hold one f32 value, got {} of shape {:?}",
                t.dtype, t.shape
            ))),
        }
    };
    Ok(Some((scale(12, "k_scale")?, scale(13, "v_scale")?)))
}

/// Stores `row` as float8 e4m3fn values of `row / scale` (see the module documentation).
fn quantize(row: &mut [f32], scale: f32) {
    let inverse = if scale == 0.0 { 0.0 } else { 1.0 / scale };
    for x in row {
        let clamped = (-f8e4m3::MAX).max(f8e4m3::MAX.min(*x * inverse));
        *x = f8e4m3::round(clamped, true);
    }
}

/// `out = float8 · scale`, rounded to `dtype`.
fn dequantize(stored: &[f32], scale: f32, dtype: DType, out: &mut [f32]) {
    for (o, &x) in out.iter_mut().zip(stored) {
        *o = round_to(dtype, x * scale);
    }
}
