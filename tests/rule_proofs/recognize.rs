//! Proofs of the recognition rules (`rewrites/recognize/`): each exported spelling of a norm
//! (built by `tests/common/norm_spellings.rs`) becomes the standard norm, on random shapes,
//! epsilons and values.

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder, TensorData};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::norm_spellings::{cast, layer_core, rms_core, scaled, Inverse, Spelling, Square};
use super::{dims, prove_on, prove_with, random_tensor, rule, rules_for};

/// `[batch, seq, hidden]`, epsilon, the square's spelling, the epsilon's operand order, seed.
type Case = (Vec<usize>, f32, Square, bool, u64);

fn case() -> impl Strategy<Value = Case> {
    (
        1usize..3,
        1usize..4,
        1usize..9,
        prop_oneof![Just(1e-5f32), Just(1e-6f32), Just(0.5f32)],
        prop_oneof![Just(Square::Pow), Just(Square::Mul)],
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(b, s, h, eps, sq, eps_first, seed)| (vec![b, s, h], eps, sq, eps_first, seed))
}

/// Random values for the graph inputs `x` (of `dtype`) and, when present, `w` and `bias`.
fn inputs(graph: &Graph, shape: &[usize], dtype: DType, seed: u64) -> HashMap<String, Tensor> {
    let mut rng = Rng::new(seed);
    let hidden = &shape[shape.len() - 1..];
    graph
        .inputs
        .iter()
        .map(|v| match v.name.as_str() {
            "x" => ("x".to_string(), random_tensor(dtype, shape, &mut rng)),
            other => (other.to_string(), random_tensor(dtype, hidden, &mut rng)),
        })
        .collect()
}

/// A graph with input `x` and output `y` of `shape`, `y` computed by `body` from `x`.
fn graph(
    shape: &[usize],
    dtype: DType,
    body: impl FnOnce(&mut GraphBuilder, &str) -> String,
) -> Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", dtype, dims(shape));
    b.output("y", dtype, dims(shape));
    let y = body(&mut b, &x);
    b.op_into("Identity", &[&y], vec![], "y");
    b.finish()
}

/// A `[hidden]` f32 constant of ones.
fn ones(b: &mut GraphBuilder, hidden: usize) -> String {
    b.constant(TensorData::from_f32(vec![hidden], &vec![1.0; hidden]))
}

fn norm_attrs(eps: f32) -> Vec<(&'static str, Attr)> {
    vec![
        ("axis", Attr::Int(-1)),
        ("epsilon", Attr::Float(eps)),
        ("stash_type", Attr::Int(1)),
    ]
}

/// The rule of each RMS normalization spelling (`x` first or second in the `Mul`).
const RMS_RULES: &[(&str, Inverse, bool)] = &[
    ("rms-norm-reciprocal", Inverse::Reciprocal, true),
    ("rms-norm-reciprocal-first", Inverse::Reciprocal, false),
    ("rms-norm-div-one", Inverse::DivOne, true),
    ("rms-norm-div-one-first", Inverse::DivOne, false),
    ("rms-norm-div", Inverse::Div, true),
];

/// The rule of each layer normalization spelling.
const LAYER_RULES: &[(&str, Inverse, bool)] = &[
    ("layer-norm-div", Inverse::Div, true),
    ("layer-norm-reciprocal", Inverse::Reciprocal, true),
    ("layer-norm-reciprocal-first", Inverse::Reciprocal, false),
    ("layer-norm-div-one", Inverse::DivOne, true),
    ("layer-norm-div-one-first", Inverse::DivOne, false),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn rms_norm_recognition((shape, eps, square, eps_first, seed) in case()) {
        for (rule, inverse, x_first) in RMS_RULES {
            let spelling = Spelling::new(square, *inverse, *x_first, eps_first);
            let g = graph(&shape, DType::F32, |b, x| rms_core(b, x, eps, &spelling));
            let values = inputs(&g, &shape, DType::F32, seed);
            prove_on(rule, "cpu", g, values, 1e-4)?;
        }
    }

    #[test]
    fn layer_norm_recognition((shape, eps, square, eps_first, seed) in case()) {
        for (rule, inverse, x_first) in LAYER_RULES {
            let spelling = Spelling::new(square, *inverse, *x_first, eps_first);
            let g = graph(&shape, DType::F32, |b, x| layer_core(b, x, eps, &spelling));
            let values = inputs(&g, &shape, DType::F32, seed);
            prove_on(rule, "cpu", g, values, 1e-4)?;
        }
    }

    #[test]
    fn rms_norm_f32_round_trip((shape, eps, _square, _eps_first, seed) in case(), bf16 in any::<bool>()) {
        let dtype = if bf16 { DType::BF16 } else { DType::F16 };
        let hidden = shape[2];
        let g = graph(&shape, dtype, |b, x| {
            let up = cast(b, x, DType::F32);
            let unit = ones(b, hidden);
            let normed = b.op("RMSNormalization", &[&up, &unit], norm_attrs(eps));
            cast(b, &normed, dtype)
        });
        let values = inputs(&g, &shape, dtype, seed);
        // One rounding to 16 bits either way; they may differ in the last bit (values ≤ √hidden).
        let tol = if bf16 { 3e-2 } else { 4e-3 };
        prove_on("rms-norm-f32-round-trip", "cpu", g, values, tol)?;
    }

    #[test]
    fn norm_scale_folding((shape, eps, _square, _eps_first, seed) in case()) {
        let hidden = shape[2];
        for (rule, op, first) in [
            ("rms-norm-weight", "RMSNormalization", true),
            ("rms-norm-weight-second", "RMSNormalization", false),
            ("layer-norm-weight", "LayerNormalization", true),
            ("layer-norm-weight-second", "LayerNormalization", false),
        ] {
            let mut b = GraphBuilder::new("g");
            let x = b.input("x", DType::F32, dims(&shape));
            let w = b.input("w", DType::F32, dims(&[hidden]));
            b.output("y", DType::F32, dims(&shape));
            let unit = ones(&mut b, hidden);
            let ins: &[&str] = match op {
                "LayerNormalization" => &[&x, &unit, ""],
                _ => &[&x, &unit],
            };
            let normed = b.op(op, ins, norm_attrs(eps));
            let y = scaled(&mut b, &normed, &w, first);
            b.op_into("Identity", &[&y], vec![], "y");
            let g = b.finish();
            let values = inputs(&g, &shape, DType::F32, seed);
            prove_on(rule, "cpu", g, values, 1e-4)?;
        }
        for (rule, first) in [("layer-norm-bias", false), ("layer-norm-bias-first", true)] {
            let mut b = GraphBuilder::new("g");
            let x = b.input("x", DType::F32, dims(&shape));
            let w = b.input("w", DType::F32, dims(&[hidden]));
            let bias = b.input("bias", DType::F32, dims(&[hidden]));
            b.output("y", DType::F32, dims(&shape));
            let normed = b.op("LayerNormalization", &[&x, &w, ""], norm_attrs(eps));
            let ins = if first { [&bias, &normed] } else { [&normed, &bias] };
            b.op_into("Add", &[ins[0], ins[1]], vec![], "y");
            let g = b.finish();
            let values = inputs(&g, &shape, DType::F32, seed);
            prove_on(rule, "cpu", g, values, 1e-4)?;
        }
    }

    /// `Add(bias, x)` → `Add(x, bias)` on its own changes no op, so it is proven through what
    /// it enables: BiasGelu fuses the bias-first Add only with it (and the mutation test runs
    /// BiasGelu alone, which must then leave the graph as it was).
    #[test]
    fn bias_second((shape, _eps, _square, _eps_first, seed) in case()) {
        let hidden = shape[2];
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, dims(&shape));
        b.output("y", DType::F32, dims(&shape));
        let values = random_tensor(DType::F32, &[hidden], &mut Rng::new(seed ^ 0xb1a5));
        let bias = b.constant(TensorData::from_f32(
            vec![hidden],
            &values.as_f64().iter().map(|&v| v as f32).collect::<Vec<_>>(),
        ));
        let sum = b.op("Add", &[&bias, &x], vec![]);
        b.op_into("Gelu", &[&sum], vec![], "y");
        let g = b.finish();
        let values = inputs(&g, &shape, DType::F32, seed);
        let mut rules = rules_for("bias-second");
        rules.push(rule("bias-gelu"));
        prove_with(&rule("bias-second"), rules, "cpu", g, values, 1e-5)?;
    }
}
