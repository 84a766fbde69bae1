//! OPT (Meta): learned positions read two rows into their table, multi-head attention with
//! biases, an ungated `fc2(act(fc1(x)))` MLP (ReLU by default) and LayerNorms; pre-norm layers
//! and a final LayerNorm (`do_layer_norm_before`, the default), or post-norm layers
//! `ln(x + f(x))` without a final norm (OPT-350m). Token embeddings `word_embed_proj_dim` wide
//! are projected up to the hidden size (`project_in`) and the last hidden states back down
//! (`project_out`, after the final norm) when the two widths differ; the LM head is tied.

use super::components::{
    learned_positions, linear, ungated_mlp, Activation, DecoderInputs, Norm, NormKind,
};
use super::decoder::{Family, LayerNorms, Names};
use super::family::{without_windows, FamilySpec};
use super::gpt2::read_gpt2_layout;
use crate::config::{ArchConfig, CheckpointRenaming, Fields, HfConfig, Knobs, ModelType};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_WIDTH;
use crate::Result;

/// The family's registry entry. onnxruntime-genai has no `opt` type: its generic `decoder`
/// runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "opt",
    summary: "learned positions offset by 2, biased attention, ReLU MLP (`fc1`/`fc2`), \
              pre-norm or post-norm layers (`do_layer_norm_before`), embeddings projected \
              in and out when `word_embed_proj_dim` differs, tied head",
    model_types: &[ModelType::generative("opt", "decoder", read)],
};

/// The rows OPT's position table holds before position 0.
const POSITION_OFFSET: i64 = 2;

/// The epsilon of OPT's LayerNorms (torch's default: transformers passes none).
const LAYER_NORM_EPS: f32 = 1e-5;

/// OPT's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Opt {
    /// Pre-norm layers with a final LayerNorm (`do_layer_norm_before`); false: post-norm.
    pub pre_norm: bool,
    /// Whether the last layer's output goes through `final_layer_norm` (pre-norm layers
    /// without the legacy `_remove_final_layer_norm`).
    pub final_norm: bool,
    /// The token embedding width (`word_embed_proj_dim`, default the hidden size).
    pub word_embed_proj_dim: usize,
    /// Whether the LayerNorms have weights and biases (`layer_norm_elementwise_affine`).
    pub affine_norms: bool,
    /// The MLP activation (`activation_function`).
    pub act: Activation,
}

impl Opt {
    /// Whether the embeddings are projected in and out of the hidden width.
    fn projected(&self, cfg: &ArchConfig) -> bool {
        self.word_embed_proj_dim != cfg.hidden_size
    }
}

/// Reads an OPT config as transformers' OPTConfig does (the sizes default to OPT-125m's:
/// hidden 768, 12 layers of 12 heads, `ffn_dim` 3072, 2048 positions, vocabulary 50272);
/// errors name the field.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let ffn_dim = f.positive("ffn_dim", Some(raw.ffn_dim.unwrap_or(3072)), MAX_WIDTH)?;
    // OPTConfig has no GPT-2 spellings, epsilon or window: only its own fields count.
    let sizes = HfConfig {
        hidden_size: raw.hidden_size.or(Some(768)),
        num_hidden_layers: raw.num_hidden_layers.or(Some(12)),
        num_attention_heads: raw.num_attention_heads.or(Some(12)),
        max_position_embeddings: raw.max_position_embeddings.or(Some(2048)),
        vocab_size: raw.vocab_size.or(Some(50272)),
        intermediate_size: Some(ffn_dim as i64),
        n_embd: None,
        n_layer: None,
        n_head: None,
        n_positions: None,
        n_inner: None,
        layer_norm_epsilon: None,
        layer_norm_eps: None,
        activation_function: None,
        ..without_windows(raw)
    };
    let (mut cfg, _) = read_gpt2_layout(&sizes, model_type, f, "gelu_new", |heads| heads)?;
    let act = Activation::read(
        raw.activation_function.as_deref(),
        "relu",
        "activation_function",
        f,
    )?;
    let word_embed_proj_dim = match raw.word_embed_proj_dim {
        None => cfg.hidden_size,
        some => f.positive("word_embed_proj_dim", some, MAX_WIDTH)?,
    };
    let bias = raw.enable_bias.unwrap_or(true);
    (cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) = (bias, bias, bias);
    let pre_norm = raw.do_layer_norm_before.unwrap_or(true);
    cfg.family = Knobs::new(Opt {
        pre_norm,
        final_norm: pre_norm && !raw.remove_final_layer_norm.unwrap_or(false),
        word_embed_proj_dim,
        affine_norms: raw.layer_norm_elementwise_affine.unwrap_or(true),
        act,
    });
    Ok(cfg)
}

/// Checkpoint names as the builder reads them: base-model checkpoints (`OPTModel`, e.g. the
/// hub's `facebook/opt-125m`) spell `decoder.layers.0.…`; `OPTForCausalLM` ones
/// `model.decoder.layers.0.…`. Every name outside `model.` and `lm_head.` gets the prefix.
fn checkpoint_name(name: &str) -> Option<String> {
    Some(
        if name.starts_with("model.") || name.starts_with("lm_head.") {
            name.to_string()
        } else {
            format!("model.{name}")
        },
    )
}

impl Family for Opt {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn names(&self) -> Names {
        Names {
            root: "model.decoder",
            o_proj: "out_proj",
            final_norm: "final_layer_norm",
            ..Names::LLAMA
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: match self.affine_norms {
                true => NormKind::Layer,
                false => NormKind::PlainLayer,
            },
            eps: LAYER_NORM_EPS,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        let (attn, mlp) = (Some("self_attn_layer_norm"), Some("final_layer_norm"));
        match self.pre_norm {
            true => LayerNorms {
                pre_attention: attn,
                post_attention: None,
                pre_mlp: mlp,
                post_mlp: None,
            },
            false => LayerNorms {
                pre_attention: None,
                post_attention: attn,
                pre_mlp: None,
                post_mlp: mlp,
            },
        }
    }

    fn norm_after_residual(&self) -> bool {
        !self.pre_norm
    }

    fn final_norm(&self) -> bool {
        self.final_norm
    }

    fn embed_width(&self, _cfg: &ArchConfig) -> usize {
        self.word_embed_proj_dim
    }

    /// Token embeddings (through `project_in` when projected) plus the
    /// `model.decoder.embed_positions` rows of `position_ids + 2`.
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let h = cfg.hidden_size;
        let x = if self.projected(cfg) {
            let module = "model.decoder.project_in";
            b.set_scope(module);
            linear(b, &x, module, self.word_embed_proj_dim, h, false, dtype)
        } else {
            x
        };
        let rows = cfg.max_position_embeddings + POSITION_OFFSET as usize;
        let module = "model.decoder.embed_positions";
        let positions = learned_positions(
            b,
            module,
            [rows, h],
            &io.position_ids,
            POSITION_OFFSET,
            dtype,
        );
        b.op("Add", &[&x, &positions], vec![])
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        false
    }

    /// `fc2(act(fc1(x)))`, both in the layer module itself.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        _i: usize,
        dtype: DType,
    ) -> String {
        ungated_mlp(b, cfg, x, (layer, "fc1", "fc2"), self.act, dtype)
    }

    /// `project_out(x) @ head` when projected, else `x @ head`.
    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        let x = if self.projected(cfg) {
            let module = "model.decoder.project_out";
            b.set_scope(module);
            let (h, width) = (cfg.hidden_size, self.word_embed_proj_dim);
            let y = linear(b, x, module, h, width, false, dtype);
            b.set_scope("lm_head");
            y
        } else {
            x.to_string()
        };
        b.op_into("MatMul", &[&x, head], vec![], "logits");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let fields = r#""model_type": "opt", "hidden_size": 64, "num_attention_heads": 4,
            "num_hidden_layers": 2, "ffn_dim": 128, "max_position_embeddings": 128,
            "vocab_size": 300"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "layer_norm_epsilon": 0.5, "n_inner": 7"#).unwrap();
        assert_eq!(cfg.intermediate_size, 128);
        assert!(cfg.tie_word_embeddings && cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias);
        let knobs = *cfg.knobs::<Opt>().unwrap();
        assert_eq!(
            knobs,
            Opt {
                pre_norm: true,
                final_norm: true,
                word_embed_proj_dim: 64,
                affine_norms: true,
                act: Activation::Relu,
            }
        );
        assert_eq!(knobs.norm(&cfg).eps, LAYER_NORM_EPS);
        let post = parse(r#", "do_layer_norm_before": false, "word_embed_proj_dim": 32"#).unwrap();
        let knobs = post.knobs::<Opt>().unwrap();
        assert!(!knobs.pre_norm && !knobs.final_norm && knobs.projected(&post));
        assert_eq!(knobs.embed_width(&post), 32);
        let legacy = parse(r#", "_remove_final_layer_norm": true, "enable_bias": false"#).unwrap();
        assert!(!legacy.knobs::<Opt>().unwrap().final_norm && !legacy.qkv_bias);
        let plain = parse(r#", "layer_norm_elementwise_affine": false"#).unwrap();
        let knobs = plain.knobs::<Opt>().unwrap();
        assert_eq!(knobs.norm(&plain).kind, NormKind::PlainLayer);
        let sized = crate::models::parse_fields(r#""model_type": "opt""#, "").unwrap();
        let dims = (
            sized.hidden_size,
            sized.num_hidden_layers,
            sized.intermediate_size,
        );
        assert_eq!(dims, (768, 12, 3072));
        assert_eq!(
            (sized.max_position_embeddings, sized.vocab_size),
            (2048, 50272)
        );
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, field) in [
            (r#", "activation_function": "bogus""#, "activation_function"),
            (r#", "word_embed_proj_dim": 0"#, "word_embed_proj_dim"),
        ] {
            let msg = parse(extra).unwrap_err().to_string();
            assert!(msg.contains(&format!("field `{field}`")), "{extra}: {msg}");
        }
        // num_attention_heads does not divide the width
        let heads = r#""model_type": "opt", "hidden_size": 64, "num_attention_heads": 5"#;
        let msg = crate::models::parse_fields(heads, "")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("field `num_attention_heads`"), "{msg}");
        let fields = r#""model_type": "opt", "ffn_dim": -1"#;
        let msg = crate::models::parse_fields(fields, "")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("field `ffn_dim`"), "{msg}");
    }
}
