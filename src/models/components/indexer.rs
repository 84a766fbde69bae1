//! DeepSeek Sparse Attention's learned "lightning indexer" (DeepSeek-V3.2, GLM-5): per query, a
//! cheap score of every key picks the `index_topk` keys the attention may see.
//!
//! # The computation (as transformers computes it)
//!
//! ```text
//! q      = wq_b(q_latent)                      H heads of D channels, q_latent = the MLA's
//!                                              q_a_layernorm(q_a_proj(x))
//! k      = LayerNorm_k(wk(x))                  one head of D channels (cached per token)
//!          RoPE on the first qk_rope_head_dim channels of q and k (half-split for
//!          DeepSeek-V3.2, interleaved pairs for GLM-MoE-DSA)
//! w      = weights_proj(x) · H^-½              per query, one weight per head (f32)
//! score  = Σ_h w_h · ReLU(q_h · k · D^-½)      in f32, causal and padding keys −∞
//! keep   = TopK(score, min(index_topk, T))     the selected keys, T the keys so far
//! ```
//!
//! The attention then sees only `keep` (and, as always, the causal, unpadded keys): the
//! selection is scattered into an additive mask, 0 where a key is kept and the dtype's lowest
//! value elsewhere (what transformers fills), named `{INDEX_MASK}{layer}`. GroupQueryAttention
//! takes no such mask, so the optimizer leaves these layers opset-24 `Attention` (its trace says
//! so) and the static cache refuses them.
//!
//! # The index-key cache
//!
//! The indexer's keys (rotated, normalised) are carried from call to call beside the layer's
//! KV cache: `past_key_values.{i}.index_key` → `present.{i}.index_key`, `[batch,
//! past_sequence_len, index_head_dim]` in the model dtype (docs/recurrent.md). Interleaved RoPE
//! keeps the rotated pairs in place where transformers lays them out even-then-odd, so the cached
//! channels are a permutation of transformers' (the same for q, so the scores are equal).

use super::{linear, rotary_embedding, scalar, Norm, NormKind, RopeTables};
use crate::config::Rope;
use crate::ir::{Attr, DType, GraphBuilder};

/// The name prefix of every index mask; the optimizer keeps it, so its GroupQueryAttention trace
/// can say why an attention stayed `Attention` and the static cache can refuse it.
pub const INDEX_MASK: &str = "index_mask";

/// The name of layer `i`'s index mask.
pub fn index_mask_name(i: usize) -> String {
    format!("{INDEX_MASK}{i}")
}

/// The name of layer `i`'s index-key cache input.
pub fn past_index_key_name(i: usize) -> String {
    format!("past_key_values.{i}.index_key")
}

/// The name of layer `i`'s index-key cache output.
pub fn present_index_key_name(i: usize) -> String {
    format!("present.{i}.index_key")
}

/// The shape of one indexer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Indexer {
    /// Width of the residual stream (`wk`'s and `weights_proj`'s input).
    pub hidden: usize,
    /// `q_lora_rank`: the width of the q latent (`wq_b`'s input).
    pub q_rank: usize,
    /// `index_n_heads`.
    pub heads: usize,
    /// `index_head_dim`: channels per head, the cached key's width.
    pub head_dim: usize,
    /// `qk_rope_head_dim`: the rotated leading channels of each head.
    pub rope_dim: usize,
    /// Whether the rotated channels are interleaved pairs (else the two halves).
    pub interleaved: bool,
    /// `index_topk`: keys kept per query (all of them when fewer).
    pub topk: usize,
}

/// How a layer's attention is sparse.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IndexedLayer {
    /// The layer runs its own indexer (and carries its index-key cache).
    Own(Indexer),
    /// The layer reuses the selection of the earlier layer `.0` (which runs its own indexer).
    Shared(usize),
}

/// The graph values an indexer reads and writes.
#[derive(Debug, Clone)]
pub struct IndexIo<'a> {
    /// The boolean `[B, 1, S, T]` mask of the keys a query may see at all (causal, unpadded).
    pub allowed: &'a str,
    /// The index-key cache input.
    pub past: &'a str,
    /// The name of the index-key cache output.
    pub present: &'a str,
}

impl Indexer {
    /// Writes the additive index mask `mask` (`[B, 1, S, T]`, the model dtype) of the indexer
    /// module `module` (`….self_attn.indexer`) for the attention input `x` and the q latent
    /// `q_latent`, rotated by `tables` (`rope`'s tables: the interleaving is the indexer's own),
    /// and the index-key cache output named in `io`.
    #[allow(clippy::too_many_arguments)]
    pub fn mask(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        q_latent: &str,
        module: &str,
        (tables, rope): (&RopeTables, &Rope),
        io: &IndexIo<'_>,
        mask: &str,
        dtype: DType,
    ) -> String {
        let (h, d) = (self.heads, self.head_dim);
        let rope = Rope {
            rotary_dim: self.rope_dim,
            interleaved: self.interleaved,
            ..rope.clone()
        };
        let q = linear(
            b,
            q_latent,
            &format!("{module}.wq_b"),
            self.q_rank,
            h * d,
            false,
            dtype,
        );
        let q = rotary_embedding(b, &q, tables, &rope, h, d);
        let k = linear(b, x, &format!("{module}.wk"), self.hidden, d, false, dtype);
        let norm = Norm {
            kind: NormKind::Layer,
            eps: 1e-6,
        };
        let k = norm.apply(b, &k, &format!("{module}.k_norm"), d, dtype);
        let k = rotary_embedding(b, &k, tables, &rope, 1, d);
        b.op_into(
            "Concat",
            &[io.past, &k],
            vec![("axis", Attr::Int(1))],
            io.present,
        );

        // Scores in f32: q [B, S, H, D] · kᵀ [B, 1, D, T] → [B, S, H, T].
        let f32 = ("to", Attr::Int(DType::F32.onnx_code() as i64));
        let q = b.op("Cast", &[&q], vec![f32.clone()]);
        let heads = b.const_i64(&[0, 0, h as i64, d as i64]);
        let q = b.op("Reshape", &[&q, &heads], vec![]);
        let k = b.op("Cast", &[io.present], vec![f32.clone()]);
        let axis1 = b.const_i64(&[1]);
        let k = b.op("Unsqueeze", &[&k, &axis1], vec![]);
        let kt = b.op(
            "Transpose",
            &[&k],
            vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))],
        );
        let scores = b.op("MatMul", &[&q, &kt], vec![]);
        let scale = scalar(b, (d as f32).powf(-0.5), DType::F32);
        let scores = b.op("Mul", &[&scores, &scale], vec![]);
        let scores = b.op("Relu", &[&scores], vec![]);

        // Per-head weights [B, S, 1, H] (weights_proj kept in f32, as transformers keeps it).
        let x32 = b.op("Cast", &[x], vec![f32]);
        let proj = format!("{module}.weights_proj");
        let w = linear(b, &x32, &proj, self.hidden, h, false, DType::F32);
        let w_scale = scalar(b, (h as f32).powf(-0.5), DType::F32);
        let w = b.op("Mul", &[&w, &w_scale], vec![]);
        let axis2 = b.const_i64(&[2]);
        let w = b.op("Unsqueeze", &[&w, &axis2], vec![]);
        let index = b.op("MatMul", &[&w, &scores], vec![]);
        let index = b.op("Squeeze", &[&index, &axis2], vec![]);

        // The keys a query may not see score −∞; keep the top min(index_topk, T).
        let allowed = b.op("Squeeze", &[io.allowed, &axis1], vec![]);
        let never = scalar(b, f32::NEG_INFINITY, DType::F32);
        let index = b.op("Where", &[&allowed, &index, &never], vec![]);
        let total = b.op(
            "Shape",
            &[&index],
            vec![("start", Attr::Int(2)), ("end", Attr::Int(3))],
        );
        let topk = b.const_i64(&[self.topk as i64]);
        let k = b.op("Min", &[&topk, &total], vec![]);
        let picked = b.fresh_name("TopK_indices");
        let values = b.fresh_name("TopK_values");
        b.node(
            "",
            "TopK",
            &[&index, &k],
            vec![
                ("axis", Attr::Int(-1)),
                ("largest", Attr::Int(1)),
                ("sorted", Attr::Int(1)),
            ],
            vec![values, picked.clone()],
        );

        // Scatter the selection into [B, S, T], then the additive mask [B, 1, S, T].
        let all = b.op("Shape", &[&index], vec![]);
        let zero = scalar(b, 0.0, DType::F32);
        let zeros = b.op("Expand", &[&zero, &all], vec![]);
        let some = b.op("Shape", &[&picked], vec![]);
        let one = scalar(b, 1.0, DType::F32);
        let ones = b.op("Expand", &[&one, &some], vec![]);
        let chosen = b.op(
            "ScatterElements",
            &[&zeros, &picked, &ones],
            vec![("axis", Attr::Int(-1))],
        );
        let to_bool = ("to", Attr::Int(DType::Bool.onnx_code() as i64));
        let chosen = b.op("Cast", &[&chosen], vec![to_bool]);
        let keep = b.op("And", &[&chosen, &allowed], vec![]);
        let keep = b.op("Unsqueeze", &[&keep, &axis1], vec![]);
        let open = scalar(b, 0.0, dtype);
        let closed = scalar(b, super::alibi::lowest(dtype), dtype);
        b.op_into("Where", &[&keep, &open, &closed], vec![], mask);
        mask.to_string()
    }
}
