//! AFMoE (Arcee's Trinity, transformers' AfmoeForCausalLM): sandwich-normed layers
//! (`input_layernorm` and `post_attention_layernorm` around the attention, `pre_mlp_layernorm`
//! and `post_mlp_layernorm` around the MLP), per-head q/k RMSNorm, RoPE in the sliding-window
//! layers only (the full-attention layers, every `global_attn_every_n_layers`-th, use no
//! position embedding), the attention output gated by `σ(gate_proj(x))` before `o_proj`,
//! embeddings times √hidden_size with `mup_enabled`. After `num_dense_layers` dense SwiGLU
//! layers, every MLP is a mixture of experts: sigmoid scores, the top-k picked on the scores
//! plus `expert_bias`, weighted by their scores renormalised, times `route_scale`, plus
//! `num_shared_experts` experts' worth of shared SwiGLU (`shared_experts`).

use super::components::{
    gated_mlp, linear, scalar, AttentionSpec, DecoderInputs, ExpertNames, ExpertWeights,
    GateActivation, MoeSpec, RopeTables, Router, Scores,
};
use super::decoder::{Family, LayerNorms, LayerRope, QkNorm};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_routing, sliding_layer_types, ArchConfig, Biases, DecoderFields, Fields,
    HfConfig, Sign, SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_EXPERTS, MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "afmoe",
    summary: "sandwich norms, per-head q/k RMSNorm, RoPE only in the sliding-window layers, \
              sigmoid-gated attention output, dense then MoE layers (sigmoid router with an \
              expert bias, renormalised, `route_scale`; shared experts)",
    model_types: &[ModelType::generative("afmoe", "decoder", read)],
};

/// transformers' AfmoeConfig: `head_dim` 128, `attention_bias` on q/k/v/o, no MLP bias, RoPE
/// theta 1e4, untied, `rms_norm_eps` 1e-5, window 1024 on all but every
/// `global_attn_every_n_layers`-th layer.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::Configured { mlp_bias: false },
    sliding_window: Some(1024),
    sliding_layers: SlidingLayers::Pattern(local_layers),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// AFMoE's layer norms.
const NORMS: LayerNorms = LayerNorms {
    pre_attention: Some("input_layernorm"),
    post_attention: Some("post_attention_layernorm"),
    pre_mlp: Some("pre_mlp_layernorm"),
    post_mlp: Some("post_mlp_layernorm"),
};

/// Per layer, whether it is a `sliding_attention` layer: `layer_types`, else all but every
/// `global_attn_every_n_layers`-th (default 4).
fn local_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    if let Some(types) = sliding_layer_types(raw, layers, f)? {
        return Ok(types);
    }
    let field = "global_attn_every_n_layers";
    let n = f.optional_count(field, raw.global_attn_every_n_layers, 4, MAX_LAYERS)?;
    Ok((0..layers).map(|i| (i + 1) % n != 0).collect())
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_decoder(raw, t, f, &FIELDS, |dims| {
        let layers = dims.num_hidden_layers;
        let field = "num_dense_layers";
        let dense = match raw.num_dense_layers {
            Some(n) => f.index(field, n, MAX_LAYERS)?,
            None => 1,
        };
        let field = "moe_intermediate_size";
        let expert_width = f.optional_count(field, raw.moe_intermediate_size, 1408, MAX_WIDTH)?;
        let shared = match raw.num_shared_experts {
            Some(n) => f.index("num_shared_experts", n, MAX_EXPERTS)?,
            None => 2,
        };
        Ok(Afmoe {
            rope_layers: local_layers(raw, layers, f)?,
            moe_layers: (0..layers).map(|i| i >= dense).collect(),
            routing: read_routing(raw, f, (64, 6))?,
            expert_width,
            shared_width: expert_width * shared,
            route_scale: f.number("route_scale", raw.route_scale, 1.0, Sign::Positive)?,
            embedding_scale: raw
                .mup_enabled
                .unwrap_or(false)
                .then(|| (dims.hidden_size as f32).sqrt()),
        })
    })
}

/// AFMoE's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Afmoe {
    /// Per layer, whether it rotates q and k (the sliding-window layers).
    pub rope_layers: Vec<bool>,
    /// Per layer, whether its MLP is a mixture of experts.
    pub moe_layers: Vec<bool>,
    /// `(num_experts, num_experts_per_tok)`.
    pub routing: (usize, usize),
    /// `moe_intermediate_size`: each routed expert's width.
    pub expert_width: usize,
    /// The shared experts' width (`moe_intermediate_size · num_shared_experts`; 0 for none).
    pub shared_width: usize,
    /// `route_scale`.
    pub route_scale: f32,
    /// √hidden_size with `mup_enabled`.
    pub embedding_scale: Option<f32>,
}

/// The name of the attention output gate `σ(gate_proj(x))` of attention module `attn`.
fn output_gate(attn: &str) -> String {
    format!("{attn}.output_gate")
}

impl Family for Afmoe {
    fn layer_norms(&self) -> LayerNorms {
        NORMS
    }

    fn embed(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        match self.embedding_scale {
            Some(scale) => {
                let scale = scalar(b, scale, dtype);
                b.op("Mul", &[&x, &scale], vec![])
            }
            None => x,
        }
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::config_if(self.rope_layers.get(i).copied().unwrap_or(true))
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }

    fn attention_qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        i: usize,
        rotary: &[RopeTables],
        spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> [String; 3] {
        let gate = format!("{attn}.gate_proj");
        let gate = linear(b, x, &gate, cfg.hidden_size, cfg.q_size(), false, dtype);
        b.op_into("Sigmoid", &[&gate], vec![], &output_gate(attn));
        let [q, k, v] = self.qkv(b, cfg, x, attn, dtype);
        let (q, k) = self.qk_norm(b, cfg, q, k, attn, dtype);
        let (q, k) = self.rotate_qk(b, cfg, i, rotary, (q, k), spec);
        [q, k, v]
    }

    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        let gated = b.op("Mul", &[y, &output_gate(attn)], vec![]);
        let (q, h) = (cfg.q_size(), cfg.hidden_size);
        linear(
            b,
            &gated,
            &format!("{attn}.o_proj"),
            q,
            h,
            cfg.o_bias,
            dtype,
        )
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
        let h = cfg.hidden_size;
        let act = GateActivation::Silu;
        if !self.moe_layers.get(i).copied().unwrap_or(false) {
            return gated_mlp(b, x, &mlp, (h, cfg.intermediate_size), false, act, dtype);
        }
        let router = Router::Corrected {
            scores: Scores::Sigmoid,
            bias: "expert_bias",
            min_sum: None,
        };
        let weights = ExpertWeights::PerExpert(ExpertNames {
            router: "router.gate",
            ..ExpertNames::PROJ
        });
        let spec = MoeSpec::new(cfg, self.expert_width, self.routing, router, weights);
        let mut routed = spec.build(b, x, &mlp, dtype);
        if self.route_scale != 1.0 {
            // The routed sum is linear in the routing weights.
            let scale = scalar(b, self.route_scale, dtype);
            routed = b.op("Mul", &[&routed, &scale], vec![]);
        }
        if self.shared_width == 0 {
            return routed;
        }
        let shared = format!("{mlp}.shared_experts");
        let shared = gated_mlp(b, x, &shared, (h, self.shared_width), false, act, dtype);
        b.op("Add", &[&shared, &routed], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::Afmoe;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "afmoe", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 4096"#,
            extra,
        )
    }

    #[test]
    fn defaults_and_layer_patterns_follow_transformers() {
        let c = parse("").unwrap();
        let k = c.knobs::<Afmoe>().unwrap();
        assert_eq!(k.rope_layers, [true, true, true, false]);
        assert_eq!(c.layer_windows, [Some(1024), Some(1024), Some(1024), None]);
        assert_eq!(k.moe_layers, [false, true, true, true]);
        assert_eq!(
            (k.routing, k.expert_width, k.shared_width),
            ((64, 6), 1408, 2816)
        );
        assert!(k.embedding_scale.is_none() && c.head_dim == 128);
        let c = parse(
            r#", "global_attn_every_n_layers": 2, "num_dense_layers": 0, "mup_enabled": true,
            "sliding_window": null, "num_shared_experts": 0"#,
        )
        .unwrap();
        let k = c.knobs::<Afmoe>().unwrap();
        assert_eq!(k.rope_layers, [true, false, true, false]);
        assert_eq!(c.layer_windows, [None; 4]);
        assert_eq!(k.moe_layers, [true; 4]);
        assert_eq!((k.shared_width, k.embedding_scale), (0, Some(8.0)));
        let err = parse(r#", "global_attn_every_n_layers": 0"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("global_attn_every_n_layers"), "{err}");
    }
}
