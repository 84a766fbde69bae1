//! OLMo 2: the Llama decoder with norms on each block's output
//! (`x + post_attention_layernorm(attn(x))`, `x + post_feedforward_layernorm(mlp(x))`, no
//! input norm) and RMSNorm of q and k over the whole projection width (not per head).

use super::decoder::{self, Family, LayerNorms};
use crate::config::ArchConfig;
use crate::ir::{DType, Graph, GraphBuilder};

/// OLMo 2's hooks: post-norm placement and full-width q/k norms.
pub struct Olmo2;

impl Family for Olmo2 {
    fn qk_norm(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        q: String,
        k: String,
        attn: &str,
        dtype: DType,
    ) -> (String, String) {
        let norm = self.norm(cfg);
        (
            norm.apply(b, &q, &format!("{attn}.q_norm"), cfg.q_size(), dtype),
            norm.apply(b, &k, &format!("{attn}.k_norm"), cfg.kv_size(), dtype),
        )
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms::POST
    }
}

/// Builds the decoder graph.
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    decoder::build(cfg, dtype, &Olmo2)
}
