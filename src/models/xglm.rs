//! XGLM (Meta): token embeddings times √d_model (`scale_embedding`) plus sinusoidal positions
//! read two rows into their table, pre-norm LayerNorm layers of biased multi-head attention
//! and an ungated `fc2(act(fc1(x)))` MLP (exact GELU by default), a final LayerNorm and a
//! tied LM head.

use super::components::{
    scalar, sinusoidal_positions, ungated_mlp, Activation, DecoderInputs, Norm, NormKind,
};
use super::decoder::{Family, LayerNorms, Names};
use super::family::{without_windows, FamilySpec};
use super::gpt2::read_gpt2_layout;
use crate::config::{ArchConfig, Fields, HfConfig, Knobs, ModelType};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_WIDTH;
use crate::Result;

/// The family's registry entry. onnxruntime-genai has no `xglm` type: its generic `decoder`
/// runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "xglm",
    summary: "sinusoidal positions offset by 2, embeddings times √d_model \
              (`scale_embedding`), biased attention, GELU MLP (`fc1`/`fc2`), tied head",
    model_types: &[ModelType::generative("xglm", "decoder", read)],
};

/// The rows XGLM's position table holds before position 0.
const POSITION_OFFSET: usize = 2;

/// The epsilon of XGLM's LayerNorms (torch's default: transformers passes none).
const LAYER_NORM_EPS: f32 = 1e-5;

/// XGLM's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Xglm {
    /// What the token embeddings are multiplied by (√d_model, or 1 without
    /// `scale_embedding`).
    pub embed_scale: f32,
    /// The MLP activation (`activation_function`).
    pub act: Activation,
    /// The inverse frequencies of the sinusoidal table's columns.
    pub inv_freq: Vec<f32>,
}

/// Reads an XGLM config as transformers' XGLMConfig does: `d_model` 1024, `num_layers` 24,
/// `attention_heads` 16, `ffn_dim` 4096, 2048 positions, vocabulary 256008, `gelu`,
/// `scale_embedding` true, a tied head. Errors name the field.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let ffn_dim = f.positive("ffn_dim", Some(raw.ffn_dim.unwrap_or(4096)), MAX_WIDTH)?;
    // XGLMConfig's own names (transformers maps hidden_size, num_attention_heads and
    // num_hidden_layers onto them), and none of GPT-2's spellings or epsilon.
    let sizes = HfConfig {
        hidden_size: raw.d_model.or(raw.hidden_size).or(Some(1024)),
        n_layer: raw.num_layers.or(raw.num_hidden_layers).or(Some(24)),
        n_head: raw.attention_heads.or(raw.num_attention_heads).or(Some(16)),
        max_position_embeddings: raw.max_position_embeddings.or(Some(2048)),
        vocab_size: raw.vocab_size.or(Some(256_008)),
        intermediate_size: Some(ffn_dim as i64),
        n_embd: None,
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
        "gelu",
        "activation_function",
        f,
    )?;
    let d = cfg.hidden_size;
    if d % 2 != 0 || d < 4 {
        return Err(f.err(
            "d_model",
            &format!("{d} (the sinusoidal positions need an even width of at least 4)"),
        ));
    }
    cfg.family = Knobs::new(Xglm {
        embed_scale: match raw.scale_embedding.unwrap_or(true) {
            true => (d as f64).sqrt() as f32,
            false => 1.0,
        },
        act,
        inv_freq: inverse_frequencies(d / 2),
    });
    Ok(cfg)
}

/// `exp(-i · ln(10000) / (half - 1))` for `i < half`, in f32 as transformers computes them.
fn inverse_frequencies(half: usize) -> Vec<f32> {
    let step = -(10_000f64.ln() / (half - 1) as f64) as f32;
    (0..half).map(|i| (i as f32 * step).exp()).collect()
}

impl Family for Xglm {
    fn names(&self) -> Names {
        Names {
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

    /// Token embeddings times the embedding scale, plus the sinusoidal rows of
    /// `position_ids + 2` (the padding index's row zeroed, as transformers builds it).
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
        b.set_scope("model.embed_positions");
        let rows = cfg.max_position_embeddings + POSITION_OFFSET;
        let pad = cfg.pad_token_id.and_then(|p| usize::try_from(p).ok());
        let positions = sinusoidal_positions(
            b,
            "model.embed_positions.weights",
            &self.inv_freq,
            rows,
            pad,
            &io.position_ids,
            POSITION_OFFSET as i64,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let fields = r#""model_type": "xglm", "d_model": 64, "attention_heads": 4,
            "num_layers": 2, "ffn_dim": 128, "max_position_embeddings": 128,
            "vocab_size": 300"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "layer_norm_epsilon": 0.5, "n_inner": 7"#).unwrap();
        assert_eq!((cfg.hidden_size, cfg.num_hidden_layers), (64, 2));
        assert_eq!((cfg.num_attention_heads, cfg.intermediate_size), (4, 128));
        assert!(cfg.tie_word_embeddings && cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias);
        let knobs = cfg.knobs::<Xglm>().unwrap();
        assert_eq!(knobs.embed_scale, 8.0);
        assert_eq!(knobs.act, Activation::Gelu(crate::config::Gelu::Exact));
        assert_eq!(knobs.inv_freq.len(), 32);
        assert_eq!(knobs.inv_freq[0], 1.0);
        assert!(
            (knobs.inv_freq[31] / 1e-4 - 1.0).abs() < 1e-5,
            "{}",
            knobs.inv_freq[31]
        );
        let unscaled = parse(r#", "scale_embedding": false"#).unwrap();
        assert_eq!(unscaled.knobs::<Xglm>().unwrap().embed_scale, 1.0);
        let default = crate::models::parse_fields(r#""model_type": "xglm""#, "").unwrap();
        assert_eq!((default.hidden_size, default.vocab_size), (1024, 256_008));
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, field) in [
            (r#", "activation_function": "bogus""#, "activation_function"),
            (r#", "ffn_dim": 0"#, "ffn_dim"),
        ] {
            let msg = parse(extra).unwrap_err().to_string();
            assert!(msg.contains(&format!("field `{field}`")), "{extra}: {msg}");
        }
        let odd = r#""model_type": "xglm", "d_model": 63, "attention_heads": 3"#;
        let msg = crate::models::parse_fields(odd, "")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("field `d_model`"), "{msg}");
    }
}
