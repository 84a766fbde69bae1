//! Cohere Compass text (the language model of Cohere's North vision models, transformers'
//! CohereCompassForCausalLM): Cohere's parallel blocks off one LayerNorm without bias, with
//! heads always `hidden_size / num_attention_heads` wide, layers full or sliding by
//! `layer_types` (all full by default, window 4096), one RoPE per layer type
//! (`rope_parameters.full_attention`, `.sliding_attention`) rotating whole heads in halves
//! (`rotate_half`, not Cohere's interleaved pairs; the M-RoPE sections only matter for image
//! positions: text positions are the same on every axis), and the logits times `logit_scale`
//! (1 when null).

use serde_json::Value;

use super::cohere::{read_cohere, Cohere, FIELDS as COHERE};
use super::components::Norm;
use super::decoder::{Family, LayerNorms, LayerRope};
use super::family::FamilySpec;
use crate::config::read_layer_type_rope;
use crate::config::{
    sliding_layer_types, ArchConfig, DecoderFields, Fields, HfConfig, ModelType, Rope,
    SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `cohere_compass_text` type: its
/// generic `decoder` runs the graph (which carries the windows, both RoPEs and the logit
/// scale).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "cohere_compass_text",
    summary: "Cohere's parallel blocks with rotate-half RoPE per layer type, full/sliding \
              layers, logits times `logit_scale`",
    model_types: &[ModelType::generative(
        "cohere_compass_text",
        "decoder",
        read,
    )],
};

const FULL: &str = "full_attention";
const SLIDING: &str = "sliding_attention";

/// transformers' CohereCompassTextConfig: Cohere's reading (`attention_bias` on q, k, v and o,
/// tied) with a window of 4096 on the `sliding_attention` layers (none by default) and a
/// RoPE per layer type.
const FIELDS: DecoderFields = DecoderFields {
    rope: |raw, head_dim, f| rope_of(raw, head_dim, first_kind(raw), f),
    sliding_window: Some(4096),
    sliding_layers: SlidingLayers::Pattern(|_, layers, _| Ok(vec![false; layers])),
    ..COHERE
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // CohereCompassTextConfig derives head_dim from hidden_size and has no MLP bias, q/k norm,
    // `use_sliding_window` or `max_window_layers`; a null `logit_scale` scales by 1.
    let raw = HfConfig {
        head_dim: None,
        mlp_bias: None,
        use_qk_norm: None,
        use_sliding_window: None,
        max_window_layers: None,
        logit_scale: raw.logit_scale.or(Some(1.0)),
        ..raw.clone()
    };
    read_cohere(&raw, t, f, &FIELDS, |cohere, dims| {
        let layers = dims.num_hidden_layers;
        let sliding = sliding_layer_types(&raw, layers, f)?.unwrap_or_else(|| vec![false; layers]);
        let sliding_rope = match sliding.contains(&true) && sliding.contains(&false) {
            true => Some(rope_of(&raw, dims.head_dim, SLIDING, f)?),
            false => None,
        };
        Ok(CohereCompassText {
            cohere,
            sliding,
            sliding_rope,
        })
    })
}

/// The layer type whose RoPE is the config's: `full_attention`, unless every layer slides.
fn first_kind(raw: &HfConfig) -> &'static str {
    match &raw.layer_types {
        Some(types) if !types.is_empty() && types.iter().all(|t| t == SLIDING) => SLIDING,
        _ => FULL,
    }
}

/// The RoPE of `kind` layers: `rope_parameters.{kind}`. transformers reads no other form
/// (a flat `rope_parameters` or none fails in CohereCompassRotaryEmbedding).
fn rope_of(raw: &HfConfig, head_dim: usize, kind: &str, f: &Fields<'_>) -> Result<Rope> {
    let field = format!("rope_parameters.{kind}");
    let params = match &raw.rope_parameters {
        Some(Value::Object(map)) if map.contains_key(FULL) || map.contains_key(SLIDING) => {
            match map.get(kind) {
                Some(p @ Value::Object(_)) => p.clone(),
                other => {
                    let found = other.map_or("missing".to_string(), Value::to_string);
                    return Err(f.err(&field, &format!("{found} (expected an object)")));
                }
            }
        }
        _ => {
            return Err(f.err(
                "rope_parameters",
                "has no entry per layer type (expected `full_attention` and \
                 `sliding_attention` objects, as transformers writes CohereCompassTextConfig)",
            ))
        }
    };
    read_layer_type_rope(raw, params, kind, head_dim, 10_000.0, f)
}

/// Cohere Compass text's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct CohereCompassText {
    /// Cohere's knobs (LayerNorm epsilon, logit scale).
    pub cohere: Cohere,
    /// Per layer, whether it is a `sliding_attention` layer.
    pub sliding: Vec<bool>,
    /// The sliding layers' RoPE when both layer types are present (the config's RoPE is the
    /// other type's).
    pub sliding_rope: Option<Rope>,
}

impl Family for CohereCompassText {
    fn norm(&self, cfg: &ArchConfig) -> Norm {
        self.cohere.norm(cfg)
    }

    fn layer_norms(&self) -> LayerNorms {
        self.cohere.layer_norms()
    }

    fn parallel_blocks(&self) -> bool {
        self.cohere.parallel_blocks()
    }

    /// Sliding-window layers rotate with their own RoPE (`model.rotary_emb_sliding.*`).
    fn other_rope(&self) -> Option<(&Rope, &'static str)> {
        self.sliding_rope
            .as_ref()
            .map(|r| (r, "model.rotary_emb_sliding"))
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::other_if(self.sliding[i])
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        self.cohere.logits(b, cfg, x, head, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROPES: &str = r#", "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 2, 2]},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}"#;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "cohere_compass_text", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 8192"#,
            extra,
        )
    }

    fn knobs(cfg: &ArchConfig) -> &CohereCompassText {
        cfg.knobs::<CohereCompassText>().unwrap()
    }

    #[test]
    fn reads_transformers_defaults() {
        let extra = format!(
            r#"{ROPES}, "head_dim": 8, "mlp_bias": true, "use_qk_norm": true,
            "use_sliding_window": false, "logit_scale": null"#
        );
        let cfg = parse(&extra).unwrap();
        assert_eq!((cfg.head_dim, cfg.rope.rotary_dim), (16, 16));
        assert!(!cfg.rope.interleaved);
        assert_eq!(cfg.rope.theta, 1e6);
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(cfg.tie_word_embeddings && !cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias);
        let k = knobs(&cfg);
        assert_eq!((k.cohere.layer_norm_eps, k.cohere.logit_scale), (1e-5, 1.0));
        assert_eq!(
            (k.sliding.as_slice(), &k.sliding_rope),
            (&[false, false][..], &None)
        );
        assert!(k.parallel_blocks() && k.layer_norms().pre_mlp.is_none());

        let extra = format!(
            r#"{ROPES}, "layer_types": ["sliding_attention", "full_attention"],
            "sliding_window": 6, "attention_bias": true, "logit_scale": 0.25"#
        );
        let v = parse(&extra).unwrap();
        assert_eq!(v.layer_windows, [Some(6), None]);
        assert!(v.qkv_bias && v.o_bias);
        let k = knobs(&v);
        assert_eq!(k.cohere.logit_scale, 0.25);
        let sliding = k.sliding_rope.as_ref().unwrap();
        assert_eq!((sliding.theta, sliding.interleaved), (1e4, false));
        assert_eq!(k.layer_rope(&v, 0).unwrap().1, 1);
        assert_eq!(k.layer_rope(&v, 1).unwrap(), (&v.rope, 0));

        // Every layer sliding: the config's RoPE is the sliding one, no second table.
        let all = parse(
            r#", "rope_parameters": {"sliding_attention": {"rope_theta": 500.0}},
            "layer_types": ["sliding_attention", "sliding_attention"], "sliding_window": 6"#,
        )
        .unwrap();
        assert_eq!(all.rope.theta, 500.0);
        assert_eq!(knobs(&all).sliding_rope, None);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            ("", "rope_parameters"),
            (
                r#", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}"#,
                "rope_parameters",
            ),
            (
                r#", "rope_parameters": {"sliding_attention": {"rope_theta": 1e4}}"#,
                "rope_parameters.full_attention",
            ),
            (
                r#", "rope_parameters": {"full_attention": {"rope_type": "linear"}}"#,
                "rope_parameters.full_attention.factor",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
        for (extra, want) in [
            (r#", "layer_types": ["sliding_attention"]"#, "layer_types"),
            (r#", "logit_scale": 0"#, "logit_scale"),
            (r#", "layer_norm_eps": -1"#, "layer_norm_eps"),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
        ] {
            let err = parse(&format!("{ROPES}{extra}")).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }
}
