//! Phi-1/1.5/2: each layer applies attention (partial RoPE) and a GELU MLP in parallel to one
//! LayerNorm of the residual stream, `x + (attn(ln(x)) + mlp(ln(x)))`; then a final LayerNorm
//! and an LM head with bias. Every projection has a bias.

use super::components::{gelu_mlp, Norm, NormKind};
use super::decoder::{self, Family, LayerNorms, Names};
use super::registry::{FamilySpec, ModelType};
use crate::config::phi::{self as config, PhiConfig};
use crate::config::{ArchConfig, FamilyKnobs};
use crate::ir::{DType, Graph, GraphBuilder};

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "phi",
    summary: "phi-1.5/phi-2: attention and GELU MLP in parallel off one LayerNorm, partial \
              RoPE, LM head with bias",
    model_types: &[ModelType::generative("phi", "phi", config::read)],
};

/// Phi's hooks: LayerNorm, parallel blocks, `dense` output projection, `fc1`/`fc2` GELU MLP,
/// LM head with bias.
impl Family for PhiConfig {
    fn names(&self) -> Names {
        Names {
            o_proj: "dense",
            final_norm: "final_layernorm",
            ..Names::LLAMA
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: self.layer_norm_eps,
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

    /// `fc2(gelu(fc1(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        gelu_mlp(b, cfg, x, (mlp, "fc1", "fc2"), self.gelu, dtype)
    }

    /// `x @ head + lm_head.bias`.
    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        decoder::biased_logits(b, cfg, x, head, dtype);
    }
}

impl FamilyKnobs for PhiConfig {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        decoder::build(cfg, dtype, self)
    }
}
