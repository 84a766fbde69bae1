//! IQuest-Coder (IQuestLab, built by transformers as LlamaForCausalLM): the Llama decoder read
//! from IQuestCoderConfig, whose head dim is 128 unless config.json says otherwise, with
//! `attention_bias` and `mlp_bias` honoured and no sliding window.

use super::decoder::Llama;
use super::family::{without_windows, FamilySpec};
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig, ModelType};
use crate::Result;

/// The family's registry entry (onnxruntime-genai's `llama` type: the same graph).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "iquestcoder",
    summary: "Llama read from IQuest-Coder's config (head dim 128 by default)",
    model_types: &[ModelType::generative("iquestcoder", "llama", read)],
};

/// transformers' IQuestCoderConfig: head dim 128, RoPE theta 1e4, `rms_norm_eps` 1e-5,
/// untied.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // Llama never slides, and IQuestCoderConfig refuses `use_sliding_window`.
    if raw.use_sliding_window == Some(true) {
        return Err(f.err(
            "use_sliding_window",
            "true is not supported for iquestcoder (transformers refuses it)",
        ));
    }
    read_decoder(&without_windows(raw), t, f, &FIELDS, |_| Ok(Llama))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "iquestcoder", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4, "mlp_bias": true"#).unwrap();
        assert_eq!((cfg.head_dim, cfg.rms_norm_eps), (128, 1e-5));
        assert!(cfg.mlp_bias && !cfg.qkv_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.layer_windows, [None, None]);
        let err = parse(r#", "use_sliding_window": true"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("use_sliding_window"), "{err}");
    }
}
