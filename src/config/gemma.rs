//! The Gemma family (`gemma`, `gemma2`, `gemma3_text`): the knobs that set these decoders apart
//! from the Llama family, read from transformers v4 and v5 spellings of config.json.

use serde_json::{Map, Value};

use super::{read_rope, Dims, Fields, Gelu, HfConfig, Rope, Sign};
use crate::limits::config::MAX_LAYERS;
use crate::{Error, Result};

/// Which Gemma generation a config describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmaVersion {
    /// Gemma 1: pre-norm layers like Llama, with the Gemma norm, embedding scale and GELU.
    Gemma1,
    /// Gemma 2: four norms per layer, attention and final logit soft-capping.
    Gemma2,
    /// Gemma 3 (text): Gemma 2 plus per-head q/k norms and a second RoPE for sliding layers.
    Gemma3,
}

/// Gemma-specific architecture parameters (see spec §1.10).
#[derive(Debug, Clone, PartialEq)]
pub struct GemmaConfig {
    /// The generation.
    pub version: GemmaVersion,
    /// The MLP activation.
    pub gelu: Gelu,
    /// Factor on the token embeddings: `sqrt(hidden_size)` in f32 (rounded to the model dtype
    /// by the builder, as transformers does).
    pub embed_scale: f32,
    /// Softmax scale of attention: `query_pre_attn_scalar^-0.5` (Gemma 2/3), `head_dim^-0.5`.
    pub attn_scale: f32,
    /// `attn_logit_softcapping`: scores become `c · tanh(scores / c)`.
    pub attn_softcap: Option<f32>,
    /// `final_logit_softcapping`: logits become `c · tanh(logits / c)`.
    pub final_softcap: Option<f32>,
    /// Gemma 3: the RoPE of sliding-window layers (`rope_local_base_freq`); the config's
    /// [`super::ArchConfig::rope`] is the one of full-attention layers.
    pub local_rope: Option<Rope>,
}

impl GemmaConfig {
    /// Whether each layer has the extra post-attention and pre/post-feedforward norms.
    pub fn sandwich_norms(&self) -> bool {
        self.version != GemmaVersion::Gemma1
    }

    /// Whether queries and keys are RMS-normalised per head before RoPE.
    pub fn qk_norm(&self) -> bool {
        self.version == GemmaVersion::Gemma3
    }
}

/// The Gemma knobs of `raw`, a `version` config of model type `model_type`.
pub fn read(
    raw: &HfConfig,
    version: GemmaVersion,
    model_type: &str,
    dims: Dims,
    f: &Fields<'_>,
) -> Result<GemmaConfig> {
    let Dims {
        hidden_size,
        head_dim,
        ..
    } = dims;
    if raw.attention_bias == Some(true) {
        return Err(f.err(
            "attention_bias",
            &format!("true is not supported for {model_type} (expected false)"),
        ));
    }
    if raw.use_bidirectional_attention == Some(true) {
        return Err(f.err(
            "use_bidirectional_attention",
            &format!("true is not supported for {model_type} (mobius builds causal decoders)"),
        ));
    }
    let gelu = activation(raw, version, f)?;
    let (attn_scale, attn_softcap, final_softcap) = match version {
        GemmaVersion::Gemma1 => ((head_dim as f32).powf(-0.5), None, None),
        GemmaVersion::Gemma2 | GemmaVersion::Gemma3 => {
            let scalar = f.number(
                "query_pre_attn_scalar",
                raw.query_pre_attn_scalar,
                256.0,
                Sign::Positive,
            )?;
            // transformers' defaults when the field is absent (an explicit null disables it).
            let (attn_default, final_default) = match version {
                GemmaVersion::Gemma2 => (Some(50.0), Some(30.0)),
                _ => (None, None),
            };
            (
                (scalar as f64).powf(-0.5) as f32,
                softcap(raw.attn_logit_softcapping.as_ref(), attn_default, "attn", f)?,
                softcap(
                    raw.final_logit_softcapping.as_ref(),
                    final_default,
                    "final",
                    f,
                )?,
            )
        }
    };
    let local_rope = match version {
        GemmaVersion::Gemma3 => Some(gemma3_rope(raw, head_dim, "sliding_attention", f)?),
        _ => None,
    };
    Ok(GemmaConfig {
        version,
        gelu,
        embed_scale: (hidden_size as f64).sqrt() as f32,
        attn_scale,
        attn_softcap,
        final_softcap,
        local_rope,
    })
}

/// Gemma 1 reads `hidden_act` (its legacy `"gelu"` means the tanh form); Gemma 2/3 read
/// `hidden_activation`, where `"gelu"` is the exact GELU.
fn activation(raw: &HfConfig, version: GemmaVersion, f: &Fields<'_>) -> Result<Gelu> {
    let (field, act) = match version {
        GemmaVersion::Gemma1 => match (&raw.hidden_act, &raw.hidden_activation) {
            (Some(a), _) => ("hidden_act", a.as_str()),
            (None, Some(a)) => ("hidden_activation", a.as_str()),
            (None, None) => ("hidden_act", "gelu_pytorch_tanh"),
        },
        _ => match (&raw.hidden_activation, &raw.hidden_act) {
            (Some(a), _) => ("hidden_activation", a.as_str()),
            (None, Some(a)) => ("hidden_act", a.as_str()),
            (None, None) => ("hidden_activation", "gelu_pytorch_tanh"),
        },
    };
    match act {
        "gelu" if version == GemmaVersion::Gemma1 => Ok(Gelu::Tanh),
        other => Gelu::from_hf_name(other).ok_or_else(|| {
            f.err(
                field,
                &format!("`{other}` is not supported (expected {})", Gelu::NAMES),
            )
        }),
    }
}

/// A soft-capping value: absent → `default`, null → none, else a positive number.
fn softcap(
    value: Option<&Value>,
    default: Option<f32>,
    which: &str,
    f: &Fields<'_>,
) -> Result<Option<f32>> {
    let field = format!("{which}_logit_softcapping");
    match value {
        None => Ok(default),
        Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(c) => f.number(&field, Some(c), c, Sign::Positive).map(Some),
            None => Err(f.err(&field, &format!("{v} (expected a positive number or null)"))),
        },
    }
}

/// Gemma 3's RoPE for layers of `kind` (`full_attention` or `sliding_attention`): v5 nests one
/// `rope_parameters` entry per layer type; v4 has `rope_theta` + `rope_scaling` for full layers
/// and `rope_local_base_freq` (default scaling) for sliding ones. Defaults as transformers:
/// theta 1e6 (full) and 1e4 (sliding).
pub fn gemma3_rope(raw: &HfConfig, head_dim: usize, kind: &str, f: &Fields<'_>) -> Result<Rope> {
    let default_theta = if kind == "full_attention" { 1e6 } else { 1e4 };
    let nested = match &raw.rope_parameters {
        Some(Value::Object(map))
            if map.contains_key("full_attention") || map.contains_key("sliding_attention") =>
        {
            Some(map)
        }
        _ => None,
    };
    let mut one = HfConfig {
        rope_parameters: None,
        rope_scaling: None,
        rope_theta: None,
        ..raw.clone()
    };
    let prefix;
    if let Some(map) = nested {
        let mut params = match map.get(kind) {
            Some(Value::Object(p)) => p.clone(),
            Some(Value::Null) | None => Map::new(),
            Some(other) => {
                return Err(f.err(
                    &format!("rope_parameters.{kind}"),
                    &format!("{other} (expected an object)"),
                ))
            }
        };
        params
            .entry("rope_theta")
            .or_insert_with(|| Value::from(default_theta));
        one.rope_parameters = Some(Value::Object(params));
        prefix = format!("rope_parameters.{kind}");
    } else if kind == "full_attention" {
        one.rope_scaling = raw.rope_scaling.clone();
        one.rope_theta = Some(raw.rope_theta.unwrap_or(default_theta));
        prefix = "rope_scaling".to_string();
    } else {
        one.rope_theta = Some(raw.rope_local_base_freq.unwrap_or(default_theta));
        prefix = "rope_local_base_freq".to_string();
    }
    read_rope(&one, head_dim, default_theta, f).map_err(|e| match e {
        Error::ConfigField {
            path,
            field,
            message,
        } if field == "rope_theta" && prefix == "rope_local_base_freq" => Error::ConfigField {
            path,
            field: prefix.clone(),
            message,
        },
        Error::ConfigField {
            path,
            field,
            message,
        } if field.starts_with("rope_parameters") || field.starts_with("rope_scaling") => {
            let rest = field.split_once('.').map(|(_, r)| r).unwrap_or("");
            Error::ConfigField {
                path,
                field: format!("{prefix}.{rest}"),
                message,
            }
        }
        other => other,
    })
}

/// Gemma 3's RoPE of full-attention layers.
pub fn gemma3_global_rope(raw: &HfConfig, head_dim: usize, f: &Fields<'_>) -> Result<Rope> {
    gemma3_rope(raw, head_dim, "full_attention", f)
}

/// Gemma 2's sliding layers when the config has no `layer_types`: every other one, starting
/// with a sliding layer.
pub fn gemma2_sliding_layers(_raw: &HfConfig, layers: usize, _f: &Fields<'_>) -> Result<Vec<bool>> {
    Ok((0..layers).map(|i| (i + 1) % 2 != 0).collect())
}

/// Gemma 3's sliding layers when the config has no `layer_types`: every
/// `sliding_window_pattern`-th layer (default 6, checked to be a positive count) is full.
pub fn gemma3_sliding_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let field = "sliding_window_pattern";
    let value = f.json_integer(field, raw.sliding_window_pattern.as_ref())?;
    let pattern = f.optional_count(field, value, 6, MAX_LAYERS)?;
    Ok((0..layers).map(|i| (i + 1) % pattern != 0).collect())
}
