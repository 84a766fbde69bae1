//! Cohere 2 (Command R7B, transformers' Cohere2ForCausalLM): Cohere's parallel blocks off one
//! LayerNorm without bias and its `logit_scale`, with hybrid attention: the
//! `sliding_attention` layers (three of four by default, window 4096) slide and rotate
//! (interleaved RoPE), the full layers use no position embedding at all (NoPE). Heads are
//! always `hidden_size / num_attention_heads` wide.

use super::cohere::{read_cohere, Cohere, FIELDS as COHERE};
use super::components::Norm;
use super::decoder::{Family, LayerNorms, LayerRope};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    sliding_layer_types, ArchConfig, DecoderFields, Fields, HfConfig, SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_LAYERS;
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `cohere2` type: its generic
/// `decoder` runs the graph (which carries the windows, the NoPE layers and the logit scale).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "cohere2",
    summary: "Cohere with sliding-window layers that rotate and global layers without \
              position embedding (three of four slide by default)",
    model_types: &[ModelType::generative("cohere2", "decoder", read)],
};

/// transformers' Cohere2Config: Cohere's reading with a window of 4096 on all layers but every
/// `sliding_window_pattern`-th.
const FIELDS: DecoderFields = DecoderFields {
    sliding_window: Some(4096),
    sliding_layers: SlidingLayers::Pattern(pattern_layers),
    ..COHERE
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // Cohere2Config derives head_dim from hidden_size and has no MLP bias, q/k norm,
    // `use_sliding_window` or `max_window_layers`: transformers ignores them.
    let raw = HfConfig {
        head_dim: None,
        mlp_bias: None,
        use_qk_norm: None,
        use_sliding_window: None,
        max_window_layers: None,
        ..raw.clone()
    };
    read_cohere(&raw, t, f, &FIELDS, |cohere, dims| {
        let layers = dims.num_hidden_layers;
        let sliding = match sliding_layer_types(&raw, layers, f)? {
            Some(types) => types,
            None => pattern_layers(&raw, layers, f)?,
        };
        if raw.sliding_window == Some(None) && sliding.contains(&true) {
            return Err(f.err(
                "sliding_window",
                "null, but some layers are sliding_attention layers (transformers needs a \
                 window for them)",
            ));
        }
        Ok(Cohere2 { cohere, sliding })
    })
}

/// The sliding layers without `layer_types`, as Cohere2Config derives them: all but every
/// `sliding_window_pattern`-th (default 4).
fn pattern_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let field = "sliding_window_pattern";
    let every = f.json_integer(field, raw.sliding_window_pattern.as_ref())?;
    let every = f.optional_count(field, every, 4, MAX_LAYERS)?;
    Ok((0..layers).map(|i| (i + 1) % every != 0).collect())
}

/// Cohere 2's knobs: Cohere's, and which layers slide (and rotate).
#[derive(Debug, Clone, PartialEq)]
pub struct Cohere2 {
    /// Cohere's knobs (LayerNorm epsilon, logit scale).
    pub cohere: Cohere,
    /// Per layer, whether it is a `sliding_attention` layer: only those apply RoPE.
    pub sliding: Vec<bool>,
}

impl Family for Cohere2 {
    fn norm(&self, cfg: &ArchConfig) -> Norm {
        self.cohere.norm(cfg)
    }

    fn layer_norms(&self) -> LayerNorms {
        self.cohere.layer_norms()
    }

    fn parallel_blocks(&self) -> bool {
        self.cohere.parallel_blocks()
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::config_if(self.sliding[i])
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        self.cohere.logits(b, cfg, x, head, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("cohere2", extra)
    }

    fn knobs(cfg: &ArchConfig) -> &Cohere2 {
        cfg.knobs::<Cohere2>().unwrap()
    }

    #[test]
    fn reads_transformers_defaults() {
        let fields = r#""model_type": "cohere2", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 5, "vocab_size": 300,
            "max_position_embeddings": 8192, "head_dim": 8, "mlp_bias": true,
            "use_qk_norm": true, "use_sliding_window": false"#;
        let cfg = crate::models::parse_fields(fields, "").unwrap();
        let w = Some(4096);
        assert_eq!(cfg.layer_windows, [w, w, w, None, w]);
        assert_eq!(knobs(&cfg).sliding, [true, true, true, false, true]);
        assert_eq!((cfg.head_dim, cfg.rope.rotary_dim), (16, 16));
        assert!(cfg.rope.interleaved);
        assert_eq!(cfg.rope.theta, 1e4);
        assert!(cfg.tie_word_embeddings && !cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias);
        let c = knobs(&cfg).cohere;
        assert_eq!((c.layer_norm_eps, c.logit_scale), (1e-5, 0.0625));
        let v = parse(
            r#", "sliding_window_pattern": 2, "sliding_window": 6, "attention_bias": true,
            "logit_scale": 0.25"#,
        )
        .unwrap();
        assert_eq!(v.layer_windows, [Some(6), None]);
        assert_eq!(knobs(&v).sliding, [true, false]);
        assert!(v.qkv_bias && v.o_bias);
        assert_eq!(knobs(&v).cohere.logit_scale, 0.25);
        // A window as long as the RoPE tables never takes effect; the layer still rotates.
        let long = parse(
            r#", "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"]"#,
        )
        .unwrap();
        assert_eq!(long.layer_windows, [None, None]);
        assert_eq!(knobs(&long).sliding, [true, false]);
        let global = parse(
            r#", "sliding_window": null, "layer_types": ["full_attention", "full_attention"]"#,
        )
        .unwrap();
        assert_eq!(knobs(&global).sliding, [false, false]);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "sliding_window": null"#, "sliding_window"),
            (
                r#", "sliding_window_pattern": "LLLG""#,
                "sliding_window_pattern",
            ),
            (r#", "sliding_window_pattern": 0"#, "sliding_window_pattern"),
            (r#", "layer_types": ["sliding_attention"]"#, "layer_types"),
            (r#", "logit_scale": 0"#, "logit_scale"),
            (r#", "layer_norm_eps": -1"#, "layer_norm_eps"),
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
