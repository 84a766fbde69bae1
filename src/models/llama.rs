//! The Llama family (llama, mistral, qwen2): the plain pre-norm decoder of
//! [`super::decoder`] with no family hooks (q/k/v biases, sliding windows and RoPE scaling
//! come from the shared config fields).

use super::decoder::Llama;
use super::family::FamilySpec;
use super::ministral;
use super::multimodal::{read_text_part, TextPart, TextType};
use crate::config::{
    read_decoder, ArchConfig, Biases, DecoderFields, Fields, HfConfig, Knobs, ModelType,
    SlidingLayers,
};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "llama",
    summary: "pre-norm RMSNorm decoder, SiLU-gated MLP, RoPE (`default`, `linear`, `llama3`, \
              `yarn`, `dynamic`), \
              GQA/MQA, optional biases (qwen2: q/k/v), sliding-window layers; `mistral3`: the \
              text decoder of Mistral3ForConditionalGeneration (no vision part)",
    model_types: &[
        ModelType::generative("llama", "llama", |raw, t, f| {
            read(raw, t, f, &DecoderFields::LLAMA)
        }),
        ModelType::generative("mistral", "mistral", |raw, t, f| read(raw, t, f, &MISTRAL)),
        ModelType::generative("qwen2", "qwen2", |raw, t, f| read(raw, t, f, &QWEN2)),
        ModelType::generative("mistral3", "mistral", |raw, t, f| {
            read_text_part(raw, t, f, &MISTRAL3)
        }),
    ],
};

/// transformers' MistralConfig defaults the readers do not hold themselves (Ministral's are the
/// same).
const MISTRAL_DEFAULTS: &str = r#"{"vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 131072, "sliding_window": 4096,
    "bos_token_id": 1, "eos_token_id": 2}"#;

/// Mistral3ForConditionalGeneration's (Mistral-Small-3.x) text decoder: a `mistral` or
/// `ministral` config, built as those are.
const MISTRAL3: TextPart = TextPart {
    default_type: "mistral",
    text_types: &[
        TextType {
            name: "mistral",
            defaults: MISTRAL_DEFAULTS,
            read: |raw, t, f| read(raw, t, f, &MISTRAL),
        },
        TextType {
            name: "ministral",
            defaults: MISTRAL_DEFAULTS,
            read: ministral::read,
        },
    ],
    decoder: Knobs::clone,
};

/// Mistral: no biases.
const MISTRAL: DecoderFields = DecoderFields {
    biases: Biases::None,
    ..DecoderFields::LLAMA
};

/// Qwen2: biases on q, k and v; windows from `max_window_layers` on.
const QWEN2: DecoderFields = DecoderFields {
    biases: Biases::Qkv,
    sliding_layers: SlidingLayers::FromMaxWindowLayers,
    ..DecoderFields::LLAMA
};

fn read(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
    fields: &DecoderFields,
) -> Result<ArchConfig> {
    read_decoder(raw, model_type, f, fields, |_| Ok(Llama))
}
