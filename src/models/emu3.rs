//! Emu3 text (BAAI, transformers' Emu3ForCausalLM, `emu3_text_model`): the Llama decoder with
//! Emu3TextConfig's defaults — RoPE theta 1e6, `rms_norm_eps` 1e-5, no sliding window — and
//! `attention_bias` / `mlp_bias` honoured when config.json sets them.

use super::decoder::Llama;
use super::family::{without_windows, FamilySpec};
use crate::config::{
    read_decoder, read_rope, ArchConfig, DecoderFields, Fields, HfConfig, ModelType,
};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `emu3` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "emu3",
    summary: "Emu3's text decoder (Emu3ForCausalLM): Llama with RoPE theta 1e6 by default",
    model_types: &[ModelType::generative("emu3_text_model", "decoder", read)],
};

/// transformers' Emu3TextConfig: RoPE theta 1e6, `rms_norm_eps` 1e-5, untied; the biases
/// off unless config.json sets `attention_bias` or `mlp_bias`.
const FIELDS: DecoderFields = DecoderFields {
    rope: |raw, head_dim, f| read_rope(raw, head_dim, 1_000_000.0, f),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // Emu3TextConfig has no sliding window or layer types: transformers never slides.
    read_decoder(&without_windows(raw), t, f, &FIELDS, |_| Ok(Llama))
}

#[cfg(test)]
mod tests {
    fn parse(extra: &str) -> crate::Result<crate::config::ArchConfig> {
        crate::models::tiny_config("emu3_text_model", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4"#).unwrap();
        assert_eq!(cfg.rope.theta, 1e6);
        assert_eq!(cfg.rms_norm_eps, 1e-5);
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        let biased = parse(r#", "attention_bias": true, "mlp_bias": true"#).unwrap();
        assert!(biased.qkv_bias && biased.o_bias && biased.mlp_bias);
    }
}
