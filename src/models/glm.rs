//! GLM (THUDM GLM-4-9B `-hf` checkpoints, transformers' GlmForCausalLM): the Llama decoder
//! with RoPE on the first `partial_rotary_factor` (0.5 by default) of each head in
//! interleaved pairs `(x0, x1), (x2, x3)…`, biases on q, k and v (`attention_bias`, on by
//! default; never on o or the MLP), a fused `gate_up_proj` MLP weight (gate half first, split
//! at save time as Phi-3's), head_dim 128 and `rms_norm_eps` 1.5625e-7 by default.

use super::decoder::Family;
use super::family::{without_windows, FamilySpec};
use super::phi3::Phi3;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, FamilyKnobs, Fields, HfConfig, Rope,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `glm` type: its generic
/// `decoder` runs the graph (which carries the partial interleaved rotation).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "glm",
    summary: "partial interleaved RoPE (0.5 by default), q/k/v biases, fused `gate_up_proj` \
              split at save time",
    model_types: &[ModelType::generative("glm", "decoder", |raw, t, f| {
        read_glm(raw, t, f, Glm)
    })],
};

/// transformers' GlmConfig: head_dim 128, biases set below, SiLU-gated MLP, interleaved RoPE
/// with theta 1e4 on half of each head by default, untied.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::None,
    rope: |raw, head_dim, f| {
        let partial = raw.partial_rotary_factor.or(Some(0.5));
        let raw = HfConfig {
            partial_rotary_factor: partial,
            ..raw.clone()
        };
        let rope = read_rope(&raw, head_dim, 10_000.0, f)?;
        Ok(Rope {
            interleaved: true,
            ..rope
        })
    },
    ..DecoderFields::LLAMA
};

/// transformers' GlmConfig default `rms_norm_eps`.
const RMS_NORM_EPS: f32 = 1.5625e-7;

/// A GlmConfig (GLM and GLM-4 share it) read with the family's `knobs`.
pub(super) fn read_glm<K: FamilyKnobs>(
    raw: &HfConfig,
    t: &'static ModelType,
    f: &Fields<'_>,
    knobs: K,
) -> Result<ArchConfig> {
    // GlmConfig has no sliding window or layer types.
    let raw = without_windows(raw);
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |_| Ok(knobs))?;
    cfg.qkv_bias = raw.attention_bias.unwrap_or(true);
    if raw.rms_norm_eps.is_none() {
        cfg.rms_norm_eps = RMS_NORM_EPS;
    }
    Ok(cfg)
}

/// GLM's hooks: the fused MLP weight (the rest is the shared decoder's, the rotation included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Glm;

impl Family for Glm {
    /// `down_proj(silu(gate) · up)`, gate and up the two row halves of `gate_up_proj`, as
    /// Phi-3 reads them.
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
        crate::models::tiny_config("glm", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4"#).unwrap();
        assert_eq!((cfg.head_dim, cfg.rope.rotary_dim), (128, 64));
        assert!(cfg.rope.interleaved);
        assert_eq!(cfg.rope.theta, 1e4);
        assert_eq!(cfg.rms_norm_eps, RMS_NORM_EPS);
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.knobs::<Glm>(), Some(&Glm));
        let v4 = parse(
            r#", "head_dim": 16, "partial_rotary_factor": 0.25, "rope_theta": 500,
            "attention_bias": false, "rms_norm_eps": 1e-5, "mlp_bias": true"#,
        )
        .unwrap();
        assert_eq!(
            (v4.head_dim, v4.rope.rotary_dim, v4.rope.theta),
            (16, 4, 500.0)
        );
        assert!(!v4.qkv_bias && !v4.o_bias && !v4.mlp_bias);
        assert_eq!(v4.rms_norm_eps, 1e-5);
        let v5 = parse(
            r#", "head_dim": 16, "rope_parameters": {"rope_type": "default",
            "rope_theta": 1000, "partial_rotary_factor": 1.0}"#,
        )
        .unwrap();
        assert_eq!((v5.rope.rotary_dim, v5.rope.theta), (16, 1000.0));
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "hidden_act": "gelu""#, "hidden_act"),
            (
                r#", "partial_rotary_factor": 0.01"#,
                "partial_rotary_factor",
            ),
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
