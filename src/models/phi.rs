//! Phi-1/1.5/2: each layer applies attention (partial RoPE) and a GELU MLP in parallel to one
//! LayerNorm of the residual stream, `x + (attn(ln(x)) + mlp(ln(x)))`; then a final LayerNorm
//! and an LM head with bias. Every projection has a bias.

use super::components::{gelu, linear, Norm, NormKind};
use super::decoder::{self, Family, LayerNorms, Names};
use crate::config::{ArchConfig, Gelu};
use crate::ir::{DType, Graph, GraphBuilder};

/// Phi's hooks: LayerNorm, parallel blocks, `dense` output projection, `fc1`/`fc2` GELU MLP.
pub struct Phi;

impl Family for Phi {
    fn names(&self) -> Names {
        Names {
            final_norm: "final_layernorm",
            ..Names::LLAMA
        }
    }

    fn norm(&self, cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: cfg.layer_norm_eps.unwrap_or(1e-5),
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_mlp: None,
            ..LayerNorms::PRE
        }
    }

    fn parallel_blocks(&self) -> bool {
        true
    }

    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        let (q, h) = (cfg.q_size(), cfg.hidden_size);
        linear(b, y, &format!("{attn}.dense"), q, h, cfg.o_bias, dtype)
    }

    /// `fc2(gelu(fc1(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let (h, inner, bias) = (cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias);
        let up = linear(b, x, &format!("{mlp}.fc1"), h, inner, bias, dtype);
        let up = gelu(b, &up, cfg.gelu.unwrap_or(Gelu::Tanh));
        linear(b, &up, &format!("{mlp}.fc2"), inner, h, bias, dtype)
    }
}

/// Builds the decoder graph.
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    decoder::build(cfg, dtype, &Phi)
}
