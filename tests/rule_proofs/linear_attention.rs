//! Proof of the Gated DeltaNet fusion (`rewrites/fusion/linear_attention.rules`): the gated
//! delta rule's `Scan` exactly as the Gated DeltaNet layers write it
//! ([`delta_rule_scan`]: random batch, tokens, value heads, key and value widths, the batch and
//! token dims symbolic or fixed), over random states, log-decays (decay = `Exp(g)`), update
//! rates, queries, keys and values, is rewritten for the cpu EP into
//! `com.microsoft::LinearAttention` and compared with the Scan through the reference
//! interpreter (whose LinearAttention is cross-checked against onnxruntime 1.32's CPU kernel
//! in tests/ort, NaN and infinities included). Both outputs are compared: the per-token
//! outputs and the final state. The sums are the body's in another grouping (the kernel
//! accumulates each retrieval and output in one loop, the body's MatMuls likewise, but the
//! state update is one fused multiply-add per element there and two ops here), so the
//! comparison allows 1e-5 of these order-one values.
//!
//! And of its inverse (`rewrites/inline/linear_attention.rules`): random `LinearAttention`
//! calls of that kind (scale unset, 0 or random) rewritten for the default EP, which lacks the
//! kernel, into the Scan, each output by its rule (the Scan scales q before the recurrence, the
//! kernel its output after it: within 1e-5 too).

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Dim, GraphBuilder, Shape};
use mobius::models::components::gated_delta::delta_rule_scan;
use mobius::models::components::GatedDeltaMixer;
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::prove_on;

/// Batch, tokens, value heads, key width, value width, symbolic batch/token dims, seed.
type Case = (usize, usize, usize, usize, usize, bool, u64);

fn case() -> impl Strategy<Value = Case> {
    (
        1usize..3,
        1usize..5,
        1usize..4,
        1usize..6,
        1usize..6,
        any::<bool>(),
        any::<u64>(),
    )
}

/// Values uniform in `[lo, hi)`.
fn uniform(shape: &[usize], lo: f64, hi: f64, rng: &mut Rng) -> Tensor {
    let n = shape.iter().product();
    let values = (0..n)
        .map(|_| (lo + (hi - lo) * rng.unit()) as f32)
        .collect();
    Tensor::float(DType::F32, shape.to_vec(), values)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn gated_delta_scan_fusion((b, s, hv, dk, dv, symbolic, seed) in case()) {
        let dim = |d: usize, sym: &str| {
            if symbolic { Dim::Sym(sym.into()) } else { Dim::Fixed(d as i64) }
        };
        let shape = |rest: &[usize], tokens: bool| {
            let mut dims = vec![dim(b, "batch")];
            if tokens {
                dims.push(dim(s, "seq"));
            }
            dims.extend(rest.iter().map(|&d| Dim::Fixed(d as i64)));
            Shape(dims)
        };
        let mut gb = GraphBuilder::new("g");
        let past = gb.input("past", DType::F32, shape(&[hv, dk, dv], false));
        let g = gb.input("g", DType::F32, shape(&[hv], true));
        let beta = gb.input("beta", DType::F32, shape(&[hv], true));
        let q = gb.input("q", DType::F32, shape(&[hv, 1, dk], true));
        let k = gb.input("k", DType::F32, shape(&[hv, 1, dk], true));
        let v = gb.input("v", DType::F32, shape(&[hv, 1, dv], true));
        gb.output("state", DType::F32, shape(&[hv, dk, dv], false));
        gb.output("o", DType::F32, shape(&[hv, 1, dv], true));
        let decay = gb.op("Exp", &[&g], vec![]);
        let mixer = GatedDeltaMixer {
            hidden: 1,
            key_heads: hv,
            value_heads: hv,
            key_dim: dk,
            value_dim: dv,
            kernel: 2,
            eps: 1e-6,
            fused: false,
        };
        let (state, o) = delta_rule_scan(
            &mut gb,
            "layer",
            mixer,
            (&past, DType::F32),
            [&decay, &beta, &q, &k, &v],
        );
        gb.op_into("Identity", &[&state], vec![], "state");
        gb.op_into("Identity", &[&o], vec![], "o");
        let graph = gb.finish();
        let mut rng = Rng::new(seed);
        let inputs = HashMap::from([
            ("past".to_string(), uniform(&[b, hv, dk, dv], -1.0, 1.0, &mut rng)),
            ("g".to_string(), uniform(&[b, s, hv], -3.0, 0.0, &mut rng)),
            ("beta".to_string(), uniform(&[b, s, hv], 0.0, 1.0, &mut rng)),
            ("q".to_string(), uniform(&[b, s, hv, 1, dk], -1.0, 1.0, &mut rng)),
            ("k".to_string(), uniform(&[b, s, hv, 1, dk], -1.0, 1.0, &mut rng)),
            ("v".to_string(), uniform(&[b, s, hv, 1, dv], -1.0, 1.0, &mut rng)),
        ]);
        prove_on("gated-delta-scan-to-linear-attention", "cpu", graph, inputs, 1e-5)?;
    }
}

/// A `com.microsoft::LinearAttention` call of the kind the fusion makes (gated delta rule,
/// `heads` query and KV heads, per-head gates, a past state), its `scale` set or unset, with
/// random inputs; the graph's one output is the call's output `which` (0: output, 1: state).
fn linear_attention_call(
    (b, s, heads, dk, dv, symbolic, seed): Case,
    scale: Option<f32>,
    which: usize,
) -> (mobius::ir::Graph, HashMap<String, Tensor>) {
    let dim = |d: usize, sym: &str| {
        if symbolic {
            Dim::Sym(sym.into())
        } else {
            Dim::Fixed(d as i64)
        }
    };
    let shape = |last: &[usize], tokens: bool| {
        let mut dims = vec![dim(b, "batch")];
        if tokens {
            dims.push(dim(s, "seq"));
        }
        dims.extend(last.iter().map(|&d| Dim::Fixed(d as i64)));
        Shape(dims)
    };
    let mut gb = GraphBuilder::new("g");
    let q = gb.input("q", DType::F32, shape(&[heads * dk], true));
    let k = gb.input("k", DType::F32, shape(&[heads * dk], true));
    let v = gb.input("v", DType::F32, shape(&[heads * dv], true));
    let past = gb.input("past", DType::F32, shape(&[heads, dk, dv], false));
    let g = gb.input("g", DType::F32, shape(&[heads], true));
    let beta = gb.input("beta", DType::F32, shape(&[heads], true));
    let mut attrs = vec![
        ("kv_num_heads", Attr::Int(heads as i64)),
        ("q_num_heads", Attr::Int(heads as i64)),
        ("update_rule", Attr::String("gated_delta".into())),
    ];
    attrs.extend(scale.map(|f| ("scale", Attr::Float(f))));
    let outs = ["o".to_string(), "state".to_string()];
    gb.node(
        "com.microsoft",
        "LinearAttention",
        &[&q, &k, &v, &past, &g, &beta],
        attrs,
        outs.to_vec(),
    );
    let (name, out_shape) = match which {
        0 => ("y", shape(&[heads * dv], true)),
        _ => ("y", shape(&[heads, dk, dv], false)),
    };
    gb.output(name, DType::F32, out_shape);
    gb.op_into("Identity", &[&outs[which]], vec![], "y");
    let mut rng = Rng::new(seed);
    let inputs = HashMap::from([
        (
            "q".to_string(),
            uniform(&[b, s, heads * dk], -1.0, 1.0, &mut rng),
        ),
        (
            "k".to_string(),
            uniform(&[b, s, heads * dk], -1.0, 1.0, &mut rng),
        ),
        (
            "v".to_string(),
            uniform(&[b, s, heads * dv], -1.0, 1.0, &mut rng),
        ),
        (
            "past".to_string(),
            uniform(&[b, heads, dk, dv], -1.0, 1.0, &mut rng),
        ),
        (
            "g".to_string(),
            uniform(&[b, s, heads], -3.0, 0.0, &mut rng),
        ),
        (
            "beta".to_string(),
            uniform(&[b, s, heads], 0.0, 1.0, &mut rng),
        ),
    ]);
    (gb.finish(), inputs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// The inverse (`rewrites/inline/linear_attention.rules`): random calls rewritten for the
    /// default EP (no `supports_linear_attention`) into the Scan, each output by its own rule.
    #[test]
    fn linear_attention_as_scan(
        case in case(),
        scale in prop_oneof![Just(None), Just(Some(0.0f32)), (0.1f32..2.0).prop_map(Some)],
    ) {
        for (which, rule) in [(0, "linear-attention-output-as-scan"), (1, "linear-attention-state-as-scan")] {
            let (graph, inputs) = linear_attention_call(case, scale, which);
            prove_on(rule, "default", graph, inputs, 1e-5)?;
        }
    }
}
