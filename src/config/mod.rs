//! `config.json` → [`ArchConfig`], one normalised description of the architecture.

pub mod decoder;
pub mod family;
mod fields;
pub mod gelu;
pub mod hf;
pub mod longrope;
mod model_type;
pub mod moe;
pub mod quantization;
pub mod rope;
pub mod yarn;

use std::any::Any;
use std::path::Path;

use serde_json::Value;

use crate::ir::DType;
use crate::limits::config::MAX_POSITIONS;
use crate::role::Role;
use crate::{Error, Result};
pub use decoder::{read_decoder, sliding_layer_types, Biases, DecoderFields, Dims, SlidingLayers};
pub use family::{CheckpointRenaming, FamilyKnobs, Knobs};
pub use fields::{Fields, Sign};
pub use gelu::Gelu;
pub use hf::HfConfig;
pub use model_type::{ModelType, ReadConfig};
pub use moe::read_routing;
pub use quantization::{CheckpointQuant, QuantMethod};
pub use rope::{Rope, RopeScaling};

/// The architecture of a model, normalised from any supported `config.json`: the fields every
/// family shares, and the family's own knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchConfig {
    /// The HF `model_type`, as registered ([`crate::models::registry`]).
    pub model_type: &'static ModelType,
    /// Width of the residual stream (H).
    pub hidden_size: usize,
    /// Width of the MLP (I).
    pub intermediate_size: usize,
    /// Query heads (Hq).
    pub num_attention_heads: usize,
    /// Key/value heads (Hkv); Hq is a multiple of it (GQA/MQA).
    pub num_key_value_heads: usize,
    /// Channels per head (D).
    pub head_dim: usize,
    /// Decoder layers (L).
    pub num_hidden_layers: usize,
    /// Vocabulary size (V).
    pub vocab_size: usize,
    /// Rows of the RoPE tables.
    pub max_position_embeddings: usize,
    /// Epsilon of every RMSNorm (0 for families normalised with LayerNorm, whose knobs hold
    /// their epsilon).
    pub rms_norm_eps: f32,
    /// Whether the LM head reuses the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Bias on the q/k/v projections.
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub o_bias: bool,
    /// Bias on the MLP projections.
    pub mlp_bias: bool,
    /// Rotary position embedding (families without one hold a full-width default, not read).
    pub rope: Rope,
    /// Sliding attention window per layer (`None` = full causal attention).
    pub layer_windows: Vec<Option<usize>>,
    /// The checkpoint's dtype, when the config states it.
    pub dtype: Option<DType>,
    /// Beginning-of-sequence token.
    pub bos_token_id: Option<i64>,
    /// End-of-sequence token(s).
    pub eos_token_ids: Vec<i64>,
    /// Padding token.
    pub pad_token_id: Option<i64>,
    /// The family's own knobs, which build the graph.
    pub family: Knobs,
}

impl ArchConfig {
    /// Normalises a raw HF config as its registered `model_type` reads it (the family
    /// registry, `crate::models::registry`, finds that entry); errors name the field and what
    /// was expected. Token ids (`bos_token_id`, `eos_token_id`, `pad_token_id`) must be
    /// integers in `0..vocab_size`.
    pub fn from_hf(
        raw: &HfConfig,
        path: &Path,
        model_type: &'static ModelType,
    ) -> Result<ArchConfig> {
        let f = Fields { path };
        let cfg = (model_type.read)(raw, model_type, &f)?;
        for (field, ids) in [
            ("bos_token_id", cfg.bos_token_id.as_slice()),
            ("eos_token_id", cfg.eos_token_ids.as_slice()),
            ("pad_token_id", cfg.pad_token_id.as_slice()),
        ] {
            in_vocab(&f, field, ids, cfg.vocab_size)?;
        }
        Ok(cfg)
    }

    /// Fills token ids the config.json lacks from a `generation_config.json`, and adds its
    /// end-of-sequence ids to config.json's. Its token ids must be integers in
    /// `0..vocab_size`, as config.json's; errors name the file and the field.
    pub fn fill_tokens_from_generation_config(&mut self, path: &Path) -> Result<()> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let gen: Value = serde_json::from_slice(&bytes).map_err(|e| Error::json(path, &e))?;
        let f = Fields { path };
        let read = |field: &str| -> Result<Vec<i64>> {
            let ids = token_list(&f, field, gen.get(field))?;
            in_vocab(&f, field, &ids, self.vocab_size)?;
            Ok(ids)
        };
        let (bos, eos, pad) = (
            read("bos_token_id")?,
            read("eos_token_id")?,
            read("pad_token_id")?,
        );
        // generate() stops on generation_config's ids (e.g. Phi-3's `<|end|>`, absent from
        // config.json): keep config.json's first, then add the others.
        for id in eos {
            if !self.eos_token_ids.contains(&id) {
                self.eos_token_ids.push(id);
            }
        }
        self.bos_token_id = self.bos_token_id.or(bos.first().copied());
        self.pad_token_id = self.pad_token_id.or(pad.first().copied());
        Ok(())
    }

    /// Query width (Hq · D).
    pub fn q_size(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// Key/value width (Hkv · D).
    pub fn kv_size(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    /// The model's role for the optimizer, as its family says.
    pub fn role(&self) -> Role {
        self.family.role()
    }

    /// The family's knobs as `T`, when they are of that type.
    pub fn knobs<T: Any>(&self) -> Option<&T> {
        self.family.as_any().downcast_ref()
    }
}

pub(crate) fn parse_dtype(raw: &HfConfig, f: &Fields<'_>) -> Result<Option<DType>> {
    let (field, value) = match (&raw.dtype, &raw.torch_dtype) {
        (Some(v), _) => ("dtype", v),
        (None, Some(v)) => ("torch_dtype", v),
        (None, None) => return Ok(None),
    };
    if value == "auto" {
        return Ok(None);
    }
    DType::parse_model_dtype(value).map(Some).ok_or_else(|| {
        f.err(
            field,
            &format!("`{value}` (expected float32, float16 or bfloat16)"),
        )
    })
}

/// The RoPE of one layer type from its own parameters `params` (what
/// `rope_parameters.{kind}` holds where config.json keeps one RoPE per layer type, or the
/// config class's default for it): [`read_rope`] on them alone (`default_theta` when they give
/// no theta), its errors naming `rope_parameters.{kind}`.
pub fn read_layer_type_rope(
    raw: &HfConfig,
    params: Value,
    kind: &str,
    head_dim: usize,
    default_theta: f64,
    f: &Fields<'_>,
) -> Result<Rope> {
    let field = format!("rope_parameters.{kind}");
    let one = HfConfig {
        rope_parameters: Some(params),
        rope_scaling: None,
        rope_theta: None,
        ..raw.clone()
    };
    read_rope(&one, head_dim, default_theta, f).map_err(|e| match e {
        Error::ConfigField {
            path,
            field: inner,
            message,
        } => Error::ConfigField {
            path,
            field: inner.replacen("rope_parameters", &field, 1),
            message,
        },
        other => other,
    })
}

/// Per layer, whether `mlp_layer_types` (`types`, one entry per layer) names it `sparse` (its
/// MLP is the experts) or `dense`.
pub fn read_sparse_layers(types: &[String], layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    if types.len() != layers {
        return Err(f.err(
            "mlp_layer_types",
            &format!(
                "has {} entries, expected num_hidden_layers = {layers}",
                types.len()
            ),
        ));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            "sparse" => Ok(true),
            "dense" => Ok(false),
            other => Err(f.err(
                "mlp_layer_types",
                &format!("`{other}` (expected dense or sparse)"),
            )),
        })
        .collect()
}

/// The RoPE parameters: v5 `rope_parameters` first, else v4 `rope_theta` + `rope_scaling`
/// (`default_theta` when neither gives a theta).
pub fn read_rope(
    raw: &HfConfig,
    head_dim: usize,
    default_theta: f64,
    f: &Fields<'_>,
) -> Result<Rope> {
    let (field, params) = match (&raw.rope_parameters, &raw.rope_scaling) {
        (Some(p @ Value::Object(_)), _) => ("rope_parameters", Some(p)),
        (_, Some(p @ Value::Object(_))) => ("rope_scaling", Some(p)),
        _ => ("rope_scaling", None),
    };
    let name = |key: &str| format!("{field}.{key}");
    let get = |key: &str| f.json_number(&name(key), params.and_then(|p| p.get(key)));
    let num =
        |key: &str| -> Result<f32> { f.required_number(&name(key), get(key)?, Sign::Positive) };
    let theta = match get("rope_theta")? {
        Some(t) => f.number(&name("rope_theta"), Some(t), t, Sign::Positive)?,
        None => f.number("rope_theta", raw.rope_theta, default_theta, Sign::Positive)?,
    };
    let kind = params
        .and_then(|p| p.get("rope_type").or_else(|| p.get("type")))
        .filter(|v| !v.is_null());
    let rope_type = match kind {
        None => "default",
        Some(v) => v
            .as_str()
            .ok_or_else(|| f.err(&name("rope_type"), &format!("{v} (expected a string)")))?,
    };
    let scaling = match rope_type {
        "default" => RopeScaling::Default,
        "linear" => RopeScaling::Linear {
            factor: num("factor")?,
        },
        "longrope" | "su" => RopeScaling::LongRope(longrope::parse(
            raw,
            field,
            params,
            raw.max_position_embeddings.unwrap_or(0).max(0) as usize,
            f,
        )?),
        "yarn" => RopeScaling::Yarn(yarn::parse(
            raw,
            field,
            params.unwrap_or(&Value::Null),
            raw.max_position_embeddings.unwrap_or(0).max(0) as usize,
            f,
        )?),
        "dynamic" => {
            let original = match raw.max_position_embeddings {
                Some(m) if m > 0 => m as usize,
                other => {
                    return Err(f.err(
                        "max_position_embeddings",
                        &format!(
                            "{} (dynamic NTK RoPE scales from it: expected a positive integer)",
                            other.map_or("missing".to_string(), |m| m.to_string())
                        ),
                    ))
                }
            };
            let factor = num("factor")?;
            // The context the model then runs (genai's context_length) is ⌈factor × it⌉.
            let context = (f64::from(factor) * original as f64).ceil();
            if context > MAX_POSITIONS as f64 {
                return Err(f.err(
                    &name("factor"),
                    &format!(
                        "{factor} gives a context of {context} positions (factor × \
                         max_position_embeddings {original}), more than mobius supports (at most \
                         {MAX_POSITIONS})"
                    ),
                ));
            }
            RopeScaling::Dynamic { factor, original }
        }
        "llama3" => {
            let low_freq_factor = num("low_freq_factor")?;
            let high_freq_factor = num("high_freq_factor")?;
            // The smoothing divides by their difference; equal or swapped bands are meaningless.
            if high_freq_factor <= low_freq_factor {
                return Err(f.err(
                    &name("high_freq_factor"),
                    &format!(
                        "{high_freq_factor} (expected more than low_freq_factor = \
                         {low_freq_factor})"
                    ),
                ));
            }
            RopeScaling::Llama3 {
                factor: num("factor")?,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: num("original_max_position_embeddings")?,
            }
        }
        other => {
            return Err(f.err(
                &name("rope_type"),
                &format!(
                "`{other}` is not supported (expected default, linear, llama3, longrope, yarn or \
                     dynamic)"
            ),
            ))
        }
    };
    let partial = match get("partial_rotary_factor")? {
        Some(p) => (name("partial_rotary_factor"), p),
        None => (
            "partial_rotary_factor".to_string(),
            raw.partial_rotary_factor.unwrap_or(1.0),
        ),
    };
    let (partial_field, partial) = partial;
    let rotary_dim = (head_dim as f64 * partial) as usize;
    if !(partial > 0.0 && partial <= 1.0) || rotary_dim == 0 || rotary_dim % 2 != 0 {
        return Err(f.err(
            &partial_field,
            &format!(
                "{partial} gives a rotary width of {rotary_dim} (expected a factor in (0, 1] \
                 giving an even width, 2..={head_dim})"
            ),
        ));
    }
    if let RopeScaling::LongRope(l) = &scaling {
        longrope::check_width(l, field, rotary_dim, f)?;
    }
    Ok(Rope {
        theta,
        scaling,
        rotary_dim,
        interleaved: false,
    })
}

/// The token ids of `field`: an integer ≥ 0 or a list of them; none when absent, `null` or
/// -1 (older configs, e.g. LLaMA's `pad_token_id: -1`, spell "no such token" that way).
/// Anything else (another negative number, a fraction, a string, `null` in a list) is an error
/// naming the field.
pub(crate) fn token_list(f: &Fields<'_>, field: &str, v: Option<&Value>) -> Result<Vec<i64>> {
    let items: Vec<&Value> = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(one) => vec![one],
    };
    items
        .into_iter()
        .filter(|item| item.as_i64() != Some(-1))
        .map(|item| match item.as_i64() {
            Some(id) if id >= 0 => Ok(id),
            _ => Err(f.err(
                field,
                &format!(
                    "{item} is not a token id (expected an integer ≥ 0, or a list of them; -1 \
                     for none)"
                ),
            )),
        })
        .collect()
}

/// The first token id of `field` ([`token_list`]).
pub(crate) fn first_token(f: &Fields<'_>, field: &str, v: Option<&Value>) -> Result<Option<i64>> {
    Ok(token_list(f, field, v)?.first().copied())
}

/// Checks that every id of `field` is below `vocab_size`.
fn in_vocab(f: &Fields<'_>, field: &str, ids: &[i64], vocab_size: usize) -> Result<()> {
    match ids.iter().find(|&&id| id as u64 >= vocab_size as u64) {
        Some(id) => Err(f.err(
            field,
            &format!("token id {id} is outside the vocabulary (vocab_size {vocab_size})"),
        )),
        None => Ok(()),
    }
}

impl HfConfig {
    /// Parses config.json bytes; `path` is used in error messages only.
    /// The bare `Infinity`, `-Infinity` and `NaN` Python's json module writes (transformers'
    /// Mamba2 `time_step_limit` is `[0.0, Infinity]`) are read as the strings `"Infinity"`,
    /// `"-Infinity"` and `"NaN"`: a field that accepts them says so, any other refuses them
    /// as it refuses a string.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<HfConfig> {
        let bytes = quote_non_finite(bytes);
        serde_json::from_slice(&bytes).map_err(|e| fields::json_error(&bytes, path, &e))
    }

    /// The `model_type` it names (an error naming config.json's field when missing).
    pub fn model_type_name(&self, path: &Path) -> Result<&str> {
        self.model_type.as_deref().ok_or_else(|| {
            Fields { path }.err(
                "model_type",
                "missing (expected a string such as \"llama\")",
            )
        })
    }
}

/// `bytes` with every bare `Infinity`, `-Infinity` and `NaN` token outside strings quoted
/// (borrowed unchanged when there is none).
fn quote_non_finite(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    const TOKENS: [&[u8]; 3] = [b"-Infinity", b"Infinity", b"NaN"];
    let mut out: Option<Vec<u8>> = None;
    let (mut in_string, mut escaped, mut i) = (false, false, 0);
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            (in_string, escaped) = match (escaped, c) {
                (true, _) => (true, false),
                (false, b'\\') => (true, true),
                (false, b'"') => (false, false),
                _ => (true, false),
            };
        } else if c == b'"' {
            in_string = true;
        } else if let Some(t) = TOKENS.iter().find(|t| bytes[i..].starts_with(t)) {
            let out = out.get_or_insert_with(|| bytes[..i].to_vec());
            out.push(b'"');
            out.extend_from_slice(t);
            out.push(b'"');
            i += t.len();
            continue;
        }
        if let Some(out) = out.as_mut() {
            out.push(c);
        }
        i += 1;
    }
    match out {
        Some(out) => std::borrow::Cow::Owned(out),
        None => std::borrow::Cow::Borrowed(bytes),
    }
}

#[cfg(test)]
mod tests;
