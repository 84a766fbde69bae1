//! ERNIE 4.5 dense (Baidu, transformers' Ernie4_5ForCausalLM): the Llama decoder with RoPE
//! over whole heads in interleaved pairs `(x0, x1), (x2, x3)…`, one `use_bias` switch for the
//! biases of every projection (q, k, v, o and the MLP's), head_dim 128, theta 5e5,
//! `rms_norm_eps` 1e-5 and a tied head by default.

use super::decoder::Llama;
use super::family::{without_windows, FamilySpec};
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, Rope,
};
use crate::Result;

/// The family's registry entry: onnxruntime-genai 0.18 runs it as `ernie4_5`.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "ernie4_5",
    summary: "Llama with interleaved RoPE, `use_bias` on every projection, tied head",
    model_types: &[ModelType::generative("ernie4_5", "ernie4_5", read)],
};

/// transformers' Ernie4_5Config: head_dim 128, interleaved RoPE with theta 5e5, biases set
/// below, `rms_norm_eps` 1e-5, tied.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::None,
    rope: |raw, head_dim, f| {
        let rope = read_rope(raw, head_dim, 500_000.0, f)?;
        Ok(Rope {
            interleaved: true,
            ..rope
        })
    },
    tie_word_embeddings: true,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // Ernie4_5Config has no sliding window, layer types or per-kind biases: transformers
    // ignores them.
    let raw = HfConfig {
        attention_bias: None,
        mlp_bias: None,
        ..without_windows(raw)
    };
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |_| Ok(Llama))?;
    // The rotation spans whole heads (its q and k are never split into rotated and passed
    // channels).
    if cfg.rope.rotary_dim != cfg.head_dim {
        return Err(f.err(
            "partial_rotary_factor",
            &format!(
                "rotates {} of {} channels per head (ERNIE 4.5 rotates whole heads)",
                cfg.rope.rotary_dim, cfg.head_dim
            ),
        ));
    }
    let bias = raw.use_bias.unwrap_or(false);
    (cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) = (bias, bias, bias);
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("ernie4_5", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg =
            parse(r#", "attention_bias": true, "mlp_bias": true, "sliding_window": 4"#).unwrap();
        assert_eq!((cfg.head_dim, cfg.rope.rotary_dim), (128, 128));
        assert!(cfg.rope.interleaved);
        assert_eq!((cfg.rope.theta, cfg.rms_norm_eps), (5e5, 1e-5));
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(cfg.tie_word_embeddings && !cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias);
        let v = parse(
            r#", "head_dim": 16, "use_bias": true, "tie_word_embeddings": false,
            "rope_theta": 1e4"#,
        )
        .unwrap();
        assert!(v.qkv_bias && v.o_bias && v.mlp_bias && !v.tie_word_embeddings);
        assert_eq!((v.head_dim, v.rope.theta), (16, 1e4));
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "partial_rotary_factor": 0.5"#, "partial_rotary_factor"),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
            (r#", "head_dim": 0"#, "head_dim"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }
}
