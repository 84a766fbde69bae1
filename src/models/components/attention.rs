//! Opset-24 `Attention` over 3-D q/k/v with a 4-D past/present KV cache.

use crate::ir::{Attr, GraphBuilder};

/// The per-layer parameters of one attention call.
#[derive(Debug, Clone)]
pub struct AttentionSpec<'a> {
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Softmax scale (usually `head_dim^-0.5`).
    pub scale: f32,
    /// Boolean mask `[B, 1, S, T]`, or a float mask `[B, Hq, S, T]` added to the scores
    /// (the ALiBi bias: [`super::alibi`]).
    pub mask: &'a str,
    /// Past key/value graph inputs.
    pub past: (&'a str, &'a str),
    /// Names of the present key/value outputs.
    pub present: (&'a str, &'a str),
    /// Where the layer runs its own learned indexer (DeepSeek Sparse Attention): what it
    /// reads and writes. The family's q/k/v hook then writes `mask`, the index mask
    /// ([`super::indexer`]); `None` for every other layer.
    pub index: Option<super::IndexIo<'a>>,
}

/// `Attention(q, k, v, mask, past_k, past_v; is_causal=1)` → `[B, S, Hq·D]`; the present
/// key/value outputs get the names in `spec.present`.
pub fn attention(
    b: &mut GraphBuilder,
    q: &str,
    k: &str,
    v: &str,
    spec: &AttentionSpec<'_>,
) -> String {
    soft_capped_attention(b, q, k, v, spec, 0.0)
}

/// [`attention`] with score soft-capping: scores become `softcap · tanh(scores / softcap)`
/// before the mask is applied (`softcap = 0` disables it).
pub fn soft_capped_attention(
    b: &mut GraphBuilder,
    q: &str,
    k: &str,
    v: &str,
    spec: &AttentionSpec<'_>,
    softcap: f32,
) -> String {
    let y = b.fresh_name("Attention");
    b.node(
        "",
        "Attention",
        &[q, k, v, spec.mask, spec.past.0, spec.past.1],
        vec![
            ("is_causal", Attr::Int(1)),
            ("kv_num_heads", Attr::Int(spec.kv_heads as i64)),
            ("q_num_heads", Attr::Int(spec.q_heads as i64)),
            ("scale", Attr::Float(spec.scale)),
            ("softcap", Attr::Float(softcap)),
        ],
        vec![
            y.clone(),
            spec.present.0.to_string(),
            spec.present.1.to_string(),
        ],
    );
    y
}
