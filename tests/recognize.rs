//! The recognize stage on hand-made graphs: every exported spelling of RMSNorm and LayerNorm
//! becomes the standard norm on cpu (and then SkipSimplifiedLayerNormalization after a residual
//! Add), near misses stay as they are, EPs that cannot run the norm keep a runnable graph, and
//! the saved model declares the opset its ops need.

mod common;
use common::compare::{assert_tensors_close, atol};
use std::collections::{BTreeMap, HashMap};

use mobius::ep::get_ep;
use mobius::interp::run_graph;
use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder, Model, Node, Shape, TensorData};
use mobius::ops::Tensor;
use mobius::opt::rules::Stage;
use mobius::opt::{Limits, OptimizeOptions, OptimizeReport, Role};
use mobius::rulebook::contrib_functions::ContribFunctions;
use mobius::rulebook::optimize;
use mobius::weights::eval::Evaluator;

#[path = "common/norm_spellings.rs"]
mod norm_spellings;

use norm_spellings::{cast, layer_core, rms_core, scaled, Inverse, Spelling, Square};

const SHAPE: [usize; 3] = [2, 3, 8];
const EPS: f32 = 1e-6;

fn model(graph: Graph, opset: i64) -> Model {
    Model {
        graph,
        opsets: BTreeMap::from([(String::new(), opset)]),
        ir_version: 10,
        producer_name: "test".into(),
        producer_version: "0".into(),
    }
}

fn optimize_for(graph: &Graph, ep: &str, opset: i64, dtype: DType) -> (Model, OptimizeReport) {
    let opts = OptimizeOptions {
        dtype,
        role: Role::Decoder,
        limits: Limits::default(),
        fingerprint_leaves: None,
        accuracy_level: None,
        kv_cache: mobius::opt::KvCache::AsIs,
        trace: true,
    };
    optimize(&model(graph.clone(), opset), &get_ep(ep).unwrap(), &opts).unwrap()
}

fn dims(shape: &[usize]) -> Shape {
    Shape::new(shape.iter().map(|&d| d as i64))
}

/// A `[hidden]` weight initializer of `dtype` (values 0.5, 0.75, …).
fn weight(b: &mut GraphBuilder, name_seed: f32, dtype: DType, shape: &[usize]) -> String {
    let n = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|i| name_seed + 0.25 * i as f32).collect();
    let data = TensorData::from_f32(shape.to_vec(), &values);
    b.constant(match dtype {
        DType::F16 => TensorData {
            dtype,
            shape: data.shape.clone(),
            bytes: values
                .iter()
                .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                .collect(),
        },
        _ => data,
    })
}

/// `x` `[2, 3, 8]` of `dtype` → `y` computed by `body`.
fn graph(dtype: DType, body: impl FnOnce(&mut GraphBuilder, &str) -> String) -> Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", dtype, dims(&SHAPE));
    b.output("y", dtype, dims(&SHAPE));
    let y = body(&mut b, &x);
    b.op_into("Identity", &[&y], vec![], "y");
    b.finish()
}

fn x_value(dtype: DType, seed: u64) -> HashMap<String, Tensor> {
    let mut rng = Rng::new(seed);
    let values = (0..SHAPE.iter().product())
        .map(|_| (rng.unit() * 6.0 - 3.0) as f32)
        .collect();
    HashMap::from([("x".into(), Tensor::float(dtype, SHAPE.to_vec(), values))])
}

/// Both graphs compute the same `y` on `inputs` within `tol` (interpreter); returns the largest
/// difference.
fn assert_same_y(
    what: &str,
    before: &Graph,
    after: &Graph,
    inputs: &HashMap<String, Tensor>,
    tol: f64,
) -> f64 {
    let a = run_graph(before, inputs, &mut Evaluator::new(None)).unwrap();
    let b = run_graph(after, inputs, &mut Evaluator::new(None)).unwrap();
    assert_tensors_close(what, &a["y"], &b["y"], atol(tol))
}

/// Both graphs compute the same `y` within `tol`.
fn assert_same_values(before: &Graph, after: &Graph, dtype: DType, tol: f64) {
    assert_same_y("y", before, after, &x_value(dtype, 7), tol);
}

fn ops(graph: &Graph) -> Vec<&str> {
    graph
        .nodes
        .iter()
        .map(|n| n.op_type.as_str())
        .filter(|op| *op != "Identity")
        .collect()
}

fn only_node<'a>(graph: &'a Graph, op: &str) -> &'a Node {
    assert_eq!(ops(graph), vec![op], "{:#?}", graph.nodes);
    graph.nodes.iter().find(|n| n.op_type == op).unwrap()
}

fn float_attr(node: &Node, name: &str) -> f32 {
    match node.attrs.get(name) {
        Some(Attr::Float(v)) => *v,
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn every_rms_norm_spelling_becomes_one_rms_normalization_on_cpu() {
    for spelling in Spelling::all() {
        for weight_first in [true, false] {
            let g = graph(DType::F32, |b, x| {
                let w = weight(b, 0.5, DType::F32, &[8]);
                let normed = rms_core(b, x, EPS, &spelling);
                scaled(b, &normed, &w, weight_first)
            });
            let (out, _) = optimize_for(&g, "cpu", 18, DType::F32);
            let norm = only_node(&out.graph, "RMSNormalization");
            assert_eq!(norm.inputs[0], "x", "{spelling:?}");
            assert!(norm.inputs[1].starts_with("const_"), "the weight: {norm:?}");
            assert_eq!(float_attr(norm, "epsilon"), EPS);
            assert_eq!(norm.attrs.get("axis"), Some(&Attr::Int(-1)));
            assert_eq!(norm.attrs.get("stash_type"), Some(&Attr::Int(1)));
            assert_same_values(&g, &out.graph, DType::F32, 1e-5);
            assert_eq!(out.opsets[""], 23, "RMSNormalization needs opset 23");
            assert_eq!(out.ir_version, 11);
        }
    }
}

#[test]
fn a_16_bit_rms_norm_with_f32_casts_becomes_one_rms_normalization() {
    for spelling in [
        Spelling::new(Square::Pow, Inverse::Reciprocal, true, false),
        Spelling::new(Square::Pow, Inverse::DivOne, true, false),
    ] {
        let g = graph(DType::F16, |b, x| {
            let w = weight(b, 0.5, DType::F16, &[8]);
            let up = cast(b, x, DType::F32);
            let normed = rms_core(b, &up, EPS, &spelling);
            let down = cast(b, &normed, DType::F16);
            scaled(b, &down, &w, true)
        });
        let (out, _) = optimize_for(&g, "cpu", 18, DType::F16);
        let norm = only_node(&out.graph, "RMSNormalization");
        assert_eq!(norm.inputs[0], "x");
        assert_same_values(&g, &out.graph, DType::F16, 1e-2);
    }
}

#[test]
fn every_layer_norm_spelling_becomes_one_layer_normalization_on_cpu() {
    let spellings = Spelling::all()
        .into_iter()
        .filter(|s| s.inverse != Inverse::DivOne);
    for spelling in spellings {
        for (weight_first, bias_first) in [(true, true), (false, false)] {
            let g = graph(DType::F32, |b, x| {
                let w = weight(b, 0.5, DType::F32, &[8]);
                let bias = weight(b, -1.0, DType::F32, &[8]);
                let normed = layer_core(b, x, EPS, &spelling);
                let y = scaled(b, &normed, &w, weight_first);
                match bias_first {
                    true => b.op("Add", &[&bias, &y], vec![]),
                    false => b.op("Add", &[&y, &bias], vec![]),
                }
            });
            let (out, _) = optimize_for(&g, "cpu", 18, DType::F32);
            let norm = only_node(&out.graph, "LayerNormalization");
            assert_eq!(norm.inputs.len(), 3, "weight and bias folded: {norm:?}");
            assert_eq!(float_attr(norm, "epsilon"), EPS);
            assert_same_values(&g, &out.graph, DType::F32, 1e-5);
            assert_eq!(out.opsets[""], 18, "LayerNormalization is in opset 17");
        }
    }
}

/// A near miss of the dynamo RMSNorm: nothing may become an RMSNormalization.
fn assert_not_recognised(spelling: Spelling) {
    let g = graph(DType::F32, |b, x| {
        let w = weight(b, 0.5, DType::F32, &[8]);
        let normed = rms_core(b, x, EPS, &spelling);
        scaled(b, &normed, &w, true)
    });
    let (out, report) = optimize_for(&g, "cpu", 18, DType::F32);
    assert_eq!(ops(&out.graph), ops(&g), "{spelling:?}");
    assert_eq!(out.opsets[""], 18);
    let found: usize = report
        .stages
        .iter()
        .filter(|s| s.stage == Stage::Recognize)
        .flat_map(|s| &s.groups)
        .map(|g| g.found)
        .sum();
    assert_eq!(found, 0, "{spelling:?}");
}

#[test]
fn near_misses_of_rms_norm_are_left_as_they_are() {
    let dynamo = Spelling::new(Square::Pow, Inverse::Reciprocal, true, false);
    for axis in [0, 1, -2] {
        assert_not_recognised(Spelling {
            axis,
            ..dynamo.clone()
        });
    }
    assert_not_recognised(Spelling {
        exponent: 3.0,
        ..dynamo.clone()
    });
    assert_not_recognised(Spelling {
        keepdims: 0,
        ..dynamo.clone()
    });
    assert_not_recognised(Spelling {
        eps_shape: vec![8],
        ..dynamo.clone()
    });
    assert_not_recognised(Spelling {
        eps_shape: vec![2, 3, 1],
        ..dynamo
    });
}

#[test]
fn an_epsilon_that_is_not_a_constant_is_not_recognised() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(&SHAPE));
    let eps = b.input("eps", DType::F32, dims(&[]));
    b.output("y", DType::F32, dims(&SHAPE));
    let two = b.constant(TensorData::from_f32(vec![], &[2.0]));
    let axes = b.const_i64(&[-1]);
    let sq = b.op("Pow", &[&x, &two], vec![]);
    let mean = b.op("ReduceMean", &[&sq, &axes], vec![]);
    let v = b.op("Add", &[&mean, &eps], vec![]);
    let root = b.op("Sqrt", &[&v], vec![]);
    let inv = b.op("Reciprocal", &[&root], vec![]);
    b.op_into("Mul", &[&x, &inv], vec![], "y");
    let g = b.finish();
    let (out, report) = optimize_for(&g, "cpu", 18, DType::F32);
    assert_eq!(ops(&out.graph), ops(&g));
    // The trace says what was left and where.
    assert_eq!(report.leftovers.len(), 1, "{:?}", report.leftovers);
    assert_eq!(report.leftovers[0].count, 1);
    assert!(report.leftovers[0].shape.starts_with("RMSNorm"));
    let trace = report.to_string();
    assert!(
        trace.contains("1 × RMSNorm / LayerNorm (ReduceMean of a square)"),
        "{trace}"
    );
}

#[test]
fn a_weight_of_another_shape_stays_a_separate_mul() {
    for shape in [vec![1, 8], vec![3, 8], vec![2, 3, 8]] {
        let spelling = Spelling::new(Square::Pow, Inverse::Reciprocal, true, false);
        let g = graph(DType::F32, |b, x| {
            let w = weight(b, 0.5, DType::F32, &shape);
            let normed = rms_core(b, x, EPS, &spelling);
            scaled(b, &normed, &w, true)
        });
        let (out, _) = optimize_for(&g, "cpu", 18, DType::F32);
        // The normalization itself is recognised exactly (with a unit scale); the weight is not
        // folded into it.
        assert_eq!(
            ops(&out.graph),
            vec!["RMSNormalization", "Mul"],
            "{shape:?}"
        );
        let norm = &out.graph.nodes[0];
        let w = out
            .graph
            .initializers
            .iter()
            .find(|i| i.name == norm.inputs[1])
            .unwrap();
        assert_eq!(w.shape, vec![8]);
        assert_same_values(&g, &out.graph, DType::F32, 1e-5);
    }
}

#[test]
fn a_residual_add_then_fuses_into_skip_simplified_layer_norm_on_cpu() {
    let mut b = GraphBuilder::new("g");
    let a = b.input("x", DType::F32, dims(&SHAPE));
    let r = b.input("r", DType::F32, dims(&SHAPE));
    b.output("y", DType::F32, dims(&SHAPE));
    b.output("sum", DType::F32, dims(&SHAPE));
    let sum = b.op("Add", &[&a, &r], vec![]);
    let w = weight(&mut b, 0.5, DType::F32, &[8]);
    let spelling = Spelling::new(Square::Pow, Inverse::Reciprocal, true, false);
    let normed = rms_core(&mut b, &sum, EPS, &spelling);
    let y = scaled(&mut b, &normed, &w, true);
    b.op_into("Identity", &[&y], vec![], "y");
    b.op_into("Identity", &[&sum], vec![], "sum");
    let g = b.finish();
    let (out, report) = optimize_for(&g, "cpu", 18, DType::F32);
    assert_eq!(
        ops(&out.graph),
        vec!["SkipSimplifiedLayerNormalization"],
        "{:#?}",
        out.graph.nodes
    );
    // The contrib op's function body imports the newest opset: so does the model.
    assert_eq!(out.opsets[""], mobius::opt::opset::NEWEST);
    let trace = report.to_string();
    assert!(
        trace.contains("RMSNorm                  : found 1 ("),
        "{trace}"
    );
}

#[test]
fn eps_that_cannot_run_the_norm_keep_a_runnable_graph() {
    // qnn runs no rank-4 RMSNormalization: rank-3 view (HtpRank4RMSNorm) or the decomposed form.
    let mut b = GraphBuilder::new("g");
    let shape = [1, 3, 2, 8];
    let x = b.input("x", DType::F32, dims(&shape));
    b.output("y", DType::F32, dims(&shape));
    let w = weight(&mut b, 0.5, DType::F32, &[8]);
    let spelling = Spelling::new(Square::Pow, Inverse::Reciprocal, true, false);
    let normed = rms_core(&mut b, &x, EPS, &spelling);
    let y = scaled(&mut b, &normed, &w, true);
    b.op_into("Identity", &[&y], vec![], "y");
    let g = b.finish();
    for ep in ["qnn", "onnx-standard", "default"] {
        let (out, _) = optimize_for(&g, ep, 18, DType::F32);
        let norms = ops(&out.graph)
            .iter()
            .filter(|o| **o == "RMSNormalization")
            .count();
        assert_eq!(norms, 1, "{ep}: {:?}", ops(&out.graph));
        assert!(out.graph.nodes.iter().all(|n| n.domain.is_empty()));
        let mut rng = Rng::new(3);
        let values = (0..48).map(|_| (rng.unit() * 6.0 - 3.0) as f32).collect();
        let inputs = HashMap::from([(
            "x".into(),
            Tensor::float(DType::F32, shape.to_vec(), values),
        )]);
        assert_same_y(ep, &g, &out.graph, &inputs, 1e-5);
    }
}

#[test]
fn a_model_that_cannot_declare_opset_23_keeps_its_decomposed_norm() {
    let spelling = Spelling::new(Square::Pow, Inverse::Reciprocal, true, false);
    let g = graph(DType::F32, |b, x| {
        let w = weight(b, 0.5, DType::F32, &[8]);
        let normed = rms_core(b, x, EPS, &spelling);
        scaled(b, &normed, &w, true)
    });
    // Opset 17: ReduceMean's axes would be an attribute; raising the opset is not safe.
    let (out, _) = optimize_for(&g, "cpu", 17, DType::F32);
    assert!(!ops(&out.graph).contains(&"RMSNormalization"));
    assert_eq!(out.opsets[""], 17);
    // A model holding an op whose meaning changed after opset 18 keeps opset 18.
    let mut with_grid = g.clone();
    with_grid.nodes.push(Node {
        name: "grid".into(),
        domain: String::new(),
        op_type: "GridSample".into(),
        inputs: vec!["x".into(), "x".into()],
        outputs: vec!["unused".into()],
        attrs: Default::default(),
    });
    assert_eq!(
        mobius::opt::opset::ceiling(&model(with_grid, 18)),
        18,
        "GridSample's modes were renamed in opset 20"
    );
    assert_eq!(mobius::opt::opset::ceiling(&model(g, 18)), 24);
}

/// The torch.onnx exports of `scripts/make_recognize_fixtures.py`: each becomes one norm on
/// cpu and computes what the export computes.
#[test]
fn torch_exports_of_single_norms_become_one_norm() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recognize");
    for (file, dtype, op, opset, tol) in [
        (
            "rms_norm_dynamo.onnx",
            DType::F32,
            "RMSNormalization",
            23,
            1e-5,
        ),
        (
            "rms_norm_f16_legacy.onnx",
            DType::F16,
            "RMSNormalization",
            23,
            1e-2,
        ),
        (
            "layer_norm_manual_dynamo.onnx",
            DType::F32,
            "LayerNormalization",
            18,
            1e-5,
        ),
    ] {
        let exported = mobius::onnx::import::load(&dir.join(file), &ContribFunctions).unwrap();
        assert_eq!(exported.opsets[""], 18, "{file}");
        let opts = OptimizeOptions {
            dtype,
            role: Role::Decoder,
            limits: Limits::default(),
            fingerprint_leaves: None,
            accuracy_level: None,
            kv_cache: mobius::opt::KvCache::AsIs,
            trace: false,
        };
        let (out, _) = optimize(&exported, &get_ep("cpu").unwrap(), &opts).unwrap();
        assert_eq!(ops(&out.graph), vec![op], "{file}");
        assert_eq!(out.opsets[""], opset, "{file}");
        // The graphs have symbolic batch and sequence: run them on [2, 3, 8].
        assert_same_y(file, &exported.graph, &out.graph, &x_value(dtype, 11), tol);
    }
}

/// The torch.onnx exports of the Llama-like fixtures: every residual Add and the norm after it
/// become one SkipSimplifiedLayerNormalization on cpu (4 per 2-layer model), including the
/// first residual sums, which the extraction can only fuse by switching the Add's class and the
/// norm's class together (`greedy_dag`'s co-switch of a fused op's outputs).
#[test]
fn every_residual_norm_of_the_exports_fuses_on_cpu() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exports");
    for name in [
        "llama-dynamo-cache",
        "llama-legacy-cache",
        "mistral-dynamo",
        "qwen2-dynamo-cache",
    ] {
        let exported =
            mobius::onnx::import::load(&dir.join(name).join("model.onnx"), &ContribFunctions)
                .unwrap();
        let opts = OptimizeOptions {
            dtype: DType::F32,
            role: Role::Decoder,
            limits: Limits::default(),
            fingerprint_leaves: None,
            accuracy_level: None,
            kv_cache: mobius::opt::KvCache::AsIs,
            trace: false,
        };
        let (out, _) = optimize(&exported, &get_ep("cpu").unwrap(), &opts).unwrap();
        let count = |op: &str| out.graph.nodes.iter().filter(|n| n.op_type == op).count();
        assert_eq!(
            (
                count("SkipSimplifiedLayerNormalization"),
                count("RMSNormalization")
            ),
            (4, 1),
            "{name}"
        );
    }
}
