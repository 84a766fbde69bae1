//! Seed-OSS (ByteDance, transformers' SeedOssForCausalLM): the Llama decoder with the bias of
//! the output projection set apart from q, k and v's — `attention_bias` (on by default) puts
//! one on q, k and v, `attention_out_bias` (off by default) one on o — and a head dim of 128
//! unless config.json says otherwise.

use super::decoder::Llama;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `seed_oss` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "seed_oss",
    summary: "Llama with q/k/v biases on by default and o's bias apart (`attention_out_bias`)",
    model_types: &[ModelType::generative("seed_oss", "decoder", read)],
};

/// transformers' SeedOssConfig: head dim 128, `mlp_bias` honoured, RoPE theta 1e4, untied.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // SeedOssConfig has no sliding window or layer types: transformers never slides.
    let raw = HfConfig {
        attention_bias: Some(raw.attention_bias.unwrap_or(true)),
        sliding_window: None,
        use_sliding_window: None,
        layer_types: None,
        ..raw.clone()
    };
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |_| Ok(Llama))?;
    cfg.o_bias = raw.attention_out_bias.unwrap_or(false);
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "seed_oss", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4"#).unwrap();
        assert_eq!(cfg.head_dim, 128);
        assert!(cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.layer_windows, [None, None]);
        let flipped = parse(
            r#", "head_dim": 16, "attention_bias": false, "attention_out_bias": true,
            "mlp_bias": true"#,
        )
        .unwrap();
        assert_eq!(flipped.head_dim, 16);
        assert!(!flipped.qkv_bias && flipped.o_bias && flipped.mlp_bias);
    }
}
