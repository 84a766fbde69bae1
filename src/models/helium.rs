//! Helium (Kyutai): the Llama decoder with interleaved RoPE pairs `(x0, x1), (x2, x3)…`,
//! `attention_bias` on q, k and v only (never on o), head_dim 128 and theta 1e5 by default.

use super::decoder::Llama;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::Rope;
use crate::config::{read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `helium` type: its generic
/// `decoder` runs the graph (which carries the interleaved rotation).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "helium",
    summary: "Llama with interleaved RoPE, q/k/v biases without an o bias",
    model_types: &[ModelType::generative("helium", "decoder", read)],
};

/// transformers' HeliumConfig: head_dim 128, `attention_bias` and `mlp_bias` honoured,
/// interleaved RoPE with theta 1e5.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::Configured { mlp_bias: true },
    rope: |raw, head_dim, f| {
        let rope = read_rope(raw, head_dim, 100_000.0, f)?;
        Ok(Rope {
            interleaved: true,
            ..rope
        })
    },
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut cfg = read_decoder(raw, t, f, &FIELDS, |_| Ok(Llama))?;
    // o_proj is hidden_size → hidden_size in transformers: the heads must fill the width.
    if cfg.q_size() != cfg.hidden_size {
        return Err(f.err(
            "head_dim",
            &format!(
                "{} × num_attention_heads {} = {} (Helium expects hidden_size = {})",
                cfg.head_dim,
                cfg.num_attention_heads,
                cfg.q_size(),
                cfg.hidden_size
            ),
        ));
    }
    cfg.o_bias = false;
    if raw.rms_norm_eps.is_none() {
        cfg.rms_norm_eps = 1e-8;
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    fn parse(extra: &str) -> crate::Result<crate::config::ArchConfig> {
        crate::models::tiny_config("helium", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "head_dim": 16, "attention_bias": true"#).unwrap();
        assert!(cfg.rope.interleaved);
        assert_eq!(cfg.rope.theta, 1e5);
        assert_eq!(cfg.rms_norm_eps, 1e-8);
        assert!(cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias);
    }

    #[test]
    fn heads_narrower_than_the_width_are_refused() {
        let err = parse("").unwrap_err().to_string();
        assert!(err.contains("head_dim") && err.contains("512"), "{err}");
    }
}
