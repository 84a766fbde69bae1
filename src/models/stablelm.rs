//! StableLM (Stability AI): the Llama decoder with LayerNorm (weight and bias,
//! `layer_norm_eps`), RoPE on the first `partial_rotary_factor` (0.25 by default) of each
//! head, and biases on q, k and v when `use_qkv_bias` is set (never on o or the MLP).
//! Per-head q/k LayerNorms (`qk_layernorm`) and parallel residual blocks
//! (`use_parallel_residual`, StableLM 2 12B) are refused.

use super::components::{Norm, NormKind};
use super::decoder::{self, Family};
use super::registry::{FamilySpec, ModelType};
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, FamilyKnobs, Fields, HfConfig, Sign,
};
use crate::ir::{DType, Graph};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `stablelm` type: its generic
/// `decoder` runs the graph (which carries the partial rotation).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "stablelm",
    summary: "LayerNorm with bias, partial RoPE (`partial_rotary_factor`), optional q/k/v \
              biases (`use_qkv_bias`)",
    model_types: &[ModelType::generative("stablelm", "decoder", read)],
};

/// transformers' StableLmConfig: no biases but the q/k/v ones read below, SiLU-gated MLP,
/// RoPE theta 1e4 on a quarter of each head by default, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    rope: |raw, head_dim, f| {
        let partial = raw.partial_rotary_factor.or(Some(0.25));
        let raw = HfConfig {
            partial_rotary_factor: partial,
            ..raw.clone()
        };
        read_rope(&raw, head_dim, 10_000.0, f)
    },
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    for (field, value, what) in [
        (
            "qk_layernorm",
            raw.qk_layernorm,
            "per-head LayerNorms on queries and keys",
        ),
        (
            "use_parallel_residual",
            raw.use_parallel_residual,
            "attention and MLP added to the residual together",
        ),
    ] {
        if value == Some(true) {
            return Err(f.err(
                field,
                &format!("true ({what}) is not supported for stablelm (expected false)"),
            ));
        }
    }
    // StableLmConfig has no sliding window or layer types: transformers never slides,
    // whatever else config.json holds.
    let raw = HfConfig {
        sliding_window: None,
        use_sliding_window: None,
        layer_types: None,
        ..raw.clone()
    };
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |_| {
        Ok(StableLm {
            layer_norm_eps: f.number(
                "layer_norm_eps",
                raw.layer_norm_eps,
                1e-5,
                Sign::NonNegative,
            )?,
        })
    })?;
    cfg.qkv_bias = raw.use_qkv_bias.unwrap_or(false);
    // transformers derives the head width from hidden_size; a different head_dim would
    // not be the model transformers runs.
    if cfg.q_size() != cfg.hidden_size {
        return Err(f.err(
            "head_dim",
            &format!(
                "{} (transformers' StableLM uses hidden_size / num_attention_heads = {})",
                cfg.head_dim,
                cfg.hidden_size / cfg.num_attention_heads
            ),
        ));
    }
    cfg.rms_norm_eps = 0.0;
    Ok(cfg)
}

/// StableLM's knobs: its LayerNorm epsilon.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StableLm {
    /// Epsilon of every LayerNorm (`layer_norm_eps`).
    pub layer_norm_eps: f32,
}

impl Family for StableLm {
    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: self.layer_norm_eps,
        }
    }
}

impl FamilyKnobs for StableLm {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        decoder::build(cfg, dtype, self)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        let json = format!(
            r#"{{"model_type": "stablelm", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 128 {extra}}}"#
        );
        crate::models::parse_config(json.as_bytes(), Path::new("config.json"))
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "head_dim": 16, "sliding_window": 4"#).unwrap();
        assert_eq!(cfg.head_dim, 16);
        assert_eq!(cfg.rope.rotary_dim, 4, "a quarter of the head rotates");
        assert_eq!(cfg.rope.theta, 1e4);
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.knobs::<StableLm>().unwrap().layer_norm_eps, 1e-5);
        let v4 = parse(
            r#", "use_qkv_bias": true, "partial_rotary_factor": 0.5, "rope_theta": 500,
            "layer_norm_eps": 1e-6"#,
        )
        .unwrap();
        assert!(v4.qkv_bias && !v4.o_bias);
        assert_eq!((v4.rope.rotary_dim, v4.rope.theta), (8, 500.0));
        assert_eq!(v4.knobs::<StableLm>().unwrap().layer_norm_eps, 1e-6);
        let v5 = parse(
            r#", "rope_parameters": {"rope_type": "default", "rope_theta": 1000,
            "partial_rotary_factor": 1.0}"#,
        )
        .unwrap();
        assert_eq!((v5.rope.rotary_dim, v5.rope.theta), (16, 1000.0));
    }

    #[test]
    fn unsupported_variants_are_refused_by_field() {
        for (extra, want) in [
            (r#", "qk_layernorm": true"#, "qk_layernorm"),
            (
                r#", "use_parallel_residual": true"#,
                "use_parallel_residual",
            ),
            (r#", "layer_norm_eps": -1"#, "layer_norm_eps"),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
            (
                r#", "partial_rotary_factor": 0.01"#,
                "partial_rotary_factor",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
        assert!(parse(r#", "qk_layernorm": false, "use_parallel_residual": false"#).is_ok());
    }
}
