//! Kolibri-1 (Aleph Alpha, transformers' Kolibri1ForCausalLM): GLM-4's four norms per layer
//! (`input_layernorm`, `post_self_attn_layernorm` on the attention output,
//! `post_attention_layernorm` before the MLP, `post_mlp_layernorm` after it), per-head q/k
//! RMSNorm, sliding-window layers (all but every fifth by default) that alone rotate q and k
//! when a window is set, no biases; every MLP a mixture of SwiGLU experts whose router picks the
//! top-k of its logits plus `e_score_correction_bias` and weights them by the sigmoids of their
//! logits (renormalised with `norm_topk_prob`), plus a shared SwiGLU expert
//! (`shared_experts`, `shared_expert_intermediate_size` wide). The checkpoints name the
//! correction `moe.router.expert_bias` and the post norms `post_attn_norm`, `post_ffn_norm`:
//! read under transformers' names ([`checkpoint_name`]).

use super::components::{gated_mlp, ExpertWeights, GateActivation, MoeSpec, Router};
use super::decoder::{Family, LayerNorms, LayerRope, QkNorm};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_routing, sliding_layer_types, ArchConfig, Biases, CheckpointRenaming,
    DecoderFields, Fields, HfConfig, SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_WIDTH;
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "kolibri1",
    summary: "GLM-4's four layer norms, per-head q/k RMSNorm, sliding layers that alone rotate, \
              SwiGLU experts in every layer picked on the logits plus a correction bias and \
              weighted by their sigmoids, a shared expert",
    model_types: &[ModelType::generative("kolibri1", "decoder", read)],
};

/// transformers' Kolibri1Config: `head_dim` 128, no biases, RoPE theta 1e4, untied,
/// `rms_norm_eps` 1e-6, window 513 on all but every fifth layer.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::None,
    sliding_window: Some(513),
    sliding_layers: SlidingLayers::Pattern(sliding_layers),
    ..DecoderFields::LLAMA
};

/// GLM-4's layer norms.
const NORMS: LayerNorms = LayerNorms {
    post_attention: Some("post_self_attn_layernorm"),
    post_mlp: Some("post_mlp_layernorm"),
    ..LayerNorms::PRE
};

/// Per layer, whether it is a `sliding_attention` layer: `layer_types`, else all but every
/// fifth.
fn sliding_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    Ok(sliding_layer_types(raw, layers, f)?
        .unwrap_or_else(|| (0..layers).map(|i| (i + 1) % 5 != 0).collect()))
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut raw = raw.clone();
    raw.num_key_value_heads = Some(raw.num_key_value_heads.unwrap_or(4));
    let field = "moe_intermediate_size";
    let expert_width = f.optional_count(field, raw.moe_intermediate_size, 512, MAX_WIDTH)?;
    // The config has no `intermediate_size`: every MLP is a mixture of experts.
    raw.intermediate_size = Some(expert_width as i64);
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let layers = dims.num_hidden_layers;
        let windowed = matches!(raw.sliding_window.unwrap_or(Some(513)), Some(w) if w > 0);
        let rope_layers = match windowed {
            true => sliding_layers(&raw, layers, f)?,
            false => vec![true; layers],
        };
        let field = "shared_expert_intermediate_size";
        let shared = raw.shared_expert_intermediate_size;
        Ok(Kolibri1 {
            rope_layers,
            routing: read_routing(&raw, f, (384, 6))?,
            expert_width,
            shared_width: f.optional_count(field, shared, 512, MAX_WIDTH)?,
            normalize: raw.norm_topk_prob.unwrap_or(false),
        })
    })
}

/// The name transformers gives checkpoint tensor `name` (its conversion mapping for
/// `kolibri1`); every other name is kept.
pub fn checkpoint_name(name: &str) -> Option<String> {
    let renamed = [
        ("moe.router.expert_bias", "mlp.gate.e_score_correction_bias"),
        ("post_attn_norm", "post_self_attn_layernorm"),
        ("post_ffn_norm", "post_mlp_layernorm"),
    ]
    .iter()
    .fold(name.to_string(), |n, (from, to)| n.replace(from, to));
    Some(renamed)
}

/// Kolibri-1's knobs and hooks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kolibri1 {
    /// Per layer, whether it rotates q and k.
    pub rope_layers: Vec<bool>,
    /// `(num_experts, num_experts_per_tok)`.
    pub routing: (usize, usize),
    /// `moe_intermediate_size`: each routed expert's width.
    pub expert_width: usize,
    /// `shared_expert_intermediate_size`.
    pub shared_width: usize,
    /// `norm_topk_prob`.
    pub normalize: bool,
}

impl Family for Kolibri1 {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn layer_norms(&self) -> LayerNorms {
        NORMS
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::config_if(self.rope_layers.get(i).copied().unwrap_or(true))
    }

    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        _i: usize,
        dtype: DType,
    ) -> String {
        let mlp = format!("{layer}.mlp");
        let router = Router::BiasedLogits {
            bias: "gate.e_score_correction_bias",
            normalize: self.normalize,
        };
        let weights = ExpertWeights::PROJ;
        let spec = MoeSpec::new(cfg, self.expert_width, self.routing, router, weights);
        let routed = spec.build(b, x, &mlp, dtype);
        let shared = format!("{mlp}.shared_experts");
        let sizes = (cfg.hidden_size, self.shared_width);
        let shared = gated_mlp(b, x, &shared, sizes, false, GateActivation::Silu, dtype);
        b.op("Add", &[&routed, &shared], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::Kolibri1;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "kolibri1", "hidden_size": 64, "num_attention_heads": 4,
            "num_hidden_layers": 5, "vocab_size": 300, "max_position_embeddings": 4096"#,
            extra,
        )
    }

    #[test]
    fn defaults_follow_transformers() {
        let c = parse("").unwrap();
        let k = c.knobs::<Kolibri1>().unwrap();
        assert_eq!(k.rope_layers, [true, true, true, true, false]);
        assert_eq!(c.layer_windows[0], Some(513));
        assert_eq!(c.layer_windows[4], None);
        assert_eq!(
            (k.routing, k.expert_width, k.shared_width),
            ((384, 6), 512, 512)
        );
        assert_eq!((c.num_key_value_heads, c.head_dim), (4, 128));
        assert!(!k.normalize && !c.qkv_bias);
        let c = parse(r#", "sliding_window": null, "norm_topk_prob": true"#).unwrap();
        let k = c.knobs::<Kolibri1>().unwrap();
        assert_eq!(k.rope_layers, [true; 5]);
        assert_eq!(c.layer_windows, [None; 5]);
        assert!(k.normalize);
        assert_eq!(
            super::checkpoint_name("model.layers.3.moe.router.expert_bias").unwrap(),
            "model.layers.3.mlp.gate.e_score_correction_bias"
        );
        assert_eq!(
            super::checkpoint_name("model.layers.0.post_ffn_norm.weight").unwrap(),
            "model.layers.0.post_mlp_layernorm.weight"
        );
    }
}
