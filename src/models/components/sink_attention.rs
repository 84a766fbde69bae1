//! Attention with sinks (gpt-oss) in standard ops: each head has a learned logit that joins
//! every query's softmax as one more column and is dropped after it, so it takes a share of
//! the weight without contributing a value. Opset-24 `Attention` has no such input, so the
//! whole attention is spelled out:
//!
//! ```text
//! present_k = Concat(past_k, k)      present_v = Concat(past_v, v)          [B, Hkv, T, D]
//! s = (q @ present_kᵀ) · scale, query heads grouped per kv head             [B, Hq, S, T]
//! s = Where(mask ∧ causal, s, −inf)
//! p = Softmax(Concat(s, sink[h]))[…, :T]
//! y = p @ present_v                                                          [B, S, Hq·D]
//! ```
//!
//! A query row whose keys are all masked puts its whole weight on the sink: its output is 0
//! (opset-24 `Attention` also gives 0 there). Causality counts valid tokens
//! (`CumSum(attention_mask)`), as the sliding-window mask does: under the padding mask this
//! is the `Attention` op's bottom-right-aligned causal mask.

use super::mask::token_distance;
use super::{scalar, AttentionSpec, DecoderInputs};
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};

/// Declares the per-head sink logits of attention module `attn`: the checkpoint's
/// `{attn}.sinks` (`[heads]`) as `[1, heads, 1, 1]`, what [`sink_attention`] takes.
pub fn sink_logits(b: &mut GraphBuilder, attn: &str, heads: usize, dtype: DType) -> String {
    b.initializer(Initializer {
        name: format!("{attn}.sinks"),
        dtype,
        shape: vec![1, heads, 1, 1],
        source: Some(TensorSource::Reshape {
            source: Box::new(TensorSource::Checkpoint(format!("{attn}.sinks"))),
            shape: vec![1, heads, 1, 1],
        }),
    })
}

/// Attention of 3-D `q` `[B, S, Hq·D]`, `k`, `v` `[B, S, Hkv·D]` with the per-head sink
/// logits `sinks` (`[1, Hq, 1, 1]`, model dtype), the boolean mask and KV cache of `spec`
/// (the present key/value outputs get its names) and the causal mask of `io`'s tokens;
/// scores and probabilities in `dtype`, as transformers' eager attention.
pub fn sink_attention(
    b: &mut GraphBuilder,
    io: &DecoderInputs,
    [q, k, v]: [&str; 3],
    sinks: &str,
    spec: &AttentionSpec<'_>,
    (head_dim, dtype): (usize, DType),
) -> String {
    let (hq, hkv, d) = (spec.q_heads as i64, spec.kv_heads as i64, head_dim as i64);
    let heads_first = |b: &mut GraphBuilder, x: &str, heads: i64| {
        let split = b.const_i64(&[0, 0, heads, d]);
        let x = b.op("Reshape", &[x, &split], vec![]);
        b.op(
            "Transpose",
            &[&x],
            vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
        )
    };
    let q = heads_first(b, q, hq);
    let k = heads_first(b, k, hkv);
    let v = heads_first(b, v, hkv);
    let on_seq = vec![("axis", Attr::Int(2))];
    b.op_into("Concat", &[spec.past.0, &k], on_seq.clone(), spec.present.0);
    b.op_into("Concat", &[spec.past.1, &v], on_seq, spec.present.1);

    // The query heads of one kv head side by side: [B, Hq, S, D] → [B, Hkv, g·S, D].
    let grouped = b.const_i64(&[0, hkv, -1, d]);
    let q = b.op("Reshape", &[&q, &grouped], vec![]);
    let kt = b.op(
        "Transpose",
        &[spec.present.0],
        vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))],
    );
    let scores = b.op("MatMul", &[&q, &kt], vec![]);
    let per_head = b.const_i64(&[0, hq, -1, 0]);
    let scores = b.op("Reshape", &[&scores, &per_head], vec![]);
    let scale = scalar(b, spec.scale, dtype);
    let scores = b.op("Mul", &[&scores, &scale], vec![]);
    let mask = causal(b, spec.mask, io);
    let neg_inf = scalar(b, f32::NEG_INFINITY, dtype);
    let scores = b.op("Where", &[&mask, &scores, &neg_inf], vec![]);

    // [B, Hq, S, 1] sink column.
    let rows = b.op("Shape", &[&scores], vec![("end", Attr::Int(3))]);
    let one = b.const_i64(&[1]);
    let column = b.op("Concat", &[&rows, &one], vec![("axis", Attr::Int(0))]);
    let sink_col = b.op("Expand", &[sinks, &column], vec![]);
    let with_sink = b.op(
        "Concat",
        &[&scores, &sink_col],
        vec![("axis", Attr::Int(-1))],
    );
    let probs = b.op("Softmax", &[&with_sink], vec![("axis", Attr::Int(-1))]);
    let (start, end, axis) = (b.const_i64(&[0]), b.const_i64(&[-1]), b.const_i64(&[3]));
    let probs = b.op("Slice", &[&probs, &start, &end, &axis], vec![]);

    let grouped = b.const_i64(&[0, hkv, -1, 0]);
    let probs = b.op("Reshape", &[&probs, &grouped], vec![]);
    let y = b.op("MatMul", &[&probs, spec.present.1], vec![]);
    let heads = b.const_i64(&[0, hq, -1, d]);
    let y = b.op("Reshape", &[&y, &heads], vec![]);
    let y = b.op(
        "Transpose",
        &[&y],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let merged = b.const_i64(&[0, 0, hq * d]);
    b.op("Reshape", &[&y, &merged], vec![])
}

/// `mask` (`[B, 1, S, T]`) restricted to keys at or before each query, counted in valid
/// tokens.
fn causal(b: &mut GraphBuilder, mask: &str, io: &DecoderInputs) -> String {
    let (distance, axes1) = token_distance(b, &io.input_ids, &io.attention_mask);
    let zero = b.scalar_i64(0);
    let behind = b.op("GreaterOrEqual", &[&distance, &zero], vec![]);
    let behind = b.op("Unsqueeze", &[&behind, &axes1], vec![]);
    b.op("And", &[mask, &behind], vec![])
}
