//! Laguna (poolside, transformers' LagunaForCausalLM): a query head count per layer
//! (`num_attention_heads_per_layer`; the key/value heads are `num_key_value_heads` in every
//! layer), per-head q/k RMSNorm, a RoPE per layer type (`rope_parameters.full_attention`,
//! `.sliding_attention`; by default theta 5e5 on half of each head in the full layers, theta
//! 1e4 on whole heads in the sliding ones), the attention output gated by
//! `softplus(g_proj(x))` (one gate per head, or per channel with `gating: "per-element"`)
//! before `o_proj`. By `mlp_layer_types` (default: the first dense, the rest sparse) a layer's
//! MLP is a dense SwiGLU or a mixture of experts: sigmoid scores, the top-k picked on the
//! scores plus a correction bias, weighted by their scores renormalised, times
//! `moe_routed_scaling_factor`, plus a shared SwiGLU expert.

use serde_json::{json, Value};

use super::components::{
    gated_mlp, linear, scalar, AttentionSpec, ExpertWeights, GateActivation, MoeSpec, RopeTables,
    Router, Scores,
};
use super::decoder::{Family, LayerRope, QkNorm};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_layer_type_rope, read_routing, read_sparse_layers, sliding_layer_types,
    ArchConfig, Biases, DecoderFields, Fields, HfConfig, Rope, Sign, SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_HEADS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "laguna",
    summary: "query heads per layer, per-head q/k RMSNorm, a (partial) RoPE per layer type, \
              softplus-gated attention output, dense then MoE layers (sigmoid router with a \
              correction bias, renormalised, scaled; shared expert)",
    model_types: &[ModelType::generative("laguna", "decoder", read)],
};

/// transformers' LagunaConfig: `head_dim` 128, `attention_bias` on q/k/v/o, no MLP bias,
/// untied, `rms_norm_eps` 1e-6, window 512 on the `sliding_attention` layers (by default
/// none: every layer is a full one).
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| rope_of(raw, head_dim, FULL, f),
    sliding_window: Some(512),
    sliding_layers: SlidingLayers::Pattern(full_layers),
    ..DecoderFields::LLAMA
};

const FULL: &str = "full_attention";
const SLIDING: &str = "sliding_attention";

/// Per layer, whether it slides: `layer_types`, else none.
fn full_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    Ok(sliding_layer_types(raw, layers, f)?.unwrap_or_else(|| vec![false; layers]))
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let raw = HfConfig {
        use_sliding_window: None,
        max_window_layers: None,
        partial_rotary_factor: None,
        ..raw.clone()
    };
    if raw.moe_apply_router_weight_on_input == Some(true) {
        return Err(f.err(
            "moe_apply_router_weight_on_input",
            "true (transformers does not implement it for Laguna)",
        ));
    }
    let field = "moe_router_logit_softcapping";
    let softcap = f.number(
        field,
        raw.moe_router_logit_softcapping,
        0.0,
        Sign::NonNegative,
    )?;
    if softcap > 0.0 {
        return Err(f.err(
            field,
            &format!("{softcap}: a soft-capped router is not supported for laguna (expected 0)"),
        ));
    }
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let layers = dims.num_hidden_layers;
        let sliding = full_layers(&raw, layers, f)?;
        let sliding_rope = match sliding.contains(&true) {
            true => Some(rope_of(&raw, dims.head_dim, SLIDING, f)?),
            false => None,
        };
        let heads = f.positive("num_attention_heads", raw.num_attention_heads, MAX_HEADS)?;
        let kv = match raw.num_key_value_heads {
            None => heads,
            some => f.positive("num_key_value_heads", some, MAX_HEADS)?,
        };
        let field = "num_attention_heads_per_layer";
        let q_heads = match &raw.num_attention_heads_per_layer {
            None => vec![heads; layers],
            Some(list) if list.len() != layers => {
                return Err(f.err(
                    field,
                    &format!(
                        "has {} entries, expected num_hidden_layers = {layers}",
                        list.len()
                    ),
                ))
            }
            Some(list) => list
                .iter()
                .map(|&n| f.count(field, n, MAX_HEADS))
                .collect::<Result<Vec<_>>>()?,
        };
        if let Some(n) = q_heads.iter().find(|&&n| n % kv != 0) {
            return Err(f.err(
                field,
                &format!("{n} heads in a layer is not a multiple of num_key_value_heads ({kv})"),
            ));
        }
        let gate_per_head = match &raw.gating {
            None | Some(Value::Bool(true)) => true,
            Some(Value::String(s)) if s == "per-head" => true,
            Some(Value::Bool(false)) => false,
            Some(Value::String(s)) if s == "per-element" => false,
            Some(other) => {
                return Err(f.err(
                    "gating",
                    &format!("{other} (expected true, false, \"per-head\" or \"per-element\")"),
                ))
            }
        };
        let moe_layers = match &raw.mlp_layer_types {
            None => (0..layers).map(|i| i > 0).collect(),
            Some(types) => read_sparse_layers(types, layers, f)?,
        };
        let field = "moe_intermediate_size";
        let expert_width = f.optional_count(field, raw.moe_intermediate_size, 512, MAX_WIDTH)?;
        let field = "shared_expert_intermediate_size";
        let shared = raw.shared_expert_intermediate_size;
        let shared_width = f.optional_count(field, shared, 512, MAX_WIDTH)?;
        let field = "moe_routed_scaling_factor";
        Ok(Laguna {
            q_heads,
            gate_per_head,
            sliding_rope,
            sliding,
            moe_layers,
            routing: read_routing(&raw, f, (256, 8))?,
            expert_width,
            shared_width,
            route_scale: f.number(field, raw.moe_routed_scaling_factor, 1.0, Sign::Positive)?,
        })
    })
}

/// The RoPE of `kind` layers: `rope_parameters.{kind}` (LagunaConfig's defaults when
/// config.json has no `rope_parameters`: theta 5e5 on half of each head for full layers,
/// theta 1e4 on whole heads for sliding ones).
fn rope_of(raw: &HfConfig, head_dim: usize, kind: &str, f: &Fields<'_>) -> Result<Rope> {
    let field = format!("rope_parameters.{kind}");
    let params = match &raw.rope_parameters {
        None | Some(Value::Null) => match kind {
            FULL => json!({"rope_type": "default", "rope_theta": 500_000.0,
                           "partial_rotary_factor": 0.5}),
            _ => json!({"rope_type": "default", "rope_theta": 10_000.0}),
        },
        Some(Value::Object(map)) => match map.get(kind) {
            Some(p @ Value::Object(_)) => p.clone(),
            _ if !map.contains_key(FULL) && !map.contains_key(SLIDING) => {
                return Err(f.err(
                    "rope_parameters",
                    "has no entry per layer type (expected `full_attention` and \
                     `sliding_attention` objects, as transformers writes LagunaConfig)",
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

/// Laguna's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Laguna {
    /// Per layer, its query heads (`num_attention_heads_per_layer`).
    pub q_heads: Vec<usize>,
    /// Whether the output gate has one value per head (else one per channel).
    pub gate_per_head: bool,
    /// The sliding layers' RoPE, where some layer slides.
    pub sliding_rope: Option<Rope>,
    /// Per layer, whether it is a `sliding_attention` layer.
    pub sliding: Vec<bool>,
    /// Per layer, whether its MLP is a mixture of experts.
    pub moe_layers: Vec<bool>,
    /// `(num_experts, num_experts_per_tok)`.
    pub routing: (usize, usize),
    /// `moe_intermediate_size`: each routed expert's width.
    pub expert_width: usize,
    /// `shared_expert_intermediate_size`.
    pub shared_width: usize,
    /// `moe_routed_scaling_factor`.
    pub route_scale: f32,
}

/// The name of the attention output gate `softplus(g_proj(x))` of attention module `attn`.
fn output_gate(attn: &str) -> String {
    format!("{attn}.output_gate")
}

impl Family for Laguna {
    /// Sliding-window layers rotate with their own RoPE (`model.rotary_emb_local.*`).
    fn other_rope(&self) -> Option<(&Rope, &'static str)> {
        self.sliding_rope
            .as_ref()
            .map(|r| (r, "model.rotary_emb_local"))
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::other_if(self.sliding.get(i).copied().unwrap_or(false))
    }

    fn layer_q_heads(&self, cfg: &ArchConfig, i: usize) -> usize {
        self.q_heads
            .get(i)
            .copied()
            .unwrap_or(cfg.num_attention_heads)
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }

    /// `q_proj` of the layer's own head count, `k_proj` and `v_proj`, per-head q/k norms and
    /// RoPE; the output gate `softplus(g_proj(x))` is computed here too.
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
        let (h, d, bias) = (cfg.hidden_size, cfg.head_dim, cfg.qkv_bias);
        let gate_width = match self.gate_per_head {
            true => spec.q_heads,
            false => spec.q_heads * d,
        };
        let gate = linear(b, x, &format!("{attn}.g_proj"), h, gate_width, false, dtype);
        b.op_into("Softplus", &[&gate], vec![], &output_gate(attn));
        let q_size = spec.q_heads * d;
        let q = linear(b, x, &format!("{attn}.q_proj"), h, q_size, bias, dtype);
        let k = linear(
            b,
            x,
            &format!("{attn}.k_proj"),
            h,
            cfg.kv_size(),
            bias,
            dtype,
        );
        let v = linear(
            b,
            x,
            &format!("{attn}.v_proj"),
            h,
            cfg.kv_size(),
            bias,
            dtype,
        );
        let (q, k) = self.qk_norm(b, cfg, q, k, attn, dtype);
        let (q, k) = self.rotate_qk(b, cfg, i, rotary, (q, k), spec);
        [q, k, v]
    }

    /// The attention result times its output gate (per head: broadcast over each head's
    /// channels), then `o_proj`.
    fn attention_output(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        _x: &str,
        y: &str,
        attn: &str,
        spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> String {
        let gate = output_gate(attn);
        let q_size = spec.q_heads * cfg.head_dim;
        let gated = match self.gate_per_head {
            true => {
                let heads = b.const_i64(&[0, 0, spec.q_heads as i64, cfg.head_dim as i64]);
                let split = b.op("Reshape", &[y, &heads], vec![]);
                let last = b.const_i64(&[-1]);
                let gate = b.op("Unsqueeze", &[&gate, &last], vec![]);
                let gated = b.op("Mul", &[&split, &gate], vec![]);
                let flat = b.const_i64(&[0, 0, q_size as i64]);
                b.op("Reshape", &[&gated, &flat], vec![])
            }
            false => b.op("Mul", &[y, &gate], vec![]),
        };
        let o_proj = format!("{attn}.o_proj");
        linear(
            b,
            &gated,
            &o_proj,
            q_size,
            cfg.hidden_size,
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
        if !self.moe_layers.get(i).copied().unwrap_or(false) {
            return self.mlp(b, cfg, x, &mlp, dtype);
        }
        let router = Router::Corrected {
            scores: Scores::Sigmoid,
            bias: "experts.e_score_correction_bias",
            min_sum: None,
        };
        let weights = ExpertWeights::PROJ;
        let spec = MoeSpec::new(cfg, self.expert_width, self.routing, router, weights);
        let mut routed = spec.build(b, x, &mlp, dtype);
        if self.route_scale != 1.0 {
            // The routed sum is linear in the routing weights.
            let scale = scalar(b, self.route_scale, dtype);
            routed = b.op("Mul", &[&routed, &scale], vec![]);
        }
        let shared = format!("{mlp}.shared_expert");
        let sizes = (cfg.hidden_size, self.shared_width);
        let shared = gated_mlp(b, x, &shared, sizes, false, GateActivation::Silu, dtype);
        b.op("Add", &[&routed, &shared], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::Laguna;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "laguna", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
            "vocab_size": 300, "max_position_embeddings": 4096"#,
            extra,
        )
    }

    #[test]
    fn defaults_follow_transformers() {
        let c = parse("").unwrap();
        let k = c.knobs::<Laguna>().unwrap();
        assert_eq!(k.q_heads, [4, 4, 4]);
        assert_eq!(k.moe_layers, [false, true, true]);
        assert_eq!(c.layer_windows, [None; 3]);
        assert!(k.gate_per_head && k.sliding_rope.is_none());
        assert_eq!(
            (c.head_dim, c.rope.rotary_dim, c.rope.theta),
            (128, 64, 5e5)
        );
        assert_eq!(
            (k.routing, k.expert_width, k.shared_width, k.route_scale),
            ((256, 8), 512, 512, 1.0)
        );
        let c = parse(
            r#", "num_attention_heads_per_layer": [2, 4, 6], "gating": "per-element",
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "mlp_layer_types": ["sparse", "dense", "sparse"], "head_dim": 16"#,
        )
        .unwrap();
        let k = c.knobs::<Laguna>().unwrap();
        assert_eq!(k.q_heads, [2, 4, 6]);
        assert_eq!(k.moe_layers, [true, false, true]);
        assert_eq!(c.layer_windows, [Some(512), None, Some(512)]);
        let local = k.sliding_rope.as_ref().unwrap();
        assert_eq!((local.rotary_dim, local.theta), (16, 1e4));
        assert!(!k.gate_per_head);
    }

    #[test]
    fn refuses_what_transformers_refuses_or_mobius_cannot_build() {
        for (extra, field) in [
            (
                r#", "num_attention_heads_per_layer": [4, 4]"#,
                "num_attention_heads_per_layer",
            ),
            (
                r#", "num_attention_heads_per_layer": [4, 3, 4]"#,
                "num_attention_heads_per_layer",
            ),
            (r#", "gating": "per-token""#, "gating"),
            (
                r#", "mlp_layer_types": ["dense", "moe", "sparse"]"#,
                "mlp_layer_types",
            ),
            (
                r#", "moe_apply_router_weight_on_input": true"#,
                "moe_apply_router_weight_on_input",
            ),
            (
                r#", "moe_router_logit_softcapping": 30.0"#,
                "moe_router_logit_softcapping",
            ),
            (
                r#", "rope_parameters": {"rope_theta": 1e4}"#,
                "rope_parameters",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }
}
