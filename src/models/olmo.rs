//! OLMo (AllenAI, the first generation): the Llama decoder with LayerNorms that have no
//! learned weight or bias (epsilon 1e-5), and q, k and v clamped to `[-clip_qkv, clip_qkv]`
//! after their projections when `clip_qkv` is set.

use super::components::{linear, scalar, Norm, NormKind};
use super::decoder::Family;
use super::family::{without_windows, FamilySpec};
use crate::config::ModelType;
use crate::config::{read_decoder, ArchConfig, Biases, DecoderFields, Fields, HfConfig, Sign};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "olmo",
    summary: "LayerNorm without weight or bias, q/k/v clamped to `clip_qkv`",
    model_types: &[ModelType::generative("olmo", "olmo", read)],
};

/// transformers' OlmoConfig: `attention_bias` on q, k, v and o, no MLP bias, RoPE theta
/// 1e4, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    ..DecoderFields::LLAMA
};

/// The epsilon of OLMo's LayerNorms (fixed in transformers' OlmoLayerNorm).
const LAYER_NORM_EPS: f32 = 1e-5;

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // OlmoConfig has no sliding window or layer types.
    let raw = without_windows(raw);
    let clip_qkv = read_clip_qkv(&raw, f)?;
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |_| Ok(Olmo { clip_qkv }))?;
    cfg.rms_norm_eps = 0.0;
    Ok(cfg)
}

/// `clip_qkv`, positive where set (OLMo and OLMoE).
pub(super) fn read_clip_qkv(raw: &HfConfig, f: &Fields<'_>) -> Result<Option<f32>> {
    match raw.clip_qkv {
        Some(c) => Ok(Some(f.number("clip_qkv", Some(c), c, Sign::Positive)?)),
        None => Ok(None),
    }
}

/// `y` clamped to `[-clip, clip]` as torch's clamp, `Min(Max(y, -clip), clip)` (written with
/// the elementwise ops the optimizer types, rather than Clip); `y` itself without a bound.
pub(super) fn clipped(b: &mut GraphBuilder, y: String, clip: Option<f32>, dtype: DType) -> String {
    let Some(c) = clip else { return y };
    let (lo, hi) = (scalar(b, -c, dtype), scalar(b, c, dtype));
    let floored = b.op("Max", &[&y, &lo], vec![]);
    b.op("Min", &[&floored, &hi], vec![])
}

/// OLMo's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Olmo {
    /// The bound q, k and v are clamped to (`clip_qkv`), if any.
    pub clip_qkv: Option<f32>,
}

impl Family for Olmo {
    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::PlainLayer,
            eps: LAYER_NORM_EPS,
        }
    }

    /// The Llama projections, each clamped to `[-clip_qkv, clip_qkv]` when set.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let h = cfg.hidden_size;
        [
            ("q_proj", cfg.q_size()),
            ("k_proj", cfg.kv_size()),
            ("v_proj", cfg.kv_size()),
        ]
        .map(|(name, width)| {
            let prefix = format!("{attn}.{name}");
            let y = linear(b, x, &prefix, h, width, cfg.qkv_bias, dtype);
            clipped(b, y, self.clip_qkv, dtype)
        })
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "olmo", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4"#).unwrap();
        assert_eq!(cfg.num_key_value_heads, 4);
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.knobs::<Olmo>().unwrap().clip_qkv, None);
        let clipped =
            parse(r#", "clip_qkv": 8, "attention_bias": true, "mlp_bias": true"#).unwrap();
        assert_eq!(clipped.knobs::<Olmo>().unwrap().clip_qkv, Some(8.0));
        assert!(clipped.qkv_bias && clipped.o_bias && !clipped.mlp_bias);
        let null = parse(r#", "clip_qkv": null"#).unwrap();
        assert_eq!(null.knobs::<Olmo>().unwrap().clip_qkv, None);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "clip_qkv": 0"#, "clip_qkv"),
            (r#", "clip_qkv": -2"#, "clip_qkv"),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }
}
