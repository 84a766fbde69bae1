//! OLMoE (AllenAI): the pre-norm Llama decoder with RMSNorm of q and k over the whole
//! projection width (as OLMo 2), q, k and v then clamped to `[-clip_qkv, clip_qkv]` when
//! `clip_qkv` is set, and in every layer a sparse mixture of SwiGLU experts (router
//! `mlp.gate`, experts `mlp.experts.{e}.*_proj` of width `intermediate_size`), each token
//! routed to `num_experts_per_tok` of `num_experts` by softmax → top-k, renormalised only with
//! `norm_topk_prob`. The block is [`MoeSpec::build`].

use super::components::{ExpertWeights, MoeSpec, Router};
use super::decoder::{self, Family, QkNorm};
use super::family::{without_windows, FamilySpec};
use super::olmo::{clipped, read_clip_qkv};
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `olmoe` type; its `olmo` type
/// is the same plain decoder loop (as for OLMo 2), and the graph carries the rest.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "olmoe",
    summary: "full-width q/k RMSNorm, q/k/v clamped to `clip_qkv`, sparse SwiGLU experts in every \
              layer (softmax → top-k, optional renormalisation `norm_topk_prob`)",
    model_types: &[ModelType::generative("olmoe", "olmo", read)],
};

/// transformers' OlmoeConfig: `attention_bias` on q, k, v and o, no MLP bias, RoPE theta 1e4,
/// `rms_norm_eps` 1e-5, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // OlmoeConfig has no sliding window or layer types.
    let raw = without_windows(raw);
    let clip_qkv = read_clip_qkv(&raw, f)?;
    read_decoder(&raw, t, f, &FIELDS, |_| {
        let (experts, top_k) = read_routing(&raw, f, (64, 8))?;
        Ok(Olmoe {
            experts,
            top_k,
            normalize: raw.norm_topk_prob.unwrap_or(false),
            clip_qkv,
        })
    })
}

/// OLMoE's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Olmoe {
    /// `num_experts` per layer.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub top_k: usize,
    /// `norm_topk_prob`.
    pub normalize: bool,
    /// The bound q, k and v are clamped to (`clip_qkv`), if any.
    pub clip_qkv: Option<f32>,
}

impl Family for Olmoe {
    /// The Llama projections, v clamped (q and k are clamped after their norms).
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let [q, k, v] = decoder::plain_qkv(b, cfg, x, attn, dtype);
        [q, k, clipped(b, v, self.clip_qkv, dtype)]
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
        let norm = self.norm(cfg);
        let (q, k) = QkNorm::FullWidth.apply(b, cfg, norm, q, k, attn, dtype);
        let clip = self.clip_qkv;
        (clipped(b, q, clip, dtype), clipped(b, k, clip, dtype))
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
        let routing = (self.experts, self.top_k);
        let router = Router::Softmax {
            normalize: self.normalize,
        };
        let spec = MoeSpec::new(
            cfg,
            cfg.intermediate_size,
            routing,
            router,
            ExpertWeights::PROJ,
        );
        spec.build(b, x, &format!("{layer}.mlp"), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::Olmoe;

    fn parse(extra: &str) -> crate::Result<crate::config::ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "olmoe", "hidden_size": 64, "intermediate_size": 32,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn reads_transformers_defaults_and_checks_routing() {
        let cfg = parse(r#", "sliding_window": 4"#).unwrap();
        let k = *cfg.knobs::<Olmoe>().unwrap();
        assert_eq!(
            k,
            Olmoe {
                experts: 64,
                top_k: 8,
                normalize: false,
                clip_qkv: None
            }
        );
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(!cfg.qkv_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        let c = parse(r#", "num_experts": 4, "num_experts_per_tok": 2, "clip_qkv": 8, "norm_topk_prob": true"#)
            .unwrap();
        let k = *c.knobs::<Olmoe>().unwrap();
        assert_eq!(
            (k.experts, k.top_k, k.normalize, k.clip_qkv),
            (4, 2, true, Some(8.0))
        );
        for (bad, field) in [
            (
                r#", "num_experts": 4, "num_experts_per_tok": 5"#,
                "num_experts_per_tok",
            ),
            (r#", "clip_qkv": 0"#, "clip_qkv"),
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains(field), "{bad}: {err}");
        }
    }
}
