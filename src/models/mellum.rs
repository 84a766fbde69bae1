//! Mellum 2 (JetBrains, transformers' MellumForCausalLM): Qwen3-MoE's attention (per-head
//! q/k RMSNorm, `attention_bias` on q, k, v and o) in layers that are full or sliding by
//! `layer_types` (all full by default, window 1024), each layer type with its own RoPE
//! (`rope_parameters.full_attention`, theta 5e5 by default, and `.sliding_attention`, theta
//! 1e4), and whose MLP is, by `mlp_layer_types`, a dense SwiGLU of `intermediate_size` or a
//! sparse mixture of SwiGLU experts of `moe_intermediate_size` (router `mlp.gate`, experts
//! `mlp.experts.{e}.*_proj`; softmax → top-k, renormalised with `norm_topk_prob`, on by
//! default). The multi-token-prediction layers (`mtp.*`) are not built.

use serde_json::{json, Value};

use super::components::{ExpertWeights, MoeSpec, Router};
use super::decoder::{Family, LayerRope, QkNorm};
use super::family::FamilySpec;
use crate::config::{
    read_decoder, read_layer_type_rope, read_routing, read_sparse_layers, sliding_layer_types,
    ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType, Rope,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_WIDTH;
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `mellum` type: its generic
/// `decoder` runs the graph (which carries the windows and both RoPEs).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "mellum",
    summary: "Qwen3-MoE attention, full/sliding layers with a RoPE per layer type, dense or \
              sparse MLP per layer (`mlp_layer_types`)",
    model_types: &[ModelType::generative("mellum", "decoder", read)],
};

const FULL: &str = "full_attention";
const SLIDING: &str = "sliding_attention";

/// transformers' MellumConfig: head dim 128, `attention_bias` on q, k, v and o, no MLP bias,
/// window 1024 on the `sliding_attention` layers (none by default), `rms_norm_eps` 1e-6,
/// untied.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| rope_of(raw, head_dim, FULL, f),
    sliding_window: Some(1024),
    sliding_layers: crate::config::SlidingLayers::Pattern(|_, layers, _| Ok(vec![false; layers])),
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // MellumConfig has no `use_sliding_window` and reads no `max_window_layers`.
    let raw = HfConfig {
        use_sliding_window: None,
        max_window_layers: None,
        ..raw.clone()
    };
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let layers = dims.num_hidden_layers;
        let sliding = sliding_layer_types(&raw, layers, f)?.unwrap_or_else(|| vec![false; layers]);
        let sliding_rope = match sliding.contains(&true) {
            true => Some(rope_of(&raw, dims.head_dim, SLIDING, f)?),
            false => None,
        };
        let (experts, top_k) = read_routing(&raw, f, (64, 8))?;
        let field = "moe_intermediate_size";
        let expert_width = f.optional_count(field, raw.moe_intermediate_size, 896, MAX_WIDTH)?;
        Ok(Mellum {
            sliding_rope,
            sparse: sparse_layers(&raw, layers, f)?,
            experts,
            top_k,
            normalize: raw.norm_topk_prob.unwrap_or(true),
            expert_width,
        })
    })
}

/// Per layer, whether `mlp_layer_types` names it `sparse` (all are when it is absent).
fn sparse_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let Some(types) = &raw.mlp_layer_types else {
        return Ok(vec![true; layers]);
    };
    read_sparse_layers(types, layers, f)
}

/// The RoPE of `kind` layers: `rope_parameters.{kind}` (MellumConfig's defaults when
/// config.json has no `rope_parameters`: theta 5e5 for full layers, 1e4 for sliding ones).
fn rope_of(raw: &HfConfig, head_dim: usize, kind: &str, f: &Fields<'_>) -> Result<Rope> {
    let field = format!("rope_parameters.{kind}");
    let params = match &raw.rope_parameters {
        None | Some(Value::Null) => match kind {
            FULL => json!({"rope_type": "default", "rope_theta": 500_000.0}),
            _ => json!({"rope_type": "default", "rope_theta": 10_000.0}),
        },
        Some(Value::Object(map)) => match map.get(kind) {
            Some(p @ Value::Object(_)) => p.clone(),
            _ if !map.contains_key(FULL) && !map.contains_key(SLIDING) => {
                return Err(f.err(
                    "rope_parameters",
                    "has no entry per layer type (expected `full_attention` and \
                     `sliding_attention` objects, as transformers writes MellumConfig)",
                ))
            }
            other => {
                let found = other.map_or("missing".to_string(), Value::to_string);
                return Err(f.err(&field, &format!("{found} (expected an object)")));
            }
        },
        Some(other) => {
            return Err(f.err("rope_parameters", &format!("{other} (expected an object)")))
        }
    };
    read_layer_type_rope(raw, params, kind, head_dim, 10_000.0, f)
}

/// Mellum's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Mellum {
    /// The RoPE of the sliding layers, when there are any (the config's is the full layers').
    pub sliding_rope: Option<Rope>,
    /// Per layer, whether its MLP is the sparse experts.
    pub sparse: Vec<bool>,
    /// `num_experts`.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub top_k: usize,
    /// `norm_topk_prob`.
    pub normalize: bool,
    /// `moe_intermediate_size`: each expert's width.
    pub expert_width: usize,
}

impl Family for Mellum {
    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }

    /// Sliding-window layers rotate with their own RoPE (`model.rotary_emb_sliding.*`).
    fn other_rope(&self) -> Option<(&Rope, &'static str)> {
        self.sliding_rope
            .as_ref()
            .map(|r| (r, "model.rotary_emb_sliding"))
    }

    fn layer_rope_kind(&self, cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::other_if(cfg.layer_windows[i].is_some())
    }

    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let mlp = format!("{layer}.mlp");
        if !self.sparse[i] {
            return self.mlp(b, cfg, x, &mlp, dtype);
        }
        let routing = (self.experts, self.top_k);
        let router = Router::Softmax {
            normalize: self.normalize,
        };
        let spec = MoeSpec::new(cfg, self.expert_width, routing, router, ExpertWeights::PROJ);
        spec.build(b, x, &mlp, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "mellum", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 4096"#,
            extra,
        )
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "use_sliding_window": false, "rope_theta": 1e4"#).unwrap();
        assert_eq!((cfg.head_dim, cfg.rope.theta), (128, 5e5));
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(!cfg.qkv_bias && !cfg.tie_word_embeddings);
        let k = cfg.knobs::<Mellum>().unwrap();
        assert_eq!(k.sparse, [true, true]);
        assert_eq!(
            (k.experts, k.top_k, k.normalize, k.expert_width),
            (64, 8, true, 896)
        );
        assert_eq!(k.sliding_rope, None);
        let mixed = parse(
            r#", "layer_types": ["sliding_attention", "full_attention"],
            "mlp_layer_types": ["dense", "sparse"], "num_experts": 4, "num_experts_per_tok": 2"#,
        )
        .unwrap();
        assert_eq!(mixed.layer_windows, [Some(1024), None]);
        let k = mixed.knobs::<Mellum>().unwrap();
        assert_eq!(k.sparse, [false, true]);
        assert_eq!(k.sliding_rope.as_ref().map(|r| r.theta), Some(1e4));
    }

    #[test]
    fn bad_layer_fields_are_named() {
        for (extra, field) in [
            (r#", "mlp_layer_types": ["dense"]"#, "mlp_layer_types"),
            (
                r#", "mlp_layer_types": ["dense", "moe"]"#,
                "mlp_layer_types",
            ),
            (
                r#", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}"#,
                "rope_parameters",
            ),
            (
                r#", "rope_parameters": {"full_attention": {"rope_type": "linear"}}"#,
                "rope_parameters.full_attention.factor",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }
}
