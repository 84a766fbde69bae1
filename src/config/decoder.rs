//! config.json of a Llama-like decoder → [`ArchConfig`]: the fields every such family shares,
//! read the way transformers reads them, with the per-family differences (transformers'
//! config-class defaults, which optional fields a family honours) given as [`DecoderFields`].

use super::family::{FamilyKnobs, Knobs};
use super::fields::{Fields, Sign};
use super::ModelType;
use super::{first_token, parse_dtype, read_rope, token_list, ArchConfig, HfConfig, Rope};
use crate::limits::config::{
    MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_ROPE_TABLE, MAX_VOCAB, MAX_WIDTH,
};
use crate::Result;

/// Where a Llama-like family's config.json reads differently from Llama's.
#[derive(Debug, Clone, Copy)]
pub struct DecoderFields {
    /// `head_dim` when the config has none (`None`: hidden_size / num_attention_heads).
    pub head_dim: Option<usize>,
    /// Which biases the projections have.
    pub biases: Biases,
    /// Whether the MLP is SiLU-gated, with `hidden_act` checked to say so (`false`: the
    /// family reads its activation itself).
    pub silu_mlp: bool,
    /// The rotary embedding (of full-attention layers), given the head dim.
    pub rope: fn(&HfConfig, usize, &Fields<'_>) -> Result<Rope>,
    /// `tie_word_embeddings` when absent.
    pub tie_word_embeddings: bool,
    /// `sliding_window` when absent.
    pub sliding_window: Option<i64>,
    /// `use_sliding_window` when absent.
    pub use_sliding_window: bool,
    /// Which layers slide when the config has no `layer_types`.
    pub sliding_layers: SlidingLayers,
    /// `rms_norm_eps` when absent.
    pub rms_norm_eps: f64,
}

impl DecoderFields {
    /// Llama's reading: no fixed head dim, `attention_bias` and `mlp_bias` honoured, SiLU
    /// MLP, RoPE with theta 1e4 by default, untied, every layer sliding when a window is set,
    /// `rms_norm_eps` 1e-6.
    pub const LLAMA: DecoderFields = DecoderFields {
        head_dim: None,
        biases: Biases::Configured { mlp_bias: true },
        silu_mlp: true,
        rope: default_rope,
        tie_word_embeddings: false,
        sliding_window: None,
        use_sliding_window: true,
        sliding_layers: SlidingLayers::All,
        rms_norm_eps: 1e-6,
    };
}

/// The biases of a decoder's projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Biases {
    /// None (mistral, phi3, the Gemma family).
    None,
    /// Always on q, k and v, never on o (qwen2).
    Qkv,
    /// `attention_bias` puts one on q, k, v and o; `mlp_bias` one on the MLP projections when
    /// the family honours it.
    Configured {
        /// Whether `mlp_bias` is read.
        mlp_bias: bool,
    },
}

/// Which layers use the sliding window when config.json has no `layer_types`.
#[derive(Debug, Clone, Copy)]
pub enum SlidingLayers {
    /// Every layer.
    All,
    /// Layers from `max_window_layers` on (Qwen2, Qwen3; all when absent).
    FromMaxWindowLayers,
    /// Per layer, from the config (given the layer count): `true` slides.
    Pattern(fn(&HfConfig, usize, &Fields<'_>) -> Result<Vec<bool>>),
}

/// RoPE with transformers' default theta of 1e4.
pub fn default_rope(raw: &HfConfig, head_dim: usize, f: &Fields<'_>) -> Result<Rope> {
    read_rope(raw, head_dim, 10_000.0, f)
}

/// The dimensions a family's knobs may depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Channels per head.
    pub head_dim: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
}

/// Reads a Llama-like decoder's config.json as `fields` says, with the family's knobs from
/// `knobs` (called once the dimensions are known); errors name the field and what was
/// expected.
pub fn read_decoder<K: FamilyKnobs>(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
    fields: &DecoderFields,
    knobs: impl FnOnce(Dims) -> Result<K>,
) -> Result<ArchConfig> {
    let name = model_type.name;
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
    let head_dim = match (raw.head_dim, fields.head_dim) {
        (Some(_), _) => f.positive("head_dim", raw.head_dim, MAX_WIDTH)?,
        (None, Some(d)) => d,
        (None, None) if hidden_size % num_attention_heads == 0 => hidden_size / num_attention_heads,
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
    let num_hidden_layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let family = knobs(Dims {
        hidden_size,
        head_dim,
        num_hidden_layers,
    })?;
    let act = raw.hidden_act.as_deref().unwrap_or("silu");
    if fields.silu_mlp && act != "silu" && act != "swish" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported for {name} (expected \"silu\")"),
        ));
    }
    let attention_bias = raw.attention_bias.unwrap_or(false);
    let (qkv_bias, o_bias, mlp_bias) = match fields.biases {
        Biases::None => (false, false, false),
        Biases::Qkv => (true, false, false),
        Biases::Configured { mlp_bias } => (
            attention_bias,
            attention_bias,
            mlp_bias && raw.mlp_bias.unwrap_or(false),
        ),
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
        model_type,
        hidden_size,
        intermediate_size: f.positive("intermediate_size", raw.intermediate_size, MAX_WIDTH)?,
        num_attention_heads,
        num_key_value_heads,
        head_dim,
        num_hidden_layers,
        vocab_size: f.positive("vocab_size", raw.vocab_size, MAX_VOCAB)?,
        max_position_embeddings,
        rms_norm_eps: f.number(
            "rms_norm_eps",
            raw.rms_norm_eps,
            fields.rms_norm_eps,
            Sign::NonNegative,
        )?,
        tie_word_embeddings: raw
            .tie_word_embeddings
            .unwrap_or(fields.tie_word_embeddings),
        qkv_bias,
        o_bias,
        mlp_bias,
        rope: (fields.rope)(raw, head_dim, f)?,
        // A window at least as long as the RoPE tables can never take effect.
        layer_windows: layer_windows(raw, fields, num_hidden_layers, f)?
            .into_iter()
            .map(|w| w.filter(|&w| w < max_position_embeddings))
            .collect(),
        dtype: parse_dtype(raw, f)?,
        bos_token_id: first_token(f, "bos_token_id", raw.bos_token_id.as_ref())?,
        eos_token_ids: token_list(f, "eos_token_id", raw.eos_token_id.as_ref())?,
        pad_token_id: first_token(f, "pad_token_id", raw.pad_token_id.as_ref())?,
        family: Knobs::new(family),
    })
}

/// Which layers use a sliding window, from `layer_types` (v5) or the legacy fields.
fn layer_windows(
    raw: &HfConfig,
    fields: &DecoderFields,
    layers: usize,
    f: &Fields<'_>,
) -> Result<Vec<Option<usize>>> {
    let enabled = raw.use_sliding_window.unwrap_or(fields.use_sliding_window);
    // An explicit `null` turns the window off; an absent field takes the family's default.
    let window = match raw.sliding_window.unwrap_or(fields.sliding_window) {
        Some(w) if w > 0 && enabled => Some(w as usize),
        Some(w) if w <= 0 => {
            return Err(f.err(
                "sliding_window",
                &format!("must be positive or null, found {w}"),
            ))
        }
        _ => None,
    };
    if let Some(sliding) = sliding_layer_types(raw, layers, f)? {
        return Ok(sliding.into_iter().map(|s| window.filter(|_| s)).collect());
    }
    let first_sliding = match fields.sliding_layers {
        SlidingLayers::Pattern(pattern) => {
            let sliding = pattern(raw, layers, f)?;
            return Ok(sliding.into_iter().map(|s| window.filter(|_| s)).collect());
        }
        SlidingLayers::FromMaxWindowLayers => match raw.max_window_layers {
            Some(m) => f.index("max_window_layers", m, MAX_LAYERS)?,
            None => 0,
        },
        SlidingLayers::All => 0,
    };
    Ok((0..layers)
        .map(|i| if i >= first_sliding { window } else { None })
        .collect())
}

/// Per layer, whether config.json's `layer_types` (transformers v5) names it a
/// `sliding_attention` layer; `None` when the config has no `layer_types`. Errors name the
/// field: a list of another length than `layers`, or an entry other than `full_attention` and
/// `sliding_attention`.
pub fn sliding_layer_types(
    raw: &HfConfig,
    layers: usize,
    f: &Fields<'_>,
) -> Result<Option<Vec<bool>>> {
    let Some(types) = &raw.layer_types else {
        return Ok(None);
    };
    if types.len() != layers {
        return Err(f.err(
            "layer_types",
            &format!(
                "has {} entries, expected num_hidden_layers = {layers}",
                types.len()
            ),
        ));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            "full_attention" => Ok(false),
            "sliding_attention" => Ok(true),
            other => Err(f.err(
                "layer_types",
                &format!("`{other}` (expected full_attention or sliding_attention)"),
            )),
        })
        .collect::<Result<Vec<bool>>>()
        .map(Some)
}
