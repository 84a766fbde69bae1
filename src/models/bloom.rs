//! BLOOM (BigScience): ALiBi instead of position embeddings ([`crate::models::components::alibi`]),
//! a LayerNorm on the token embeddings (`word_embeddings_layernorm`), pre-norm layers of
//! LayerNorm with bias, one fused `query_key_value` projection whose rows are grouped by head
//! (`[heads, 3, head_dim]`, as GPT-NeoX's), a tanh-GELU MLP `4·hidden` wide, biases on every
//! projection, and the LM head tied to the embeddings.
//!
//! config.json spells the sizes `n_layer` and `n_head` (transformers maps `num_hidden_layers` and
//! `num_attention_heads` to them) and the width `hidden_size` (`n_embed` in old configs). BLOOM has
//! no context limit of its own (ALiBi extrapolates); the package's context length is 2048, the
//! length BLOOM was trained on.

use super::components::head_interleaved_qkv;
use super::components::{alibi_slopes, gelu, linear, DecoderInputs, Norm, NormKind};
use super::decoder::{Family, LayerNorms, Names};
use super::family::FamilySpec;
use crate::config::{
    first_token, parse_dtype, token_list, ArchConfig, CheckpointRenaming, Fields, Gelu, HfConfig,
    Knobs, ModelType, Rope, RopeScaling, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `bloom` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "bloom",
    summary: "ALiBi (no position embeddings), LayerNorm on the embeddings, fused \
              head-interleaved `query_key_value` (split at save time), tanh-GELU MLP, biases \
              everywhere, tied head",
    model_types: &[ModelType::generative("bloom", "decoder", read)],
};

/// The package's context length: BLOOM's training length.
const DEFAULT_CONTEXT: usize = 2048;

/// BLOOM's knobs: its LayerNorm epsilon.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bloom {
    /// Epsilon of every LayerNorm (`layer_norm_epsilon`, 1e-5).
    pub layer_norm_eps: f32,
}

/// Reads a BLOOM config as transformers' BloomConfig does (its defaults: `hidden_size` 64,
/// `n_layer` 2, `n_head` 8, `vocab_size` 250880, tied embeddings); errors name the field.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let (hidden_field, hidden) = match raw.n_embed {
        Some(n) => ("n_embed", n),
        None => ("hidden_size", raw.hidden_size.unwrap_or(64)),
    };
    let hidden_size = f.positive(hidden_field, Some(hidden), MAX_WIDTH)?;
    let heads = f.positive(
        "n_head",
        raw.n_head.or(raw.num_attention_heads).or(Some(8)),
        MAX_HEADS,
    )?;
    if hidden_size % heads != 0 {
        return Err(f.err(
            "n_head",
            &format!("{heads} does not divide the hidden size ({hidden_size})"),
        ));
    }
    let layers = f.positive(
        "n_layer",
        raw.n_layer.or(raw.num_hidden_layers).or(Some(2)),
        MAX_LAYERS,
    )?;
    if raw.apply_residual_connection_post_layernorm == Some(true) {
        return Err(f.err(
            "apply_residual_connection_post_layernorm",
            "is not supported (expected false: the residual is the layer input)",
        ));
    }
    let head_dim = hidden_size / heads;
    Ok(ArchConfig {
        model_type,
        hidden_size,
        intermediate_size: 4 * hidden_size,
        num_attention_heads: heads,
        num_key_value_heads: heads,
        head_dim,
        num_hidden_layers: layers,
        vocab_size: f.positive("vocab_size", raw.vocab_size.or(Some(250_880)), MAX_VOCAB)?,
        max_position_embeddings: DEFAULT_CONTEXT,
        rms_norm_eps: 0.0,
        tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(true),
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        // No rotary embedding (ALiBi): a full-width default keeps the field well-formed.
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
        family: Knobs::new(Bloom {
            layer_norm_eps: f.number(
                "layer_norm_epsilon",
                raw.layer_norm_epsilon,
                1e-5,
                Sign::NonNegative,
            )?,
        }),
    })
}

/// BLOOM's hooks: `transformer.*` names, LayerNorm (also on the embeddings), ALiBi, the
/// head-interleaved fused q/k/v, tanh-GELU MLP.
impl Family for Bloom {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        // Base-model checkpoints (the hub's bigscience/bloom-*) spell `h.0.…`.
        Some(super::gpt2::checkpoint_name)
    }

    fn names(&self) -> Names {
        Names {
            root: "transformer",
            embed: "word_embeddings",
            layers: "h",
            attn: "self_attention",
            o_proj: "dense",
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
        LayerNorms::PRE
    }

    /// `word_embeddings_layernorm` of the token rows.
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let module = "transformer.word_embeddings_layernorm";
        b.set_scope(module);
        self.norm(cfg).apply(b, &x, module, cfg.hidden_size, dtype)
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        false
    }

    fn alibi_slopes(&self, cfg: &ArchConfig) -> Option<Vec<f32>> {
        Some(alibi_slopes(cfg.num_attention_heads))
    }

    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        head_interleaved_qkv(b, cfg, x, attn, dtype)
    }

    /// `dense_4h_to_h(gelu_tanh(dense_h_to_4h(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let (h, inner) = (cfg.hidden_size, cfg.intermediate_size);
        let up = linear(b, x, &format!("{mlp}.dense_h_to_4h"), h, inner, true, dtype);
        let up = gelu(b, &up, Gelu::Tanh);
        linear(
            b,
            &up,
            &format!("{mlp}.dense_4h_to_h"),
            inner,
            h,
            true,
            dtype,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let json = format!(r#"{{"model_type": "bloom", "vocab_size": 300{extra}}}"#);
        crate::models::parse_config(json.as_bytes(), std::path::Path::new("config.json"))
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse("").unwrap();
        assert_eq!(
            (
                cfg.hidden_size,
                cfg.num_attention_heads,
                cfg.num_hidden_layers
            ),
            (64, 8, 2)
        );
        assert_eq!((cfg.head_dim, cfg.intermediate_size), (8, 256));
        assert!(cfg.tie_word_embeddings && cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias);
        assert_eq!(cfg.knobs::<Bloom>().unwrap().layer_norm_eps, 1e-5);
        let old = parse(r#", "n_embed": 96, "n_head": 4, "n_layer": 3"#).unwrap();
        assert_eq!(
            (old.hidden_size, old.head_dim, old.num_hidden_layers),
            (96, 24, 3)
        );
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "n_head": 5"#, "n_head"),
            (r#", "n_layer": 0"#, "n_layer"),
            (r#", "layer_norm_epsilon": -1"#, "layer_norm_epsilon"),
            (
                r#", "apply_residual_connection_post_layernorm": true"#,
                "apply_residual_connection_post_layernorm",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(&format!("field `{want}`")), "{extra}: {err}");
        }
    }
}
