//! The Gemma family (gemma, gemma2, gemma3_text).
//!
//! Like the Llama decoder, with: token embeddings scaled by `sqrt(hidden_size)` (rounded to
//! the model dtype), RMSNorms scaling by `1 + weight`, a GELU-gated MLP and tied embeddings.
//! Gemma 2 and 3 add a norm after attention and one on each side of the MLP, a custom
//! attention scale, soft-capped attention scores and final logits, and sliding-window layers;
//! Gemma 3 also normalises queries and keys per head and gives sliding layers their own RoPE.
//! Its knobs ([`GemmaConfig`]) read transformers v4 and v5 spellings of config.json.

use serde_json::{Map, Value};

use super::components::{gated_mlp, scalar, DecoderInputs, GateActivation, Norm, NormKind};
use super::decoder::{Family, LayerNorms, LayerRope, QkNorm};
use super::family::FamilySpec;
use super::multimodal::{read_text_part, TextPart, TextType};
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Dims, Fields, Gelu, HfConfig,
    Knobs, ModelType, Rope, Sign, SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_LAYERS;
use crate::{Error, Result};

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gemma",
    summary: "RMSNorm gain `1 + w`, scaled embeddings, GELU-gated MLP; Gemma 2/3: four norms \
              per layer, `query_pre_attn_scalar`, attention and final-logit soft-capping, \
              alternating sliding-window layers; Gemma 3: per-head q/k norms, local RoPE; \
              `gemma3`: the text decoder of Gemma3ForConditionalGeneration (no vision part)",
    model_types: &[
        ModelType::generative("gemma", "gemma", |raw, t, f| {
            read(raw, t, f, GemmaVersion::Gemma1, &GEMMA1)
        }),
        ModelType::generative("gemma2", "gemma", |raw, t, f| {
            read(raw, t, f, GemmaVersion::Gemma2, &GEMMA2)
        }),
        ModelType::generative("gemma3_text", "gemma3_text", |raw, t, f| {
            read(raw, t, f, GemmaVersion::Gemma3, &GEMMA3)
        }),
        ModelType::generative("gemma3", "gemma3_text", |raw, t, f| {
            read_text_part(raw, t, f, &GEMMA3_IMAGE_TEXT)
        }),
    ],
};

/// Gemma3ForConditionalGeneration's text decoder: a `gemma3_text` config, whose head never
/// soft-caps the logits (whatever `final_logit_softcapping` says).
const GEMMA3_IMAGE_TEXT: TextPart = TextPart {
    default_type: "gemma3_text",
    text_types: &[TextType {
        name: "gemma3_text",
        // transformers' Gemma3TextConfig defaults the reader does not hold itself.
        defaults: r#"{"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
            "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": 256, "max_position_embeddings": 131072, "bos_token_id": 2,
            "eos_token_id": 1, "pad_token_id": 0}"#,
        read: |raw, t, f| read(raw, t, f, GemmaVersion::Gemma3, &GEMMA3),
    }],
    decoder: |knobs| match knobs.as_any().downcast_ref::<GemmaConfig>() {
        Some(gemma) => Knobs::new(GemmaConfig {
            final_softcap: None,
            ..gemma.clone()
        }),
        None => knobs.clone(),
    },
};

/// transformers' GemmaConfig: head_dim 256, no biases, tied embeddings, its own activation.
const GEMMA1: DecoderFields = DecoderFields {
    head_dim: Some(256),
    biases: Biases::None,
    silu_mlp: false,
    tie_word_embeddings: true,
    ..DecoderFields::LLAMA
};

/// Gemma 2: a window of 4096 by default, on every other layer.
pub(super) const GEMMA2: DecoderFields = DecoderFields {
    sliding_window: Some(4096),
    sliding_layers: SlidingLayers::Pattern(gemma2_sliding_layers),
    ..GEMMA1
};

/// Gemma 3: its own RoPE reading, full attention every `sliding_window_pattern` layers.
const GEMMA3: DecoderFields = DecoderFields {
    rope: gemma3_global_rope,
    sliding_layers: SlidingLayers::Pattern(gemma3_sliding_layers),
    ..GEMMA2
};

/// Reads a Gemma config of `version` whose fields default as `fields` says.
pub(super) fn read(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
    version: GemmaVersion,
    fields: &DecoderFields,
) -> Result<ArchConfig> {
    read_decoder(raw, model_type, f, fields, |dims| {
        read_knobs(raw, version, model_type.name, dims, f)
    })
}

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

/// Gemma-specific architecture parameters.
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
    /// [`ArchConfig::rope`] is the one of full-attention layers.
    pub local_rope: Option<Rope>,
    /// Where a layer's norms sit: pre-norm (Gemma 1), sandwich (Gemma 2 and 3).
    pub layer_norms: LayerNorms,
}

impl GemmaConfig {
    /// Whether queries and keys are RMS-normalised per head before RoPE.
    pub fn qk_norm(&self) -> bool {
        self.version == GemmaVersion::Gemma3
    }
}

/// The Gemma knobs of `raw`, a `version` config of model type `model_type`.
fn read_knobs(
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
    match &raw.use_bidirectional_attention {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            return Err(f.err(
                "use_bidirectional_attention",
                &format!("true is not supported for {model_type} (mobius builds causal decoders)"),
            ))
        }
        Some(other) => {
            return Err(f.err(
                "use_bidirectional_attention",
                &format!("{other} (expected a boolean)"),
            ))
        }
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
        layer_norms: match version {
            GemmaVersion::Gemma1 => LayerNorms::PRE,
            GemmaVersion::Gemma2 | GemmaVersion::Gemma3 => LayerNorms::SANDWICH,
        },
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
pub(crate) fn gemma3_rope(
    raw: &HfConfig,
    head_dim: usize,
    kind: &str,
    f: &Fields<'_>,
) -> Result<Rope> {
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
fn gemma3_global_rope(raw: &HfConfig, head_dim: usize, f: &Fields<'_>) -> Result<Rope> {
    gemma3_rope(raw, head_dim, "full_attention", f)
}

/// Gemma 2's sliding layers when the config has no `layer_types`: every other one, starting
/// with a sliding layer.
fn gemma2_sliding_layers(_raw: &HfConfig, layers: usize, _f: &Fields<'_>) -> Result<Vec<bool>> {
    Ok((0..layers).map(|i| (i + 1) % 2 != 0).collect())
}

/// Gemma 3's sliding layers when the config has no `layer_types`: every
/// `sliding_window_pattern`-th layer (default 6, checked to be a positive count) is full.
fn gemma3_sliding_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let field = "sliding_window_pattern";
    let value = f.json_integer(field, raw.sliding_window_pattern.as_ref())?;
    let pattern = f.optional_count(field, value, 6, MAX_LAYERS)?;
    Ok((0..layers).map(|i| (i + 1) % pattern != 0).collect())
}

impl Family for GemmaConfig {
    fn norm(&self, cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::OffsetRms,
            eps: cfg.rms_norm_eps,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        self.layer_norms
    }

    fn embed(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let scale = scalar(b, self.embed_scale, dtype);
        b.op("Mul", &[&x, &scale], vec![])
    }

    /// Gemma 3's sliding layers rotate with the local RoPE (`model.rotary_emb_local.*`).
    fn other_rope(&self) -> Option<(&Rope, &'static str)> {
        self.local_rope
            .as_ref()
            .map(|r| (r, "model.rotary_emb_local"))
    }

    fn layer_rope_kind(&self, cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::other_if(cfg.layer_windows[i].is_some())
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        match self.qk_norm() {
            true => QkNorm::PerHeadCounted,
            false => QkNorm::Off,
        }
    }

    fn attention_scale(&self, _cfg: &ArchConfig) -> f32 {
        self.attn_scale
    }

    fn attention_softcap(&self, _cfg: &ArchConfig) -> f32 {
        self.attn_softcap.unwrap_or(0.0)
    }

    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let act = GateActivation::Gelu(self.gelu);
        let sizes = (cfg.hidden_size, cfg.intermediate_size);
        gated_mlp(b, x, mlp, sizes, false, act, dtype)
    }

    /// `cap · tanh(x @ head / cap)` when the final logits are soft-capped.
    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        super::decoder::soft_capped_logits(b, x, head, self.final_softcap, dtype);
    }
}

#[cfg(test)]
mod tests {
    use crate::config::ArchConfig;
    use crate::Result;

    fn parse(json: &str) -> Result<ArchConfig> {
        crate::models::parse_config(json.as_bytes(), std::path::Path::new("config.json"))
    }

    #[test]
    fn gemma2_and_gemma3_without_a_window_get_transformers_default() {
        for (model_type, want) in [
            ("gemma2", vec![Some(4096), None, Some(4096), None]),
            (
                "gemma3_text",
                vec![Some(4096), Some(4096), Some(4096), Some(4096)],
            ),
        ] {
            let cfg = parse(&format!(
                r#"{{"model_type": "{model_type}", "hidden_size": 64, "intermediate_size": 128,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
                    "head_dim": 16, "vocab_size": 300, "max_position_embeddings": 8192}}"#
            ))
            .unwrap();
            assert_eq!(cfg.layer_windows, want, "{model_type}");
        }
    }

    #[test]
    fn bad_gemma_values_are_named() {
        let gemma = r#""hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 2, "head_dim": 16, "vocab_size": 300,
            "max_position_embeddings": 128"#;
        for (model_type, extra, field) in [
            (
                "gemma2",
                r#""attn_logit_softcapping": 0"#,
                "attn_logit_softcapping",
            ),
            (
                "gemma2",
                r#""final_logit_softcapping": -30"#,
                "final_logit_softcapping",
            ),
            (
                "gemma2",
                r#""query_pre_attn_scalar": 0"#,
                "query_pre_attn_scalar",
            ),
            (
                "gemma3_text",
                r#""rope_local_base_freq": -1"#,
                "rope_local_base_freq",
            ),
            ("gemma3_text", r#""rope_theta": 0"#, "rope_theta"),
        ] {
            let json = format!(r#"{{"model_type": "{model_type}", {gemma}, {extra}}}"#);
            let msg = parse(&json).unwrap_err().to_string();
            assert!(msg.contains(&format!("field `{field}`")), "{extra}: {msg}");
        }
    }
}
