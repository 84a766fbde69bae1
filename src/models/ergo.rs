//! Ergo (transformers' ErgoForCausalLM): a fused `qkv_proj`, per-head q/k RMSNorm, an
//! interleaved RoPE in the sliding-window layers only (all but every
//! `global_attention_every_n_layers`-th; the full layers use no position embedding and
//! multiply q and k by `√global_attention_scale` where it is set), sandwich norms, and each
//! block's output mixed into the residual stream by a learned gate per channel `w`:
//! `σ(w)·y + √(1 + σ(w))·e^(−softplus(w)/2)·x`. The first `num_dense_blocks` MLPs are
//! ungated squared-ReLU MLPs; the others mixtures of squared-ReLU experts, each expert's
//! output RMS-normalised with its own gain (sigmoid router with a correction bias,
//! renormalised, times `moe_routed_scaling_factor`), plus a shared squared-ReLU expert whose
//! output is RMS-normalised too. The checkpoint's own names ([`checkpoint_name`]) are read
//! where transformers transposes the tensor.

use serde_json::Value;

use super::components::{
    fused_qkv, scalar, squared_relu_mlp, AttentionSpec, ExpertWeights, FusedQkv, MoeSpec,
    RopeTables, Router, Scores,
};
use super::decoder::{Block, Family, LayerNorms, LayerRope, QkNorm};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_layer_type_rope, read_routing, read_sparse_layers, sliding_layer_types,
    ArchConfig, Biases, CheckpointRenaming, DecoderFields, Fields, HfConfig, Rope, RopeScaling,
    Sign, SlidingLayers,
};
use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::{MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "ergo",
    summary: "fused qkv, per-head q/k RMSNorm, interleaved RoPE only in the sliding layers, \
              sandwich norms, learned residual gates, squared-ReLU MLPs and experts (each \
              expert's output RMS-normed with its own gain; sigmoid router with a correction \
              bias; normed shared expert)",
    model_types: &[ModelType::generative("ergo", "decoder", read)],
};

/// transformers' ErgoConfig: no biases, RoPE theta 1e6, untied, `rms_norm_eps` 1e-12, window
/// 512 on all but every fourth layer.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    silu_mlp: false,
    rope: |raw, head_dim, f| {
        // Full layers without RoPE never read it: any table serves.
        let rope = rope_of(raw, head_dim, SLIDING, f)?;
        Ok(rope.unwrap_or(Rope {
            theta: 1_000_000.0,
            scaling: RopeScaling::Default,
            rotary_dim: head_dim,
            interleaved: true,
        }))
    },
    sliding_window: Some(512),
    sliding_layers: SlidingLayers::Pattern(sliding_layers),
    rms_norm_eps: 1e-12,
    ..DecoderFields::LLAMA
};

const FULL: &str = "full_attention";
const SLIDING: &str = "sliding_attention";

/// Per layer, whether it slides: `layer_types`, else all but every
/// `global_attention_every_n_layers`-th (default 4).
fn sliding_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    if let Some(types) = sliding_layer_types(raw, layers, f)? {
        return Ok(types);
    }
    let field = "global_attention_every_n_layers";
    let n = f.optional_count(field, raw.global_attention_every_n_layers, 4, MAX_LAYERS)?;
    Ok((0..layers).map(|i| (i + 1) % n != 0).collect())
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let field = "first_dense_intermediate_size";
    let dense_width =
        f.optional_count(field, raw.first_dense_intermediate_size, 32768, MAX_WIDTH)?;
    let raw = HfConfig {
        use_sliding_window: None,
        max_window_layers: None,
        partial_rotary_factor: None,
        head_dim: None,
        intermediate_size: Some(dense_width as i64),
        num_key_value_heads: Some(raw.num_key_value_heads.unwrap_or(8)),
        sliding_window: match raw.local_attention_window {
            Some(w) => Some(Some(w)),
            None => raw.sliding_window,
        },
        ..raw.clone()
    };
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let layers = dims.num_hidden_layers;
        let sliding = sliding_layers(&raw, layers, f)?;
        let full_rope = rope_of(&raw, dims.head_dim, FULL, f)?;
        let sliding_rope = rope_of(&raw, dims.head_dim, SLIDING, f)?;
        let field = "num_dense_blocks";
        let dense = match raw.num_dense_blocks {
            Some(n) => f.index(field, n, MAX_LAYERS)?,
            None => 1,
        };
        let moe_layers = match &raw.mlp_layer_types {
            None => (0..layers).map(|i| i >= dense).collect(),
            Some(types) => read_sparse_layers(types, layers, f)?,
        };
        let field = "moe_intermediate_size";
        let expert_width = f.optional_count(field, raw.moe_intermediate_size, 4096, MAX_WIDTH)?;
        let field = "shared_intermediate_size";
        let shared_width =
            f.optional_count(field, raw.shared_intermediate_size, 8192, MAX_WIDTH)?;
        let field = "moe_routed_scaling_factor";
        let route_scale = f.number(
            field,
            raw.moe_routed_scaling_factor,
            8f64.sqrt(),
            Sign::Positive,
        )?;
        let field = "global_attention_scale";
        let qk_scale = match raw.global_attention_scale {
            None => None,
            Some(s) => Some(f.number(field, Some(s), 1.0, Sign::Positive)?.sqrt()),
        };
        Ok(Ergo {
            rope_layers: sliding
                .iter()
                .map(|&s| match s {
                    true => sliding_rope.is_some(),
                    false => full_rope.is_some(),
                })
                .collect(),
            full_rope: full_rope.filter(|_| sliding.contains(&false)),
            sliding,
            qk_scale,
            moe_layers,
            routing: read_routing(&raw, f, (256, 8))?,
            expert_width,
            shared_width,
            route_scale,
        })
    })
}

/// The (interleaved) RoPE of `kind` layers, `None` for no position embedding:
/// `rope_parameters.{kind}`; a flat `rope_parameters` (one RoPE) is the sliding layers', the
/// full ones have none (as ErgoConfig reads it); without any, theta 1e6 on the sliding layers.
fn rope_of(raw: &HfConfig, head_dim: usize, kind: &str, f: &Fields<'_>) -> Result<Option<Rope>> {
    let field = format!("rope_parameters.{kind}");
    let params = match &raw.rope_parameters {
        None | Some(Value::Null) => match kind {
            FULL => return Ok(None),
            _ => serde_json::json!({"rope_type": "default", "rope_theta": 1_000_000.0}),
        },
        Some(Value::Object(map)) if map.contains_key("rope_type") => match kind {
            FULL => return Ok(None),
            _ => Value::Object(map.clone()),
        },
        Some(Value::Object(map)) => match map.get(kind) {
            Some(p @ Value::Object(_)) => p.clone(),
            Some(Value::Null) | None => return Ok(None),
            Some(other) => {
                return Err(f.err(&field, &format!("{other} (expected an object or null)")))
            }
        },
        Some(other) => {
            return Err(f.err("rope_parameters", &format!("{other} (expected an object)")))
        }
    };
    let rope = read_layer_type_rope(raw, params, kind, head_dim, 1_000_000.0, f)?;
    Ok(Some(Rope {
        interleaved: true,
        ..rope
    }))
}

/// The name the builder reads for checkpoint tensor `name` (transformers' conversion mapping
/// for `ergo`, but for the tensors it transposes: the router's `gate_kernel` and the shared
/// expert's `shared_up_proj`, `shared_down_proj`, read as stored, `[in, out]`).
pub fn checkpoint_name(name: &str) -> Option<String> {
    const PREFIXES: [(&str, &str); 4] = [
        ("tok_embeddings.", "model.embed_tokens."),
        ("norm.", "model.norm."),
        ("output.", "lm_head."),
        ("layers.", "model.layers."),
    ];
    const PARTS: [(&str, &str); 16] = [
        (".attention_norm.", ".input_layernorm."),
        (".post_attention_norm.", ".post_attention_layernorm."),
        (".ffn_norm.", ".pre_feedforward_layernorm."),
        (".post_ffn_norm.", ".post_feedforward_layernorm."),
        (
            ".post_attention_residual.scale",
            ".attention_residual_gate.weight",
        ),
        (
            ".post_ffn_residual.scale",
            ".feedforward_residual_gate.weight",
        ),
        (".attention.wqkv.", ".self_attn.qkv_proj."),
        (".attention.wo.", ".self_attn.o_proj."),
        (".attention.q_norm.", ".self_attn.q_norm."),
        (".attention.k_norm.", ".self_attn.k_norm."),
        (".feed_forward.up.", ".mlp.up_proj."),
        (".feed_forward.down.", ".mlp.down_proj."),
        (
            ".feed_forward.router_bias",
            ".mlp.gate.e_score_correction_bias",
        ),
        (
            ".feed_forward.expert_output_norm.scale",
            ".mlp.experts.post_expert_norm.weight",
        ),
        (
            ".feed_forward.shared_expert_output_norm.scale",
            ".mlp.shared_experts.norm.weight",
        ),
        (".feed_forward.", ".mlp."),
    ];
    let mut out = name.to_string();
    if let Some((from, to)) = PREFIXES.iter().find(|(from, _)| name.starts_with(from)) {
        out = format!("{to}{}", &name[from.len()..]);
    }
    if let Some((from, to)) = PARTS.iter().find(|(from, _)| out.contains(from)) {
        out = out.replacen(from, to, 1);
    }
    Some(out)
}

/// Ergo's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Ergo {
    /// Per layer, whether it rotates q and k.
    pub rope_layers: Vec<bool>,
    /// The full layers' RoPE, where they rotate ([`ArchConfig::rope`] is the sliding layers').
    pub full_rope: Option<Rope>,
    /// Per layer, whether it is a `sliding_attention` layer.
    pub sliding: Vec<bool>,
    /// `√global_attention_scale`, q's and k's multiplier in the full layers.
    pub qk_scale: Option<f32>,
    /// Per layer, whether its MLP is a mixture of experts.
    pub moe_layers: Vec<bool>,
    /// `(num_experts, num_experts_per_tok)`.
    pub routing: (usize, usize),
    /// `moe_intermediate_size`: each expert's width.
    pub expert_width: usize,
    /// `shared_intermediate_size`.
    pub shared_width: usize,
    /// `moe_routed_scaling_factor`.
    pub route_scale: f32,
}

/// A `[rows, cols]` checkpoint tensor read as stored (`[in, out]`).
fn stored(b: &mut GraphBuilder, name: &str, shape: [usize; 2], dtype: DType) -> String {
    b.initializer(Initializer {
        name: name.to_string(),
        dtype,
        shape: shape.to_vec(),
        source: Some(TensorSource::Checkpoint(name.to_string())),
    })
}

impl Family for Ergo {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms::SANDWICH
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

    /// `qkv_proj` split into q, k and v (heads in that order).
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let layout = FusedQkv::blocks(cfg.q_size(), cfg.kv_size());
        let fused = format!("{attn}.qkv_proj");
        fused_qkv(b, x, attn, &fused, &layout, cfg.hidden_size, false, dtype)
    }

    /// Per-head norms, then RoPE where the layer rotates; in the full layers q and k times
    /// `√global_attention_scale`.
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
        let (mut q, mut k) = self.rotate_qk(b, cfg, i, rotary, (q, k), spec);
        let full = !self.sliding.get(i).copied().unwrap_or(true);
        if let (true, Some(scale)) = (full, self.qk_scale) {
            let s = scalar(b, scale, dtype);
            q = b.op("Mul", &[&q, &s], vec![]);
            k = b.op("Mul", &[&k, &s], vec![]);
        }
        [q, k, v]
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
            return squared_relu_mlp(b, cfg, x, (&mlp, "up_proj", "down_proj"), dtype);
        }
        let router = Router::Corrected {
            scores: Scores::Sigmoid,
            bias: "gate.e_score_correction_bias",
            min_sum: None,
        };
        let weights = ExpertWeights::Relu2InOut {
            router: "gate_kernel",
            up: "up_proj",
            down: "down_proj",
        };
        let eps = cfg.rms_norm_eps;
        let spec = MoeSpec::new(cfg, self.expert_width, self.routing, router, weights)
            .with_expert_norm("experts.post_expert_norm.weight", eps);
        let routed = spec.build(b, x, &mlp, dtype);
        // The routed sum is linear in the routing weights.
        let scale = scalar(b, self.route_scale, dtype);
        let routed = b.op("Mul", &[&routed, &scale], vec![]);
        let (h, w) = (cfg.hidden_size, self.shared_width);
        let up = stored(b, &format!("{mlp}.shared_up_proj"), [h, w], dtype);
        let up = b.op("MatMul", &[x, &up], vec![]);
        let relu = b.op("Relu", &[&up], vec![]);
        let act = b.op("Mul", &[&relu, &relu], vec![]);
        let down = stored(b, &format!("{mlp}.shared_down_proj"), [w, h], dtype);
        let shared = b.op("MatMul", &[&act, &down], vec![]);
        let norm = self.norm(cfg);
        let shared = norm.apply(b, &shared, &format!("{mlp}.shared_experts.norm"), h, dtype);
        b.op("Add", &[&routed, &shared], vec![])
    }

    /// `σ(w)·y + √(1 + σ(w))·e^(−softplus(w)/2)·x` with the block's gate `w`.
    fn residual_add(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        y: &str,
        (layer, _i): (&str, usize),
        block: Block,
        dtype: DType,
    ) -> String {
        let name = match block {
            Block::Attention => format!("{layer}.attention_residual_gate.weight"),
            Block::Mlp => format!("{layer}.feedforward_residual_gate.weight"),
        };
        let w = b.initializer(Initializer {
            name: name.clone(),
            dtype,
            shape: vec![cfg.hidden_size],
            source: Some(TensorSource::Checkpoint(name)),
        });
        let branch = b.op("Sigmoid", &[&w], vec![]);
        let one = scalar(b, 1.0, dtype);
        let grown = b.op("Add", &[&one, &branch], vec![]);
        let root = b.op("Sqrt", &[&grown], vec![]);
        let soft = b.op("Softplus", &[&w], vec![]);
        let half = scalar(b, -0.5, dtype);
        let soft = b.op("Mul", &[&soft, &half], vec![]);
        let decay = b.op("Exp", &[&soft], vec![]);
        let keep = b.op("Mul", &[&root, &decay], vec![]);
        let y = b.op("Mul", &[y, &branch], vec![]);
        let x = b.op("Mul", &[x, &keep], vec![]);
        b.op("Add", &[&y, &x], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::{checkpoint_name, Ergo};
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "ergo", "hidden_size": 64, "num_attention_heads": 4,
            "num_hidden_layers": 4, "vocab_size": 300, "max_position_embeddings": 4096,
            "num_key_value_heads": 2"#,
            extra,
        )
    }

    #[test]
    fn defaults_follow_transformers() {
        let c = parse("").unwrap();
        let k = c.knobs::<Ergo>().unwrap();
        assert_eq!(k.sliding, [true, true, true, false]);
        assert_eq!(k.rope_layers, [true, true, true, false]);
        assert_eq!(c.layer_windows, [Some(512), Some(512), Some(512), None]);
        assert_eq!(k.moe_layers, [false, true, true, true]);
        assert_eq!(
            (c.head_dim, c.intermediate_size, c.rope.theta),
            (16, 32768, 1e6)
        );
        assert!(c.rope.interleaved && k.qk_scale.is_none());
        assert_eq!(
            (k.expert_width, k.shared_width, k.routing),
            (4096, 8192, (256, 8))
        );
        let c = parse(
            r#", "local_attention_window": 8, "global_attention_scale": 4.0,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}"#,
        )
        .unwrap();
        let k = c.knobs::<Ergo>().unwrap();
        assert_eq!(c.layer_windows[0], Some(8));
        assert_eq!((k.qk_scale, c.rope.theta), (Some(2.0), 1e4));
        assert_eq!(
            checkpoint_name("layers.3.feed_forward.shared_up_proj").unwrap(),
            "model.layers.3.mlp.shared_up_proj"
        );
        assert_eq!(
            checkpoint_name("layers.0.post_ffn_residual.scale").unwrap(),
            "model.layers.0.feedforward_residual_gate.weight"
        );
    }
}
