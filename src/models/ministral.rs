//! Ministral (`ministral`, e.g. Ministral-8B-Instruct-2410): the Mistral decoder (no biases)
//! whose layers slide by `layer_types`, with transformers' default window of 4096 positions
//! when config.json names none (`"sliding_window": null` turns it off).

use super::decoder::Llama;
use super::family::FamilySpec;
use crate::config::{read_decoder, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `ministral` type; its `mistral`
/// type is the same plain decoder loop (windows live in the graph).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "ministral",
    summary: "Mistral with per-layer sliding windows (`layer_types`), window 4096 by default",
    model_types: &[ModelType::generative("ministral", "mistral", read)],
};

/// transformers' MinistralConfig: no biases, `sliding_window` 4096 when absent, every layer
/// sliding unless `layer_types` says otherwise.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    sliding_window: Some(4096),
    ..DecoderFields::LLAMA
};

/// Reads a `ministral` config (also the text decoder of a `mistral3` one).
pub(super) fn read(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
) -> Result<ArchConfig> {
    read_decoder(raw, model_type, f, &FIELDS, |_| Ok(Llama))
}

#[cfg(test)]
mod tests {

    fn parse(extra: &str) -> crate::Result<crate::config::ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "ministral", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 8192"#,
            extra,
        )
    }

    #[test]
    fn windows_follow_transformers_defaults_and_layer_types() {
        assert_eq!(parse("").unwrap().layer_windows, [Some(4096), Some(4096)]);
        assert_eq!(
            parse(r#", "sliding_window": null"#).unwrap().layer_windows,
            [None, None]
        );
        let mixed = parse(
            r#", "sliding_window": 32,
            "layer_types": ["sliding_attention", "full_attention"]"#,
        )
        .unwrap();
        assert_eq!(mixed.layer_windows, [Some(32), None]);
        assert!(!mixed.qkv_bias && !mixed.o_bias && !mixed.mlp_bias);
    }
}
