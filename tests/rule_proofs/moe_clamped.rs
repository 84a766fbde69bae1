//! Proof of the clamped-SwiGLU MoE fusion (`rewrites/fusion/moe_clamped.rules`): gpt-oss's
//! dense block exactly as the model builder writes it ([`clamped_moe`]: random batch,
//! sequence, width, expert width, number of experts, top-k, SwiGLU gain and clamp, f32 or
//! f16), its checkpoint weights and biases replaced by random values, is rewritten into
//! `com.microsoft::MoE` with the kernel's clamped SwiGLU and bias inputs and compared with the
//! dense block through the reference interpreter (whose MoE, biases, alpha, beta and limit
//! included, is cross-checked against onnxruntime's CPU kernel in tests/ort).
//!
//! And of its inverse (`rewrites/inline/moe_clamped.rules`): random MoE calls with biases and
//! random alpha, beta and limit over random weights, rewritten into the dense block for
//! onnx-standard.
//!
//! The kernel and TopK break ties of the k-th and (k+1)-th router logit differently (the
//! higher expert index, the lower), a difference the rule documents: cases near such a tie
//! are rejected.

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder, Initializer, TensorData, TensorSource};
use mobius::models::components::{clamped_moe, ClampedMoe};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::moe::{bytes, sizes, values, Sizes};
use super::{dims, prove_on};

/// The block of `sizes` with gain `alpha` and clamp `limit` in `dtype`, its weights random,
/// with an input x and the router's logits of x (f64, `[T, E]`).
fn block(
    (batch, seq, h, i, e, k): Sizes,
    (alpha, limit): (f32, f32),
    dtype: DType,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>, Vec<f64>) {
    let mut rng = Rng::new(seed);
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", dtype, dims(&[batch, seq, h]));
    b.output("y", dtype, dims(&[batch, seq, h]));
    let spec = ClampedMoe {
        hidden: h,
        intermediate: i,
        experts: e,
        top_k: k,
        alpha,
        limit,
    };
    let y = clamped_moe(&mut b, &x, "moe", &spec, dtype);
    b.op_into("Identity", &[&y], vec![], "y");
    let mut g = b.finish();
    let (mut router, mut router_bias) = (Vec::new(), Vec::new());
    for init in &mut g.initializers {
        if matches!(init.source, Some(TensorSource::Inline(_))) {
            continue;
        }
        let n = init.shape.iter().product();
        let scale = if init.name.starts_with("moe.router") {
            2.0
        } else {
            1.2
        };
        let v = values(n, scale, dtype, &mut rng);
        match init.name.as_str() {
            "moe.router.weight_t" => router = v.clone(),
            "moe.router.bias" => router_bias = v.clone(),
            _ => {}
        }
        init.source = Some(TensorSource::Inline(TensorData {
            dtype,
            shape: init.shape.clone(),
            bytes: bytes(&v, dtype),
        }));
    }
    let xs = values(batch * seq * h, 1.0, dtype, &mut rng);
    let logits = xs
        .chunks(h)
        .flat_map(|token| {
            (0..e)
                .map(|j| {
                    let dot: f64 = (0..h)
                        .map(|c| token[c] as f64 * router[c * e + j] as f64)
                        .sum();
                    dot + router_bias[j] as f64
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let input = Tensor::float(dtype, vec![batch, seq, h], xs);
    (g, HashMap::from([("x".to_string(), input)]), logits)
}

/// The block with its routing column's inner `[0, 0, E]` view folded into the outer
/// `[0, 0, E, 1]` one (what `reshape-of-reshape` leaves after the recognize stage): every
/// Reshape of a Reshape reads the inner one's input, the inner Reshapes dropped.
fn fold_reshape_of_reshape(g: &mut Graph) {
    let reshaped: HashMap<String, String> = g
        .nodes
        .iter()
        .filter(|n| n.op_type == "Reshape")
        .map(|n| (n.outputs[0].clone(), n.inputs[0].clone()))
        .collect();
    let mut folded = Vec::new();
    for n in g.nodes.iter_mut().filter(|n| n.op_type == "Reshape") {
        if let Some(x) = reshaped.get(&n.inputs[0]) {
            folded.push(std::mem::replace(&mut n.inputs[0], x.clone()));
        }
    }
    assert!(!folded.is_empty(), "the block has a Reshape of a Reshape");
    g.nodes
        .retain(|n| !(n.op_type == "Reshape" && folded.contains(&n.outputs[0])));
}

/// Whether some token's k-th and (k+1)-th router logits are equal, or so close that the
/// rounding of the products (in `dtype`) could make them so.
fn boundary_tie(logits: &[f64], e: usize, k: usize, dtype: DType) -> bool {
    k < e
        && logits.chunks(e).any(|row| {
            let mut row = row.to_vec();
            row.sort_by(|a, b| b.partial_cmp(a).unwrap());
            let scale = row[0].abs().max(row[e - 1].abs()).max(1e-3);
            let eps = match dtype {
                DType::F16 => 4.0 * 2f64.powi(-10),
                _ => 1e-5,
            };
            row[k - 1] - row[k] <= eps * scale
        })
}

/// One `com.microsoft::MoE` call with biases as gpt-oss's fusion writes it: x `[B, S, H]` and
/// router logits `[B·S, E]` inputs, random fc1 `[E, 2·I, H]`, fc1 bias `[E, 2·I]`, fc2
/// `[E, H, I]` and fc2 bias `[E, H]` initializers, α, β and the limit set, renormalised.
fn moe_call(
    (batch, seq, h, i, e, k): Sizes,
    (alpha, beta, limit): (f32, f32, f32),
    dtype: DType,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>, Vec<f64>) {
    let mut rng = Rng::new(seed);
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", dtype, dims(&[batch, seq, h]));
    let router = b.input("router", dtype, dims(&[batch * seq, e]));
    b.output("y", dtype, dims(&[batch, seq, h]));
    let mut weight = |b: &mut GraphBuilder, name: &str, shape: Vec<usize>, scale: f64| {
        let v = values(shape.iter().product(), scale, dtype, &mut rng);
        b.initializer(Initializer {
            name: name.into(),
            dtype,
            shape: shape.clone(),
            source: Some(TensorSource::Inline(TensorData {
                dtype,
                shape,
                bytes: bytes(&v, dtype),
            })),
        })
    };
    let fc1 = weight(&mut b, "fc1", vec![e, 2 * i, h], 1.2);
    let fc1_bias = weight(&mut b, "fc1_bias", vec![e, 2 * i], 0.5);
    let fc2 = weight(&mut b, "fc2", vec![e, h, i], 1.2);
    let fc2_bias = weight(&mut b, "fc2_bias", vec![e, h], 0.5);
    b.node(
        "com.microsoft",
        "MoE",
        &[&x, &router, &fc1, &fc1_bias, &fc2, &fc2_bias],
        vec![
            ("activation_alpha", Attr::Float(alpha)),
            ("activation_beta", Attr::Float(beta)),
            ("activation_type", Attr::String("swiglu".into())),
            ("k", Attr::Int(k as i64)),
            ("normalize_routing_weights", Attr::Int(1)),
            ("swiglu_fusion", Attr::Int(1)),
            ("swiglu_limit", Attr::Float(limit)),
        ],
        vec!["y".into()],
    );
    let g = b.finish();
    let xs = values(batch * seq * h, 1.0, dtype, &mut rng);
    let logits = values(batch * seq * e, 2.0, dtype, &mut rng);
    let inputs = HashMap::from([
        (
            "x".to_string(),
            Tensor::float(dtype, vec![batch, seq, h], xs),
        ),
        (
            "router".to_string(),
            Tensor::float(dtype, vec![batch * seq, e], logits.clone()),
        ),
    ]);
    (g, inputs, logits.iter().map(|&v| v as f64).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn dense_moe_clamped_fusion(
        sizes in sizes(),
        alpha in 0.5f32..2.5,
        limit in 0.3f32..2.0,
        half in any::<bool>(),
        folded in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dtype = if half { DType::F16 } else { DType::F32 };
        let (mut graph, inputs, logits) = block(sizes, (alpha, limit), dtype, seed);
        if folded {
            fold_reshape_of_reshape(&mut graph);
        }
        prop_assume!(!boundary_tie(&logits, sizes.4, sizes.5, dtype));
        let tol = if half { 2e-2 } else { 1e-5 };
        prove_on("dense-moe-clamped", "cpu", graph, inputs, tol)?;
    }

    #[test]
    fn moe_clamped_to_dense_inline(
        sizes in sizes(),
        alpha in 0.5f32..2.5,
        beta in -1.0f32..1.5,
        limit in 0.3f32..2.0,
        half in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dtype = if half { DType::F16 } else { DType::F32 };
        let (graph, inputs, logits) = moe_call(sizes, (alpha, beta, limit), dtype, seed);
        prop_assume!(!boundary_tie(&logits, sizes.4, sizes.5, dtype));
        let tol = if half { 2e-2 } else { 1e-5 };
        prove_on("moe-clamped-to-dense", "onnx-standard", graph, inputs, tol)?;
    }
}
