//! CWM (Meta's Code World Model, transformers' CwmForCausalLM): the Llama decoder without
//! attention biases whose layers alternate full attention (every fourth, from layer 0) and
//! sliding windows (8192 positions by default), with Llama 3 RoPE (theta 1e6, factor 16 over an
//! original context of 8192) when config.json gives no RoPE parameters.

use serde_json::{json, Value};

use super::decoder::Llama;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, ArchConfig, DecoderFields, Fields, HfConfig, Rope, SlidingLayers,
};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `cwm` type: its generic
/// `decoder` runs the graph (which carries the windows).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "cwm",
    summary: "Llama without attention biases, sliding windows on three layers of four, Llama 3 \
              RoPE by default",
    model_types: &[ModelType::generative("cwm", "decoder", read)],
};

/// transformers' CwmConfig: head dim 128, `mlp_bias` honoured, window 8192 on every layer but
/// each fourth, `rms_norm_eps` 1e-5, untied.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    rope: read_cwm_rope,
    sliding_window: Some(8192),
    sliding_layers: SlidingLayers::Pattern(|_, layers, _| {
        Ok((0..layers).map(|i| i % 4 != 0).collect())
    }),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // CwmConfig has no `attention_bias` (q, k, v and o never have one) and no
    // `use_sliding_window`; a window of 0 means none.
    let raw = HfConfig {
        attention_bias: None,
        use_sliding_window: None,
        sliding_window: match raw.sliding_window {
            Some(Some(0)) => Some(None),
            other => other,
        },
        ..raw.clone()
    };
    read_decoder(&raw, t, f, &FIELDS, |_| Ok(Llama))
}

/// CwmConfig's RoPE: config.json's parameters (`rope_parameters`, or a v4 `rope_scaling`
/// object), else its Llama 3 defaults, whose theta of 1e6 transformers keeps even over a
/// top-level `rope_theta`.
fn read_cwm_rope(raw: &HfConfig, head_dim: usize, f: &Fields<'_>) -> Result<Rope> {
    let given = |v: &Option<Value>| matches!(v, Some(Value::Object(m)) if !m.is_empty());
    if given(&raw.rope_parameters) || given(&raw.rope_scaling) {
        return read_rope(raw, head_dim, 1_000_000.0, f);
    }
    let defaults = HfConfig {
        rope_parameters: Some(json!({
            "rope_type": "llama3",
            "rope_theta": 1_000_000.0,
            "factor": 16.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
        })),
        rope_scaling: None,
        ..raw.clone()
    };
    read_rope(&defaults, head_dim, 1_000_000.0, f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RopeScaling;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "cwm", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 5,
            "vocab_size": 300, "max_position_embeddings": 16384"#,
            extra,
        )
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "attention_bias": true, "rope_theta": 5e5"#).unwrap();
        let w = Some(8192);
        assert_eq!(cfg.layer_windows, [None, w, w, w, None]);
        assert_eq!((cfg.head_dim, cfg.rms_norm_eps), (128, 1e-5));
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.rope.theta, 1e6);
        assert!(matches!(
            cfg.rope.scaling,
            RopeScaling::Llama3 { factor, original_max_position_embeddings, .. }
                if factor == 16.0 && original_max_position_embeddings == 8192.0
        ));
        let given = parse(
            r#", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4},
            "sliding_window": 0, "layer_types": ["full_attention", "sliding_attention",
            "full_attention", "full_attention", "full_attention"]"#,
        )
        .unwrap();
        assert_eq!(
            (given.rope.theta, given.rope.scaling),
            (1e4, RopeScaling::Default)
        );
        assert_eq!(given.layer_windows, [None; 5]);
    }
}
