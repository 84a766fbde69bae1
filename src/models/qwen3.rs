//! Qwen3: the Llama decoder with per-head RMSNorm on q and k before RoPE
//! (`Reshape [0, 0, -1, D]` → `RMSNormalization(q_norm.weight [D])` → `Reshape [0, 0, -1]`).
//! The normed projections are no longer plain MatMuls, so QKV packing does not apply.

use super::components::per_head_norm;
use super::decoder::{self, Family};
use crate::config::ArchConfig;
use crate::ir::{DType, Graph, GraphBuilder};

/// Qwen3's hooks: per-head q/k norms.
pub struct Qwen3;

impl Family for Qwen3 {
    fn qk_norm(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        q: String,
        k: String,
        attn: &str,
        dtype: DType,
    ) -> (String, String) {
        let (norm, d) = (self.norm(cfg), cfg.head_dim);
        (
            per_head_norm(b, norm, &q, &format!("{attn}.q_norm"), -1, d, dtype),
            per_head_norm(b, norm, &k, &format!("{attn}.k_norm"), -1, d, dtype),
        )
    }
}

/// Builds the decoder graph.
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    decoder::build(cfg, dtype, &Qwen3)
}
