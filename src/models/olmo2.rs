//! OLMo 2: the Llama decoder with norms on each block's output
//! (`x + post_attention_layernorm(attn(x))`, `x + post_feedforward_layernorm(mlp(x))`, no
//! input norm) and RMSNorm of q and k over the whole projection width (not per head).

use super::decoder::{Family, LayerNorms, QkNorm};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{read_decoder, ArchConfig, Biases, DecoderFields};

/// The family's registry entry. onnxruntime-genai 0.18 has no `olmo2` type; its `olmo` type
/// is the same plain decoder loop, and the graph carries every OLMo 2 difference.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "olmo2",
    summary: "post-norm blocks, full-width q/k RMSNorm",
    model_types: &[ModelType::generative("olmo2", "olmo", |raw, t, f| {
        read_decoder(raw, t, f, &FIELDS, |_| Ok(Olmo2))
    })],
};

/// `attention_bias` honoured, no MLP bias, `rms_norm_eps` 1e-5 by default (Olmo2Config's).
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// OLMo 2's hooks: post-norm placement and full-width q/k norms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Olmo2;

impl Family for Olmo2 {
    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::FullWidth
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms::POST
    }
}
