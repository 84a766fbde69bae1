//! InternLM3 (Shanghai AI Lab): transformers builds it as Llama (LlamaForCausalLM); its
//! config reads `qkv_bias` as `attention_bias` and `bias` as `mlp_bias` (which transformers
//! requires to agree), with a head dim of 128 unless config.json says otherwise.

use super::decoder::Llama;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `internlm3` type; its `llama`
/// type is the same decoder.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "internlm3",
    summary: "Llama read from InternLM3's config (`qkv_bias`, `bias`, head dim 128)",
    model_types: &[ModelType::generative("internlm3", "llama", read)],
};

/// transformers' InternLM3Config: head dim 128, `rms_norm_eps` 1e-5, RoPE theta 1e4, untied.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // InternLM3Config has no sliding window or layer types: transformers never slides.
    let raw = HfConfig {
        attention_bias: raw.attention_bias.or(raw.qkv_bias),
        mlp_bias: raw.mlp_bias.or(raw.bias),
        sliding_window: None,
        use_sliding_window: None,
        layer_types: None,
        ..raw.clone()
    };
    let (attention, mlp) = (
        raw.attention_bias.unwrap_or(false),
        raw.mlp_bias.unwrap_or(false),
    );
    if attention != mlp {
        return Err(f.err(
            "bias",
            &format!(
                "{mlp} while qkv_bias (attention_bias) is {attention}: transformers requires \
                 them equal for InternLM3"
            ),
        ));
    }
    read_decoder(&raw, t, f, &FIELDS, |_| Ok(Llama))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "internlm3", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn reads_transformers_defaults_and_its_bias_names() {
        let cfg = parse(r#", "sliding_window": 4"#).unwrap();
        assert_eq!((cfg.head_dim, cfg.rms_norm_eps), (128, 1e-5));
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias);
        assert_eq!(cfg.layer_windows, [None, None]);
        let biased = parse(r#", "qkv_bias": true, "bias": true"#).unwrap();
        assert!(biased.qkv_bias && biased.o_bias && biased.mlp_bias);
        let err = parse(r#", "qkv_bias": true"#).unwrap_err().to_string();
        assert!(err.contains("bias") && err.contains("config.json"), "{err}");
    }
}
