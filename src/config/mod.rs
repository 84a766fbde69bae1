//! `config.json` → [`ArchConfig`], one normalised description of the architecture.

pub mod encoder;
pub mod family;
mod fields;
pub mod gelu;
pub mod gemma;
mod gpt2;
pub mod hf;
pub mod longrope;
mod phi;
pub mod quantization;
pub mod rope;

use std::path::Path;

use serde_json::Value;

use crate::ir::DType;
use crate::limits::config::{
    MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_ROPE_TABLE, MAX_VOCAB, MAX_WIDTH,
};
use crate::{Error, Result};
pub use encoder::{EncoderConfig, Positions};
pub use family::{FamilyKnobs, Multipliers};
use fields::{Fields, Sign};
pub use gelu::Gelu;
pub use gemma::{GemmaConfig, GemmaVersion};
pub use hf::HfConfig;
pub use quantization::{CheckpointQuant, QuantMethod};
pub use rope::{Rope, RopeScaling};

/// The `model_type`s mobius builds: decoders and BERT-family encoders.
pub const SUPPORTED_MODEL_TYPES: &[&str] = &[
    "llama",
    "mistral",
    "qwen2",
    "gemma",
    "gemma2",
    "gemma3_text",
    "gpt2",
    "phi",
    "qwen3",
    "smollm3",
    "granite",
    "olmo2",
    "phi3",
    "bert",
    "roberta",
];

/// The architecture of a decoder-only model, normalised from any supported `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchConfig {
    /// The HF `model_type`.
    pub model_type: String,
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
    /// Epsilon of every RMSNorm.
    pub rms_norm_eps: f32,
    /// Whether the LM head reuses the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Bias on the q/k/v projections.
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub o_bias: bool,
    /// Bias on the MLP projections.
    pub mlp_bias: bool,
    /// Rotary position embedding.
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
    /// The Gemma family's knobs (`None` for other families).
    pub gemma: Option<GemmaConfig>,
    /// Epsilon of every LayerNorm, for families normalised with `LayerNormalization` (gpt2,
    /// phi); `None` for RMSNorm families.
    pub layer_norm_eps: Option<f32>,
    /// The activation of a plain (ungated) GELU MLP (gpt2, phi); `None` for SiLU-gated MLPs.
    pub gelu: Option<Gelu>,
    /// Bias on the LM head (phi).
    pub lm_head_bias: bool,
    /// What a BERT-family encoder adds (`None` for decoders). Encoders have no rotary
    /// embedding: their `rope` holds the defaults and is not read.
    pub encoder: Option<EncoderConfig>,
    /// Knobs of one family only (Granite multipliers, SmolLM3 NoPE layers).
    pub family: FamilyKnobs,
}

impl ArchConfig {
    /// Reads and normalises `path` (a config.json).
    pub fn load(path: &Path) -> Result<ArchConfig> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        ArchConfig::parse(&bytes, path)
    }

    /// Parses and normalises config.json bytes; `path` is used in error messages only.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<ArchConfig> {
        let raw: HfConfig =
            serde_json::from_slice(bytes).map_err(|e| fields::json_error(bytes, path, &e))?;
        ArchConfig::from_hf(&raw, path)
    }

    /// Normalises a raw HF config; errors name the field and what was expected. Token ids
    /// (`bos_token_id`, `eos_token_id`, `pad_token_id`) must be integers in `0..vocab_size`.
    pub fn from_hf(raw: &HfConfig, path: &Path) -> Result<ArchConfig> {
        let f = Fields { path };
        let cfg = ArchConfig::normalise(raw, &f)?;
        for (field, ids) in [
            ("bos_token_id", cfg.bos_token_id.as_slice()),
            ("eos_token_id", cfg.eos_token_ids.as_slice()),
            ("pad_token_id", cfg.pad_token_id.as_slice()),
        ] {
            in_vocab(&f, field, ids, cfg.vocab_size)?;
        }
        Ok(cfg)
    }

    /// [`ArchConfig::from_hf`] before the token ids are checked against the vocabulary.
    fn normalise(raw: &HfConfig, f: &Fields<'_>) -> Result<ArchConfig> {
        let path = f.path;
        let model_type = raw.model_type.clone().ok_or_else(|| {
            f.err(
                "model_type",
                "missing (expected a string such as \"llama\")",
            )
        })?;
        if !SUPPORTED_MODEL_TYPES.contains(&model_type.as_str()) {
            return Err(Error::UnsupportedModelType {
                path: path.to_path_buf(),
                found: model_type,
                supported: SUPPORTED_MODEL_TYPES
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            });
        }
        if encoder::ENCODER_MODEL_TYPES.contains(&model_type.as_str()) {
            return encoder::from_hf(raw, model_type, f);
        }
        match model_type.as_str() {
            "gpt2" => return gpt2::from_hf(raw, f),
            "phi" => return phi::from_hf(raw, f),
            _ => {}
        }
        let hidden_size = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
        let num_attention_heads =
            f.positive("num_attention_heads", raw.num_attention_heads, MAX_HEADS)?;
        let num_key_value_heads = match raw.num_key_value_heads {
            None => num_attention_heads,
            some => f.positive("num_key_value_heads", some, MAX_HEADS)?,
        };
        if num_attention_heads % num_key_value_heads != 0 {
            return Err(f.err(
                "num_key_value_heads",
                &format!(
                    "{num_key_value_heads} must divide num_attention_heads ({num_attention_heads})"
                ),
            ));
        }
        // transformers' config classes fix head_dim for these families when the field is absent.
        let family_head_dim = match model_type.as_str() {
            "qwen3" => Some(128),
            "gemma" | "gemma2" | "gemma3_text" => Some(256),
            _ => None,
        };
        let head_dim = match (raw.head_dim, family_head_dim) {
            (Some(_), _) => f.positive("head_dim", raw.head_dim, MAX_WIDTH)?,
            (None, Some(d)) => d,
            (None, None) if hidden_size % num_attention_heads == 0 => {
                hidden_size / num_attention_heads
            }
            (None, None) => {
                return Err(f.err(
                    "head_dim",
                    &format!(
                        "missing, and hidden_size ({hidden_size}) is not a multiple of \
                         num_attention_heads ({num_attention_heads})"
                    ),
                ))
            }
        };
        let num_hidden_layers =
            f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
        let gemma = gemma::parse(raw, &model_type, hidden_size, head_dim, f)?;
        let act = raw.hidden_act.as_deref().unwrap_or("silu");
        if gemma.is_none() && act != "silu" && act != "swish" {
            return Err(f.err(
                "hidden_act",
                &format!("`{act}` is not supported for {model_type} (expected \"silu\")"),
            ));
        }
        let qkv_bias = match model_type.as_str() {
            "qwen2" => true,
            "llama" | "qwen3" | "smollm3" | "granite" | "olmo2" => {
                raw.attention_bias.unwrap_or(false)
            }
            _ => false,
        };
        let max_position_embeddings = f.positive(
            "max_position_embeddings",
            raw.max_position_embeddings,
            MAX_POSITIONS,
        )?;
        let table = max_position_embeddings as u64 * (head_dim as u64 / 2);
        if table > MAX_ROPE_TABLE as u64 {
            return Err(f.err(
                "max_position_embeddings",
                &format!(
                    "{max_position_embeddings} positions × {} rotary frequencies (head_dim \
                     {head_dim}) make RoPE tables of {table} elements, more than mobius \
                     supports (at most {MAX_ROPE_TABLE})",
                    head_dim / 2
                ),
            ));
        }
        Ok(ArchConfig {
            hidden_size,
            intermediate_size: f.positive("intermediate_size", raw.intermediate_size, MAX_WIDTH)?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            num_hidden_layers,
            vocab_size: f.positive("vocab_size", raw.vocab_size, MAX_VOCAB)?,
            max_position_embeddings,
            rms_norm_eps: f.number("rms_norm_eps", raw.rms_norm_eps, 1e-6, Sign::NonNegative)?,
            // Gemma checkpoints tie the LM head to the embeddings unless told otherwise.
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(gemma.is_some()),
            qkv_bias,
            o_bias: qkv_bias && model_type != "qwen2",
            mlp_bias: matches!(model_type.as_str(), "llama" | "smollm3" | "granite")
                && raw.mlp_bias.unwrap_or(false),
            rope: match model_type.as_str() {
                "gemma3_text" => gemma::gemma3_rope(raw, head_dim, "full_attention", f)?,
                _ => parse_rope(raw, head_dim, f)?,
            },
            family: family::parse(raw, &model_type, num_hidden_layers, f)?,
            // A window at least as long as the RoPE tables can never take effect.
            layer_windows: layer_windows(raw, &model_type, num_hidden_layers, f)?
                .into_iter()
                .map(|w| w.filter(|&w| w < max_position_embeddings))
                .collect(),
            dtype: parse_dtype(raw, f)?,
            bos_token_id: first_token(f, "bos_token_id", raw.bos_token_id.as_ref())?,
            eos_token_ids: token_list(f, "eos_token_id", raw.eos_token_id.as_ref())?,
            pad_token_id: first_token(f, "pad_token_id", raw.pad_token_id.as_ref())?,
            gemma,
            layer_norm_eps: None,
            gelu: None,
            lm_head_bias: false,
            model_type,
            encoder: None,
        })
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
}

fn parse_dtype(raw: &HfConfig, f: &Fields<'_>) -> Result<Option<DType>> {
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

/// The RoPE parameters: v5 `rope_parameters` first, else v4 `rope_theta` + `rope_scaling`.
fn parse_rope(raw: &HfConfig, head_dim: usize, f: &Fields<'_>) -> Result<Rope> {
    let (field, params) = match (&raw.rope_parameters, &raw.rope_scaling) {
        (Some(p @ Value::Object(_)), _) => ("rope_parameters", Some(p)),
        (_, Some(p @ Value::Object(_))) => ("rope_scaling", Some(p)),
        _ => ("rope_scaling", None),
    };
    let name = |key: &str| format!("{field}.{key}");
    let get = |key: &str| f.json_number(&name(key), params.and_then(|p| p.get(key)));
    let num =
        |key: &str| -> Result<f32> { f.required_number(&name(key), get(key)?, Sign::Positive) };
    // transformers' default theta: 2e6 for SmolLM3, 1e4 elsewhere (Gemma 3 reads its own).
    let default_theta = match raw.model_type.as_deref() {
        Some("smollm3") => 2_000_000.0,
        _ => 10_000.0,
    };
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
                    "`{other}` is not supported (expected default, linear, llama3 or longrope)"
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

/// Which layers use a sliding window, from `layer_types` (v5) or the legacy fields.
fn layer_windows(
    raw: &HfConfig,
    model_type: &str,
    layers: usize,
    f: &Fields<'_>,
) -> Result<Vec<Option<usize>>> {
    // Qwen3 and SmolLM3 default `use_sliding_window` to false, the others to true.
    let enabled = raw
        .use_sliding_window
        .unwrap_or(!matches!(model_type, "qwen3" | "smollm3"));
    let window = match raw.sliding_window.or(gemma::default_window(model_type)) {
        Some(w) if w > 0 && enabled => Some(w as usize),
        Some(w) if w <= 0 => {
            return Err(f.err(
                "sliding_window",
                &format!("must be positive or null, found {w}"),
            ))
        }
        _ => None,
    };
    if let Some(types) = &raw.layer_types {
        if types.len() != layers {
            return Err(f.err(
                "layer_types",
                &format!(
                    "has {} entries, expected num_hidden_layers = {layers}",
                    types.len()
                ),
            ));
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                "full_attention" => Ok(None),
                "sliding_attention" => Ok(window),
                other => Err(f.err(
                    "layer_types",
                    &format!("`{other}` (expected full_attention or sliding_attention)"),
                )),
            })
            .collect();
    }
    if let Some(sliding) = gemma::default_sliding_layers(raw, model_type, layers, f)? {
        return Ok(sliding.into_iter().map(|s| window.filter(|_| s)).collect());
    }
    if model_type == "smollm3" && window.is_some() {
        // transformers: the NoPE layers slide, the RoPE layers attend to everything.
        let knobs = family::parse(raw, model_type, layers, f)?;
        return Ok((0..layers)
            .map(|i| window.filter(|_| !knobs.layer_uses_rope(i)))
            .collect());
    }
    let first_sliding = match (model_type, raw.max_window_layers) {
        ("qwen2" | "qwen3", Some(m)) => f.index("max_window_layers", m, MAX_LAYERS)?,
        _ => 0,
    };
    Ok((0..layers)
        .map(|i| if i >= first_sliding { window } else { None })
        .collect())
}

/// The token ids of `field`: an integer ≥ 0 or a list of them; none when absent, `null` or
/// -1 (older configs, e.g. LLaMA's `pad_token_id: -1`, spell "no such token" that way).
/// Anything else (another negative number, a fraction, a string, `null` in a list) is an error
/// naming the field.
fn token_list(f: &Fields<'_>, field: &str, v: Option<&Value>) -> Result<Vec<i64>> {
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
fn first_token(f: &Fields<'_>, field: &str, v: Option<&Value>) -> Result<Option<i64>> {
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

#[cfg(test)]
mod tests;
