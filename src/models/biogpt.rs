//! BioGPT (Microsoft): token embeddings times √hidden_size (`scale_embedding`) plus learned
//! positions read two rows into their table, pre-norm LayerNorm layers (epsilon 1e-5: the
//! config's `layer_norm_eps` is not read) of biased multi-head attention and an ungated
//! `fc2(act(fc1(x)))` MLP, a final LayerNorm and an LM head (`output_projection`) tied to the
//! embeddings unless the config unties it.

use super::components::{
    learned_positions, scalar, ungated_mlp, Activation, DecoderInputs, Norm, NormKind,
};
use super::decoder::{Family, LayerNorms, Names};
use super::family::{without_windows, FamilySpec};
use super::gpt2::read_gpt2_layout;
use crate::config::{ArchConfig, CheckpointRenaming, Fields, HfConfig, Knobs, ModelType};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai has no `biogpt` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "biogpt",
    summary: "learned positions offset by 2, embeddings times √hidden_size \
              (`scale_embedding`), biased attention, GELU MLP (`fc1`/`fc2`), tied \
              `output_projection` head",
    model_types: &[ModelType::generative("biogpt", "decoder", read)],
};

/// The rows BioGPT's position table holds before position 0.
const POSITION_OFFSET: i64 = 2;

/// The epsilon of BioGPT's LayerNorms (torch's default: transformers passes none).
const LAYER_NORM_EPS: f32 = 1e-5;

/// BioGPT's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BioGpt {
    /// What the token embeddings are multiplied by (√hidden_size, or 1 without
    /// `scale_embedding`).
    pub embed_scale: f32,
    /// The MLP activation (`hidden_act`).
    pub act: Activation,
}

/// Reads a BioGPT config as transformers' BioGptConfig does: hidden 1024, 24 layers of 16
/// heads, `intermediate_size` 4096, 1024 positions, vocabulary 42384, `gelu`,
/// `scale_embedding` true, a tied head. Errors name the field.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // BioGptConfig's own names, and none of GPT-2's spellings or epsilon.
    let sizes = HfConfig {
        hidden_size: raw.hidden_size.or(Some(1024)),
        num_hidden_layers: raw.num_hidden_layers.or(Some(24)),
        num_attention_heads: raw.num_attention_heads.or(Some(16)),
        intermediate_size: raw.intermediate_size.or(Some(4096)),
        max_position_embeddings: raw.max_position_embeddings.or(Some(1024)),
        vocab_size: raw.vocab_size.or(Some(42384)),
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
    let act = Activation::read(raw.hidden_act.as_deref(), "gelu", "hidden_act", f)?;
    cfg.family = Knobs::new(BioGpt {
        embed_scale: match raw.scale_embedding.unwrap_or(true) {
            true => (cfg.hidden_size as f64).sqrt() as f32,
            false => 1.0,
        },
        act,
    });
    Ok(cfg)
}

/// Checkpoint names as the builder reads them: the head `output_projection.weight` as
/// `lm_head.weight`, every other name as it is.
fn checkpoint_name(name: &str) -> Option<String> {
    Some(match name {
        "output_projection.weight" => "lm_head.weight".to_string(),
        _ => name.to_string(),
    })
}

impl Family for BioGpt {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn names(&self) -> Names {
        Names {
            root: "biogpt",
            o_proj: "out_proj",
            final_norm: "layer_norm",
            ..Names::LLAMA
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: LAYER_NORM_EPS,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_attention: Some("self_attn_layer_norm"),
            post_attention: None,
            pre_mlp: Some("final_layer_norm"),
            post_mlp: None,
        }
    }

    /// Token embeddings times the embedding scale, plus the `biogpt.embed_positions` rows of
    /// `position_ids + 2`.
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let scale = scalar(b, self.embed_scale, dtype);
        let x = b.op("Mul", &[&x, &scale], vec![]);
        let rows = cfg.max_position_embeddings + POSITION_OFFSET as usize;
        let module = "biogpt.embed_positions";
        let table = [rows, cfg.hidden_size];
        let positions =
            learned_positions(b, module, table, &io.position_ids, POSITION_OFFSET, dtype);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let fields = r#""model_type": "biogpt", "hidden_size": 64, "num_attention_heads": 4,
            "num_hidden_layers": 2, "intermediate_size": 128, "max_position_embeddings": 128,
            "vocab_size": 300"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "layer_norm_eps": 1e-12"#).unwrap();
        assert_eq!(cfg.intermediate_size, 128);
        assert!(cfg.tie_word_embeddings && cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias);
        let knobs = *cfg.knobs::<BioGpt>().unwrap();
        assert_eq!(knobs.norm(&cfg).eps, LAYER_NORM_EPS);
        let exact = Activation::Gelu(crate::config::Gelu::Exact);
        assert_eq!((knobs.embed_scale, knobs.act), (8.0, exact));
        let unscaled = parse(r#", "scale_embedding": false"#).unwrap();
        assert_eq!(unscaled.knobs::<BioGpt>().unwrap().embed_scale, 1.0);
        let default = crate::models::parse_fields(r#""model_type": "biogpt""#, "").unwrap();
        assert_eq!((default.hidden_size, default.vocab_size), (1024, 42384));
        assert_eq!(default.max_position_embeddings, 1024);
        let head = checkpoint_name("output_projection.weight");
        assert_eq!(head.as_deref(), Some("lm_head.weight"));
    }

    #[test]
    fn bad_fields_are_named() {
        let msg = parse(r#", "hidden_act": "bogus""#).unwrap_err().to_string();
        assert!(msg.contains("field `hidden_act`"), "{msg}");
        let heads = r#""model_type": "biogpt", "hidden_size": 64, "num_attention_heads": 5"#;
        let msg = crate::models::parse_fields(heads, "")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("field `num_attention_heads`"), "{msg}");
    }
}
