//! The Gemma family (gemma, gemma2, gemma3_text), spec §1.10.
//!
//! Like the Llama decoder, with: token embeddings scaled by `sqrt(hidden_size)` (rounded to
//! the model dtype), RMSNorms scaling by `1 + weight`, a GELU-gated MLP and tied embeddings.
//! Gemma 2 and 3 add a norm after attention and one on each side of the MLP, a custom
//! attention scale, soft-capped attention scores and final logits, and sliding-window layers;
//! Gemma 3 also normalises queries and keys per head and gives sliding layers their own RoPE.

use super::components::{
    gated_mlp, named_rope_tables, per_head_norm, scalar, DecoderInputs, GateActivation, Norm,
    NormKind, RopeTables,
};
use super::decoder::{self, Family, LayerNorms};
use crate::config::{ArchConfig, GemmaConfig, Rope};
use crate::ir::{DType, Graph, GraphBuilder};

/// Gemma's hooks, reading the Gemma knobs of the config.
pub struct Gemma<'a> {
    knobs: &'a GemmaConfig,
}

impl Family for Gemma<'_> {
    fn norm(&self, cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::OffsetRms,
            eps: cfg.rms_norm_eps,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        if self.knobs.sandwich_norms() {
            LayerNorms::SANDWICH
        } else {
            LayerNorms::PRE
        }
    }

    fn embed(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let scale = scalar(b, self.knobs.embed_scale, dtype);
        b.op("Mul", &[&x, &scale], vec![])
    }

    /// The global tables, then (Gemma 3) the local ones `model.rotary_emb_local.*`.
    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        let mut tables = vec![decoder::plain_rotary(b, cfg, io, dtype)];
        if let Some(rope) = &self.knobs.local_rope {
            let (prefix, positions) = ("model.rotary_emb_local", cfg.max_position_embeddings);
            let ids = &io.position_ids;
            tables.push(named_rope_tables(b, prefix, rope, positions, ids, dtype));
        }
        tables
    }

    /// Gemma 3's sliding layers rotate with the local RoPE.
    fn layer_rope<'c>(&self, cfg: &'c ArchConfig, i: usize) -> Option<(&'c Rope, usize)> {
        let local = cfg.gemma.as_ref().and_then(|g| g.local_rope.as_ref());
        match (local, cfg.layer_windows[i]) {
            (Some(rope), Some(_)) => Some((rope, 1)),
            _ => Some((&cfg.rope, 0)),
        }
    }

    fn qk_norm(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        q: String,
        k: String,
        attn: &str,
        dtype: DType,
    ) -> (String, String) {
        if !self.knobs.qk_norm() {
            return (q, k);
        }
        let (norm, d) = (self.norm(cfg), cfg.head_dim);
        let (heads, kv_heads) = (
            cfg.num_attention_heads as i64,
            cfg.num_key_value_heads as i64,
        );
        (
            per_head_norm(b, norm, &q, &format!("{attn}.q_norm"), heads, d, dtype),
            per_head_norm(b, norm, &k, &format!("{attn}.k_norm"), kv_heads, d, dtype),
        )
    }

    fn attention_scale(&self, _cfg: &ArchConfig) -> f32 {
        self.knobs.attn_scale
    }

    fn attention_softcap(&self, _cfg: &ArchConfig) -> f32 {
        self.knobs.attn_softcap.unwrap_or(0.0)
    }

    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let act = GateActivation::Gelu(self.knobs.gelu);
        let sizes = (cfg.hidden_size, cfg.intermediate_size);
        gated_mlp(b, x, mlp, sizes, false, act, dtype)
    }

    /// `cap · tanh(x @ head / cap)` when the final logits are soft-capped.
    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        let Some(cap) = self.knobs.final_softcap else {
            b.op_into("MatMul", &[x, head], vec![], "logits");
            return;
        };
        let raw = b.op("MatMul", &[x, head], vec![]);
        let c = scalar(b, cap, dtype);
        let scaled = b.op("Div", &[&raw, &c], vec![]);
        let squashed = b.op("Tanh", &[&scaled], vec![]);
        b.op_into("Mul", &[&squashed, &c], vec![], "logits");
    }
}

/// Builds the decoder graph of a Gemma-family config (`cfg.gemma` must be set).
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    let knobs = cfg
        .gemma
        .as_ref()
        .expect("config parsing sets the Gemma knobs for every Gemma model type");
    decoder::build(cfg, dtype, &Gemma { knobs })
}
