//! CTRL (Salesforce): token embeddings times √n_embd plus sinusoidal positions, pre-norm
//! LayerNorm layers (epsilon 1e-6) of biased multi-head attention (`Wq`, `Wk`, `Wv`, `dense`)
//! and a ReLU MLP (`ffn.0`, `ffn.2`), a final LayerNorm (`layer_norm_epsilon`) and an LM head
//! with a bias, tied to the embeddings.

use super::components::{
    linear, scalar, sinusoidal_positions, ungated_mlp, Activation, DecoderInputs, Norm, NormKind,
};
use super::decoder::{biased_logits, Family, LayerNorms, Names};
use super::family::{without_windows, FamilySpec};
use super::gpt2::{self, read_gpt2_layout};
use crate::config::{ArchConfig, CheckpointRenaming, Fields, HfConfig, Knobs, ModelType};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_WIDTH;
use crate::Result;

/// The family's registry entry. onnxruntime-genai has no `ctrl` type: its generic `decoder`
/// runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "ctrl",
    summary: "sinusoidal positions, embeddings times √n_embd, biased attention (`Wq`/`Wk`/`Wv`), \
              ReLU MLP (`ffn.0`/`ffn.2`), tied LM head with bias",
    model_types: &[ModelType::generative("ctrl", "decoder", read)],
};

/// The epsilon of the layers' LayerNorms (fixed in transformers' CTRL layers).
const LAYER_NORM_EPS: f32 = 1e-6;

/// CTRL's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Ctrl {
    /// The final LayerNorm's epsilon (`layer_norm_epsilon`).
    pub final_norm_eps: f32,
    /// What the token embeddings are multiplied by (√n_embd).
    pub embed_scale: f32,
    /// The inverse frequencies of the sinusoidal table's columns.
    pub inv_freq: Vec<f32>,
}

/// Reads a CTRL config as transformers' CTRLConfig does: `n_embd` 1280, `n_layer` 48,
/// `n_head` 16, `dff` 8192, `n_positions` 256, vocabulary 246534, `layer_norm_epsilon` 1e-6,
/// a tied head. Errors name the field.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let dff = f.positive("dff", Some(raw.dff.unwrap_or(8192)), MAX_WIDTH)?;
    // CTRLConfig's own names (transformers maps the generic ones onto them).
    let sizes = HfConfig {
        n_embd: raw.n_embd.or(raw.hidden_size).or(Some(1280)),
        n_layer: raw.n_layer.or(raw.num_hidden_layers).or(Some(48)),
        n_head: raw.n_head.or(raw.num_attention_heads).or(Some(16)),
        n_positions: raw
            .n_positions
            .or(raw.max_position_embeddings)
            .or(Some(256)),
        vocab_size: raw.vocab_size.or(Some(246_534)),
        n_inner: Some(dff as i64),
        layer_norm_epsilon: raw.layer_norm_epsilon.or(Some(LAYER_NORM_EPS.into())),
        layer_norm_eps: None,
        activation_function: None,
        ..without_windows(raw)
    };
    let (mut cfg, gpt2) = read_gpt2_layout(&sizes, model_type, f, "gelu_new", |heads| heads)?;
    let d = cfg.hidden_size;
    if d % 2 != 0 {
        return Err(f.err(
            "n_embd",
            &format!("{d} (the sinusoidal positions need an even width)"),
        ));
    }
    cfg.family = Knobs::new(Ctrl {
        final_norm_eps: gpt2.layer_norm_eps,
        embed_scale: (d as f64).sqrt() as f32,
        inv_freq: inverse_frequencies(d),
    });
    Ok(cfg)
}

/// `1 / 10000^(2k / d)` for `k < d / 2`, in f32 as transformers computes them.
fn inverse_frequencies(d: usize) -> Vec<f32> {
    (0..d / 2)
        .map(|k| 1.0 / 10_000f32.powf((2 * k) as f32 / d as f32))
        .collect()
}

impl Family for Ctrl {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(gpt2::checkpoint_name)
    }

    fn names(&self) -> Names {
        Names {
            root: "transformer",
            embed: "w",
            layers: "h",
            attn: "multi_head_attention",
            o_proj: "dense",
            final_norm: "layernorm",
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: LAYER_NORM_EPS,
        }
    }

    fn final_norm_of(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: self.final_norm_eps,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_attention: Some("layernorm1"),
            post_attention: None,
            pre_mlp: Some("layernorm2"),
            post_mlp: None,
        }
    }

    /// Token embeddings times √n_embd plus the sinusoidal rows of `position_ids`.
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
        b.set_scope("transformer.pos_encoding");
        let rows = cfg.max_position_embeddings;
        let name = "transformer.pos_encoding";
        let positions = sinusoidal_positions(
            b,
            name,
            &self.inv_freq,
            rows,
            None,
            &io.position_ids,
            0,
            dtype,
        );
        b.op("Add", &[&x, &positions], vec![])
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        false
    }

    /// `Wq`, `Wk` and `Wv`, with biases.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let h = cfg.hidden_size;
        ["Wq", "Wk", "Wv"].map(|name| linear(b, x, &format!("{attn}.{name}"), h, h, true, dtype))
    }

    /// `ffn.2(relu(ffn.0(x)))`.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        _i: usize,
        dtype: DType,
    ) -> String {
        let ffn = format!("{layer}.ffn");
        ungated_mlp(b, cfg, x, (&ffn, "0", "2"), Activation::Relu, dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        biased_logits(b, cfg, x, head, dtype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let fields = r#""model_type": "ctrl", "n_embd": 64, "n_head": 4, "n_layer": 2,
            "n_positions": 128, "vocab_size": 300"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "dff": 128"#).unwrap();
        assert_eq!(cfg.intermediate_size, 128);
        assert!(cfg.tie_word_embeddings && cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias);
        let knobs = cfg.knobs::<Ctrl>().unwrap();
        assert_eq!((knobs.final_norm_eps, knobs.embed_scale), (1e-6, 8.0));
        assert_eq!(knobs.inv_freq.len(), 32);
        assert_eq!(knobs.inv_freq[0], 1.0);
        let eps = parse(r#", "layer_norm_epsilon": 1e-5"#).unwrap();
        let knobs = eps.knobs::<Ctrl>().unwrap();
        assert_eq!(knobs.final_norm_of(&eps).eps, 1e-5);
        assert_eq!(knobs.norm(&eps).eps, LAYER_NORM_EPS);
        let default = crate::models::parse_fields(r#""model_type": "ctrl""#, "").unwrap();
        let dims = (
            default.hidden_size,
            default.num_hidden_layers,
            default.intermediate_size,
        );
        assert_eq!(dims, (1280, 48, 8192));
        assert_eq!(
            (default.max_position_embeddings, default.vocab_size),
            (256, 246_534)
        );
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, field) in [
            (r#", "dff": 0"#, "dff"),
            (r#", "layer_norm_epsilon": -1"#, "layer_norm_epsilon"),
        ] {
            let msg = parse(extra).unwrap_err().to_string();
            assert!(msg.contains(&format!("field `{field}`")), "{extra}: {msg}");
        }
        let odd = r#""model_type": "ctrl", "n_embd": 63, "n_head": 3"#;
        let msg = crate::models::parse_fields(odd, "")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("field `n_embd`"), "{msg}");
    }
}
