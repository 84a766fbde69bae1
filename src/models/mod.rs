//! Model builders: [`ArchConfig`] → portable, EP-agnostic ONNX graph (opset 24).
//!
//! Every family is one file: its [`family::FamilySpec`] (the `model_type`s it answers to,
//! how their config.json reads, their onnxruntime-genai type), its config reading and its
//! builder — for decoders a set of [`decoder::Family`] hooks on the one skeleton of
//! [`decoder`]. [`registry::FAMILIES`] lists the families, one line each; shared pieces live
//! in [`components`].

pub mod afmoe;
pub mod apertus;
pub mod arcee;
pub mod aria_text;
pub mod assume_llama;
pub mod axk1;
pub mod axk2;
pub mod bamba;
pub mod bart_lm;
pub mod beam;
pub mod bert;
pub mod bert_lm;
pub mod biogpt;
pub mod bitnet;
pub mod bloom;
pub mod cohere;
pub mod cohere2;
pub mod cohere2_moe;
pub mod cohere_compass_text;
pub mod components;
pub mod ctrl;
pub mod cwm;
pub mod dbrx;
pub mod decoder;
pub mod deepseek;
pub mod deepseek_v32;
pub mod diffllama;
pub mod doge;
pub mod dots1;
pub mod emu3;
pub mod ergo;
pub mod ernie4_5;
pub mod ernie4_5_moe;
pub mod exaone;
pub mod exaone4;
pub mod exaone_moe;
pub mod falcon;
pub mod falcon_h1;
pub mod family;
pub mod flex_olmo;
pub mod flint;
pub mod gemma;
pub mod gemma3n;
pub mod gemma4;
pub mod glm;
pub mod glm4;
pub mod glm4_moe;
pub mod gpt2;
pub mod gpt_bigcode;
pub mod gpt_neo;
pub mod gpt_neox;
pub mod gpt_neox_japanese;
pub mod gpt_oss;
pub mod gptj;
pub mod granite;
pub mod granite_swa;
pub mod granitemoe;
pub mod granitemoe_swa;
pub mod granitemoehybrid;
pub mod granitemoeshared;
pub mod helium;
pub mod hunyuan_v1_dense;
pub mod hunyuan_v1_moe;
pub mod hy_v3;
pub mod hyperclovax;
pub mod internlm3;
pub mod iquestcoder;
pub mod jais2;
pub mod jamba;
pub mod jetmoe;
pub mod kolibri1;
pub mod laguna;
pub mod lfm2;
pub mod lfm2_moe;
pub mod llama;
pub mod llama4;
pub mod longcat_flash;
pub mod mamba;
pub mod mamba2;
pub mod mellum;
pub mod mimo_v2_flash;
pub mod minicpm3;
pub mod minicpm5_moe;
pub mod minimax_m2;
pub mod ministral;
pub mod ministral3;
pub mod mixtral;
pub mod mllama;
pub mod modernbert_decoder;
pub mod mpt;
pub mod multimodal;
pub mod nanochat;
pub mod nemotron;
pub mod nemotron_h;
pub mod olmo;
pub mod olmo2;
pub mod olmo3;
pub mod olmoe;
pub mod openai;
pub mod opt;
pub mod param2moe;
pub mod persimmon;
pub mod phi;
pub mod phi3;
pub mod phimoe;
pub mod qwen3;
pub mod qwen3_next;
pub mod qwen_moe;
pub mod recurrent_gemma;
pub mod registry;
pub mod sarvam_moe;
pub mod seed_oss;
pub mod smollm3;
pub mod solar_open;
pub mod stablelm;
pub mod starcoder2;
pub mod vaultgemma;
pub mod xglm;
pub mod youtu;
pub mod zamba2;

pub use registry::{load_config, load_config_with, parse_config, parse_config_with, Unregistered};

use std::collections::BTreeMap;

use crate::config::{ArchConfig, CheckpointRenaming};
use crate::ir::{DType, Model};
use crate::Result;

/// ONNX IR version written by mobius (paired with opset 24 for ONNX Runtime ≥ 1.22).
pub const IR_VERSION: i64 = 11;
/// Default-domain opset the builders emit.
pub const OPSET: i64 = 24;

/// Builds the portable graph of `cfg` in `dtype`, with its family's builder.
pub fn build_model(cfg: &ArchConfig, dtype: DType) -> Result<Model> {
    let graph = cfg.family.build(cfg, dtype);
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
pub fn checkpoint_renaming(cfg: &ArchConfig) -> Option<CheckpointRenaming> {
    cfg.family.checkpoint_renaming()
}

/// The config.json `{fields extra}` read by the registry (as `config.json`): the families'
/// config tests. `fields` are a family's base JSON members (`"field": value, …`), `extra` the
/// test's own (`, "field": value…`, or empty).
#[cfg(test)]
pub(crate) fn parse_fields(fields: &str, extra: &str) -> Result<ArchConfig> {
    let json = format!("{{{fields} {extra}}}");
    parse_config(json.as_bytes(), std::path::Path::new("config.json"))
}

/// A tiny config.json of `model_type` (hidden 64, 4 heads, 2 KV heads, 2 layers, vocabulary
/// 300, 128 positions) with the JSON fields `extra`: [`parse_fields`] of the common base.
#[cfg(test)]
pub(crate) fn tiny_config(model_type: &str, extra: &str) -> Result<ArchConfig> {
    let fields = format!(
        r#""model_type": "{model_type}", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
        "vocab_size": 300, "max_position_embeddings": 128"#
    );
    parse_fields(&fields, extra)
}
