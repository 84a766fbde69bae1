//! Nemotron (NVIDIA: Nemotron-4, Minitron): the Llama decoder with LayerNorm1P (LayerNorm
//! scaled by `1 + weight`, with bias, `norm_eps`), RoPE on the first `partial_rotary_factor`
//! (0.5 by default) of each head, and an ungated MLP `down_proj(relu(up_proj(x))²)`.

use super::components::{squared_relu_mlp, Norm, NormKind};
use super::decoder::Family;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "nemotron",
    summary: "LayerNorm1P (scale `1 + weight`), partial RoPE (0.5 by default), squared-ReLU MLP \
              without a gate",
    model_types: &[ModelType::generative("nemotron", "nemotron", read)],
};

/// transformers' NemotronConfig: `attention_bias` on q, k, v and o, `mlp_bias` on the MLP,
/// RoPE theta 1e4 on half of each head by default, untied; the activation is read below.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: true },
    silu_mlp: false,
    rope: |raw, head_dim, f| {
        let partial = raw.partial_rotary_factor.or(Some(0.5));
        let raw = HfConfig {
            partial_rotary_factor: partial,
            ..raw.clone()
        };
        read_rope(&raw, head_dim, 10_000.0, f)
    },
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let act = raw.hidden_act.as_deref().unwrap_or("relu2");
    if act != "relu2" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported for nemotron (expected \"relu2\")"),
        ));
    }
    // NemotronConfig has no sliding window or layer types: transformers never slides,
    // whatever else config.json holds.
    let raw = HfConfig {
        sliding_window: None,
        use_sliding_window: None,
        layer_types: None,
        ..raw.clone()
    };
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |_| {
        Ok(Nemotron {
            norm_eps: f.number("norm_eps", raw.norm_eps, 1e-5, Sign::NonNegative)?,
        })
    })?;
    cfg.rms_norm_eps = 0.0;
    Ok(cfg)
}

/// Nemotron's knobs: its LayerNorm1P epsilon.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Nemotron {
    /// Epsilon of every LayerNorm1P (`norm_eps`).
    pub norm_eps: f32,
}

impl Family for Nemotron {
    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::OffsetLayer,
            eps: self.norm_eps,
        }
    }

    /// `down_proj(relu(up_proj(x))²)`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        squared_relu_mlp(b, cfg, x, (mlp, "up_proj", "down_proj"), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("nemotron", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4"#).unwrap();
        assert_eq!((cfg.head_dim, cfg.rope.rotary_dim), (16, 8));
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.knobs::<Nemotron>().unwrap().norm_eps, 1e-5);
        let v4 = parse(
            r#", "partial_rotary_factor": 0.25, "rope_theta": 500, "head_dim": 32,
            "attention_bias": true, "mlp_bias": true, "norm_eps": 1e-6, "hidden_act": "relu2""#,
        )
        .unwrap();
        assert_eq!(
            (v4.head_dim, v4.rope.rotary_dim, v4.rope.theta),
            (32, 8, 500.0)
        );
        assert!(v4.qkv_bias && v4.o_bias && v4.mlp_bias);
        assert_eq!(v4.knobs::<Nemotron>().unwrap().norm_eps, 1e-6);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "hidden_act": "silu""#, "hidden_act"),
            (r#", "norm_eps": -1"#, "norm_eps"),
            (
                r#", "partial_rotary_factor": 0.05"#,
                "partial_rotary_factor",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }
}
