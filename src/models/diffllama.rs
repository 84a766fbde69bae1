//! DiffLlama (transformers' DiffLlamaForCausalLM, the Differential Transformer on Llama): the
//! Llama decoder whose attention subtracts two softmax maps. Each query head `h` attends over
//! the keys once, with probabilities `P_h`; its output is
//! `(1 − λ_init) · RMSNorm(P_h·V¹ − λ · P_{h+H/2}·V²)` over `2·head_dim` channels for the first
//! `H/2` heads (no weight), where `V¹`/`V²` are the values of the first/second half of the kv
//! heads repeated to all of them, `λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init` from the
//! layer's learned vectors and `λ_init = 0.8 − 0.6·exp(−0.3·layer)`.
//!
//! Opset-24 `Attention` takes one value tensor per call, so the attention is spelled out in
//! standard ops (as sink attention is): the cache holds the plain keys and values, the
//! probabilities multiply both value halves at once (`[V¹ | V²]`, `2·head_dim` per kv head).

use super::components::{causal_mask, scalar, AttentionSpec, DecoderInputs, Norm, NormKind};
use super::decoder::Family;
use super::family::{without_windows, FamilySpec};
use crate::config::{read_decoder, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType};
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `diffllama` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "diffllama",
    summary: "Llama with differential attention (two softmax maps subtracted with a learned λ, \
              then a weightless RMSNorm per head pair)",
    model_types: &[ModelType::generative("diffllama", "decoder", read)],
};

/// transformers' DiffLlamaConfig: `attention_bias` on q, k, v and o, no MLP bias, RoPE theta
/// 1e4, `rms_norm_eps` 1e-5, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // DiffLlamaConfig has no sliding window or layer types.
    let cfg = read_decoder(&without_windows(raw), t, f, &FIELDS, |_| Ok(DiffLlama))?;
    if cfg.num_key_value_heads % 2 != 0 || cfg.num_attention_heads % 2 != 0 {
        return Err(f.err(
            "num_key_value_heads",
            &format!(
                "{} kv heads of {} query heads (differential attention splits both in halves: \
                 expected even counts)",
                cfg.num_key_value_heads, cfg.num_attention_heads
            ),
        ));
    }
    Ok(cfg)
}

/// DiffLlama's hooks: differential attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiffLlama;

/// The layer index of attention module `attn` (`{root}.{layers}.{i}.{attn}`).
fn layer_index(attn: &str) -> usize {
    attn.rsplit('.')
        .nth(1)
        .and_then(|i| i.parse().ok())
        .unwrap_or(0)
}

impl DiffLlama {
    /// `λ = exp(Σ λ_q1·λ_k1) − exp(Σ λ_q2·λ_k2) + λ_init` (`[1]`, sums and exponentials in f32,
    /// as transformers computes them).
    fn lambda(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        attn: &str,
        init: f32,
        dtype: DType,
    ) -> String {
        let term = |b: &mut GraphBuilder, j: usize| {
            let [q, k] = ["q", "k"].map(|which| {
                let name = format!("{attn}.lambda_{which}{j}");
                b.initializer(Initializer {
                    name: name.clone(),
                    dtype,
                    shape: vec![cfg.head_dim],
                    source: Some(TensorSource::Checkpoint(name)),
                })
            });
            let prod = b.op("Mul", &[&q, &k], vec![]);
            let to_f32 = vec![("to", Attr::Int(DType::F32.onnx_code() as i64))];
            let prod = b.op("Cast", &[&prod], to_f32);
            let axes = b.const_i64(&[0]);
            let sum = b.op(
                "ReduceSum",
                &[&prod, &axes],
                vec![("keepdims", Attr::Int(1))],
            );
            let e = b.op("Exp", &[&sum], vec![]);
            let to = vec![("to", Attr::Int(dtype.onnx_code() as i64))];
            b.op("Cast", &[&e], to)
        };
        let (l1, l2) = (term(b, 1), term(b, 2));
        let diff = b.op("Sub", &[&l1, &l2], vec![]);
        let init = scalar(b, init, dtype);
        b.op("Add", &[&diff, &init], vec![])
    }
}

impl Family for DiffLlama {
    fn attention_core(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        [q, k, v]: [&str; 3],
        spec: &AttentionSpec<'_>,
        attn: &str,
        dtype: DType,
    ) -> String {
        let (hq, hkv, d) = (
            spec.q_heads as i64,
            spec.kv_heads as i64,
            cfg.head_dim as i64,
        );
        let heads_first = |b: &mut GraphBuilder, x: &str, heads: i64| {
            let split = b.const_i64(&[0, 0, heads, d]);
            let x = b.op("Reshape", &[x, &split], vec![]);
            let perm = vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))];
            b.op("Transpose", &[&x], perm)
        };
        let (q, k, v) = (
            heads_first(b, q, hq),
            heads_first(b, k, hkv),
            heads_first(b, v, hkv),
        );
        let on_seq = vec![("axis", Attr::Int(2))];
        b.op_into("Concat", &[spec.past.0, &k], on_seq.clone(), spec.present.0);
        b.op_into("Concat", &[spec.past.1, &v], on_seq, spec.present.1);

        // Scores of the query heads of one kv head side by side: [B, Hkv, g·S, T] → [B, Hq, S, T].
        let grouped = b.const_i64(&[0, hkv, -1, d]);
        let q = b.op("Reshape", &[&q, &grouped], vec![]);
        let perm = vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))];
        let kt = b.op("Transpose", &[spec.present.0], perm);
        let scores = b.op("MatMul", &[&q, &kt], vec![]);
        let per_head = b.const_i64(&[0, hq, -1, 0]);
        let scores = b.op("Reshape", &[&scores, &per_head], vec![]);
        let scale = scalar(b, spec.scale, dtype);
        let scores = b.op("Mul", &[&scores, &scale], vec![]);
        let mask = causal_mask(b, spec.mask, io);
        let neg_inf = scalar(b, f32::NEG_INFINITY, dtype);
        let scores = b.op("Where", &[&mask, &scores, &neg_inf], vec![]);
        let probs = b.op("Softmax", &[&scores], vec![("axis", Attr::Int(-1))]);
        // A query whose keys are all masked (left padding) gets no weight, not NaN: its output is
        // 0, as opset-24 `Attention` gives.
        let zero = scalar(b, 0.0, dtype);
        let probs = b.op("Where", &[&mask, &probs, &zero], vec![]);

        // [V¹ | V²]: each half of the kv heads repeated to all of them, side by side.
        let halves = [b.fresh_name("Split"), b.fresh_name("Split")];
        let split = vec![("axis", Attr::Int(1)), ("num_outputs", Attr::Int(2))];
        b.node("", "Split", &[spec.present.1], split, halves.to_vec());
        let on_heads = vec![("axis", Attr::Int(1))];
        let [v1, v2] = halves.map(|h| b.op("Concat", &[&h, &h], on_heads.clone()));
        let both = b.op("Concat", &[&v1, &v2], vec![("axis", Attr::Int(-1))]);

        let grouped = b.const_i64(&[0, hkv, -1, 0]);
        let probs = b.op("Reshape", &[&probs, &grouped], vec![]);
        let y = b.op("MatMul", &[&probs, &both], vec![]);
        let heads = b.const_i64(&[0, hq, -1, 2 * d]);
        let y = b.op("Reshape", &[&y, &heads], vec![]);
        let perm = vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))];
        let y = b.op("Transpose", &[&y], perm);

        // First half of the heads minus λ times the second half, then the head-pair norm.
        let parts = [b.fresh_name("Split"), b.fresh_name("Split")];
        let split = vec![("axis", Attr::Int(2)), ("num_outputs", Attr::Int(2))];
        b.node("", "Split", &[&y], split, parts.to_vec());
        let init = 0.8 - 0.6 * (-0.3 * layer_index(attn) as f64).exp();
        let lambda = self.lambda(b, cfg, attn, init as f32, dtype);
        let weighted = b.op("Mul", &[&parts[1], &lambda], vec![]);
        let diff = b.op("Sub", &[&parts[0], &weighted], vec![]);
        let norm = Norm {
            kind: NormKind::PlainRms,
            eps: cfg.rms_norm_eps,
        };
        let normed = norm.apply(
            b,
            &diff,
            &format!("{attn}.groupnorm"),
            2 * cfg.head_dim,
            dtype,
        );
        let keep = scalar(b, (1.0 - init) as f32, dtype);
        let y = b.op("Mul", &[&normed, &keep], vec![]);
        let merged = b.const_i64(&[0, 0, hq * d]);
        b.op("Reshape", &[&y, &merged], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_transformers_defaults_and_needs_even_heads() {
        let cfg = crate::models::tiny_config("diffllama", r#", "mlp_bias": true"#).unwrap();
        assert_eq!(cfg.rms_norm_eps, 1e-5);
        assert!(!cfg.mlp_bias && !cfg.qkv_bias && !cfg.tie_word_embeddings);
        let err = crate::models::tiny_config("diffllama", r#", "num_key_value_heads": 1"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("num_key_value_heads"), "{err}");
        assert_eq!(layer_index("model.layers.12.self_attn"), 12);
    }
}
