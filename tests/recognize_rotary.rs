//! The rotary recognition on hand-made graphs: every spelling of rotate-half RoPE becomes one
//! `RotaryEmbedding` on cpu (over the half-width caches `Cos(f)`, `Sin(f)`), a partial
//! rotation one `RotaryEmbedding` with `rotary_embedding_dim`; near misses stay as they are;
//! an EP without `RotaryEmbedding` keeps the exported form. Values are compared through the
//! interpreter (onnxruntime runs the same graphs in tests/ort/test_recognize_rotary.py).

mod common;
use common::compare::{assert_tensors_close, atol};
use std::collections::{BTreeMap, HashMap};

use mobius::ep::get_ep;
use mobius::interp::run_graph;
use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Dim, Graph, GraphBuilder, Model, Node, Shape};
use mobius::opt::{Limits, OptimizeOptions, Role};
use mobius::rulebook::optimize;
use mobius::weights::eval::Evaluator;

#[path = "common/rope_spellings.rs"]
mod rope_spellings;

use mobius::ops::Tensor;
use rope_spellings::{partial_rope, rope, Fault, Rope, Table};

/// `[B, H, S, D]` of the test inputs.
const X: [usize; 4] = [2, 3, 4, 8];

fn optimized(graph: &Graph, ep: &str) -> Model {
    let model = Model {
        graph: graph.clone(),
        opsets: BTreeMap::from([(String::new(), 18)]),
        ir_version: 10,
        producer_name: "test".into(),
        producer_version: "0".into(),
    };
    let opts = OptimizeOptions {
        dtype: DType::F32,
        role: Role::Decoder,
        limits: Limits::default(),
        fingerprint_leaves: None,
        accuracy_level: None,
        kv_cache: mobius::opt::KvCache::AsIs,
        trace: false,
    };
    optimize(&model, &get_ep(ep).unwrap(), &opts).unwrap().0
}

fn dims(shape: &[usize]) -> Shape {
    Shape::new(shape.iter().map(|&d| d as i64))
}

/// Inputs `x` `X`, angle tensors `f`, `g` `[fb, S, w]` (and `h` for a second table), output
/// `y` of `X` computed by `body(x, [f, g, h])`.
fn graph(
    fb: usize,
    w: usize,
    body: impl FnOnce(&mut GraphBuilder, &str, [&str; 3]) -> String,
) -> Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(&X));
    let angles = dims(&[fb, X[2], w]);
    let f = b.input("f", DType::F32, angles.clone());
    let g = b.input("g", DType::F32, angles.clone());
    let h = b.input("h", DType::F32, angles);
    b.output("y", DType::F32, dims(&X));
    let y = body(&mut b, &x, [&f, &g, &h]);
    b.op_into("Identity", &[&y], vec![], "y");
    b.finish()
}

/// Random values for every graph input of `graph`.
fn values(graph: &Graph) -> HashMap<String, Tensor> {
    let mut rng = Rng::new(11);
    graph
        .inputs
        .iter()
        .map(|v| {
            let shape: Vec<usize> = v
                .shape
                .0
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => *n as usize,
                    Dim::Sym(s) => panic!("symbolic dim {s}"),
                })
                .collect();
            let n = shape.iter().product();
            let data = (0..n).map(|_| (rng.unit() * 8.0 - 4.0) as f32).collect();
            (v.name.clone(), Tensor::float(DType::F32, shape, data))
        })
        .collect()
}

/// Both graphs compute the same `y` (interpreter, 1e-5).
fn assert_same_values(before: &Graph, after: &Graph) {
    let inputs = values(before);
    let a = run_graph(before, &inputs, &mut Evaluator::new(None)).unwrap();
    let b = run_graph(after, &inputs, &mut Evaluator::new(None)).unwrap();
    assert_tensors_close("y", &a["y"], &b["y"], atol(1e-5));
}

fn count(graph: &Graph, op: &str) -> usize {
    graph.nodes.iter().filter(|n| n.op_type == op).count()
}

fn rotary_nodes(graph: &Graph) -> Vec<&Node> {
    graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "RotaryEmbedding")
        .collect()
}

/// The spellings besides the operand orders: axis −1, ends at D, no steps, each decoration.
fn spellings() -> Vec<Rope> {
    let mut all = Rope::all_orders();
    let base = Rope::new(true, true, true);
    all.push(Rope {
        axis: -1,
        to_end: false,
        steps: false,
        ..base.clone()
    });
    for table in [Table::Scaled(1.0), Table::Scaled(0.5), Table::Cast] {
        all.push(Rope {
            table,
            ..base.clone()
        });
    }
    all
}

#[test]
fn every_rotate_half_spelling_becomes_one_rotary_embedding_on_cpu() {
    for spelling in spellings() {
        let g = graph(X[0], X[3] / 2, |b, x, [f, _, _]| {
            rope(b, x, [f, f, f], X[3], &spelling)
        });
        let out = optimized(&g, "cpu");
        let rotary = rotary_nodes(&out.graph);
        assert_eq!(rotary.len(), 1, "{spelling:?}: {:#?}", out.graph.nodes);
        let node = rotary[0];
        assert_eq!(node.inputs.len(), 3, "no position_ids: {node:?}");
        assert_eq!(node.inputs[0], "x");
        assert!(!node.attrs.contains_key("rotary_embedding_dim"), "{node:?}");
        // The rotate-half chain is gone; the caches are the half-width Cos(f), Sin(f).
        for op in ["Neg", "Slice", "Concat", "Add", "Unsqueeze"] {
            assert_eq!(count(&out.graph, op), 0, "{spelling:?}: {op} left");
        }
        assert_eq!((count(&out.graph, "Cos"), count(&out.graph, "Sin")), (1, 1));
        assert_same_values(&g, &out.graph);
        assert!(out.opsets[""] >= 23, "RotaryEmbedding needs opset 23");
    }
}

#[test]
fn a_partial_rotation_becomes_one_rotary_embedding_with_its_dim() {
    for r in [2, 4, 6] {
        let g = graph(X[0], r / 2, |b, x, [f, _, _]| {
            partial_rope(b, x, [f, f, f], r, &Rope::new(true, true, true))
        });
        let out = optimized(&g, "cpu");
        let rotary = rotary_nodes(&out.graph);
        assert_eq!(rotary.len(), 1, "r {r}: {:#?}", out.graph.nodes);
        assert_eq!(
            rotary[0].inputs[0], "x",
            "the whole head is rotated in place"
        );
        assert_eq!(
            rotary[0].attrs.get("rotary_embedding_dim"),
            Some(&Attr::Int(r as i64))
        );
        assert_eq!(count(&out.graph, "Concat"), 0, "r {r}");
        assert_same_values(&g, &out.graph);
    }
}

#[test]
fn cos_and_sin_over_different_angles_are_still_a_rotary_embedding() {
    // RotaryEmbedding takes its two caches independently: only the halves of each table must
    // be equal, not cos² + sin² = 1.
    let g = graph(X[0], X[3] / 2, |b, x, [f, g, _]| {
        rope(b, x, [f, g, g], X[3], &Rope::new(true, true, true))
    });
    let out = optimized(&g, "cpu");
    let rotary = rotary_nodes(&out.graph);
    assert_eq!(rotary.len(), 1);
    assert_same_values(&g, &out.graph);
}

#[test]
fn near_misses_stay_as_they_are() {
    let base = Rope::new(true, true, true);
    let faults = [
        Fault::SwappedHalves,
        Fault::NegOnOtherHalf,
        Fault::UnequalHalves,
        Fault::SliceOtherAxis,
    ];
    for fault in faults {
        let spelling = Rope {
            fault: Some(fault),
            ..base.clone()
        };
        // The sequence axis is as long as the head (S = D) so a Slice on axis 2 type-checks.
        let (x, w) = if fault == Fault::SliceOtherAxis {
            ([2, 3, 8, 8], 4)
        } else {
            (X, X[3] / 2)
        };
        let mut b = GraphBuilder::new("g");
        let xi = b.input("x", DType::F32, dims(&x));
        let f = b.input("f", DType::F32, dims(&[x[0], x[2], w]));
        let o = b.input("o", DType::F32, dims(&[x[0], x[2], w]));
        b.output("y", DType::F32, dims(&x));
        let y = rope(&mut b, &xi, [&f, &f, &o], x[3], &spelling);
        b.op_into("Identity", &[&y], vec![], "y");
        let g = b.finish();
        let out = optimized(&g, "cpu");
        assert_eq!(rotary_nodes(&out.graph).len(), 0, "{fault:?} was rewritten");
        assert_eq!(count(&out.graph, "Neg"), 1, "{fault:?}");
        assert_same_values(&g, &out.graph);
    }
}

#[test]
fn caches_that_broadcast_over_the_batch_are_expanded_to_it() {
    // onnxruntime rejects RotaryEmbedding caches whose batch is not the input's: tables of one
    // batch row (optimum's positions from the past length) become caches expanded to x's
    // batch.
    let g = graph(1, X[3] / 2, |b, x, [f, _, _]| {
        rope(b, x, [f, f, f], X[3], &Rope::new(true, true, true))
    });
    let out = optimized(&g, "cpu");
    let rotary = rotary_nodes(&out.graph);
    assert_eq!(rotary.len(), 1);
    let expanded = |name: &str| {
        out.graph
            .nodes
            .iter()
            .any(|n| n.op_type == "Expand" && n.outputs.iter().any(|o| o == name))
    };
    assert!(rotary[0].inputs[1..3].iter().all(|c| expanded(c)));
    assert_same_values(&g, &out.graph);
}

#[test]
fn an_unequal_split_stays_as_it_is() {
    // x[…, 3:] and x[…, :3] of an 8-wide head: not halves.
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(&X));
    let f = b.input("f", DType::F32, dims(&[X[0], X[2], 4]));
    b.output("y", DType::F32, dims(&X));
    let cos = rope_spellings::table(&mut b, "Cos", &f, &f, Table::Plain);
    let sin = rope_spellings::table(&mut b, "Sin", &f, &f, Table::Plain);
    let bound = |b: &mut GraphBuilder, v: i64| b.const_i64(&[v]);
    let (zero, three, end, axis) = (
        bound(&mut b, 0),
        bound(&mut b, 3),
        bound(&mut b, i64::MAX),
        bound(&mut b, 3),
    );
    let lo = b.op("Slice", &[&x, &zero, &three, &axis], vec![]);
    let hi = b.op("Slice", &[&x, &three, &end, &axis], vec![]);
    let neg = b.op("Neg", &[&hi], vec![]);
    let rot = b.op("Concat", &[&neg, &lo], vec![("axis", Attr::Int(-1))]);
    let plain = b.op("Mul", &[&x, &cos], vec![]);
    let rotated = b.op("Mul", &[&rot, &sin], vec![]);
    let y = b.op("Add", &[&plain, &rotated], vec![]);
    b.op_into("Identity", &[&y], vec![], "y");
    let g = b.finish();
    let out = optimized(&g, "cpu");
    assert_eq!(rotary_nodes(&out.graph).len(), 0);
    assert_same_values(&g, &out.graph);
}

#[test]
fn an_ep_without_rotary_embedding_keeps_the_exported_form() {
    // qnn is the built-in EP without RotaryEmbedding.
    let g = graph(X[0], X[3] / 2, |b, x, [f, _, _]| {
        rope(b, x, [f, f, f], X[3], &Rope::new(true, true, true))
    });
    let out = optimized(&g, "qnn");
    assert_eq!(rotary_nodes(&out.graph).len(), 0);
    assert_eq!(count(&out.graph, "Neg"), 1);
    assert_same_values(&g, &out.graph);
}
