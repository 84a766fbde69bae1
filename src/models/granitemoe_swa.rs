//! Granite-MoE SWA (IBM's granite-swash MoE, transformers' GraniteMoeSWAForCausalLM):
//! Granite-MoE shared's layers ([`GraniteMoeShared`]: Granite's multipliers, stacked SwiGLU
//! experts — here in transformers 5's names, `block_sparse_moe.experts.gate_up_proj`
//! `[E, 2·I, H]`, `experts.down_proj` `[E, H, I]`, router `router.weight` — and an optional
//! shared expert) with Granite SWA's attention ([`SwaAttention`]: per-head sinks, sliding
//! windows on three layers of four by default, a RoPE base per layer).

use super::components::{AttentionSpec, DecoderInputs, ExpertWeights, MoeSpec, RopeTables, Router};
use super::decoder::Family;
use super::family::FamilySpec;
use super::granite::multipliers;
use super::granite_swa::{every_fourth_full, SwaAttention};
use super::granitemoe::GraniteMoe;
use super::granitemoeshared::{shared_expert, shared_width, GraniteMoeShared};
use crate::config::{
    read_decoder, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType,
    Rope, SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `granitemoe_swa` type: its
/// generic `decoder` runs the graph (which carries the windows and sinks).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "granitemoe_swa",
    summary: "Granite-MoE shared with Granite SWA's attention (sinks, sliding-window layers, a \
              RoPE base per layer)",
    model_types: &[ModelType::generative("granitemoe_swa", "decoder", read)],
};

/// transformers' GraniteMoeSWAConfig: GraniteMoeSharedConfig's fields (`attention_bias` on q,
/// k, v and o, no MLP bias, untied) and a window of 128 on every layer but each fourth.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    sliding_window: Some(128),
    sliding_layers: SlidingLayers::Pattern(every_fourth_full),
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // No `use_sliding_window` either: `layer_types` alone says which layers slide.
    let raw = HfConfig {
        use_sliding_window: None,
        ..raw.clone()
    };
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let (experts, top_k) = read_routing(&raw, f, (8, 2))?;
        let moe = GraniteMoe {
            multipliers: multipliers(&raw, f)?,
            experts,
            top_k,
        };
        Ok(GraniteMoeSwa {
            layers: GraniteMoeShared {
                moe,
                shared: shared_width(&raw, f)?,
            },
            attention: SwaAttention::read(&raw, dims, f)?,
        })
    })
}

/// Granite-MoE SWA's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct GraniteMoeSwa {
    /// The multipliers and experts.
    pub layers: GraniteMoeShared,
    /// The per-layer RoPE and the sinks.
    pub attention: SwaAttention,
}

impl Family for GraniteMoeSwa {
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        self.layers.embed(b, cfg, io, x, dtype)
    }

    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        self.attention.rotary(b, cfg, io, dtype)
    }

    fn layer_rope<'c>(&'c self, _cfg: &'c ArchConfig, i: usize) -> Option<(&'c Rope, usize)> {
        self.attention.layer_rope(i)
    }

    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        self.layers.attention_scale(cfg)
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
        self.attention.attention(b, cfg, io, qkv, spec, attn, dtype)
    }

    /// Granite-MoE's routed experts, in transformers 5's names, plus the shared expert when
    /// there is one.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        _i: usize,
        dtype: DType,
    ) -> String {
        let GraniteMoeShared { moe, shared } = self.layers;
        let routing = (moe.experts, moe.top_k);
        let router = Router::Softmax { normalize: true };
        let weights = ExpertWeights::GRANITE_MOE_V5;
        let spec = MoeSpec::new(cfg, cfg.intermediate_size, routing, router, weights);
        let routed = spec.build(b, x, &format!("{layer}.block_sparse_moe"), dtype);
        if shared == 0 {
            return routed;
        }
        let shared = shared_expert(b, cfg, x, layer, shared, dtype);
        b.op("Add", &[&routed, &shared], vec![])
    }

    fn residual_branch(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: String,
        dtype: DType,
    ) -> String {
        self.layers.residual_branch(b, cfg, y, dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        self.layers.logits(b, cfg, x, head, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_transformers_defaults() {
        let cfg = crate::models::tiny_config(
            "granitemoe_swa",
            r#", "num_local_experts": 4, "shared_intermediate_size": 16,
            "layer_rope_theta": [0, 5e5], "sliding_window": 8"#,
        )
        .unwrap();
        assert_eq!(cfg.layer_windows, [None, Some(8)]);
        assert_eq!(cfg.rms_norm_eps, 1e-6);
        assert!(!cfg.tie_word_embeddings && !cfg.mlp_bias);
        let k = cfg.knobs::<GraniteMoeSwa>().unwrap();
        assert_eq!((k.layers.shared, k.layers.moe.experts), (16, 4));
        assert_eq!(k.attention.layer_rope, [None, Some(0)]);
        assert_eq!(k.attention.ropes[0].theta, 5e5);
    }
}
