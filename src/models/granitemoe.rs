//! Granite-MoE (IBM): Granite's multipliers (embeddings, residual branches, attention scale,
//! logits; [`Multipliers`]) on a decoder whose every MLP is a sparse mixture of SwiGLU
//! experts stored stacked per layer (`block_sparse_moe.input_linear` `[E, 2·I, H]`,
//! `output_linear` `[E, H, I]`, router `router.layer`), each token routed to
//! `num_experts_per_tok` of `num_local_experts` by the softmax of its top-k router logits
//! (the same weights as softmax → top-k → renormalised). The block is [`MoeSpec::build`].

use super::components::{DecoderInputs, ExpertWeights, MoeSpec, Router};
use super::decoder::Family;
use super::family::FamilySpec;
use super::granite::{multipliers, Multipliers};
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry (onnxruntime-genai's `granite` type: the same I/O).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "granitemoe",
    summary: "Granite's multipliers with sparse SwiGLU experts stored stacked (`input_linear`, \
              `output_linear`), softmax of the top-k router logits",
    model_types: &[ModelType::generative("granitemoe", "granite", read)],
};

/// transformers' GraniteMoeConfig: `attention_bias` on q, k, v and o, no MLP bias, RoPE theta
/// 1e4, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    ..DecoderFields::LLAMA
};

/// Reads a Granite-MoE config (also the routed part of a Granite-MoE shared one).
pub(super) fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_decoder(raw, t, f, &FIELDS, |_| {
        let multipliers = multipliers(raw, f)?;
        let (experts, top_k) = read_routing(raw, f, (8, 2))?;
        Ok(GraniteMoe {
            multipliers,
            experts,
            top_k,
        })
    })
}

/// Granite-MoE's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GraniteMoe {
    /// Granite's multipliers.
    pub multipliers: Multipliers,
    /// `num_local_experts`.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub top_k: usize,
}

impl Family for GraniteMoe {
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        self.multipliers.embed(b, cfg, io, x, dtype)
    }

    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        self.multipliers.attention_scale(cfg)
    }

    fn residual_branch(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: String,
        dtype: DType,
    ) -> String {
        self.multipliers.residual_branch(b, cfg, y, dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        self.multipliers.logits(b, cfg, x, head, dtype)
    }

    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        _i: usize,
        dtype: DType,
    ) -> String {
        let (routing, router) = (
            (self.experts, self.top_k),
            Router::Softmax { normalize: true },
        );
        let weights = ExpertWeights::GRANITE_MOE;
        let spec = MoeSpec::new(cfg, cfg.intermediate_size, routing, router, weights);
        spec.build(b, x, &format!("{layer}.block_sparse_moe"), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::GraniteMoe;

    fn parse(extra: &str) -> crate::Result<crate::config::ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "granitemoe", "hidden_size": 64, "intermediate_size": 32,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn reads_multipliers_and_routing() {
        let k = *parse("").unwrap().knobs::<GraniteMoe>().unwrap();
        assert_eq!((k.experts, k.top_k, k.multipliers.logits), (8, 2, 1.0));
        let c = parse(r#", "num_local_experts": 4, "residual_multiplier": 0.5"#).unwrap();
        let k = *c.knobs::<GraniteMoe>().unwrap();
        assert_eq!((k.experts, k.multipliers.residual), (4, 0.5));
        for (bad, field) in [
            (
                r#", "num_local_experts": 2, "num_experts_per_tok": 3"#,
                "num_experts_per_tok",
            ),
            (r#", "embedding_multiplier": 0"#, "embedding_multiplier"),
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains(field), "{bad}: {err}");
        }
    }
}
