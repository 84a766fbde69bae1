//! Granite: the Llama decoder with four scalar multipliers — token embeddings times
//! `embedding_multiplier`, each block output times `residual_multiplier` before its residual
//! add, `attention_multiplier` as the softmax scale, and logits divided by `logits_scaling`.
//! A multiplier of exactly 1 emits no op.

use super::components::{scalar, DecoderInputs};
use super::decoder::Family;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig, Sign};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "granite",
    summary: "Llama with embedding, residual, attention and logits multipliers",
    model_types: &[ModelType::generative("granite", "granite", |raw, t, f| {
        read_decoder(raw, t, f, &DecoderFields::LLAMA, |_| multipliers(raw, f))
    })],
};

/// Granite's knobs, as transformers applies them; its hooks apply them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Multipliers {
    /// Token embeddings are multiplied by it.
    pub embedding: f32,
    /// Attention and MLP outputs are multiplied by it before the residual add.
    pub residual: f32,
    /// The attention softmax scale (replaces `head_dim^-0.5`).
    pub attention: f32,
    /// Logits are divided by it.
    pub logits: f32,
}

/// The multipliers of config.json, 1 when absent; none may be 0.
pub(super) fn multipliers(raw: &HfConfig, f: &Fields<'_>) -> Result<Multipliers> {
    let get = |field: &str, value: Option<f64>| f.number(field, value, 1.0, Sign::NonZero);
    Ok(Multipliers {
        embedding: get("embedding_multiplier", raw.embedding_multiplier)?,
        residual: get("residual_multiplier", raw.residual_multiplier)?,
        attention: get("attention_multiplier", raw.attention_multiplier)?,
        logits: get("logits_scaling", raw.logits_scaling)?,
    })
}

/// `op(x, value)` unless `value` is 1.
fn scaled(b: &mut GraphBuilder, op: &str, x: String, value: f32, dtype: DType) -> String {
    if value == 1.0 {
        return x;
    }
    let c = scalar(b, value, dtype);
    b.op(op, &[&x, &c], vec![])
}

impl Family for Multipliers {
    fn embed(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        scaled(b, "Mul", x, self.embedding, dtype)
    }

    fn attention_scale(&self, _cfg: &ArchConfig) -> f32 {
        self.attention
    }

    fn residual_branch(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        y: String,
        dtype: DType,
    ) -> String {
        scaled(b, "Mul", y, self.residual, dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        let s = self.logits;
        if s == 1.0 {
            b.op_into("MatMul", &[x, head], vec![], "logits");
            return;
        }
        let product = b.op("MatMul", &[x, head], vec![]);
        let c = scalar(b, s, dtype);
        b.op_into("Div", &[&product, &c], vec![], "logits");
    }
}

#[cfg(test)]
mod tests {
    use super::Multipliers;
    use crate::config::ArchConfig;

    fn parse(model_type: &str, extra: &str) -> crate::Result<ArchConfig> {
        let fields = format!(
            r#""model_type": "{model_type}", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 128"#
        );
        crate::models::parse_fields(&fields, extra)
    }

    #[test]
    fn multipliers_default_to_one_and_reject_zero() {
        let plain = parse("granite", "").unwrap();
        let m = plain.knobs::<Multipliers>().unwrap();
        assert_eq!(
            (m.embedding, m.residual, m.attention, m.logits),
            (1.0, 1.0, 1.0, 1.0)
        );
        let err = parse("granite", r#", "logits_scaling": 0"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("logits_scaling"), "{err}");
        assert!(parse("llama", "").unwrap().knobs::<Multipliers>().is_none());
    }
}
