//! gpt-oss (OpenAI): the pre-norm RMSNorm decoder with biases on q, k, v and o, attention
//! sinks (a learned logit per head that joins each query's softmax and takes its share of
//! the weight without contributing a value), sliding-window and full-attention layers in
//! turn (`layer_types`), YaRN RoPE, and in every layer a sparse mixture of experts: a router
//! with a bias picks `num_experts_per_tok` of `num_local_experts` by top-k of its logits,
//! weighted by the softmax of the picked logits, and each expert is a clamped SwiGLU with
//! biases, `(clamp(up, ±limit) + 1) · g · σ(alpha · g)` with `g = min(gate, limit)`.
//!
//! The checkpoint stores every expert of a layer in one tensor per projection, already
//! `[in, out]`: `mlp.experts.gate_up_proj` `[E, H, 2·I]` with the gate and up columns
//! interleaved (gate at even columns), `gate_up_proj_bias` `[E, 2·I]`, `down_proj`
//! `[E, I, H]`, `down_proj_bias` `[E, H]`. MXFP4-quantized checkpoints (the hub's
//! `openai/gpt-oss-*`) are refused by the `quantization_config` check; their dequantized
//! (bf16) copies build.
//!
//! # Form
//!
//! Attention is [`sink_attention`] (standard ops; opset-24 `Attention` has no sink input),
//! which the EPs with GroupQueryAttention and fused rotary run as GroupQueryAttention with
//! `head_sink` (`sink-attention-to-gqa` in `rewrites/fusion/gqa.rules`); the MoE block
//! [`clamped_moe`].

use super::components::{
    clamped_moe, sink_attention, sink_logits, AttentionSpec, ClampedMoe, DecoderInputs,
};
use super::decoder::Family;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig, Sign,
    SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry (onnxruntime-genai's `gptoss` type).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gpt_oss",
    summary: "attention sinks, sliding/full layers in turn, YaRN, biases on q/k/v/o, sparse \
              experts with a biased router (top-k → softmax) and a clamped SwiGLU with biases",
    model_types: &[ModelType::generative("gpt_oss", "gptoss", read)],
};

/// transformers' GptOssConfig: `head_dim` 64, `attention_bias` (default true) on q, k, v and
/// o, window 128 on the even layers when there are no `layer_types`, `rms_norm_eps` 1e-5,
/// untied; `hidden_act` is not read by the model.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(64),
    biases: Biases::Configured { mlp_bias: false },
    silu_mlp: false,
    rope: |raw, head_dim, f| crate::config::read_rope(raw, head_dim, 150_000.0, f),
    sliding_window: Some(128),
    sliding_layers: SlidingLayers::Pattern(|_, layers, _| {
        Ok((0..layers).map(|i| i % 2 == 0).collect())
    }),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut raw = raw.clone();
    raw.attention_bias = Some(raw.attention_bias.unwrap_or(true));
    if raw.rope_parameters.is_none() && raw.rope_scaling.is_none() {
        // GptOssConfig's default RoPE (theta from `rope_theta`, else 150000).
        raw.rope_scaling = Some(serde_json::json!({
            "rope_type": "yarn",
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": false,
            "original_max_position_embeddings": 4096,
        }));
    }
    let alpha = f.number("swiglu_alpha", raw.swiglu_alpha, 1.702, Sign::Positive)?;
    let limit = f.number("swiglu_limit", raw.swiglu_limit, 7.0, Sign::Positive)?;
    read_decoder(&raw, t, f, &FIELDS, |_| {
        let (experts, top_k) = read_routing(&raw, f, (128, 4))?;
        Ok(GptOss {
            experts,
            top_k,
            alpha,
            limit,
        })
    })
}

/// gpt-oss's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GptOss {
    /// `num_local_experts`.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub top_k: usize,
    /// `swiglu_alpha`: the gain inside the experts' sigmoid.
    pub alpha: f32,
    /// `swiglu_limit`: the gate is clamped above, the up projection on both sides.
    pub limit: f32,
}

impl Family for GptOss {
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
        _i: usize,
        dtype: DType,
    ) -> String {
        let spec = ClampedMoe {
            hidden: cfg.hidden_size,
            intermediate: cfg.intermediate_size,
            experts: self.experts,
            top_k: self.top_k,
            alpha: self.alpha,
            limit: self.limit,
        };
        clamped_moe(b, x, &format!("{layer}.mlp"), &spec, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::GptOss;
    use crate::config::RopeScaling;

    fn parse(extra: &str) -> crate::Result<crate::config::ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 32,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
            "vocab_size": 300, "max_position_embeddings": 8192"#,
            extra,
        )
    }

    #[test]
    fn defaults_are_transformers() {
        let c = parse("").unwrap();
        let k = *c.knobs::<GptOss>().unwrap();
        assert_eq!(
            k,
            GptOss {
                experts: 128,
                top_k: 4,
                alpha: 1.702,
                limit: 7.0
            }
        );
        assert_eq!(c.head_dim, 64);
        assert!(c.qkv_bias && c.o_bias && !c.mlp_bias);
        assert_eq!(c.layer_windows, vec![Some(128), None, Some(128), None]);
        assert!(
            matches!(c.rope.scaling, RopeScaling::Yarn(_)),
            "{:?}",
            c.rope
        );
        assert_eq!(c.rope.theta, 150_000.0);
    }

    #[test]
    fn bad_fields_are_named() {
        for (bad, field) in [
            (r#", "swiglu_limit": -1"#, "swiglu_limit"),
            (r#", "swiglu_alpha": 0"#, "swiglu_alpha"),
            (r#", "num_experts_per_tok": 200"#, "num_experts_per_tok"),
            (r#", "layer_types": ["full_attention"]"#, "layer_types"),
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains(field), "{bad}: {err}");
        }
    }
}
