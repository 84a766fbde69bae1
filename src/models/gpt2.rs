//! GPT-2: learned positions added to the token embeddings, pre-norm layers of LayerNorm →
//! multi-head attention (no RoPE) → residual → LayerNorm → GELU MLP → residual, a final
//! LayerNorm and the LM head (tied to `wte` unless the config unties it).
//!
//! Weights are HF `Conv1D`s stored `[in, out]`, used by `MatMul` as they are; the fused
//! `c_attn` (`[H, 3H]`) is cut lazily into its q, k and v column blocks.
//!
//! config.json spells the sizes `n_embd`, `n_layer`, `n_head`, `n_positions` (kept by
//! transformers v4 and v5); the MLP is `n_inner` wide (null: 4·`n_embd`).

use super::components::{
    conv1d, conv1d_mlp, learned_positions, Activation, Conv1dParams, DecoderInputs, Norm, NormKind,
};
use super::decoder::{Family, LayerNorms, Names};
use super::family::FamilySpec;
use crate::config::{
    first_token, parse_dtype, token_list, ArchConfig, CheckpointRenaming, Fields, Gelu, HfConfig,
    Knobs, ModelType, Rope, RopeScaling, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, MAX_WIDTH};
use crate::Result;

/// The family's registry entry (`gpt-sw3` is GPT-2 under another name, as transformers
/// maps it). onnxruntime-genai's own `gpt2` type expects one combined
/// `past_%d` cache tensor per layer, not the separate key/value inputs of our graph contract,
/// and refuses the package ("Model input was not found"); its generic `decoder` runs it.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gpt2",
    summary: "learned positions, LayerNorm, Conv1D weights with the fused `c_attn` cut \
              lazily into q/k/v, GELU MLP, tied head",
    model_types: &[
        ModelType::generative("gpt2", "decoder", read),
        ModelType::generative("gpt-sw3", "decoder", read),
    ],
};

/// GPT-2's knobs: its LayerNorm and GELU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpt2Config {
    /// Epsilon of every LayerNorm (`layer_norm_epsilon`).
    pub layer_norm_eps: f32,
    /// The MLP activation (`activation_function`).
    pub gelu: Gelu,
}

/// Normalises a GPT-2 config; errors name the field and what was expected.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
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
    let (cfg, _) = read_gpt2_layout(raw, model_type, f, "gelu_new", |heads| heads)?;
    Ok(cfg)
}

/// Reads a config spelled as GPT-2's (`n_embd`, `n_layer`, `n_head`, `n_positions`, `n_inner`,
/// `layer_norm_epsilon`, `activation_function` defaulting to `default_act`), with the key/value
/// head count `kv_heads` gives for the attention head count; the knobs are [`Gpt2Config`] (a
/// family wrapping them gets them back with the config). Errors name the field and what was expected.
pub fn read_gpt2_layout(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
    default_act: &str,
    kv_heads: impl FnOnce(usize) -> usize,
) -> Result<(ArchConfig, Gpt2Config)> {
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
    let act = raw.activation_function.as_deref().unwrap_or(default_act);
    let gelu = Gelu::from_hf_name(act).ok_or_else(|| {
        f.err(
            "activation_function",
            &format!(
                "`{act}` is not supported for {} (expected {})",
                model_type.name,
                Gelu::NAMES
            ),
        )
    })?;
    let head_dim = hidden_size / heads;
    let knobs = Gpt2Config {
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
    };
    let cfg = ArchConfig {
        model_type,
        hidden_size,
        intermediate_size,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads(heads),
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
        family: Knobs::new(knobs),
    };
    Ok((cfg, knobs))
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

/// GPT-2's hooks: `transformer.*` names, LayerNorm, learned positions, Conv1D projections.
impl Family for Gpt2Config {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn names(&self) -> Names {
        Names {
            root: "transformer",
            embed: "wte",
            layers: "h",
            attn: "attn",
            o_proj: "c_proj",
            final_norm: "ln_f",
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: self.layer_norm_eps,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_attention: Some("ln_1"),
            post_attention: None,
            pre_mlp: Some("ln_2"),
            post_mlp: None,
        }
    }

    /// Token embeddings plus the `transformer.wpe` rows of `position_ids`.
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let table = [cfg.max_position_embeddings, cfg.hidden_size];
        let positions = learned_positions(b, "transformer.wpe", table, &io.position_ids, 0, dtype);
        b.op("Add", &[&x, &positions], vec![])
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        false
    }

    /// The q, k and v column blocks of the fused `c_attn`.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let h = cfg.hidden_size;
        [("q_proj", 0), ("k_proj", 1), ("v_proj", 2)].map(|(name, block)| {
            let params = Conv1dParams {
                weight: format!("{attn}.c_attn.weight"),
                bias: format!("{attn}.c_attn.bias"),
                columns: Some((block * h, h, 3 * h)),
            };
            conv1d(b, x, &format!("{attn}.{name}"), &params, h, h, dtype)
        })
    }

    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        let (h, proj) = (cfg.hidden_size, format!("{attn}.{}", self.names().o_proj));
        conv1d(b, y, &proj, &Conv1dParams::whole(&proj), h, h, dtype)
    }

    /// `c_proj(gelu(c_fc(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        conv1d_mlp(b, cfg, x, mlp, Activation::Gelu(self.gelu), dtype)
    }
}

/// Checkpoint names as the builder reads them: base-model checkpoints (`GPT2Model`, e.g. the
/// hub's `openai-community/gpt2`) spell `h.0.…`, `wte.weight`; `GPT2LMHeadModel` ones
/// `transformer.h.0.…`. Every name outside `transformer.` and `lm_head.` gets the prefix.
pub fn checkpoint_name(name: &str) -> Option<String> {
    Some(
        if name.starts_with("transformer.") || name.starts_with("lm_head.") {
            name.to_string()
        } else {
            format!("transformer.{name}")
        },
    )
}

#[cfg(test)]
mod tests {
    use crate::config::ArchConfig;
    use crate::Result;

    fn parse(json: &str) -> Result<ArchConfig> {
        crate::models::parse_config(json.as_bytes(), std::path::Path::new("config.json"))
    }

    #[test]
    fn bad_gpt2_values_are_named() {
        let gpt2 = r#"{"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
            "n_positions": 128, "vocab_size": 300"#;
        for (extra, field) in [
            (r#""layer_norm_epsilon": -1"#, "layer_norm_epsilon"),
            (r#""n_layer": 4096"#, "n_layer"),
            (r#""n_head": 0"#, "n_head"),
        ] {
            let msg = parse(&format!("{gpt2}, {extra}}}"))
                .unwrap_err()
                .to_string();
            assert!(msg.contains(&format!("field `{field}`")), "{extra}: {msg}");
        }
    }
}
