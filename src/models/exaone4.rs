//! EXAONE 4 (LG AI Research, transformers' Exaone4ForCausalLM): the Llama decoder without
//! biases, with norms on each block's output and none on its input (`x +
//! post_attention_layernorm(attn(x))`, `x + post_feedforward_layernorm(mlp(x))`, as OLMo 2),
//! per-head RMSNorm of q and k before RoPE (as Qwen3), and hybrid attention: with a
//! `sliding_window`, the `sliding_attention` layers (three of four by default) slide and rotate
//! while the full layers use no position embedding at all (NoPE); without one, every layer is
//! a full layer with RoPE.

use serde_json::Value;

use super::decoder::{Family, LayerNorms, LayerRope, QkNorm};
use super::family::FamilySpec;
use crate::config::{
    read_decoder, sliding_layer_types, ArchConfig, Biases, DecoderFields, Fields, HfConfig,
    SlidingLayers,
};
use crate::config::{FamilyKnobs, ModelType};
use crate::limits::config::MAX_LAYERS;
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `exaone4` type: its generic
/// `decoder` runs the graph (which carries the windows and the NoPE layers).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "exaone4",
    summary: "post-norm blocks, per-head q/k RMSNorm, sliding layers with RoPE and global \
              layers without position embedding (`sliding_window_pattern`, `layer_types`)",
    model_types: &[ModelType::generative("exaone4", "decoder", read)],
};

/// transformers' Exaone4Config: no biases, window 4096 on three layers of four, RoPE theta
/// 1e4, `rms_norm_eps` 1e-5, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    sliding_window: Some(4096),
    sliding_layers: SlidingLayers::Pattern(pattern_layers),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_exaone4(raw, t, f, |rope_layers| Ok(Exaone4 { rope_layers }))
}

/// Reads an EXAONE 4 decoder's config.json as transformers' Exaone4Config reads it (and
/// ExaoneMoeConfig, which inherits its attention fields), the family's knobs built by `knobs`
/// from the layers that rotate (one entry per layer).
pub fn read_exaone4<K: FamilyKnobs>(
    raw: &HfConfig,
    t: &'static ModelType,
    f: &Fields<'_>,
    knobs: impl FnOnce(Vec<bool>) -> Result<K>,
) -> Result<ArchConfig> {
    // Exaone4Config has no `use_sliding_window` or `max_window_layers`: transformers ignores
    // them.
    let raw = HfConfig {
        use_sliding_window: None,
        max_window_layers: None,
        ..raw.clone()
    };
    let cfg = read_decoder(&raw, t, f, &FIELDS, |dims| {
        let layers = dims.num_hidden_layers;
        let sliding = match sliding_layer_types(&raw, layers, f)? {
            Some(types) => types,
            None => pattern_layers(&raw, layers, f)?,
        };
        let windowed = raw.sliding_window != Some(None);
        if !windowed && sliding.contains(&true) {
            return Err(f.err(
                "sliding_window",
                "null, but some layers are sliding_attention layers (transformers needs a \
                 window for them)",
            ));
        }
        knobs(sliding.iter().map(|&s| s || !windowed).collect())
    })?;
    // Exaone4's rotary embedding always spans whole heads.
    if cfg.rope.rotary_dim != cfg.head_dim {
        return Err(f.err(
            "partial_rotary_factor",
            &format!(
                "rotates {} of {} channels per head (EXAONE 4 rotates whole heads)",
                cfg.rope.rotary_dim, cfg.head_dim
            ),
        ));
    }
    Ok(cfg)
}

/// The sliding layers without `layer_types`, as Exaone4Config derives them: all but every
/// `sliding_window_pattern`-th (default 4). transformers derives nothing from a string pattern
/// (`"LLLG"`) or without a window: those need `layer_types`.
fn pattern_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let field = "sliding_window_pattern";
    if raw.sliding_window == Some(None) {
        return Err(f.err(
            "layer_types",
            "missing while sliding_window is null (transformers derives no layer types then)",
        ));
    }
    let every = match &raw.sliding_window_pattern {
        None => 4,
        Some(Value::String(s)) => {
            return Err(f.err(
                field,
                &format!(
                    "\"{s}\" without layer_types (transformers derives layer types only from \
                     an integer pattern)"
                ),
            ))
        }
        Some(v) => {
            let n = f.json_integer(field, Some(v))?;
            f.optional_count(field, n, 4, MAX_LAYERS)?
        }
    };
    Ok((0..layers).map(|i| (i + 1) % every != 0).collect())
}

/// EXAONE 4's knobs: which layers rotate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exaone4 {
    /// Per layer, whether it applies RoPE (every sliding layer; every layer without a window).
    pub rope_layers: Vec<bool>,
}

impl Family for Exaone4 {
    fn layer_norms(&self) -> LayerNorms {
        LayerNorms::POST
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::config_if(self.rope_layers[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("exaone4", extra)
    }

    fn rope_layers(cfg: &ArchConfig) -> &[bool] {
        &cfg.knobs::<Exaone4>().unwrap().rope_layers
    }

    #[test]
    fn reads_transformers_defaults() {
        let fields = r#""model_type": "exaone4", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 5, "vocab_size": 300,
            "max_position_embeddings": 8192, "attention_bias": true, "mlp_bias": true"#;
        let cfg = crate::models::parse_fields(fields, "").unwrap();
        let w = Some(4096);
        assert_eq!(cfg.layer_windows, [w, w, w, None, w]);
        assert_eq!(rope_layers(&cfg), [true, true, true, false, true]);
        assert_eq!((cfg.rope.theta, cfg.rms_norm_eps), (1e4, 1e-5));
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        let every_other = parse(r#", "sliding_window_pattern": 2, "sliding_window": 8"#).unwrap();
        assert_eq!(every_other.layer_windows, [Some(8), None]);
        assert_eq!(rope_layers(&every_other), [true, false]);
        // A string pattern is read through layer_types only.
        let typed = parse(
            r#", "sliding_window_pattern": "LG", "sliding_window": 8,
            "layer_types": ["full_attention", "sliding_attention"]"#,
        )
        .unwrap();
        assert_eq!(typed.layer_windows, [None, Some(8)]);
        assert_eq!(rope_layers(&typed), [false, true]);
        // Without a window every layer is full and rotates.
        let full = parse(
            r#", "sliding_window": null, "layer_types": ["full_attention", "full_attention"]"#,
        )
        .unwrap();
        assert_eq!(full.layer_windows, [None, None]);
        assert_eq!(rope_layers(&full), [true, true]);
        // With a window, full layers never rotate, even when no layer slides.
        let nope = parse(r#", "layer_types": ["full_attention", "full_attention"]"#).unwrap();
        assert_eq!(rope_layers(&nope), [false, false]);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (
                r#", "sliding_window_pattern": "LLLG""#,
                "sliding_window_pattern",
            ),
            (r#", "sliding_window_pattern": 0"#, "sliding_window_pattern"),
            (r#", "sliding_window": null"#, "layer_types"),
            (
                r#", "sliding_window": null, "layer_types": ["sliding_attention", "full_attention"]"#,
                "sliding_window",
            ),
            (r#", "sliding_window": 0"#, "sliding_window"),
            (r#", "partial_rotary_factor": 0.5"#, "partial_rotary_factor"),
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
