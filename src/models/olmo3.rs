//! OLMo 3: OLMo 2 (norms on each block's output, full-width q/k RMSNorm) with sliding-window
//! layers (by `layer_types`; without it three sliding layers then a full one, window 4096 by
//! default) and one RoPE per layer type: `rope_parameters.full_attention` and
//! `rope_parameters.sliding_attention` (theta 5e5 by default), so that long-context checkpoints
//! scale the full layers' RoPE (YaRN) and not the sliding ones'.

use serde_json::{Map, Value};

use super::decoder::{Family, LayerNorms, LayerRope, QkNorm};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, sliding_layer_types, ArchConfig, Biases, DecoderFields, Fields,
    HfConfig, Rope, RopeScaling, SlidingLayers,
};
use crate::{Error, Result};

/// The family's registry entry. onnxruntime-genai 0.18 has no `olmo3` type; its `olmo` type
/// is the same plain decoder loop, and the graph carries the windows and both RoPEs.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "olmo3",
    summary: "OLMo 2 with sliding-window layers (three of four by default) and a RoPE per \
              layer type (`rope_parameters.full_attention`, `.sliding_attention`)",
    model_types: &[ModelType::generative("olmo3", "olmo", read)],
};

/// transformers' Olmo3Config: `attention_bias` on q, k, v and o, no MLP bias, window 4096 on
/// every layer but each fourth, `rms_norm_eps` 1e-5, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| rope_of(raw, head_dim, FULL, f),
    sliding_window: Some(4096),
    sliding_layers: SlidingLayers::Pattern(default_sliding_layers),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// transformers' Olmo3Config default RoPE theta, of both layer types.
const THETA: f64 = 500_000.0;
const FULL: &str = "full_attention";
const SLIDING: &str = "sliding_attention";

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // Olmo3Config has no `use_sliding_window` or `max_window_layers`: transformers ignores them.
    let raw = HfConfig {
        use_sliding_window: None,
        max_window_layers: None,
        ..raw.clone()
    };
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let layers = dims.num_hidden_layers;
        let sliding = match sliding_layer_types(&raw, layers, f)? {
            Some(types) => types,
            None => default_sliding_layers(&raw, layers, f)?,
        };
        if raw.sliding_window == Some(None) && sliding.contains(&true) {
            return Err(f.err(
                "sliding_window",
                "null, but some layers are sliding_attention layers (transformers needs a \
                 window for them)",
            ));
        }
        let full = rope_of(&raw, dims.head_dim, FULL, f)?;
        let local = rope_of(&raw, dims.head_dim, SLIDING, f)?;
        Ok(Olmo3 {
            sliding_rope: (local != full).then_some(local),
            sliding,
        })
    })
}

/// Three sliding layers, then a full one, as Olmo3Config derives them without `layer_types`.
fn default_sliding_layers(_raw: &HfConfig, layers: usize, _f: &Fields<'_>) -> Result<Vec<bool>> {
    Ok((0..layers).map(|i| (i + 1) % 4 != 0).collect())
}

/// The RoPE of `kind` layers. transformers v5 writes one `rope_parameters` entry per layer
/// type (an absent or null one is the default RoPE with theta 5e5). A v4 config's
/// `rope_theta` and `rope_scaling` are the full layers'; its sliding layers rotate with theta
/// 5e5 in transformers 5 but with `rope_theta` in transformers 4, so another `rope_theta` is
/// refused as ambiguous.
fn rope_of(raw: &HfConfig, head_dim: usize, kind: &str, f: &Fields<'_>) -> Result<Rope> {
    let mut field = "rope_scaling".to_string();
    let rope = match &raw.rope_parameters {
        Some(Value::Object(map)) => {
            if !map.contains_key(FULL) && !map.contains_key(SLIDING) {
                return Err(f.err(
                    "rope_parameters",
                    "has no entry per layer type (expected `full_attention` and \
                     `sliding_attention` objects, as transformers writes Olmo3Config)",
                ));
            }
            field = format!("rope_parameters.{kind}");
            let mut params = match map.get(kind) {
                Some(Value::Object(p)) => p.clone(),
                Some(Value::Null) | None => Map::new(),
                Some(other) => return Err(f.err(&field, &format!("{other} (expected an object)"))),
            };
            params
                .entry("rope_theta")
                .or_insert_with(|| Value::from(THETA));
            let one = HfConfig {
                rope_parameters: Some(Value::Object(params)),
                rope_scaling: None,
                rope_theta: None,
                ..raw.clone()
            };
            read_rope(&one, head_dim, THETA, f).map_err(|e| nest(e, &field))?
        }
        _ if kind == FULL => read_rope(raw, head_dim, THETA, f)?,
        _ => {
            if raw.rope_theta.is_some_and(|t| t != THETA) {
                return Err(f.err(
                    "rope_theta",
                    &format!(
                        "{} with sliding layers is ambiguous (transformers 5 rotates them with \
                         theta {THETA}, transformers 4 with rope_theta): write \
                         rope_parameters.full_attention and .sliding_attention",
                        raw.rope_theta.unwrap_or(THETA)
                    ),
                ));
            }
            let plain = HfConfig {
                rope_parameters: None,
                rope_scaling: None,
                ..raw.clone()
            };
            read_rope(&plain, head_dim, THETA, f)?
        }
    };
    if rope.rotary_dim != head_dim {
        return Err(f.err(
            "partial_rotary_factor",
            &format!(
                "rotates {} of {head_dim} channels per head (OLMo 3 rotates whole heads)",
                rope.rotary_dim
            ),
        ));
    }
    if matches!(rope.scaling, RopeScaling::LongRope(_)) {
        return Err(f.err(
            &format!("{field}.rope_type"),
            "`longrope` is not supported for olmo3",
        ));
    }
    Ok(rope)
}

/// A `rope_parameters.…` field error of one nested entry, renamed to name that entry.
fn nest(e: Error, field: &str) -> Error {
    match e {
        Error::ConfigField {
            path,
            field: inner,
            message,
        } if inner.starts_with("rope_parameters.") => Error::ConfigField {
            path,
            field: format!("{field}.{}", &inner["rope_parameters.".len()..]),
            message,
        },
        other => other,
    }
}

/// OLMo 3's knobs: which layers slide, and their RoPE where it differs from the full layers'
/// ([`ArchConfig::rope`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Olmo3 {
    /// The sliding layers' RoPE, when it is not the full layers'.
    pub sliding_rope: Option<Rope>,
    /// Per layer, whether it is a `sliding_attention` layer.
    pub sliding: Vec<bool>,
}

impl Family for Olmo3 {
    fn layer_norms(&self) -> LayerNorms {
        LayerNorms::POST
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::FullWidth
    }

    /// Sliding-window layers rotate with their own RoPE (`model.rotary_emb_local.*`).
    fn other_rope(&self) -> Option<(&Rope, &'static str)> {
        self.sliding_rope
            .as_ref()
            .map(|r| (r, "model.rotary_emb_local"))
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::other_if(self.sliding[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("olmo3", extra)
    }

    fn knobs(cfg: &ArchConfig) -> &Olmo3 {
        cfg.knobs::<Olmo3>().unwrap()
    }

    #[test]
    fn reads_transformers_defaults() {
        let fields = r#""model_type": "olmo3", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 8192, "use_sliding_window": false"#;
        let cfg = crate::models::parse_fields(fields, "").unwrap();
        assert_eq!(
            cfg.layer_windows,
            [Some(4096), Some(4096), Some(4096), None]
        );
        assert_eq!(knobs(&cfg).sliding, [true, true, true, false]);
        assert_eq!((cfg.rope.theta, cfg.rope.rotary_dim), (5e5, 16));
        assert_eq!(knobs(&cfg).sliding_rope, None);
        assert!(!cfg.qkv_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.rms_norm_eps, 1e-5);
        let biased = parse(r#", "attention_bias": true, "mlp_bias": true"#).unwrap();
        assert!(biased.qkv_bias && biased.o_bias && !biased.mlp_bias);
        // A window as long as the RoPE tables never takes effect, but the layer stays a
        // sliding one.
        let long = parse(
            r#", "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"]"#,
        )
        .unwrap();
        assert_eq!(long.layer_windows, [None, None]);
        assert_eq!(knobs(&long).sliding, [true, false]);
        let none = parse(
            r#", "sliding_window": null, "layer_types": ["full_attention", "full_attention"]"#,
        )
        .unwrap();
        assert_eq!(none.layer_windows, [None, None]);
    }

    #[test]
    fn a_rope_per_layer_type() {
        let cfg = parse(
            r#", "sliding_window": 8, "rope_parameters": {
            "full_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                "original_max_position_embeddings": 32},
            "sliding_attention": null}"#,
        )
        .unwrap();
        assert_eq!(cfg.layer_windows, [Some(8), Some(8)]);
        assert!(matches!(cfg.rope.scaling, RopeScaling::Yarn(_)));
        assert_eq!(cfg.rope.theta, 1e4);
        let local = knobs(&cfg).sliding_rope.as_ref().unwrap();
        assert_eq!((local.theta, &local.scaling), (5e5, &RopeScaling::Default));
        // v4: rope_theta and rope_scaling are the full layers'.
        let v4 = parse(
            r#", "rope_theta": 500000, "rope_scaling": {"rope_type": "linear", "factor": 2}"#,
        )
        .unwrap();
        assert_eq!(v4.rope.scaling, RopeScaling::Linear { factor: 2.0 });
        assert_eq!(
            knobs(&v4).sliding_rope.as_ref().unwrap().scaling,
            RopeScaling::Default
        );
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "rope_theta": 10000"#, "rope_theta"),
            (
                r#", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}"#,
                "field `rope_parameters`",
            ),
            (
                r#", "rope_parameters": {"full_attention": 3}"#,
                "rope_parameters.full_attention",
            ),
            (
                r#", "rope_parameters": {"sliding_attention": {"rope_type": "linear"}}"#,
                "rope_parameters.sliding_attention.factor",
            ),
            (
                r#", "rope_parameters": {"full_attention": {"partial_rotary_factor": 0.5}}"#,
                "partial_rotary_factor",
            ),
            (r#", "sliding_window": null"#, "sliding_window"),
            (r#", "layer_types": ["full_attention"]"#, "layer_types"),
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
