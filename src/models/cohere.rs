//! Cohere (Command R): parallel blocks `x + attn(ln(x)) + mlp(ln(x))` off one LayerNorm
//! scaled by its weight without a bias (`layer_norm_eps`), RoPE over whole heads with
//! interleaved pairs `(x0, x1), (x2, x3)…`, the logits multiplied by `logit_scale` (0.0625 by
//! default) and the LM head tied to the embeddings by default.

use super::components::{scalar, Norm, NormKind};
use super::decoder::{Family, LayerNorms};
use super::family::{without_windows, FamilySpec};
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, ArchConfig, DecoderFields, Dims, FamilyKnobs, Fields, HfConfig, Rope,
    Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `cohere` type: its generic
/// `decoder` runs the graph (which carries the interleaved rotation and the logit scale).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "cohere",
    summary: "parallel blocks off one LayerNorm without bias, interleaved RoPE, logits times \
              `logit_scale`, tied head",
    model_types: &[ModelType::generative("cohere", "decoder", read)],
};

/// transformers' CohereConfig: `attention_bias` on q, k, v and o (no MLP bias), SiLU-gated
/// MLP, interleaved RoPE with theta 1e4, tied.
pub(super) const FIELDS: DecoderFields = DecoderFields {
    rope: |raw, head_dim, f| {
        let rope = read_rope(raw, head_dim, 10_000.0, f)?;
        Ok(Rope {
            interleaved: true,
            ..rope
        })
    },
    tie_word_embeddings: true,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    if raw.use_qk_norm == Some(true) {
        return Err(f.err(
            "use_qk_norm",
            "true is not supported for cohere (per-head q/k LayerNorms are not built)",
        ));
    }
    // CohereConfig has no sliding window, layer types or MLP bias: transformers ignores them.
    let raw = HfConfig {
        mlp_bias: None,
        ..without_windows(raw)
    };
    read_cohere(&raw, t, f, &FIELDS, |cohere, _| Ok(cohere))
}

/// A Cohere-like config read as `fields` says, with the family's knobs made by `knobs` from
/// the [`Cohere`] ones and the dimensions (Cohere 2 shares them).
pub(super) fn read_cohere<K: FamilyKnobs>(
    raw: &HfConfig,
    t: &'static ModelType,
    f: &Fields<'_>,
    fields: &DecoderFields,
    knobs: impl FnOnce(Cohere, Dims) -> Result<K>,
) -> Result<ArchConfig> {
    let mut cfg = read_decoder(raw, t, f, fields, |dims| {
        let cohere = Cohere {
            layer_norm_eps: f.number(
                "layer_norm_eps",
                raw.layer_norm_eps,
                1e-5,
                Sign::NonNegative,
            )?,
            logit_scale: f.number("logit_scale", raw.logit_scale, 0.0625, Sign::NonZero)?,
        };
        knobs(cohere, dims)
    })?;
    // transformers' default Cohere RoPE rotates whole heads, whatever the config says.
    if cfg.rope.rotary_dim != cfg.head_dim {
        return Err(f.err(
            "partial_rotary_factor",
            &format!(
                "rotates {} of {} channels per head (Cohere rotates whole heads)",
                cfg.rope.rotary_dim, cfg.head_dim
            ),
        ));
    }
    cfg.rms_norm_eps = 0.0;
    Ok(cfg)
}

/// Cohere's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cohere {
    /// Epsilon of every LayerNorm (`layer_norm_eps`).
    pub layer_norm_eps: f32,
    /// The logits are multiplied by it (`logit_scale`).
    pub logit_scale: f32,
}

impl Family for Cohere {
    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::UnbiasedLayer,
            eps: self.layer_norm_eps,
        }
    }

    /// One norm per layer (`input_layernorm`), read by attention and MLP alike.
    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_mlp: None,
            ..LayerNorms::PRE
        }
    }

    fn parallel_blocks(&self) -> bool {
        true
    }

    /// `(x @ head) · logit_scale`.
    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        let product = b.op("MatMul", &[x, head], vec![]);
        let c = scalar(b, self.logit_scale, dtype);
        b.op_into("Mul", &[&product, &c], vec![], "logits");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("cohere", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4, "mlp_bias": true"#).unwrap();
        assert_eq!((cfg.head_dim, cfg.rope.rotary_dim), (16, 16));
        assert!(cfg.rope.interleaved);
        assert_eq!(cfg.rope.theta, 1e4);
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(cfg.tie_word_embeddings && !cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias);
        let knobs = cfg.knobs::<Cohere>().unwrap();
        assert_eq!((knobs.layer_norm_eps, knobs.logit_scale), (1e-5, 0.0625));
        assert!(knobs.parallel_blocks() && knobs.layer_norms().pre_mlp.is_none());
        let v = parse(
            r#", "logit_scale": 0.5, "layer_norm_eps": 1e-6, "attention_bias": true,
            "tie_word_embeddings": false, "rope_theta": 500"#,
        )
        .unwrap();
        assert!(v.qkv_bias && v.o_bias && !v.tie_word_embeddings);
        assert_eq!(v.rope.theta, 500.0);
        let knobs = v.knobs::<Cohere>().unwrap();
        assert_eq!((knobs.layer_norm_eps, knobs.logit_scale), (1e-6, 0.5));
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "logit_scale": 0"#, "logit_scale"),
            (r#", "layer_norm_eps": -1"#, "layer_norm_eps"),
            (r#", "use_qk_norm": true"#, "use_qk_norm"),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
            (r#", "partial_rotary_factor": 0.5"#, "partial_rotary_factor"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }
}
