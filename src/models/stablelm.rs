//! StableLM (Stability AI): the Llama decoder with LayerNorm (weight and bias,
//! `layer_norm_eps`), RoPE on the first `partial_rotary_factor` (0.25 by default) of each
//! head, and biases on q, k and v when `use_qkv_bias` is set (never on o or the MLP).
//! StableLM 2 12B adds a LayerNorm per head on queries and keys (`qk_layernorm`: weight only,
//! one per head) and parallel blocks off the one input norm (`use_parallel_residual`:
//! `x + attn(ln(x)) + mlp(ln(x))`).

use super::components::{per_head_norm, Norm, NormKind};
use super::decoder::{Family, LayerNorms};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, Sign,
};
use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `stablelm` type: its generic
/// `decoder` runs the graph (which carries the partial rotation).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "stablelm",
    summary: "LayerNorm with bias, partial RoPE (`partial_rotary_factor`), optional q/k/v \
              biases (`use_qkv_bias`), per-head q/k LayerNorms (`qk_layernorm`), parallel \
              blocks (`use_parallel_residual`)",
    model_types: &[ModelType::generative("stablelm", "decoder", read)],
};

/// transformers' StableLmConfig: no biases but the q/k/v ones read below, SiLU-gated MLP,
/// RoPE theta 1e4 on a quarter of each head by default, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    rope: |raw, head_dim, f| {
        let partial = raw.partial_rotary_factor.or(Some(0.25));
        let raw = HfConfig {
            partial_rotary_factor: partial,
            ..raw.clone()
        };
        read_rope(&raw, head_dim, 10_000.0, f)
    },
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // StableLmConfig has no sliding window or layer types: transformers never slides,
    // whatever else config.json holds.
    let raw = HfConfig {
        sliding_window: None,
        use_sliding_window: None,
        layer_types: None,
        ..raw.clone()
    };
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |_| {
        Ok(StableLm {
            layer_norm_eps: f.number(
                "layer_norm_eps",
                raw.layer_norm_eps,
                1e-5,
                Sign::NonNegative,
            )?,
            qk_layernorm: raw.qk_layernorm.unwrap_or(false),
            parallel_residual: raw.use_parallel_residual.unwrap_or(false),
        })
    })?;
    cfg.qkv_bias = raw.use_qkv_bias.unwrap_or(false);
    // transformers derives the head width from hidden_size; a different head_dim would
    // not be the model transformers runs.
    if cfg.q_size() != cfg.hidden_size {
        return Err(f.err(
            "head_dim",
            &format!(
                "{} (transformers' StableLM uses hidden_size / num_attention_heads = {})",
                cfg.head_dim,
                cfg.hidden_size / cfg.num_attention_heads
            ),
        ));
    }
    cfg.rms_norm_eps = 0.0;
    Ok(cfg)
}

/// StableLM's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StableLm {
    /// Epsilon of every LayerNorm (`layer_norm_eps`), the per-head ones included.
    pub layer_norm_eps: f32,
    /// A LayerNorm per head on queries and keys (`qk_layernorm`).
    pub qk_layernorm: bool,
    /// `x + attn(ln(x)) + mlp(ln(x))` instead of sequential blocks (`use_parallel_residual`;
    /// the layer then has no `post_attention_layernorm`).
    pub parallel_residual: bool,
}

impl Family for StableLm {
    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: self.layer_norm_eps,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        if self.parallel_residual {
            LayerNorms {
                pre_mlp: None,
                ..LayerNorms::PRE
            }
        } else {
            LayerNorms::PRE
        }
    }

    fn parallel_blocks(&self) -> bool {
        self.parallel_residual
    }

    /// With `qk_layernorm`, every head of q (k) normalised over its channels and scaled by
    /// that head's own weight (`{attn}.q_layernorm.norms.{h}.weight`, no bias).
    fn qk_norm(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        q: String,
        k: String,
        attn: &str,
        dtype: DType,
    ) -> (String, String) {
        if !self.qk_layernorm {
            return (q, k);
        }
        let mut norm = |x: &str, module: &str, heads: usize| {
            let d = cfg.head_dim;
            let plain = Norm {
                kind: NormKind::PlainLayer,
                eps: self.layer_norm_eps,
            };
            let module = format!("{attn}.{module}");
            let normed = per_head_norm(b, plain, x, &module, heads as i64, d, dtype);
            // The heads' weights side by side, `[heads · D]`, as the heads lie in `x`.
            let weights = b.initializer(Initializer {
                name: format!("{module}.weight"),
                dtype,
                shape: vec![heads * d],
                source: Some(TensorSource::Concat {
                    parts: (0..heads)
                        .map(|h| TensorSource::Checkpoint(format!("{module}.norms.{h}.weight")))
                        .collect(),
                    axis: 0,
                }),
            });
            b.op("Mul", &[&normed, &weights], vec![])
        };
        (
            norm(&q, "q_layernorm", cfg.num_attention_heads),
            norm(&k, "k_layernorm", cfg.num_key_value_heads),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("stablelm", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "head_dim": 16, "sliding_window": 4"#).unwrap();
        assert_eq!(cfg.head_dim, 16);
        assert_eq!(cfg.rope.rotary_dim, 4, "a quarter of the head rotates");
        assert_eq!(cfg.rope.theta, 1e4);
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.knobs::<StableLm>().unwrap().layer_norm_eps, 1e-5);
        let v4 = parse(
            r#", "use_qkv_bias": true, "partial_rotary_factor": 0.5, "rope_theta": 500,
            "layer_norm_eps": 1e-6"#,
        )
        .unwrap();
        assert!(v4.qkv_bias && !v4.o_bias);
        assert_eq!((v4.rope.rotary_dim, v4.rope.theta), (8, 500.0));
        assert_eq!(v4.knobs::<StableLm>().unwrap().layer_norm_eps, 1e-6);
        let v5 = parse(
            r#", "rope_parameters": {"rope_type": "default", "rope_theta": 1000,
            "partial_rotary_factor": 1.0}"#,
        )
        .unwrap();
        assert_eq!((v5.rope.rotary_dim, v5.rope.theta), (16, 1000.0));
    }

    #[test]
    fn reads_stablelm_2_12b_variants() {
        let cfg = parse(r#", "qk_layernorm": true, "use_parallel_residual": true"#).unwrap();
        let knobs = cfg.knobs::<StableLm>().unwrap();
        assert!(knobs.qk_layernorm && knobs.parallel_residual);
        assert!(knobs.parallel_blocks() && knobs.layer_norms().pre_mlp.is_none());
        let plain = parse("").unwrap();
        let knobs = plain.knobs::<StableLm>().unwrap();
        assert!(!knobs.qk_layernorm && !knobs.parallel_residual);
        assert_eq!(knobs.layer_norms(), LayerNorms::PRE);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "qk_layernorm": 1"#, "qk_layernorm"),
            (r#", "layer_norm_eps": -1"#, "layer_norm_eps"),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
            (
                r#", "partial_rotary_factor": 0.01"#,
                "partial_rotary_factor",
            ),
            (r#", "head_dim": 8"#, "head_dim"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }
}
