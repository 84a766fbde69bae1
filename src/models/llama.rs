//! The Llama family (llama, mistral, qwen2): the plain pre-norm decoder of
//! [`super::decoder`] with no family hooks (q/k/v biases, sliding windows and RoPE scaling
//! come from the shared config fields).

use super::decoder::{self, Family};
use super::registry::{FamilySpec, ModelType};
use crate::config::{
    read_decoder, ArchConfig, Biases, DecoderFields, FamilyKnobs, Fields, HfConfig, SlidingLayers,
};
use crate::ir::{DType, Graph};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "llama",
    summary: "pre-norm RMSNorm decoder, SiLU-gated MLP, RoPE (`default`, `linear`, `llama3`, \
              `yarn`, `dynamic`), \
              GQA/MQA, optional biases (qwen2: q/k/v), sliding-window layers",
    model_types: &[
        ModelType::generative("llama", "llama", |raw, t, f| {
            read(raw, t, f, &DecoderFields::LLAMA)
        }),
        ModelType::generative("mistral", "mistral", |raw, t, f| read(raw, t, f, &MISTRAL)),
        ModelType::generative("qwen2", "qwen2", |raw, t, f| read(raw, t, f, &QWEN2)),
    ],
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

/// The plain Llama decoder: every [`Family`] default, no knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Llama;

impl Family for Llama {}

impl FamilyKnobs for Llama {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        decoder::build(cfg, dtype, self)
    }
}
