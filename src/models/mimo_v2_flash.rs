//! MiMo-V2-Flash (Xiaomi, transformers' MiMoV2FlashForCausalLM): q/k heads of `head_dim`
//! channels (192 by default) and narrower v heads (`v_head_dim`, 128) scaled by
//! `attention_value_scale`; the sliding-window layers (all but the first and every sixth by
//! default, window 129) have twice the full layers' `num_key_value_heads` and attention sinks
//! (`attention_sink_bias`, [`checkpoint_name`]); a partial RoPE per layer type
//! (`partial_rotary_factor` 0.334 of each head; theta 5e6 full, 1e4 sliding). By
//! `mlp_layer_types` (default: the first dense) a layer's MLP is a dense SwiGLU or
//! DeepSeek-V3's grouped sigmoid router over SwiGLU experts, without shared experts.
//!
//! # The KV cache
//!
//! The decoder's cache has one shape for every layer (the graph contract, onnxruntime-genai's
//! `head_size` and `num_key_value_heads`): the sliding layers' `2·num_key_value_heads` heads
//! of `head_dim` channels. A full layer's key/value heads are each stored twice, side by side
//! (head `j` as heads `2j` and `2j + 1`): query head `h` then reads the copy at
//! `h / (heads / 2kv)`, a copy of the head `h / (heads / kv)` it reads in transformers. A v
//! head is stored widened to `head_dim` channels, as [`super::components::mla`] does: its
//! extra channels a copy of the head's first k channels, sliced off the attention output
//! before `o_proj` (each output channel depends on its own v channel alone, so the result is
//! exact).

use serde_json::{json, Value};

use super::components::{
    linear, rotary_embedding, scalar, sink_attention, sink_logits, soft_capped_attention,
    AttentionSpec, DecoderInputs, ExpertWeights, GroupScore, GroupedRouter, MoeSpec, RopeTables,
    Router,
};
use super::decoder::{Family, LayerRope};
use super::deepseek::read_groups;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_layer_type_rope, read_routing, read_sparse_layers, sliding_layer_types,
    ArchConfig, Biases, CheckpointRenaming, DecoderFields, Fields, HfConfig, Rope, Sign,
    SlidingLayers,
};
use crate::ir::{Attr, DType, GraphBuilder};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "mimo_v2_flash",
    summary: "v heads narrower than q/k (scaled), twice the key/value heads and attention \
              sinks in the sliding layers, a partial RoPE per layer type, dense then MoE \
              layers (grouped sigmoid router)",
    model_types: &[ModelType::generative("mimo_v2_flash", "decoder", read)],
};

/// transformers' MiMoV2FlashConfig: `head_dim` 192, `attention_bias` on q/k/v (never on o),
/// no MLP bias, untied, `rms_norm_eps` 1e-5, window 129 on the sliding layers.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(192),
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| rope_of(raw, head_dim, FULL, f),
    sliding_window: Some(129),
    sliding_layers: SlidingLayers::Pattern(sliding_layers),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

const FULL: &str = "full_attention";
const SLIDING: &str = "sliding_attention";

/// Per layer, whether it slides: `layer_types`, else all but the first and every sixth.
fn sliding_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    Ok(sliding_layer_types(raw, layers, f)?
        .unwrap_or_else(|| (0..layers).map(|i| i != 0 && (i + 1) % 6 != 0).collect()))
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut raw = HfConfig {
        use_sliding_window: None,
        max_window_layers: None,
        partial_rotary_factor: None,
        num_local_experts: raw.n_routed_experts.or(raw.num_local_experts),
        num_experts: None,
        ..raw.clone()
    };
    // MiMoV2FlashConfig reads the reference implementation's `sliding_window_size` (the
    // tokens before the query) as a window of one more.
    if let Some(size) = raw.sliding_window_size {
        let size = f.index("sliding_window_size", size, MAX_WIDTH)?;
        raw.sliding_window = Some(Some(size as i64 + 1));
    }
    let heads = f.positive("num_attention_heads", raw.num_attention_heads, MAX_HEADS)?;
    let field = "num_key_value_heads";
    let kv = f.optional_count(field, raw.num_key_value_heads, 4, MAX_HEADS)?;
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let sliding = sliding_layers(&raw, layers, f)?;
    let cache_heads = match sliding.contains(&true) {
        true => 2 * kv,
        false => kv,
    };
    if heads % cache_heads != 0 {
        return Err(f.err(
            field,
            &format!(
                "{kv} (the sliding layers' {cache_heads} key/value heads must divide \
                 num_attention_heads = {heads})"
            ),
        ));
    }
    raw.num_key_value_heads = Some(cache_heads as i64);
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let field = "v_head_dim";
        let v_head_dim = match raw.v_head_dim {
            None => 128,
            Some(Some(d)) => f.count(field, d, MAX_WIDTH)?,
            Some(None) => return Err(f.err(field, "null (expected a positive integer)")),
        };
        if v_head_dim > dims.head_dim {
            return Err(f.err(
                field,
                &format!(
                    "{v_head_dim} is wider than head_dim ({}): mobius stores v heads in k's \
                     head size",
                    dims.head_dim
                ),
            ));
        }
        let v_scale = match &raw.attention_value_scale {
            None => 0.707,
            Some(Value::Null) => 1.0,
            Some(v) => {
                let field = "attention_value_scale";
                f.number(field, f.json_number(field, Some(v))?, 1.0, Sign::Positive)?
            }
        };
        let sliding_rope = match sliding.contains(&true) {
            true => Some(rope_of(&raw, dims.head_dim, SLIDING, f)?),
            false => None,
        };
        let moe_layers = match &raw.mlp_layer_types {
            None => (0..dims.num_hidden_layers).map(|i| i > 0).collect(),
            Some(types) => read_sparse_layers(types, dims.num_hidden_layers, f)?,
        };
        let routing = read_routing(&raw, f, (256, 8))?;
        let (groups, top_groups) = read_groups(&raw, f, routing.0, Some((1, 1)))?;
        let field = "moe_intermediate_size";
        let expert_width = f.optional_count(field, raw.moe_intermediate_size, 2048, MAX_WIDTH)?;
        let field = "routed_scaling_factor";
        let scale = f.number(field, raw.routed_scaling_factor, 1.0, Sign::Positive)?;
        Ok(MimoV2Flash {
            kv_heads: kv,
            v_head_dim,
            v_scale,
            sliding_rope,
            sliding: sliding.clone(),
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
        })
    })
}

/// The RoPE of `kind` layers: `rope_parameters.{kind}`, its `partial_rotary_factor` 0.334
/// when absent (MiMoV2FlashConfig's defaults when config.json has no `rope_parameters`:
/// theta 5e6 for full layers, 1e4 for sliding ones).
fn rope_of(raw: &HfConfig, head_dim: usize, kind: &str, f: &Fields<'_>) -> Result<Rope> {
    let field = format!("rope_parameters.{kind}");
    let mut params = match &raw.rope_parameters {
        None | Some(Value::Null) => match kind {
            FULL => json!({"rope_type": "default", "rope_theta": 5_000_000.0}),
            _ => json!({"rope_type": "default", "rope_theta": 10_000.0}),
        },
        Some(Value::Object(map)) => match map.get(kind) {
            Some(p @ Value::Object(_)) => p.clone(),
            _ if !map.contains_key(FULL) && !map.contains_key(SLIDING) => {
                return Err(f.err(
                    "rope_parameters",
                    "has no entry per layer type (expected `full_attention` and \
                     `sliding_attention` objects, as transformers writes MiMoV2FlashConfig)",
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
    if let Value::Object(p) = &mut params {
        let partial = p
            .entry("partial_rotary_factor")
            .or_insert_with(|| Value::from(0.334))
            .as_f64();
        let theta = p.get("rope_theta").and_then(Value::as_f64);
        let plain = matches!(
            p.get("rope_type").and_then(Value::as_str),
            None | Some("default")
        );
        // An odd width `dim` (the default factor on a narrow head): transformers rotates
        // `dim + 1` channels with the frequencies `theta^(-2i/dim)`, which are
        // `(theta^((dim + 1)/dim))^(-2i/(dim + 1))`.
        let dim = partial.map(|f| (head_dim as f64 * f) as usize);
        if let (Some(dim), Some(theta), true) = (dim, theta, plain) {
            if dim % 2 == 1 && dim < head_dim {
                let width = (dim + 1) as f64;
                // Half a channel above `width`, so that the truncation gives `width`.
                p.insert(
                    "partial_rotary_factor".into(),
                    Value::from((width + 0.5) / head_dim as f64),
                );
                p.insert(
                    "rope_theta".into(),
                    Value::from(theta.powf(width / dim as f64)),
                );
            }
        }
    }
    read_layer_type_rope(raw, params, kind, head_dim, 10_000.0, f)
}

/// The name transformers gives checkpoint tensor `name` (its conversion mapping for
/// `mimo_v2_flash`: `self_attn.attention_sink_bias` → `self_attn.sinks`); every other name is
/// kept.
pub fn checkpoint_name(name: &str) -> Option<String> {
    Some(name.replace("self_attn.attention_sink_bias", "self_attn.sinks"))
}

/// The index of the layer whose attention module is `attn` (`model.layers.{i}.self_attn`).
fn layer_of(attn: &str) -> Option<usize> {
    attn.rsplit('.').nth(1)?.parse().ok()
}

/// MiMo-V2-Flash's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct MimoV2Flash {
    /// `num_key_value_heads`: the full layers' key/value heads (the sliding layers have
    /// twice as many, [`ArchConfig::num_key_value_heads`] where a layer slides).
    pub kv_heads: usize,
    /// `v_head_dim`.
    pub v_head_dim: usize,
    /// `attention_value_scale` (1 where it is null).
    pub v_scale: f32,
    /// The sliding layers' RoPE, where some layer slides.
    pub sliding_rope: Option<Rope>,
    /// Per layer, whether it is a `sliding_attention` layer.
    pub sliding: Vec<bool>,
    /// Per layer, whether its MLP is a mixture of experts.
    pub moe_layers: Vec<bool>,
    /// `(n_routed_experts, num_experts_per_tok)`.
    pub routing: (usize, usize),
    /// `moe_intermediate_size`: each expert's width.
    pub expert_width: usize,
    /// The grouped sigmoid router.
    pub router: GroupedRouter,
}

impl MimoV2Flash {
    /// Whether layer `i` slides.
    fn slides(&self, i: usize) -> bool {
        self.sliding.get(i).copied().unwrap_or(false)
    }

    /// `x` (`[B, S, heads·width]`) with each head's channels split off as `[B, S, heads,
    /// width]`.
    fn heads(b: &mut GraphBuilder, x: &str, heads: usize, width: usize) -> String {
        let shape = b.const_i64(&[0, 0, heads as i64, width as i64]);
        b.op("Reshape", &[x, &shape], vec![])
    }

    /// 4-D heads `x` back to `[B, S, width]`.
    fn flat(b: &mut GraphBuilder, x: &str, width: usize) -> String {
        let shape = b.const_i64(&[0, 0, width as i64]);
        b.op("Reshape", &[x, &shape], vec![])
    }
}

impl Family for MimoV2Flash {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    /// Sliding-window layers rotate with their own RoPE (`model.rotary_emb_local.*`).
    fn other_rope(&self) -> Option<(&Rope, &'static str)> {
        self.sliding_rope
            .as_ref()
            .map(|r| (r, "model.rotary_emb_local"))
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::other_if(self.slides(i))
    }

    /// The layer's own key/value heads projected, v scaled, q and k rotated; then v widened
    /// to `head_dim` and (in a full layer) every key/value head doubled, to the cache's shape.
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
        let (h, d, dv, bias) = (cfg.hidden_size, cfg.head_dim, self.v_head_dim, cfg.qkv_bias);
        let kv = match self.slides(i) {
            true => 2 * self.kv_heads,
            false => self.kv_heads,
        };
        let q = linear(
            b,
            x,
            &format!("{attn}.q_proj"),
            h,
            cfg.q_size(),
            bias,
            dtype,
        );
        let k = linear(b, x, &format!("{attn}.k_proj"), h, kv * d, bias, dtype);
        let mut v = linear(b, x, &format!("{attn}.v_proj"), h, kv * dv, bias, dtype);
        if self.v_scale != 1.0 {
            let scale = scalar(b, self.v_scale, dtype);
            v = b.op("Mul", &[&v, &scale], vec![]);
        }
        let (mut q, mut k) = (q, k);
        if let Some((rope, t)) = self.layer_rope(cfg, i) {
            q = rotary_embedding(b, &q, &rotary[t], rope, spec.q_heads, d);
            k = rotary_embedding(b, &k, &rotary[t], rope, kv, d);
        }
        let mut k4 = Self::heads(b, &k, kv, d);
        let mut v4 = Self::heads(b, &v, kv, dv);
        if dv < d {
            let (start, end, axis) = (
                b.const_i64(&[0]),
                b.const_i64(&[(d - dv) as i64]),
                b.const_i64(&[-1]),
            );
            let fill = b.op("Slice", &[&k4, &start, &end, &axis], vec![]);
            v4 = b.op("Concat", &[&v4, &fill], vec![("axis", Attr::Int(-1))]);
        }
        if kv < spec.kv_heads {
            let copies = spec.kv_heads / kv;
            let double = |b: &mut GraphBuilder, x: &str| {
                let five = b.const_i64(&[0, 0, kv as i64, 1, d as i64]);
                let x = b.op("Reshape", &[x, &five], vec![]);
                let parts = vec![x.as_str(); copies];
                b.op("Concat", &parts, vec![("axis", Attr::Int(3))])
            };
            k4 = double(b, &k4);
            v4 = double(b, &v4);
        }
        let width = spec.kv_heads * d;
        [q, Self::flat(b, &k4, width), Self::flat(b, &v4, width)]
    }

    /// Sink attention in the sliding layers, plain attention in the full ones.
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
        match layer_of(attn).is_some_and(|i| self.slides(i)) {
            true => {
                let sinks = sink_logits(b, attn, spec.q_heads, dtype);
                sink_attention(b, io, qkv, &sinks, spec, (cfg.head_dim, dtype))
            }
            false => {
                let [q, k, v] = qkv;
                soft_capped_attention(b, q, k, v, spec, 0.0)
            }
        }
    }

    /// The first `v_head_dim` channels of each head of the attention result, then `o_proj`
    /// (no bias).
    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        let (heads, d, dv) = (cfg.num_attention_heads, cfg.head_dim, self.v_head_dim);
        let y = match dv < d {
            true => {
                let y4 = Self::heads(b, y, heads, d);
                let (start, end, axis) = (
                    b.const_i64(&[0]),
                    b.const_i64(&[dv as i64]),
                    b.const_i64(&[-1]),
                );
                let y4 = b.op("Slice", &[&y4, &start, &end, &axis], vec![]);
                Self::flat(b, &y4, heads * dv)
            }
            false => y.to_string(),
        };
        let o_proj = format!("{attn}.o_proj");
        linear(b, &y, &o_proj, heads * dv, cfg.hidden_size, false, dtype)
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
        let weights = ExpertWeights::PROJ;
        let spec = MoeSpec::new(cfg, self.expert_width, self.routing, router, weights);
        spec.build(b, x, &mlp, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::{layer_of, MimoV2Flash};
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "mimo_v2_flash", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 8, "num_hidden_layers": 7, "vocab_size": 300,
            "max_position_embeddings": 4096, "n_routed_experts": 8"#,
            extra,
        )
    }

    #[test]
    fn defaults_follow_transformers() {
        let c = parse("").unwrap();
        let k = c.knobs::<MimoV2Flash>().unwrap();
        assert_eq!(k.sliding, [false, true, true, true, true, false, true]);
        assert_eq!(c.layer_windows[1], Some(129));
        assert_eq!((c.num_key_value_heads, k.kv_heads), (8, 4));
        assert_eq!((c.head_dim, k.v_head_dim, k.v_scale), (192, 128, 0.707));
        assert_eq!((c.rope.rotary_dim, c.rope.theta), (64, 5e6));
        assert_eq!(k.sliding_rope.as_ref().map(|r| r.theta), Some(1e4));
        assert_eq!(k.moe_layers, [false, true, true, true, true, true, true]);
        assert_eq!((k.routing, k.expert_width), ((8, 8), 2048));
        assert_eq!(
            (k.router.groups, k.router.top_groups, k.router.scale),
            (1, 1, 1.0)
        );
        assert!(!c.o_bias);
        let c = parse(
            r#", "sliding_window_size": 127, "attention_value_scale": null,
            "routed_scaling_factor": null, "num_key_value_heads": 2"#,
        )
        .unwrap();
        let k = c.knobs::<MimoV2Flash>().unwrap();
        assert_eq!(c.layer_windows[1], Some(128));
        assert_eq!((k.v_scale, k.router.scale), (1.0, 1.0));
        assert_eq!(c.num_key_value_heads, 4);
        assert_eq!(layer_of("model.layers.12.self_attn"), Some(12));
        // 16 · 0.334 = 5 channels: 6 rotated, with the frequencies of a width of 5.
        let c = parse(r#", "head_dim": 16, "v_head_dim": 8"#).unwrap();
        assert_eq!(c.rope.rotary_dim, 6);
        let want = (5e6f64.powf(-2.0 / 5.0)) as f32;
        assert!((c.rope.inv_freq()[1] - want).abs() < 1e-6 * want);
    }

    #[test]
    fn refuses_what_it_cannot_build() {
        for (extra, field) in [
            (r#", "num_key_value_heads": 3"#, "num_key_value_heads"),
            (r#", "v_head_dim": 256"#, "v_head_dim"),
            (
                r#", "rope_parameters": {"rope_theta": 1e4}"#,
                "rope_parameters",
            ),
            (r#", "mlp_layer_types": ["dense"]"#, "mlp_layer_types"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }
}
