//! GLM-4 (GLM-4-0414, transformers' Glm4ForCausalLM): GLM (partial interleaved RoPE, q/k/v
//! biases, fused `gate_up_proj`, the same config class and defaults) with a norm on each
//! block's output besides the one on its input: `x + post_self_attn_layernorm(attn(
//! input_layernorm(x)))`, then `x + post_mlp_layernorm(mlp(post_attention_layernorm(x)))`.

use super::decoder::{Family, LayerNorms};
use super::family::FamilySpec;
use super::glm::read_glm;
use super::phi3::Phi3;
use crate::config::ArchConfig;
use crate::config::ModelType;
use crate::ir::{DType, GraphBuilder};

/// The family's registry entry. onnxruntime-genai 0.18 has no `glm4` type (its `chatglm` is
/// the older ChatGLM): its generic `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "glm4",
    summary: "GLM with sandwich norms (`post_self_attn_layernorm`, `post_mlp_layernorm` on \
              the block outputs)",
    model_types: &[ModelType::generative("glm4", "decoder", |raw, t, f| {
        read_glm(raw, t, f, Glm4)
    })],
};

/// GLM-4's norms: Llama's on each block's input (the MLP's keeps the name
/// `post_attention_layernorm`), and one on each block's output.
const NORMS: LayerNorms = LayerNorms {
    post_attention: Some("post_self_attn_layernorm"),
    post_mlp: Some("post_mlp_layernorm"),
    ..LayerNorms::PRE
};

/// GLM-4's hooks: GLM's fused MLP weight and the four norms per layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Glm4;

impl Family for Glm4 {
    fn layer_norms(&self) -> LayerNorms {
        NORMS
    }

    /// `down_proj(silu(gate) · up)`, gate and up the two row halves of `gate_up_proj`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        Phi3.mlp(b, cfg, x, mlp, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("glm4", extra)
    }

    #[test]
    fn reads_glm_defaults_with_four_norms() {
        let cfg = parse(r#", "sliding_window": 4, "layer_types": ["x"]"#).unwrap();
        assert_eq!((cfg.head_dim, cfg.rope.rotary_dim), (128, 64));
        assert!(cfg.rope.interleaved);
        assert_eq!((cfg.rope.theta, cfg.rms_norm_eps), (1e4, 1.5625e-7));
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        let knobs = cfg.knobs::<Glm4>().unwrap();
        assert_eq!(knobs.layer_norms(), NORMS);
        let v4 = parse(
            r#", "head_dim": 16, "partial_rotary_factor": 1.0, "attention_bias": false,
            "rms_norm_eps": 1e-5"#,
        )
        .unwrap();
        assert_eq!((v4.head_dim, v4.rope.rotary_dim), (16, 16));
        assert!(!v4.qkv_bias);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "hidden_act": "gelu""#, "hidden_act"),
            (r#", "partial_rotary_factor": 0"#, "partial_rotary_factor"),
            (r#", "rms_norm_eps": -1"#, "rms_norm_eps"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }
}
