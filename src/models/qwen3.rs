//! Qwen3: the Llama decoder with per-head RMSNorm on q and k before RoPE
//! (`Reshape [0, 0, -1, D]` → `RMSNormalization(q_norm.weight [D])` → `Reshape [0, 0, -1]`).
//! The normed projections are no longer plain MatMuls, so QKV packing does not apply.

use super::decoder::{Family, QkNorm};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{read_decoder, ArchConfig, Biases, DecoderFields, SlidingLayers};

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "qwen3",
    summary: "Llama with per-head q/k RMSNorm",
    model_types: &[ModelType::generative("qwen3", "qwen2", |raw, t, f| {
        read_decoder(raw, t, f, &FIELDS, |_| Ok(Qwen3))
    })],
};

/// transformers' Qwen3Config: head_dim 128, no MLP bias, windows off unless enabled.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::Configured { mlp_bias: false },
    use_sliding_window: false,
    sliding_layers: SlidingLayers::FromMaxWindowLayers,
    ..DecoderFields::LLAMA
};

/// Qwen3's hooks: per-head q/k norms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qwen3;

impl Family for Qwen3 {
    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn windows_need_use_sliding_window_and_biases_follow_attention_bias() {
        let parse = |extra: &str| {
            crate::models::parse_fields(
                r#""model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
                "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
                "max_position_embeddings": 128, "sliding_window": 8,
                "max_window_layers": 2"#,
                extra,
            )
            .unwrap()
        };
        let c = parse(r#", "attention_bias": true"#);
        assert_eq!(c.layer_windows, [None; 4]);
        assert!(c.qkv_bias && c.o_bias && !c.mlp_bias);
        let on = parse(r#", "use_sliding_window": true"#);
        assert_eq!(on.layer_windows, [None, None, Some(8), Some(8)]);
    }
}
