//! GPT-2 (`model_type` "gpt2"): `n_embd`/`n_layer`/`n_head`/`n_positions` spellings (kept by
//! transformers v4 and v5), LayerNorm, a GELU MLP of width `n_inner` (null → 4·n_embd),
//! multi-head attention, learned positions and (by default) a tied LM head.

use super::ModelType;
use super::{first_token, parse_dtype, token_list, ArchConfig, Fields, Gelu, HfConfig, Knobs};
use super::{Rope, RopeScaling, Sign};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, MAX_WIDTH};
use crate::Result;

/// GPT-2's knobs: its LayerNorm and GELU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpt2Config {
    /// Epsilon of every LayerNorm (`layer_norm_epsilon`).
    pub layer_norm_eps: f32,
    /// The MLP activation (`activation_function`).
    pub gelu: Gelu,
}

/// Normalises a GPT-2 config; errors name the field and what was expected.
pub fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let (hidden_field, hidden) = spelled("n_embd", raw.n_embd, "hidden_size", raw.hidden_size);
    let hidden_size = f.positive(hidden_field, hidden, MAX_WIDTH)?;
    let (heads_field, heads) = spelled(
        "n_head",
        raw.n_head,
        "num_attention_heads",
        raw.num_attention_heads,
    );
    let heads = f.positive(heads_field, heads, MAX_HEADS)?;
    if hidden_size % heads != 0 {
        return Err(f.err(
            heads_field,
            &format!("{heads} does not divide the hidden size ({hidden_size})"),
        ));
    }
    let (layers_field, layers) = spelled(
        "n_layer",
        raw.n_layer,
        "num_hidden_layers",
        raw.num_hidden_layers,
    );
    let (positions_field, positions) = spelled(
        "n_positions",
        raw.n_positions,
        "max_position_embeddings",
        raw.max_position_embeddings,
    );
    let layers = f.positive(layers_field, layers, MAX_LAYERS)?;
    let intermediate_size = match raw.n_inner.or(raw.intermediate_size) {
        None => 4 * hidden_size,
        some => f.positive("n_inner", some, MAX_WIDTH)?,
    };
    let act = raw.activation_function.as_deref().unwrap_or("gelu_new");
    let gelu = Gelu::from_hf_name(act).ok_or_else(|| {
        f.err(
            "activation_function",
            &format!(
                "`{act}` is not supported for gpt2 (expected {})",
                Gelu::NAMES
            ),
        )
    })?;
    for (field, value) in [
        ("scale_attn_weights", raw.scale_attn_weights == Some(false)),
        (
            "scale_attn_by_inverse_layer_idx",
            raw.scale_attn_by_inverse_layer_idx == Some(true),
        ),
        ("add_cross_attention", raw.add_cross_attention == Some(true)),
    ] {
        if value {
            return Err(f.err(
                field,
                "is not supported (expected the GPT-2 default: scaled self-attention only)",
            ));
        }
    }
    let head_dim = hidden_size / heads;
    Ok(ArchConfig {
        model_type,
        hidden_size,
        intermediate_size,
        num_attention_heads: heads,
        num_key_value_heads: heads,
        head_dim,
        num_hidden_layers: layers,
        vocab_size: f.positive("vocab_size", raw.vocab_size, MAX_VOCAB)?,
        max_position_embeddings: f.positive(positions_field, positions, MAX_POSITIONS)?,
        rms_norm_eps: 0.0,
        tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(true),
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        // No rotary embedding: positions are learned. A full-width default keeps the field
        // well-formed for code that reads it.
        rope: Rope {
            theta: 10000.0,
            scaling: RopeScaling::Default,
            rotary_dim: head_dim,
            interleaved: false,
        },
        layer_windows: vec![None; layers],
        dtype: parse_dtype(raw, f)?,
        bos_token_id: first_token(f, "bos_token_id", raw.bos_token_id.as_ref())?,
        eos_token_ids: token_list(f, "eos_token_id", raw.eos_token_id.as_ref())?,
        pad_token_id: first_token(f, "pad_token_id", raw.pad_token_id.as_ref())?,
        family: Knobs::new(Gpt2Config {
            layer_norm_eps: match raw.layer_norm_epsilon {
                Some(e) => f.number("layer_norm_epsilon", Some(e), e, Sign::NonNegative)?,
                None => f.number(
                    "layer_norm_eps",
                    raw.layer_norm_eps,
                    1e-5,
                    Sign::NonNegative,
                )?,
            },
            gelu,
        }),
    })
}

/// The GPT-2 spelling of a field when present, else the generic one (with its name, for
/// error messages).
fn spelled(
    gpt2: &'static str,
    gpt2_value: Option<i64>,
    generic: &'static str,
    generic_value: Option<i64>,
) -> (&'static str, Option<i64>) {
    match (gpt2_value, generic_value) {
        (None, Some(v)) => (generic, Some(v)),
        (v, _) => (gpt2, v),
    }
}
