//! Model builders: [`ArchConfig`] → portable, EP-agnostic ONNX graph (opset 24).
//!
//! Every decoder family is a set of [`decoder::Family`] hooks on the one skeleton of
//! [`decoder`], in its own file; shared pieces live in [`components`].

pub mod bert;
pub mod components;
pub mod decoder;
pub mod gemma;
pub mod gpt2;
pub mod granite;
pub mod llama;
pub mod olmo2;
pub mod phi;
pub mod phi3;
pub mod qwen3;
pub mod smollm3;

use std::collections::BTreeMap;

use crate::config::ArchConfig;
use crate::ir::{DType, Model};
use crate::Result;

/// ONNX IR version written by mobius (paired with opset 24 for ONNX Runtime ≥ 1.22).
pub const IR_VERSION: i64 = 11;
/// Default-domain opset the builders emit.
pub const OPSET: i64 = 24;

/// Builds the portable graph of `cfg` in `dtype`.
pub fn build_model(cfg: &ArchConfig, dtype: DType) -> Result<Model> {
    let graph = match cfg.model_type.as_str() {
        // Plain pre-norm decoders share one builder.
        "llama" | "mistral" | "qwen2" => llama::build(cfg, dtype),
        "gemma" | "gemma2" | "gemma3_text" => gemma::build(cfg, dtype),
        "gpt2" => gpt2::build(cfg, dtype),
        "phi" => phi::build(cfg, dtype),
        "bert" | "roberta" => bert::build(cfg, dtype),
        "qwen3" => qwen3::build(cfg, dtype),
        "smollm3" => smollm3::build(cfg, dtype),
        "granite" => granite::build(cfg, dtype),
        "olmo2" => olmo2::build(cfg, dtype),
        "phi3" => phi3::build(cfg, dtype),
        other => unreachable!("config validation admits only supported model types, got {other}"),
    };
    graph.validate()?;
    Ok(Model {
        graph,
        opsets: BTreeMap::from([(String::new(), OPSET)]),
        ir_version: IR_VERSION,
        producer_name: "mobius".to_string(),
        producer_version: env!("CARGO_PKG_VERSION").to_string(),
    })
}

/// How the builder of `cfg`'s family renames checkpoint tensors before reading them (`None`
/// when it reads the checkpoint's own names); the function returns `None` for tensors it drops.
pub fn checkpoint_renaming(cfg: &ArchConfig) -> Option<fn(&str) -> Option<String>> {
    match cfg.model_type.as_str() {
        "bert" | "roberta" => Some(bert::checkpoint_name),
        "gpt2" => Some(gpt2::checkpoint_name),
        _ => None,
    }
}
