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
//! Attention is [`sink_attention`] (standard ops; opset-24 `Attention` has no sink input).
//! The MoE block takes the dense form of [`crate::models::components::sparse_moe`] (every
//! expert on every token, the unpicked ones weighted by exactly 0; its docs state the
//! trade-off), with the clamped SwiGLU and the biases: the down bias enters as the routing
//! weights times the stacked biases, `Σₑ rₑ·bₑ` (a Mul and a ReduceSum, so that no weight
//! quantization takes the biases for a weight).

use super::components::{linear, scalar, sink_attention, AttentionSpec, DecoderInputs};
use super::decoder::{self, Family};
use super::registry::{FamilySpec, ModelType};
use crate::config::{
    read_decoder, read_routing, ArchConfig, Biases, DecoderFields, FamilyKnobs, Fields, HfConfig,
    Sign, SlidingLayers,
};
use crate::ir::{Attr, DType, Graph, GraphBuilder, Initializer, TensorSource};
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
        let sinks = b.initializer(Initializer {
            name: format!("{attn}.sinks"),
            dtype,
            shape: vec![1, cfg.num_attention_heads, 1, 1],
            source: Some(TensorSource::Reshape {
                source: Box::new(TensorSource::Checkpoint(format!("{attn}.sinks"))),
                shape: vec![1, cfg.num_attention_heads, 1, 1],
            }),
        });
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
        self.moe(b, cfg, x, &format!("{layer}.mlp"), dtype)
    }
}

impl GptOss {
    /// The MoE block of module `p` (`….layers.{i}.mlp`) on `x` `[B, S, H]`.
    fn moe(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        p: &str,
        dtype: DType,
    ) -> String {
        let (h, i, e) = (cfg.hidden_size, cfg.intermediate_size, self.experts);
        let routing = self.routing(b, x, p, h, dtype);
        let experts = format!("{p}.experts");
        let checkpoint =
            |name: &str| Box::new(TensorSource::Checkpoint(format!("{experts}.{name}")));
        // Column `half` (0 gate, 1 up) of every interleaved pair of a `[rows, 2·cols]` source.
        let deinterleave = |source: Box<TensorSource>, rows: usize, cols: usize, half: usize| {
            let pairs = TensorSource::Reshape {
                source,
                shape: vec![rows * cols, 2],
            };
            let picked = TensorSource::Slice {
                source: Box::new(pairs),
                axis: 1,
                start: half,
                len: 1,
                total: 2,
            };
            TensorSource::Reshape {
                source: Box::new(picked),
                shape: vec![rows, cols],
            }
        };
        // `[H, E·I]`: expert j's gate (or up) columns at j·I.
        let stacked = |b: &mut GraphBuilder, half: usize| {
            let parts = (0..e)
                .map(|j| {
                    let one = TensorSource::Slice {
                        source: checkpoint("gate_up_proj"),
                        axis: 0,
                        start: j,
                        len: 1,
                        total: e,
                    };
                    deinterleave(Box::new(one), h, i, half)
                })
                .collect();
            b.initializer(Initializer {
                name: format!("{experts}.{}_proj.weight", ["gate", "up"][half]),
                dtype,
                shape: vec![h, e * i],
                source: Some(TensorSource::Concat { parts, axis: 1 }),
            })
        };
        let bias = |b: &mut GraphBuilder, half: usize| {
            let source = deinterleave(checkpoint("gate_up_proj_bias"), e, i, half);
            b.initializer(Initializer {
                name: format!("{experts}.{}_proj.bias", ["gate", "up"][half]),
                dtype,
                shape: vec![e * i],
                source: Some(TensorSource::Reshape {
                    source: Box::new(source),
                    shape: vec![e * i],
                }),
            })
        };
        let (gate_w, up_w) = (stacked(b, 0), stacked(b, 1));
        let (gate_b, up_b) = (bias(b, 0), bias(b, 1));
        let down_w = b.initializer(Initializer {
            name: format!("{experts}.down_proj.weight"),
            dtype,
            shape: vec![e * i, h],
            source: Some(TensorSource::Reshape {
                source: checkpoint("down_proj"),
                shape: vec![e * i, h],
            }),
        });
        let down_b = b.initializer(Initializer {
            name: format!("{experts}.down_proj_bias"),
            dtype,
            shape: vec![e, h],
            source: Some(TensorSource::Checkpoint(format!(
                "{experts}.down_proj_bias"
            ))),
        });

        let gate = b.op("MatMul", &[x, &gate_w], vec![]);
        let gate = b.op("Add", &[&gate, &gate_b], vec![]);
        let up = b.op("MatMul", &[x, &up_w], vec![]);
        let up = b.op("Add", &[&up, &up_b], vec![]);
        let (lo, hi) = (scalar(b, -self.limit, dtype), scalar(b, self.limit, dtype));
        let gate = b.op("Min", &[&gate, &hi], vec![]);
        let up = b.op("Max", &[&up, &lo], vec![]);
        let up = b.op("Min", &[&up, &hi], vec![]);
        let alpha = scalar(b, self.alpha, dtype);
        let scaled = b.op("Mul", &[&gate, &alpha], vec![]);
        let sig = b.op("Sigmoid", &[&scaled], vec![]);
        let glu = b.op("Mul", &[&gate, &sig], vec![]);
        let one = scalar(b, 1.0, dtype);
        let up = b.op("Add", &[&up, &one], vec![]);
        let act = b.op("Mul", &[&up, &glu], vec![]);
        let per_expert = b.const_i64(&[0, 0, e as i64, i as i64]);
        let act = b.op("Reshape", &[&act, &per_expert], vec![]);
        let column = b.const_i64(&[0, 0, e as i64, 1]);
        let routing_col = b.op("Reshape", &[&routing, &column], vec![]);
        let weighted = b.op("Mul", &[&act, &routing_col], vec![]);
        let merged = b.const_i64(&[0, 0, (e * i) as i64]);
        let weighted = b.op("Reshape", &[&weighted, &merged], vec![]);
        let y = b.op("MatMul", &[&weighted, &down_w], vec![]);
        // Σₑ rₑ·bₑ as a weighted sum, not a MatMul: the biases are no weight to quantize.
        let biases = b.op("Mul", &[&routing_col, &down_b], vec![]);
        let over_e = b.const_i64(&[2]);
        let biases = b.op(
            "ReduceSum",
            &[&biases, &over_e],
            vec![("keepdims", Attr::Int(0))],
        );
        b.op("Add", &[&y, &biases], vec![])
    }

    /// The routing weights `[B, S, E]` in `dtype`, as transformers computes them: router
    /// logits (with bias), TopK, Softmax of the picked logits, each weight at its expert's
    /// column and 0 elsewhere.
    fn routing(&self, b: &mut GraphBuilder, x: &str, p: &str, h: usize, dtype: DType) -> String {
        let e = self.experts;
        let logits = linear(b, x, &format!("{p}.router"), h, e, true, dtype);
        let k = b.const_i64(&[self.top_k as i64]);
        let (values, picked) = (b.fresh_name("TopK"), b.fresh_name("TopK"));
        b.node(
            "",
            "TopK",
            &[&logits, &k],
            vec![("axis", Attr::Int(-1))],
            vec![values.clone(), picked.clone()],
        );
        let weights = b.op("Softmax", &[&values], vec![("axis", Attr::Int(-1))]);
        // [B, S, k, 1] == [E] → one-hot rows [B, S, k, E], weighted and summed over k.
        let last = b.const_i64(&[-1]);
        let picked = b.op("Unsqueeze", &[&picked, &last], vec![]);
        let ids: Vec<i64> = (0..e as i64).collect();
        let ids = b.const_i64(&ids);
        let one_hot = b.op("Equal", &[&picked, &ids], vec![]);
        let one_hot = b.op(
            "Cast",
            &[&one_hot],
            vec![("to", Attr::Int(dtype.onnx_code() as i64))],
        );
        let weights = b.op("Unsqueeze", &[&weights, &last], vec![]);
        let spread = b.op("Mul", &[&one_hot, &weights], vec![]);
        let over_k = b.const_i64(&[-2]);
        let routing = b.op("ReduceSum", &[&spread, &over_k], vec![]);
        // ReduceSum keeps the reduced axis: [B, S, 1, E] → [B, S, E].
        let rows = b.const_i64(&[0, 0, e as i64]);
        b.op("Reshape", &[&routing, &rows], vec![])
    }
}

impl FamilyKnobs for GptOss {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        decoder::build(cfg, dtype, self)
    }
}

#[cfg(test)]
mod tests {
    use super::GptOss;
    use crate::config::RopeScaling;
    use std::path::Path;

    fn parse(extra: &str) -> crate::Result<crate::config::ArchConfig> {
        let json = format!(
            r#"{{"model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 32,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
            "vocab_size": 300, "max_position_embeddings": 8192 {extra}}}"#
        );
        crate::models::parse_config(json.as_bytes(), Path::new("config.json"))
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
