//! Flint (transformers' FlintForCausalLM): Qwen3-MoE's attention (per-head q/k RMSNorm, no
//! biases) with attention sinks (a learned logit per head in each query's softmax, as
//! gpt-oss), sliding-window layers that alone rotate q and k (the full-attention layers, the
//! first two, every fourth from the second and the last by default, use no position
//! embedding); dense SwiGLU MLPs in the `mlp_only_layers` (default the first two), elsewhere
//! SwiGLU experts routed by the top-k of the sigmoids of the router logits (renormalised with
//! `norm_topk_prob`, default on) plus an ungated shared expert (`mlp.shared_expert`). The
//! checkpoints name the sinks `softmax_offset` ([`checkpoint_name`]).

use super::components::{
    gated_mlp, sink_attention, sink_logits, AttentionSpec, DecoderInputs, ExpertWeights,
    GateActivation, GroupScore, GroupedRouter, MoeSpec, Router,
};
use super::decoder::{Family, LayerRope, QkNorm};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_routing, sliding_layer_types, ArchConfig, Biases, CheckpointRenaming,
    DecoderFields, Fields, HfConfig, SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "flint",
    summary: "attention sinks, per-head q/k RMSNorm, sliding layers that alone rotate, dense \
              then MoE layers (top-k sigmoid router, renormalised; ungated shared expert)",
    model_types: &[ModelType::generative("flint", "decoder", read)],
};

/// transformers' FlintConfig: `head_dim` 128, 4 key/value heads, no biases, RoPE theta 1e4,
/// untied, `rms_norm_eps` 1e-6, window 513 on the sliding layers.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::None,
    sliding_window: Some(513),
    sliding_layers: SlidingLayers::Pattern(sliding_layers),
    ..DecoderFields::LLAMA
};

/// Per layer, whether it is a `sliding_attention` layer: `layer_types`, else all but the first
/// two, every fourth from the second and the last.
fn sliding_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    Ok(sliding_layer_types(raw, layers, f)?.unwrap_or_else(|| {
        (0..layers)
            .map(|i| !(i < 2 || i % 4 == 1 || i + 1 == layers))
            .collect()
    }))
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut raw = raw.clone();
    raw.num_key_value_heads = Some(raw.num_key_value_heads.unwrap_or(4));
    raw.intermediate_size = Some(raw.intermediate_size.unwrap_or(6144));
    raw.use_sliding_window = None;
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let layers = dims.num_hidden_layers;
        let windowed = matches!(raw.sliding_window.unwrap_or(Some(513)), Some(w) if w > 0);
        let rope_layers = match windowed {
            true => sliding_layers(&raw, layers, f)?,
            false => vec![false; layers],
        };
        let field = "decoder_sparse_step";
        let step = f.optional_count(field, raw.decoder_sparse_step, 1, MAX_LAYERS)?;
        let mut moe_layers: Vec<bool> = (0..layers).map(|i| (i + 1) % step == 0).collect();
        for &i in raw.mlp_only_layers.as_deref().unwrap_or(&[0, 1]) {
            let i = f.index("mlp_only_layers", i, MAX_LAYERS)?;
            if let Some(layer) = moe_layers.get_mut(i) {
                *layer = false;
            }
        }
        let expert_width = raw.moe_intermediate_size;
        let shared_width = raw.shared_expert_intermediate_size;
        let shared = "shared_expert_intermediate_size";
        Ok(Flint {
            rope_layers,
            moe_layers,
            routing: read_routing(&raw, f, (256, 6))?,
            expert_width: f.optional_count(
                "moe_intermediate_size",
                expert_width,
                512,
                MAX_WIDTH,
            )?,
            shared_width: f.optional_count(shared, shared_width, 1024, MAX_WIDTH)?,
            normalize: raw.norm_topk_prob.unwrap_or(true),
        })
    })
}

/// The name transformers gives checkpoint tensor `name` (its conversion mapping for `flint`:
/// `self_attn.softmax_offset` → `self_attn.sinks`); every other name is kept.
pub fn checkpoint_name(name: &str) -> Option<String> {
    Some(name.replace("self_attn.softmax_offset", "self_attn.sinks"))
}

/// Flint's knobs and hooks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flint {
    /// Per layer, whether it rotates q and k (the sliding layers).
    pub rope_layers: Vec<bool>,
    /// Per layer, whether its MLP is a mixture of experts.
    pub moe_layers: Vec<bool>,
    /// `(num_experts, num_experts_per_tok)`.
    pub routing: (usize, usize),
    /// `moe_intermediate_size`: each routed expert's width.
    pub expert_width: usize,
    /// `shared_expert_intermediate_size`.
    pub shared_width: usize,
    /// `norm_topk_prob`.
    pub normalize: bool,
}

impl Family for Flint {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::config_if(self.rope_layers.get(i).copied().unwrap_or(false))
    }

    fn attention_core(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        qkv: [&str; 3],
        spec: &AttentionSpec<'_>,
        attn: &str,
        dtype: DType,
    ) -> String {
        let sinks = sink_logits(b, attn, cfg.num_attention_heads, dtype);
        sink_attention(b, io, qkv, &sinks, spec, (cfg.head_dim, dtype))
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
        if !self.moe_layers.get(i).copied().unwrap_or(false) {
            return self.mlp(b, cfg, x, &mlp, dtype);
        }
        let router = Router::Grouped(GroupedRouter {
            sigmoid: true,
            correction_bias: false,
            groups: 1,
            top_groups: 1,
            group_score: GroupScore::Max,
            normalize: self.normalize,
            scale: 1.0,
        });
        let weights = ExpertWeights::PROJ;
        let spec = MoeSpec::new(cfg, self.expert_width, self.routing, router, weights);
        let routed = spec.build(b, x, &mlp, dtype);
        let shared = format!("{mlp}.shared_expert");
        let sizes = (cfg.hidden_size, self.shared_width);
        let shared = gated_mlp(b, x, &shared, sizes, false, GateActivation::Silu, dtype);
        b.op("Add", &[&routed, &shared], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::Flint;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "flint", "hidden_size": 64, "num_attention_heads": 4,
            "num_hidden_layers": 7, "vocab_size": 300, "max_position_embeddings": 4096"#,
            extra,
        )
    }

    #[test]
    fn defaults_follow_transformers() {
        let c = parse("").unwrap();
        let k = c.knobs::<Flint>().unwrap();
        let sliding = [false, false, true, true, true, false, false];
        assert_eq!(k.rope_layers, sliding);
        assert_eq!(c.layer_windows[2], Some(513));
        assert_eq!(k.moe_layers, [false, false, true, true, true, true, true]);
        assert_eq!(
            (k.routing, k.expert_width, k.shared_width),
            ((256, 6), 512, 1024)
        );
        assert!(k.normalize && c.num_key_value_heads == 4 && c.intermediate_size == 6144);
        let c = parse(r#", "sliding_window": null, "mlp_only_layers": []"#).unwrap();
        let k = c.knobs::<Flint>().unwrap();
        assert_eq!(k.rope_layers, [false; 7]);
        assert_eq!(k.moe_layers, [true; 7]);
        assert_eq!(
            super::checkpoint_name("model.layers.0.self_attn.softmax_offset").unwrap(),
            "model.layers.0.self_attn.sinks"
        );
    }
}
