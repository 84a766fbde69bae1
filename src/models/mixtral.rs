//! Mixtral: the Mistral decoder whose every MLP is a sparse mixture of SwiGLU experts
//! (`block_sparse_moe`: router `gate`, experts `experts.{e}.w1/w3/w2`), each token routed to
//! `num_experts_per_tok` of `num_local_experts` by softmax → top-k → renormalised weights.
//! The block is [`MoeSpec::build`] (its docs say how its cost grows).

use super::components::{ExpertWeights, MoeSpec, Router};
use super::decoder::Family;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "mixtral",
    summary: "Mistral with a sparse mixture of SwiGLU experts in every layer (softmax → top-k → \
              renormalised routing)",
    model_types: &[ModelType::generative("mixtral", "mistral", |raw, t, f| {
        read_decoder(raw, t, f, &FIELDS, |_| experts(raw, f))
    })],
};

/// transformers' MixtralConfig: no biases, RoPE theta 1e6, `rms_norm_eps` 1e-5.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    rope: |raw, head_dim, f| crate::config::read_rope(raw, head_dim, 1_000_000.0, f),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// Mixtral's knobs: how many experts each MoE layer has and how many a token uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mixtral {
    /// `num_local_experts`.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub top_k: usize,
}

/// `num_local_experts` (default 8) and `num_experts_per_tok` (default 2).
fn experts(raw: &HfConfig, f: &Fields<'_>) -> Result<Mixtral> {
    let (experts, top_k) = read_routing(raw, f, (8, 2))?;
    Ok(Mixtral { experts, top_k })
}

impl Family for Mixtral {
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
        let spec = MoeSpec::new(
            cfg,
            cfg.intermediate_size,
            routing,
            router,
            ExpertWeights::MIXTRAL,
        );
        spec.build(b, x, &format!("{layer}.block_sparse_moe"), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::Mixtral;

    fn parse(extra: &str) -> crate::Result<crate::config::ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn experts_default_as_transformers_and_top_k_is_checked() {
        let m = *parse("").unwrap().knobs::<Mixtral>().unwrap();
        assert_eq!(
            m,
            Mixtral {
                experts: 8,
                top_k: 2
            }
        );
        let c = parse(r#", "num_local_experts": 4, "num_experts_per_tok": 3"#).unwrap();
        assert_eq!(c.knobs::<Mixtral>().unwrap().top_k, 3);
        for (bad, field) in [
            (
                r#", "num_local_experts": 4, "num_experts_per_tok": 5"#,
                "num_experts_per_tok",
            ),
            (r#", "num_local_experts": 0"#, "num_local_experts"),
            (r#", "num_experts_per_tok": -1"#, "num_experts_per_tok"),
            (
                r#", "num_local_experts": 4, "num_experts": 8"#,
                "num_experts",
            ),
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains(field), "{bad}: {err}");
        }
    }
}
