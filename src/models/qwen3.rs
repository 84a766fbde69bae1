//! Qwen3: the Llama decoder with per-head RMSNorm on q and k before RoPE
//! (`Reshape [0, 0, -1, D]` → `RMSNormalization(q_norm.weight [D])` → `Reshape [0, 0, -1]`).
//! The normed projections are no longer plain MatMuls, so QKV packing does not apply.

use super::components::rms_norm;
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
        (
            per_head_norm(b, cfg, &q, &format!("{attn}.q_norm.weight"), dtype),
            per_head_norm(b, cfg, &k, &format!("{attn}.k_norm.weight"), dtype),
        )
    }
}

/// RMSNorm of every head vector of `x` (`[B, S, heads·D]`) with the `[D]` weight `weight`.
pub fn per_head_norm(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    x: &str,
    weight: &str,
    dtype: DType,
) -> String {
    let d = cfg.head_dim;
    let heads = b.const_i64(&[0, 0, -1, d as i64]);
    let split = b.op("Reshape", &[x, &heads], vec![]);
    let normed = rms_norm(b, &split, weight, d, cfg.rms_norm_eps, dtype);
    let flat = b.const_i64(&[0, 0, -1]);
    b.op("Reshape", &[&normed, &flat], vec![])
}

/// Builds the decoder graph.
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    decoder::build(cfg, dtype, &Qwen3)
}
