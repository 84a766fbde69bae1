//! Granite: the Llama decoder with four scalar multipliers — token embeddings times
//! `embedding_multiplier`, each block output times `residual_multiplier` before its residual
//! add, `attention_multiplier` as the softmax scale, and logits divided by `logits_scaling`.
//! A multiplier of exactly 1 emits no op.

use super::components::{scalar, DecoderInputs};
use super::decoder::{self, Family};
use crate::config::{ArchConfig, Multipliers};
use crate::ir::{DType, Graph, GraphBuilder};

/// Granite's hooks: the multipliers of [`Multipliers`].
pub struct Granite;

fn multipliers(cfg: &ArchConfig) -> &Multipliers {
    cfg.family
        .multipliers
        .as_ref()
        .expect("granite configs always carry their multipliers")
}

/// `op(x, value)` unless `value` is 1.
fn scaled(b: &mut GraphBuilder, op: &str, x: String, value: f32, dtype: DType) -> String {
    if value == 1.0 {
        return x;
    }
    let c = scalar(b, value, dtype);
    b.op(op, &[&x, &c], vec![])
}

impl Family for Granite {
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        scaled(b, "Mul", x, multipliers(cfg).embedding, dtype)
    }

    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        multipliers(cfg).attention
    }

    fn residual_branch(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: String,
        dtype: DType,
    ) -> String {
        scaled(b, "Mul", y, multipliers(cfg).residual, dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        let s = multipliers(cfg).logits;
        if s == 1.0 {
            b.op_into("MatMul", &[x, head], vec![], "logits");
            return;
        }
        let product = b.op("MatMul", &[x, head], vec![]);
        let c = scalar(b, s, dtype);
        b.op_into("Div", &[&product, &c], vec![], "logits");
    }
}

/// Builds the decoder graph.
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    decoder::build(cfg, dtype, &Granite)
}
