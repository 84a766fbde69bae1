//! The sparse mixture of experts of gpt-oss in standard ONNX: a router with a bias picks the
//! top-k experts by their logits, weighted by the softmax of the picked logits, and each
//! expert is a clamped SwiGLU with biases, `(clamp(up, ±limit) + 1) · g · σ(alpha · g)` with
//! `g = min(gate, limit)`.
//!
//! The checkpoint stores every expert of a layer in one tensor per projection, already
//! `[in, out]`: `experts.gate_up_proj` `[E, H, 2·I]` with the gate and up columns interleaved
//! (gate at even columns), `gate_up_proj_bias` `[E, 2·I]`, `down_proj` `[E, I, H]`,
//! `down_proj_bias` `[E, H]`; router `router.weight` `[E, H]` and `router.bias`.
//!
//! The block takes the dense form of [`super::sparse_moe`] (every expert on every token
//! through stacked `[H, E·I]` gate and up weights, de-interleaved at save time, the unpicked
//! experts weighted by exactly 0; its docs state the trade-off), and the down biases enter as
//! the routing weights times the stacked biases, `Σₑ rₑ·bₑ` (a Mul and a ReduceSum, so that no
//! weight quantization takes the biases for a weight). Where the EP has `com.microsoft::MoE`,
//! `rewrites/fusion/moe_clamped.rules` fuses it.

use super::{linear, scalar};
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};

/// The shape and activation of a clamped-SwiGLU MoE block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClampedMoe {
    /// Width of the residual stream (H).
    pub hidden: usize,
    /// Width of each expert's MLP (I).
    pub intermediate: usize,
    /// Number of experts (E).
    pub experts: usize,
    /// Experts picked per token (k).
    pub top_k: usize,
    /// The gain inside the sigmoid (`swiglu_alpha`).
    pub alpha: f32,
    /// The clamp: the gate above, the up projection on both sides (`swiglu_limit`).
    pub limit: f32,
}

/// The MoE block of checkpoint module `p` (`….layers.{i}.mlp`) on `x` `[B, S, H]`.
pub fn clamped_moe(
    b: &mut GraphBuilder,
    x: &str,
    p: &str,
    spec: &ClampedMoe,
    dtype: DType,
) -> String {
    let (h, i, e) = (spec.hidden, spec.intermediate, spec.experts);
    let routing = routing(b, x, p, spec, dtype);
    let experts = format!("{p}.experts");
    let checkpoint = |name: &str| Box::new(TensorSource::Checkpoint(format!("{experts}.{name}")));
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
    let (lo, hi) = (scalar(b, -spec.limit, dtype), scalar(b, spec.limit, dtype));
    let gate = b.op("Min", &[&gate, &hi], vec![]);
    let up = b.op("Max", &[&up, &lo], vec![]);
    let up = b.op("Min", &[&up, &hi], vec![]);
    let alpha = scalar(b, spec.alpha, dtype);
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
fn routing(b: &mut GraphBuilder, x: &str, p: &str, spec: &ClampedMoe, dtype: DType) -> String {
    let e = spec.experts;
    let logits = linear(b, x, &format!("{p}.router"), spec.hidden, e, true, dtype);
    let k = b.const_i64(&[spec.top_k as i64]);
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
