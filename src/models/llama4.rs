//! Llama 4's text decoder (`llama4_text`, transformers' Llama4ForCausalLM): pre-norm RMSNorm
//! layers whose attention rotates q and k with RoPE pairs interleaved, except in the NoPE
//! layers (`no_rope_layers` 0, by default every fourth); the RoPE layers normalise each head
//! of q and k without a weight (`use_qk_norm`) and attend in chunks of
//! `attention_chunk_size` tokens ([`Family::layer_chunk`], a query sees only the keys of its
//! own chunk); the NoPE layers attend to every key and, with `attn_temperature_tuning`, scale
//! q by `1 + attn_scale · ln(1 + ⌊(p + 1) / floor_scale⌋)` at position `p`. The feed-forward
//! block is a SwiGLU MLP of `intermediate_size_mlp` (`feed_forward.*_proj`) or, in the layers
//! `moe_layers` (else every `interleave_moe_layer_step`-th) names, a mixture of experts: the
//! router keeps the top-k logits, each picked expert takes the token scaled by the sigmoid of
//! its logit ([`MoeSpec::with_scaled_inputs`]), and a shared SwiGLU expert of
//! `intermediate_size` is added. The experts are stored `[in, out]`
//! (`feed_forward.experts.gate_up_proj` `[E, H, 2·I]`, `down_proj` `[E, I, H]`).
//!
//! Positions of the temperature tuning are `position_ids` (transformers counts cache slots:
//! the same under the decoder contract, and for a left-padded row its unpadded result).

use super::components::{
    gated_mlp, per_head_norm, rotary_embedding, scalar, soft_capped_attention, AttentionSpec,
    DecoderInputs, ExpertWeights, GateActivation, GroupScore, GroupedRouter, LayerPast, MoeSpec,
    Norm, NormKind, RopeTables, Router,
};
use super::decoder::Family;
use super::family::{without_windows, FamilySpec};
use super::smollm3::rope_layers;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig,
    Sign,
};
use crate::ir::{Attr, DType, GraphBuilder};
use crate::limits::config::{MAX_LAYERS, MAX_POSITIONS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "llama4",
    summary: "chunked local attention in the RoPE layers (pairs interleaved, weightless q/k \
              norm), full-attention NoPE layers with attention temperature tuning, dense and \
              MoE layers interleaved (top-k sigmoid router scaling each expert's input, shared \
              expert)",
    model_types: &[ModelType::generative("llama4_text", "decoder", read)],
};

/// transformers' Llama4TextConfig: `head_dim` 128, `attention_bias` on q/k/v/o, no MLP bias,
/// RoPE theta 5e5 with pairs interleaved, untied, `rms_norm_eps` 1e-5, no sliding window.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| {
        let mut rope = read_rope(raw, head_dim, 500_000.0, f)?;
        rope.interleaved = true;
        Ok(rope)
    },
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut plain = without_windows(raw);
    plain.intermediate_size = Some(raw.intermediate_size.unwrap_or(8192));
    if raw.no_rope_layers.as_ref().is_some_and(|l| l.is_empty()) {
        // transformers derives the list from the interval when it is empty.
        plain.no_rope_layers = None;
    }
    read_decoder(&plain, t, f, &FIELDS, |dims| {
        let layers = dims.num_hidden_layers;
        let rope_layers = rope_layers(&plain, layers, f)?;
        let chunk = match raw.attention_chunk_size {
            None => Some(8192),
            Some(None) => None,
            Some(some) => Some(f.positive("attention_chunk_size", some, MAX_POSITIONS)?),
        };
        let chunked = chunked_layers(raw, &rope_layers, chunk.is_some(), f)?;
        let temperature = match raw.attn_temperature_tuning.unwrap_or(true) {
            true => Some((
                f.number("floor_scale", raw.floor_scale, 8192.0, Sign::Positive)?,
                f.number("attn_scale", raw.attn_scale, 0.1, Sign::NonNegative)?,
            )),
            false => None,
        };
        let field = "intermediate_size_mlp";
        let dense_width = f.optional_count(field, raw.intermediate_size_mlp, 16384, MAX_WIDTH)?;
        Ok(Llama4 {
            rope_layers,
            chunk,
            chunked,
            qk_norm: raw.use_qk_norm.unwrap_or(true),
            temperature,
            moe_layers: moe_layers(raw, layers, f)?,
            routing: read_routing(raw, f, (16, 1))?,
            dense_width,
        })
    })
}

/// Per layer, whether it attends in chunks: `layer_types` (`chunked_attention` or
/// `full_attention`) where config.json has it, else the RoPE layers when a chunk is set.
fn chunked_layers(
    raw: &HfConfig,
    rope_layers: &[bool],
    has_chunk: bool,
    f: &Fields<'_>,
) -> Result<Vec<bool>> {
    let Some(types) = &raw.layer_types else {
        return Ok(rope_layers.iter().map(|&r| r && has_chunk).collect());
    };
    if types.len() != rope_layers.len() {
        return Err(f.err(
            "layer_types",
            &format!(
                "has {} entries, expected num_hidden_layers = {}",
                types.len(),
                rope_layers.len()
            ),
        ));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            "full_attention" => Ok(false),
            "chunked_attention" if has_chunk => Ok(true),
            "chunked_attention" => Err(f.err(
                "layer_types",
                "`chunked_attention` needs an attention_chunk_size (it is null)",
            )),
            other => Err(f.err(
                "layer_types",
                &format!("`{other}` (expected full_attention or chunked_attention)"),
            )),
        })
        .collect()
}

/// Per layer, whether it has experts: `moe_layers`, else every
/// `interleave_moe_layer_step`-th layer (default 1: all).
fn moe_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let Some(list) = &raw.moe_layers else {
        let field = "interleave_moe_layer_step";
        let step = f.optional_count(field, raw.interleave_moe_layer_step, 1, MAX_LAYERS)?;
        return Ok((0..layers).map(|i| (i + 1) % step == 0).collect());
    };
    let mut moe = vec![false; layers];
    for &i in list {
        let i = f.index("moe_layers", i, MAX_LAYERS)?;
        *moe.get_mut(i).ok_or_else(|| {
            f.err(
                "moe_layers",
                &format!("names layer {i}, but the model has {layers} layers"),
            )
        })? = true;
    }
    Ok(moe)
}

/// Llama 4's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Llama4 {
    /// Per layer, whether it applies RoPE (else NoPE).
    pub rope_layers: Vec<bool>,
    /// `attention_chunk_size` (`None`: null).
    pub chunk: Option<usize>,
    /// Per layer, whether it attends in chunks.
    pub chunked: Vec<bool>,
    /// `use_qk_norm`: the RoPE layers normalise each head of q and k (no weight).
    pub qk_norm: bool,
    /// `(floor_scale, attn_scale)` of the NoPE layers' temperature tuning, `None` without it.
    pub temperature: Option<(f32, f32)>,
    /// Per layer, whether its feed-forward block is a mixture of experts.
    pub moe_layers: Vec<bool>,
    /// `(num_local_experts, num_experts_per_tok)`.
    pub routing: (usize, usize),
    /// `intermediate_size_mlp`: the dense layers' MLP width.
    pub dense_width: usize,
}

impl Llama4 {
    fn uses_rope(&self, i: usize) -> bool {
        self.rope_layers.get(i).copied().unwrap_or(true)
    }

    /// `q` (`[B, S, Hq·D]`) times the temperature of each token's position (NoPE layers).
    fn tuned(
        &self,
        b: &mut GraphBuilder,
        io: &DecoderInputs,
        q: &str,
        (floor_scale, attn_scale): (f32, f32),
        dtype: DType,
    ) -> String {
        let f32_code = ("to", Attr::Int(DType::F32.onnx_code() as i64));
        let p = b.op("Cast", &[&io.position_ids], vec![f32_code]);
        let one = scalar(b, 1.0, DType::F32);
        let p = b.op("Add", &[&p, &one], vec![]);
        let steps = scalar(b, floor_scale, DType::F32);
        let p = b.op("Div", &[&p, &steps], vec![]);
        let p = b.op("Floor", &[&p], vec![]);
        let p = b.op("Add", &[&p, &one], vec![]);
        let log = b.op("Log", &[&p], vec![]);
        let strength = scalar(b, attn_scale, DType::F32);
        let t = b.op("Mul", &[&log, &strength], vec![]);
        let mut t = b.op("Add", &[&t, &one], vec![]);
        if dtype != DType::F32 {
            t = b.op(
                "Cast",
                &[&t],
                vec![("to", Attr::Int(dtype.onnx_code() as i64))],
            );
        }
        let last = b.const_i64(&[-1]);
        let t = b.op("Unsqueeze", &[&t, &last], vec![]);
        b.op("Mul", &[q, &t], vec![])
    }
}

impl Family for Llama4 {
    fn layer_chunk(&self, _cfg: &ArchConfig, i: usize) -> Option<usize> {
        self.chunk
            .filter(|_| self.chunked.get(i).copied().unwrap_or(false))
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
        let [mut q, mut k, v] = self.qkv(b, cfg, x, attn, dtype);
        if self.uses_rope(i) {
            // The weightless norm commutes with the rotation (which keeps each head's length):
            // normed first, the rotation feeds attention directly, as the fusions expect.
            if self.qk_norm {
                let norm = Norm {
                    kind: NormKind::PlainRms,
                    eps: cfg.rms_norm_eps,
                };
                let d = cfg.head_dim;
                q = per_head_norm(b, norm, &q, &format!("{attn}.qk_norm"), -1, d, dtype);
                k = per_head_norm(b, norm, &k, &format!("{attn}.qk_norm"), -1, d, dtype);
            }
            let d = cfg.head_dim;
            q = rotary_embedding(b, &q, &rotary[0], &cfg.rope, spec.q_heads, d);
            k = rotary_embedding(b, &k, &rotary[0], &cfg.rope, spec.kv_heads, d);
        }
        [q, k, v]
    }

    fn attention_core(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        io: &DecoderInputs,
        [q, k, v]: [&str; 3],
        spec: &AttentionSpec<'_>,
        _attn: &str,
        dtype: DType,
    ) -> String {
        // The layer whose cache this attention reads.
        let layer = io
            .past
            .iter()
            .position(|p| matches!(p, LayerPast::Kv { key, .. } if key == spec.past.0));
        let nope = layer.is_some_and(|i| !self.uses_rope(i));
        match self.temperature.filter(|_| nope) {
            Some(temperature) => {
                let q = self.tuned(b, io, q, temperature, dtype);
                soft_capped_attention(b, &q, k, v, spec, 0.0)
            }
            None => soft_capped_attention(b, q, k, v, spec, 0.0),
        }
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
        let ff = format!("{layer}.feed_forward");
        let h = cfg.hidden_size;
        if !self.moe_layers.get(i).copied().unwrap_or(false) {
            let sizes = (h, self.dense_width);
            let act = GateActivation::Silu;
            return gated_mlp(b, x, &ff, sizes, false, act, dtype);
        }
        let router = Router::Grouped(GroupedRouter {
            sigmoid: true,
            correction_bias: false,
            groups: 1,
            top_groups: 1,
            group_score: GroupScore::Max,
            normalize: false,
            scale: 1.0,
        });
        let weights = ExpertWeights::StackedInOut {
            router: "router",
            gate_up: "experts.gate_up_proj",
            down: "experts.down_proj",
        };
        let width = cfg.intermediate_size;
        let spec = MoeSpec::new(cfg, width, self.routing, router, weights).with_scaled_inputs();
        let routed = spec.build(b, x, &ff, dtype);
        let shared = format!("{ff}.shared_expert");
        let act = GateActivation::Silu;
        let shared = gated_mlp(b, x, &shared, (h, width), false, act, dtype);
        b.op("Add", &[&shared, &routed], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::Llama4;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 32,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
            "vocab_size": 300, "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn layers_follow_transformers_defaults_and_lists() {
        let c = parse("").unwrap();
        let k = c.knobs::<Llama4>().unwrap();
        assert_eq!(k.rope_layers, [true, true, true, false]);
        assert_eq!(k.chunked, [true, true, true, false]);
        assert_eq!(
            (k.chunk, k.routing, k.dense_width),
            (Some(8192), (16, 1), 16384)
        );
        assert_eq!(k.moe_layers, [true; 4]);
        assert_eq!(k.temperature, Some((8192.0, 0.1)));
        assert!(k.qk_norm && c.rope.interleaved && c.head_dim == 128);
        let c = parse(
            r#", "no_rope_layers": [1, 0, 1, 0], "attention_chunk_size": null,
            "interleave_moe_layer_step": 2, "attn_temperature_tuning": false"#,
        )
        .unwrap();
        let k = c.knobs::<Llama4>().unwrap();
        assert_eq!((k.chunked.as_slice(), k.chunk), (&[false; 4][..], None));
        assert_eq!(k.moe_layers, [false, true, false, true]);
        assert!(k.temperature.is_none());
        let c = parse(
            r#", "moe_layers": [0], "layer_types": ["full_attention",
            "chunked_attention", "full_attention", "full_attention"]"#,
        )
        .unwrap();
        let k = c.knobs::<Llama4>().unwrap();
        assert_eq!(k.moe_layers, [true, false, false, false]);
        assert_eq!(k.chunked, [false, true, false, false]);
        for (extra, want) in [
            (r#", "moe_layers": [4]"#, "moe_layers"),
            (
                r#", "attention_chunk_size": null, "layer_types": ["chunked_attention",
                "full_attention", "full_attention", "full_attention"]"#,
                "attention_chunk_size",
            ),
            (r#", "layer_types": ["sliding_attention"]"#, "layer_types"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
