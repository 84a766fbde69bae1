//! FlexOlmo (AllenAI, transformers' FlexOlmoForCausalLM): OLMoE's sparse SwiGLU experts
//! ([`Olmoe`]: softmax → top-k, renormalised only with `norm_topk_prob`; full-width q/k
//! RMSNorm) in OLMo 2's post-norm layers (`x + post_attention_layernorm(attn(x))`,
//! `x + post_feedforward_layernorm(moe(x))`, no input norm), without OLMoE's `clip_qkv`.

use super::decoder::{Family, LayerNorms};
use super::family::{without_windows, FamilySpec};
use super::olmoe::Olmoe;
use crate::config::{
    read_decoder, read_rope, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig,
    ModelType,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `flex_olmo` type; its `olmo`
/// type is the same plain decoder loop (as for OLMo 2 and OLMoE).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "flex_olmo",
    summary: "OLMoE's experts (softmax → top-k) in OLMo 2's post-norm layers",
    model_types: &[ModelType::generative("flex_olmo", "olmo", read)],
};

/// transformers' FlexOlmoConfig: `attention_bias` on q, k, v and o, no MLP bias, RoPE theta
/// 5e5, `rms_norm_eps` 1e-6, untied; 7 experts, 5 per token.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| read_rope(raw, head_dim, 500_000.0, f),
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // FlexOlmoConfig has no sliding window, layer types or `clip_qkv`.
    let raw = without_windows(raw);
    read_decoder(&raw, t, f, &FIELDS, |_| {
        let (experts, top_k) = read_routing(&raw, f, (7, 5))?;
        Ok(FlexOlmo(Olmoe {
            experts,
            top_k,
            normalize: raw.norm_topk_prob.unwrap_or(false),
            clip_qkv: None,
        }))
    })
}

/// FlexOlmo's knobs: OLMoE's, in post-norm layers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlexOlmo(pub Olmoe);

impl Family for FlexOlmo {
    fn layer_norms(&self) -> LayerNorms {
        LayerNorms::POST
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
        self.0.qk_norm(b, cfg, q, k, attn, dtype)
    }

    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        self.0.layer_mlp(b, cfg, x, layer, i, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_transformers_defaults() {
        let cfg = crate::models::tiny_config(
            "flex_olmo",
            r#", "num_experts": 8, "clip_qkv": 1.0, "sliding_window": 4, "mlp_bias": true"#,
        )
        .unwrap();
        let FlexOlmo(k) = *cfg.knobs::<FlexOlmo>().unwrap();
        assert_eq!(
            (k.experts, k.top_k, k.normalize, k.clip_qkv),
            (8, 5, false, None)
        );
        assert_eq!((cfg.rope.theta, cfg.rms_norm_eps), (5e5, 1e-6));
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(!cfg.mlp_bias && !cfg.tie_word_embeddings);
    }
}
