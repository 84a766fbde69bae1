//! `--assume-llama`: an unregistered `model_type` whose architectures are all `*ForCausalLM`
//! is read as a llama config and built as llama, once its config.json holds none of the fields
//! that make other families compute differently and its checkpoint holds exactly the tensors,
//! of exactly the shapes, a llama of that config reads.

use std::collections::BTreeMap;

use serde_json::Value;

use super::decoder::Llama;
use crate::config::ModelType;
use crate::config::{read_decoder, DecoderFields, Fields, HfConfig};
use crate::ir::{Graph, TensorSource};
use crate::weights::store::TensorStore;
use crate::{Error, Result};

/// The model type an assumed llama is read as: llama's reading, run by onnxruntime-genai as
/// `llama`.
pub static ASSUMED_LLAMA: ModelType = ModelType::generative(
    "llama (assumed with --assume-llama)",
    "llama",
    |raw, t, f| read_decoder(raw, t, f, &DecoderFields::LLAMA, |_| Ok(Llama)),
);

/// config.json fields other families read that change what the model computes (scales,
/// soft-caps, norms, RoPE-less layers, parallel blocks, experts): a llama build would ignore
/// them, so their presence (other than `null` or `false`) refuses the assumption.
const NOT_LLAMA_FIELDS: &[&str] = &[
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "query_pre_attn_scalar",
    "hidden_activation",
    "embedding_multiplier",
    "residual_multiplier",
    "attention_multiplier",
    "logits_scaling",
    "logit_scale",
    "no_rope_layers",
    "no_rope_layer_interval",
    "qk_layernorm",
    "use_qk_norm",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "norm_epsilon",
    "use_parallel_residual",
    "parallel_attn",
    "parallel_block",
    "rotary_pct",
    "clip_qkv",
    "use_bias",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
];

/// Whether `raw` says it is a causal LM: `architectures` is a non-empty list of
/// `*ForCausalLM` class names.
pub fn is_causal_lm(raw: &HfConfig) -> bool {
    match &raw.architectures {
        Some(Value::Array(names)) => {
            !names.is_empty()
                && names
                    .iter()
                    .all(|n| n.as_str().is_some_and(|n| n.ends_with("ForCausalLM")))
        }
        _ => false,
    }
}

/// The error for an unregistered causal LM built without `--assume-llama`.
pub fn needs_the_flag(raw: &HfConfig, name: &str, f: &Fields<'_>) -> Error {
    let archs = match &raw.architectures {
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        _ => String::new(),
    };
    f.err(
        "model_type",
        &format!(
            "`{name}` is not a model type mobius knows (`mobius list models`); its architectures \
             ({archs}) name a causal LM: pass --assume-llama to build it as llama, its \
             config.json and every checkpoint tensor checked against the Llama layout"
        ),
    )
}

/// Refuses a config.json (`json`, already parsed as `raw`) holding a field of
/// [`NOT_LLAMA_FIELDS`].
pub fn check_fields(json: &Value, name: &str, f: &Fields<'_>) -> Result<()> {
    for field in NOT_LLAMA_FIELDS {
        match json.get(field) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(value) => {
                return Err(f.err(
                    field,
                    &format!(
                        "{value} is not part of the Llama layout (model_type `{name}` computes \
                         something a llama build would not; --assume-llama builds Llama-shaped \
                         models only)"
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// Checks the checkpoint against the tensors `graph` (the portable llama graph of the config)
/// reads: every tensor of `store` is one of them, with the shape it reads, and none is missing.
/// Errors name the tensor and what the Llama layout expects.
pub fn check_tensors(graph: &Graph, store: &TensorStore) -> Result<()> {
    let mut expected: BTreeMap<String, Option<Vec<usize>>> = BTreeMap::new();
    for init in &graph.initializers {
        if let Some(src) = &init.source {
            read_by(src, Some(init.shape.clone()), &mut expected);
        }
    }
    for name in store.names() {
        if !expected.contains_key(name) {
            let head = if expected.contains_key("lm_head.weight") {
                ", lm_head.weight"
            } else {
                " (the head is tied)"
            };
            return Err(Error::Source(format!(
                "--assume-llama: checkpoint tensor `{name}` is not part of the Llama layout of \
                 this config.json ({} tensors: model.embed_tokens.weight, model.layers.N.* for N \
                 in 0..={}, model.norm.weight{head})",
                expected.len(),
                last_layer(&expected)
            )));
        }
    }
    for (name, shape) in &expected {
        let Some(tensor) = store.get(name) else {
            return Err(Error::MissingTensor {
                name: name.clone(),
                searched: "--assume-llama: the Llama layout of this config.json reads it"
                    .to_string(),
            });
        };
        if let Some(shape) = shape.as_ref().filter(|s| s.as_slice() != tensor.shape) {
            return Err(Error::ShapeMismatch {
                name: name.clone(),
                path: tensor.path.to_path_buf(),
                expected: shape.clone(),
                actual: tensor.shape.to_vec(),
            });
        }
    }
    Ok(())
}

/// The last decoder layer the expected names hold (for the error message).
fn last_layer(expected: &BTreeMap<String, Option<Vec<usize>>>) -> usize {
    expected
        .keys()
        .filter_map(|k| {
            k.strip_prefix("model.layers.")?
                .split('.')
                .next()?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// The checkpoint tensors `src` reads, with the shape it reads them at when that is known.
fn read_by(
    src: &TensorSource,
    shape: Option<Vec<usize>>,
    out: &mut BTreeMap<String, Option<Vec<usize>>>,
) {
    match src {
        TensorSource::Checkpoint(name) => {
            out.insert(name.clone(), shape);
        }
        TensorSource::Transpose(inner) => {
            let swapped = shape.filter(|s| s.len() == 2).map(|s| vec![s[1], s[0]]);
            read_by(inner, swapped, out);
        }
        TensorSource::AddScalar { source, .. } => read_by(source, shape, out),
        TensorSource::Concat { parts, .. } => {
            for part in parts {
                read_by(part, None, out);
            }
        }
        TensorSource::Slice { source, .. }
        | TensorSource::Quantize { source, .. }
        | TensorSource::NBits { source, .. }
        | TensorSource::FromNBits { source, .. }
        | TensorSource::MoeExperts { source, .. }
        | TensorSource::Reshape { source, .. } => read_by(source, None, out),
        // Computed tables and constants read no tensor; packed and fp8 checkpoint sources only
        // appear once checkpoint quantization has run, after this check.
        TensorSource::Inline(_)
        | TensorSource::External { .. }
        | TensorSource::RotaryTable { .. }
        | TensorSource::Packed4 { .. }
        | TensorSource::Fp8Blocks { .. } => {}
    }
}
