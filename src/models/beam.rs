//! Beam (Reflection, transformers' BeamForCausalLM): sandwich-normed layers whose residual
//! adds are scaled by their depth (the `n`-th add of the model, `n = 2(i + 1)` for layer `i`'s
//! attention and one more for its MLP, is `y/√n + x·√((n − 1)/n)`), per-head q/k RMSNorm, a
//! RoPE per layer type (`rope_parameters.sliding_attention`; a `null` entry, the full layers'
//! by default, is no position embedding: those layers scale their queries by
//! `exp(0.1·ln(1 + (position + 1)/2048))` instead), the attention output gated by
//! `σ(gate_proj(x) + gate_bias)` (one bias per head) before `o_proj`, sliding-window layers
//! (all but every sixth and the last by default), and by `mlp_layer_types` (default: three
//! dense, then sparse) a dense SwiGLU or DeepSeek-V3's grouped sigmoid router over SwiGLU
//! experts times `routed_scaling_factor`; the logits soft-capped by
//! `final_logit_softcapping`.

use serde_json::{json, Value};

use super::components::{
    linear, rotary_embedding, scalar, AttentionSpec, DecoderInputs, ExpertWeights, GroupScore,
    GroupedRouter, MoeSpec, RopeTables, Router,
};
use super::decoder::{Block, Family, LayerNorms, LayerRope, QkNorm};
use super::deepseek::read_groups;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_layer_type_rope, read_routing, read_sparse_layers, sliding_layer_types,
    ArchConfig, Biases, DecoderFields, Fields, HfConfig, Rope, RopeScaling, Sign, SlidingLayers,
};
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::MAX_WIDTH;
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "beam",
    summary: "sandwich norms, depth-scaled residual adds, per-head q/k RMSNorm, RoPE per layer \
              type (NoPE layers scale their queries by position), sigmoid output gate with a \
              per-head bias, dense then MoE layers (grouped sigmoid router), soft-capped logits",
    model_types: &[ModelType::generative("beam", "decoder", read)],
};

/// transformers' BeamConfig: `head_dim` 128, `attention_bias` on q/k/v/o, no MLP bias,
/// untied, `rms_norm_eps` 1e-6, window 512 on all layers but every sixth and the last.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| {
        let rope = rope_of(raw, head_dim, SLIDING, f)?;
        // Sliding layers without RoPE never read it: any table serves.
        Ok(rope.unwrap_or(Rope {
            theta: 10_000.0,
            scaling: RopeScaling::Default,
            rotary_dim: head_dim,
            interleaved: false,
        }))
    },
    sliding_window: Some(512),
    sliding_layers: SlidingLayers::Pattern(sliding_layers),
    ..DecoderFields::LLAMA
};

const FULL: &str = "full_attention";
const SLIDING: &str = "sliding_attention";

/// The queries' position scale of the NoPE layers, computed once per graph.
const QUERY_SCALE: &str = "model.nope_query_scale";

/// Per layer, whether it slides: `layer_types`, else all but every sixth and the last.
fn sliding_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    Ok(sliding_layer_types(raw, layers, f)?.unwrap_or_else(|| {
        (0..layers)
            .map(|i| (i + 1) % 6 != 0 && i + 1 != layers)
            .collect()
    }))
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let raw = HfConfig {
        use_sliding_window: None,
        max_window_layers: None,
        partial_rotary_factor: None,
        ..raw.clone()
    };
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let layers = dims.num_hidden_layers;
        let sliding = sliding_layers(&raw, layers, f)?;
        let full_rope = rope_of(&raw, dims.head_dim, FULL, f)?;
        let sliding_rope = rope_of(&raw, dims.head_dim, SLIDING, f)?;
        let moe_layers = match &raw.mlp_layer_types {
            None => (0..layers).map(|i| i >= 3).collect(),
            Some(types) => read_sparse_layers(types, layers, f)?,
        };
        let routing = read_routing(&raw, f, (256, 8))?;
        let (groups, top_groups) = read_groups(&raw, f, routing.0, Some((8, 4)))?;
        let field = "moe_intermediate_size";
        let expert_width = f.optional_count(field, raw.moe_intermediate_size, 2560, MAX_WIDTH)?;
        let field = "routed_scaling_factor";
        let scale = f.number(field, raw.routed_scaling_factor, 2.5, Sign::Positive)?;
        let final_softcap = match &raw.final_logit_softcapping {
            None => Some(30.0),
            Some(Value::Null) => None,
            Some(v) => {
                let field = "final_logit_softcapping";
                Some(f.number(field, f.json_number(field, Some(v))?, 30.0, Sign::Positive)?)
            }
        };
        Ok(Beam {
            rope_layers: sliding
                .iter()
                .map(|&s| match s {
                    true => sliding_rope.is_some(),
                    false => full_rope.is_some(),
                })
                .collect(),
            full_rope: full_rope.filter(|_| sliding.contains(&false)),
            sliding,
            moe_layers,
            routing,
            expert_width,
            router: GroupedRouter {
                sigmoid: true,
                correction_bias: true,
                groups,
                top_groups,
                group_score: GroupScore::TopTwoSum,
                normalize: raw.norm_topk_prob.unwrap_or(true),
                scale,
            },
            final_softcap,
        })
    })
}

/// The RoPE of `kind` layers, `None` for no position embedding: `rope_parameters.{kind}`
/// (BeamConfig's defaults when config.json has none: theta 1e4 for the sliding layers, none
/// for the full ones).
fn rope_of(raw: &HfConfig, head_dim: usize, kind: &str, f: &Fields<'_>) -> Result<Option<Rope>> {
    let field = format!("rope_parameters.{kind}");
    let params = match &raw.rope_parameters {
        None | Some(Value::Null) => match kind {
            FULL => return Ok(None),
            _ => json!({"rope_type": "default", "rope_theta": 10_000.0}),
        },
        Some(Value::Object(map)) => match map.get(kind) {
            Some(p @ Value::Object(_)) => p.clone(),
            Some(Value::Null) => return Ok(None),
            _ if !map.contains_key(FULL) && !map.contains_key(SLIDING) => {
                return Err(f.err(
                    "rope_parameters",
                    "has no entry per layer type (expected `full_attention` and \
                     `sliding_attention` entries, as transformers writes BeamConfig)",
                ))
            }
            other => {
                let found = other.map_or("missing".to_string(), Value::to_string);
                return Err(f.err(&field, &format!("{found} (expected an object or null)")));
            }
        },
        Some(other) => {
            return Err(f.err("rope_parameters", &format!("{other} (expected an object)")))
        }
    };
    let rope = read_layer_type_rope(raw, params, kind, head_dim, 10_000.0, f)?;
    Ok(Some(rope))
}

/// Beam's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Beam {
    /// Per layer, whether it rotates q and k (else it scales q by position).
    pub rope_layers: Vec<bool>,
    /// The full layers' RoPE, where they rotate ([`ArchConfig::rope`] is the sliding layers').
    pub full_rope: Option<Rope>,
    /// Per layer, whether it is a `sliding_attention` layer.
    pub sliding: Vec<bool>,
    /// Per layer, whether its MLP is a mixture of experts.
    pub moe_layers: Vec<bool>,
    /// `(num_experts, num_experts_per_tok)`.
    pub routing: (usize, usize),
    /// `moe_intermediate_size`: each expert's width.
    pub expert_width: usize,
    /// The grouped sigmoid router (`n_group`, `topk_group`, `norm_topk_prob`,
    /// `routed_scaling_factor`).
    pub router: GroupedRouter,
    /// `final_logit_softcapping` (`None`: no cap).
    pub final_softcap: Option<f32>,
}

impl Beam {
    /// The name of the attention output gate `σ(gate_proj(x) + gate_bias)` of module `attn`.
    fn output_gate(attn: &str) -> String {
        format!("{attn}.output_gate")
    }
}

impl Family for Beam {
    fn layer_norms(&self) -> LayerNorms {
        LayerNorms::SANDWICH
    }

    /// The token rows as they are; the NoPE layers' query scale `exp(0.1·ln(1 + (p + 1)/2048))`
    /// of each position `p` (`[B, S, 1]`) is computed here, where the positions are at hand.
    fn embed(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        if self.rope_layers.iter().all(|&r| r) {
            return x;
        }
        let to_f32 = vec![("to", Attr::Int(DType::F32.onnx_code() as i64))];
        let p = b.op("Cast", &[&io.position_ids], to_f32);
        let one = scalar(b, 1.0, DType::F32);
        let p1 = b.op("Add", &[&p, &one], vec![]);
        let span = scalar(b, 2048.0, DType::F32);
        let r = b.op("Div", &[&p1, &span], vec![]);
        let r1 = b.op("Add", &[&r, &one], vec![]);
        let l = b.op("Log", &[&r1], vec![]);
        let tenth = scalar(b, 0.1, DType::F32);
        let l = b.op("Mul", &[&l, &tenth], vec![]);
        let s = b.op("Exp", &[&l], vec![]);
        let last = b.const_i64(&[-1]);
        let s = b.op("Unsqueeze", &[&s, &last], vec![]);
        b.op_into(
            "Cast",
            &[&s],
            vec![("to", Attr::Int(dtype.onnx_code() as i64))],
            QUERY_SCALE,
        );
        x
    }

    /// Full-attention layers rotate with their own RoPE (`model.rotary_emb_global.*`).
    fn other_rope(&self) -> Option<(&Rope, &'static str)> {
        self.full_rope
            .as_ref()
            .map(|r| (r, "model.rotary_emb_global"))
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        if !self.rope_layers.get(i).copied().unwrap_or(false) {
            return LayerRope::None;
        }
        LayerRope::other_if(!self.sliding.get(i).copied().unwrap_or(true))
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }

    /// Llama's q, k, v with per-head q/k norms; RoPE where the layer rotates, else q times
    /// the position scale.
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
        let [q, k, v] = self.qkv(b, cfg, x, attn, dtype);
        let (q, k) = self.qk_norm(b, cfg, q, k, attn, dtype);
        let d = cfg.head_dim;
        match self.layer_rope(cfg, i) {
            Some((rope, t)) => [
                rotary_embedding(b, &q, &rotary[t], rope, spec.q_heads, d),
                rotary_embedding(b, &k, &rotary[t], rope, spec.kv_heads, d),
                v,
            ],
            None => [b.op("Mul", &[&q, QUERY_SCALE], vec![]), k, v],
        }
    }

    /// The attention result times `σ(gate_proj(x) + gate_bias)` (the bias one per head,
    /// broadcast over its channels), then `o_proj`.
    fn attention_output(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        y: &str,
        attn: &str,
        spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> String {
        let (h, d, heads) = (cfg.hidden_size, cfg.head_dim, spec.q_heads);
        let q_size = heads * d;
        let gate = linear(b, x, &format!("{attn}.gate_proj"), h, q_size, false, dtype);
        let split = b.const_i64(&[0, 0, heads as i64, d as i64]);
        let gate = b.op("Reshape", &[&gate, &split], vec![]);
        let name = format!("{attn}.gate_bias");
        let bias = b.initializer(Initializer {
            name: name.clone(),
            dtype,
            shape: vec![heads],
            source: Some(TensorSource::Checkpoint(name)),
        });
        let last = b.const_i64(&[-1]);
        let bias = b.op("Unsqueeze", &[&bias, &last], vec![]);
        let gate = b.op("Add", &[&gate, &bias], vec![]);
        b.op_into("Sigmoid", &[&gate], vec![], &Self::output_gate(attn));
        let y = b.op("Reshape", &[y, &split], vec![]);
        let gated = b.op("Mul", &[&y, &Self::output_gate(attn)], vec![]);
        let flat = b.const_i64(&[0, 0, q_size as i64]);
        let gated = b.op("Reshape", &[&gated, &flat], vec![]);
        let o_proj = format!("{attn}.o_proj");
        linear(b, &gated, &o_proj, q_size, h, cfg.o_bias, dtype)
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
        let router = Router::Grouped(self.router);
        let spec = MoeSpec::new(
            cfg,
            self.expert_width,
            self.routing,
            router,
            ExpertWeights::PROJ,
        );
        spec.build(b, x, &mlp, dtype)
    }

    /// `y/√n + x·√((n − 1)/n)` for the `n`-th residual add: `n = 2(i + 1)` after layer `i`'s
    /// attention, `2(i + 1) + 1` after its MLP.
    fn residual_add(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        x: &str,
        y: &str,
        (_layer, i): (&str, usize),
        block: Block,
        dtype: DType,
    ) -> String {
        let n = match block {
            Block::Attention => 2 * (i + 1),
            Block::Mlp => 2 * (i + 1) + 1,
        } as f64;
        let ys = scalar(b, (1.0 / n.sqrt()) as f32, dtype);
        let xs = scalar(b, ((n - 1.0) / n).sqrt() as f32, dtype);
        let y = b.op("Mul", &[y, &ys], vec![]);
        let x = b.op("Mul", &[x, &xs], vec![]);
        b.op("Add", &[&y, &x], vec![])
    }

    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        super::decoder::soft_capped_logits(b, x, head, self.final_softcap, dtype);
    }
}

#[cfg(test)]
mod tests {
    use super::Beam;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "beam", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 7,
            "vocab_size": 300, "max_position_embeddings": 4096, "num_experts": 16"#,
            extra,
        )
    }

    #[test]
    fn defaults_follow_transformers() {
        let c = parse("").unwrap();
        let k = c.knobs::<Beam>().unwrap();
        let sliding = [true, true, true, true, true, false, false];
        assert_eq!(k.sliding, sliding);
        assert_eq!(k.rope_layers, sliding);
        assert!(k.full_rope.is_none());
        assert_eq!(c.layer_windows[0], Some(512));
        assert_eq!(c.layer_windows[5], None);
        assert_eq!(k.moe_layers, [false, false, false, true, true, true, true]);
        assert_eq!((k.routing, k.expert_width), ((16, 8), 2560));
        assert_eq!((k.router.groups, k.router.top_groups), (8, 4));
        assert_eq!((k.router.scale, k.final_softcap), (2.5, Some(30.0)));
        assert_eq!((c.head_dim, c.rope.theta), (128, 1e4));
        let c = parse(
            r#", "rope_parameters": {"sliding_attention": {"rope_theta": 1e5},
            "full_attention": {"rope_theta": 1e6}}, "final_logit_softcapping": null,
            "mlp_layer_types": ["dense", "sparse", "sparse", "sparse", "sparse", "dense",
            "sparse"], "n_group": 4, "topk_group": 2"#,
        )
        .unwrap();
        let k = c.knobs::<Beam>().unwrap();
        assert_eq!(k.rope_layers, [true; 7]);
        assert_eq!(k.full_rope.as_ref().map(|r| r.theta), Some(1e6));
        assert_eq!(c.rope.theta, 1e5);
        assert_eq!(k.final_softcap, None);
        assert!(!k.moe_layers[5]);
    }

    #[test]
    fn refuses_configs_transformers_cannot_run() {
        for (extra, field) in [
            (
                r#", "rope_parameters": {"rope_theta": 1e4}"#,
                "rope_parameters",
            ),
            (r#", "n_group": 3"#, "n_group"),
            (r#", "n_group": 4, "topk_group": 5"#, "topk_group"),
            (r#", "n_group": null"#, "n_group"),
            (r#", "mlp_layer_types": ["dense"]"#, "mlp_layer_types"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }
}
