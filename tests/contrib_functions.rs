//! The contrib ops a build calls carry their standard-ONNX bodies as model-local functions:
//! written for exactly the contrib ops used (none for onnx-standard and trt-rtx on Llama), and
//! numerically the op they stand for (checked by expanding them and comparing against the
//! contrib kernels in the interpreter with `mobius verify`).

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use common::compare::{assert_tensors_close, Tol};
use common::{fixture, mobius};
use egg::ENodeOrVar;
use mobius::interp::run_graph;
use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Dim, Graph, GraphBuilder, Model, Shape};
use mobius::onnx::export::{model_proto, plan_layout};
use mobius::onnx::functions::expand;
use mobius::onnx::import::decode;
use mobius::onnx::proto::{FunctionProto, ModelProto};
use mobius::ops::Tensor;
use mobius::opt::lang::Onnx;
use mobius::opt::rules::Stage;
use mobius::rulebook::contrib_functions::{
    bodies_for, derived_bodies, is_known, ContribFunctions, HAND_WRITTEN, NO_BODY,
};
use mobius::weights::eval::Evaluator;
use prost::Message;

fn build(out: &Path, ep: &str, dtype: &str) -> ModelProto {
    build_fixture("llama", out, ep, dtype)
}

fn build_fixture(name: &str, out: &Path, ep: &str, dtype: &str) -> ModelProto {
    mobius()
        .args(["build", "--config"])
        .arg(fixture(name))
        .arg(out)
        .args(["--ep", ep, "--dtype", dtype])
        .assert()
        .success();
    ModelProto::decode(std::fs::read(out.join("model.onnx")).unwrap().as_slice()).unwrap()
}

/// [`build_fixture`] with `--quant int4` (MatMulNBits on EPs that run it).
fn build_quantized(name: &str, out: &Path, ep: &str, dtype: &str) -> ModelProto {
    mobius()
        .args(["build", "--config"])
        .arg(fixture(name))
        .arg(out)
        .args(["--ep", ep, "--dtype", dtype, "--quant", "int4"])
        .assert()
        .success();
    ModelProto::decode(std::fs::read(out.join("model.onnx")).unwrap().as_slice()).unwrap()
}

fn function_names(m: &ModelProto) -> Vec<String> {
    m.functions
        .iter()
        .map(|f| format!("{}::{}", f.domain, f.name))
        .collect()
}

fn ops(m: &mobius::ir::Model, op: &str) -> usize {
    m.graph.nodes.iter().filter(|n| n.op_type == op).count()
}

#[test]
fn functions_exist_for_exactly_the_contrib_ops_used() {
    let t = tempfile::tempdir().unwrap();
    let ssln = "com.microsoft::SkipSimplifiedLayerNormalization";
    for (ep, dtype, want) in [
        ("default", "f32", vec![ssln]),
        ("cpu", "f32", vec![ssln]),
        ("cuda", "f16", vec![ssln]),
        ("trt-rtx", "f16", vec![]),
        ("onnx-standard", "f32", vec![]),
    ] {
        let m = build(&t.path().join(ep), ep, dtype);
        assert_eq!(function_names(&m), want, "{ep}");
        for f in &m.functions {
            assert_eq!(f.opset_import.len(), 1, "{ep}: {} imports opset 24", f.name);
            assert_eq!(f.opset_import[0].version, 24);
        }
    }
}

#[test]
fn gelu_and_layer_norm_families_carry_their_bodies() {
    let t = tempfile::tempdir().unwrap();
    let sln = "com.microsoft::SkipLayerNormalization";
    for (name, want) in [
        ("gpt2", vec!["com.microsoft::FastGelu", sln]),
        ("bert", vec!["com.microsoft::BiasGelu", sln]),
    ] {
        let m = build_fixture(name, &t.path().join(name), "default", "f32");
        assert_eq!(function_names(&m), want, "{name}");
    }
}

#[test]
fn function_bodies_compute_the_contrib_ops() {
    let t = tempfile::tempdir().unwrap();
    for (name, op, calls) in [
        ("llama", "SkipSimplifiedLayerNormalization", 4),
        ("gpt2", "FastGelu", 2),
        ("gpt2", "SkipLayerNormalization", 5),
        ("bert", "BiasGelu", 2),
    ] {
        let out = t.path().join(format!("{name}-{op}"));
        let mut proto = build_fixture(name, &out, "default", "f32");
        let graph = proto.graph.as_mut().unwrap();
        let calls_before = std::mem::take(&mut graph.node);
        graph.node = mobius::onnx::functions::expand(calls_before, &proto.functions).unwrap();
        proto.functions.clear();
        let expanded = out.join("expanded.onnx");
        std::fs::write(&expanded, proto.encode_to_vec()).unwrap();

        // Import keeps the calls of bodies mobius writes as ops.
        let fused = mobius::onnx::import::load(&out.join("model.onnx"), &ContribFunctions).unwrap();
        let inlined = mobius::onnx::import::load(&expanded, &ContribFunctions).unwrap();
        assert_eq!(ops(&fused, op), calls, "{name} {op}");
        assert_eq!(ops(&inlined, op), 0, "{name} {op}");

        mobius()
            .arg("verify")
            .arg(out.join("model.onnx"))
            .arg(&expanded)
            .args(["--samples", "2", "--atol", "1e-5", "--rtol", "1e-5"])
            .assert()
            .success();
    }
}

/// The contrib ops whose calls some inline rule rewrites (its pattern's root op).
fn ops_with_inline_rules() -> BTreeSet<String> {
    mobius::rulebook::rules()
        .map(|set| set.rules)
        .unwrap()
        .into_iter()
        .filter(|r| r.stage == Stage::Inline)
        .filter_map(|r| {
            r.pattern.ast.as_ref().iter().find_map(|n| match n {
                ENodeOrVar::ENode(Onnx::Op(op)) if op.op.as_str().contains("::") => {
                    Some(op.op.to_string())
                }
                _ => None,
            })
        })
        .collect()
}

#[test]
fn every_emitted_contrib_op_has_a_body_exactly_when_it_has_inline_rules() {
    let mut bodies: BTreeSet<String> = derived_bodies()
        .unwrap()
        .iter()
        .map(|b| format!("{}::{}", b.function.domain, b.function.name))
        .collect();
    bodies.extend(HAND_WRITTEN.iter().map(|op| op.to_string()));
    let inline = ops_with_inline_rules();
    let without_body: BTreeSet<String> = NO_BODY.iter().map(|op| op.to_string()).collect();
    assert!(
        without_body.is_subset(&inline),
        "{without_body:?} vs {inline:?}"
    );
    assert_eq!(bodies, &inline - &without_body);
    let t = tempfile::tempdir().unwrap();
    let mut emitted = BTreeSet::new();
    for (name, ep, dtype, quant) in [
        ("llama", "cpu", "f32", false),
        ("llama", "cpu", "f32", true),
        ("llama", "cuda", "f16", false),
        ("gpt2", "default", "f32", false),
        ("bert", "default", "f32", false),
        ("mixtral", "cpu", "f32", false),
        ("mixtral", "cpu", "f32", true),
        ("qwen3_5_text", "cpu", "f32", false),
    ] {
        let out = t.path().join(format!("{name}-{ep}-{quant}"));
        let m = if quant {
            build_quantized(name, &out, ep, dtype)
        } else {
            build_fixture(name, &out, ep, dtype)
        };
        for n in &m.graph.as_ref().unwrap().node {
            if !n.domain.is_empty() {
                let op = format!("{}::{}", n.domain, n.op_type);
                emitted.insert(op.clone());
                assert_eq!(
                    is_known(&n.domain, &n.op_type),
                    inline.contains(&op) && !without_body.contains(&op),
                    "{name} --ep {ep}: {}::{}",
                    n.domain,
                    n.op_type
                );
            }
        }
    }
    // Every op with inline rules is emitted by some build (else its body is untested here).
    assert!(inline.is_subset(&emitted), "{inline:?} vs {emitted:?}");
    // GroupQueryAttention is emitted and has neither rules nor a body.
    assert!(emitted.contains("com.microsoft::GroupQueryAttention"));
}

/// One call of a contrib op with `arity` inputs, every output named, `epsilon` when given.
fn call_graph(op: &str, arity: usize, outputs: usize, epsilon: Option<f32>) -> Graph {
    let (h, rows) = (8i64, [2i64, 3]);
    let mut b = GraphBuilder::new("g");
    let names: Vec<String> = (0..arity)
        .map(|i| {
            // input, skip: [2, 3, H]; the rest (gamma, beta, bias): [H]
            let shape: Vec<i64> = if i < 2 && !(op.contains("Gelu") && i == 1) {
                vec![rows[0], rows[1], h]
            } else {
                vec![h]
            };
            b.input(&format!("in{i}"), DType::F32, Shape::new(shape))
        })
        .collect();
    for o in 0..outputs {
        let stat = op.contains("Normalization") && (o == 1 || o == 2);
        let shape = Shape::new([rows[0], rows[1], if stat { 1 } else { h }]);
        b.output(&format!("out{o}"), DType::F32, shape);
    }
    let attrs = epsilon
        .map(|e| ("epsilon", Attr::Float(e)))
        .into_iter()
        .collect();
    let inputs: Vec<&str> = names.iter().map(String::as_str).collect();
    b.node(
        "com.microsoft",
        op,
        &inputs,
        attrs,
        (0..outputs).map(|o| format!("out{o}")).collect(),
    );
    b.finish()
}

/// Values in [-3, 3) times `scale` (small values make a wrong default epsilon visible).
fn random_inputs(g: &Graph, seed: u64, scale: f64) -> HashMap<String, Tensor> {
    let mut rng = Rng::new(seed);
    g.inputs
        .iter()
        .map(|v| {
            let shape: Vec<usize> = v
                .shape
                .0
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => *n as usize,
                    Dim::Sym(s) => panic!("{}: symbolic {s}", v.name),
                })
                .collect();
            let n = shape.iter().product();
            let values = (0..n)
                .map(|_| ((rng.unit() * 6.0 - 3.0) * scale) as f32)
                .collect();
            (v.name.clone(), Tensor::float(DType::F32, shape, values))
        })
        .collect()
}

/// The saved model of `graph` (with the bodies mobius attaches), its calls expanded.
fn saved_and_expanded(graph: &Graph) -> (Vec<FunctionProto>, Model) {
    let model = Model {
        graph: graph.clone(),
        opsets: BTreeMap::from([(String::new(), 24), ("com.microsoft".into(), 1)]),
        ir_version: 11,
        producer_name: "test".into(),
        producer_version: "0".into(),
    };
    let (placements, _) = plan_layout(&model.graph);
    let mut proto = model_proto(
        &model,
        &placements,
        &mut Evaluator::new(None),
        &ContribFunctions,
    )
    .unwrap();
    let functions = std::mem::take(&mut proto.functions);
    let g = proto.graph.as_mut().unwrap();
    g.node = expand(std::mem::take(&mut g.node), &functions).unwrap();
    let inlined = decode(
        &proto.encode_to_vec(),
        Path::new("expanded.onnx"),
        &ContribFunctions,
    )
    .unwrap();
    (functions, inlined)
}

#[test]
fn derived_bodies_compute_the_ops_on_random_inputs() {
    // (op, inputs, outputs): every input count the rules cover, every output the body gives.
    let cases = [
        ("SkipSimplifiedLayerNormalization", 3, 4),
        ("SkipLayerNormalization", 4, 4),
        ("SkipLayerNormalization", 3, 4),
        ("BiasGelu", 2, 1),
        ("FastGelu", 2, 1),
    ];
    for (op, arity, outputs) in cases {
        let epsilons: &[Option<f32>] = if op.contains("Normalization") {
            &[Some(1e-5), Some(0.5), None]
        } else {
            &[None]
        };
        for &eps in epsilons {
            let what = format!("{op} with {arity} inputs, epsilon {eps:?}");
            let g = call_graph(op, arity, outputs, eps);
            let (functions, inlined) = saved_and_expanded(&g);
            assert_eq!(functions.len(), 1, "{what}: no body attached");
            assert!(
                inlined.graph.nodes.iter().all(|n| n.domain.is_empty()),
                "{what}"
            );
            for (seed, scale) in [(0, 1.0), (1, 1.0), (2, 1e-3)] {
                let inputs = random_inputs(&g, seed, scale);
                let want = run_graph(&g, &inputs, &mut Evaluator::new(None)).unwrap();
                let got = run_graph(&inlined.graph, &inputs, &mut Evaluator::new(None)).unwrap();
                for o in 0..outputs {
                    let name = format!("out{o}");
                    let (w, h) = (&want[&name], &got[&name]);
                    assert_eq!(w.dtype, h.dtype, "{what}: {name}");
                    let tol = Tol {
                        atol: 1e-5,
                        rtol: 1e-5,
                    };
                    assert_tensors_close(&format!("{what}: {name}"), w, h, tol);
                }
            }
        }
    }
}

/// `Y = MatMulNBits(A, B, scales[, zero_points][, bias])` with every input a graph input:
/// A `[2, 3, K]` (or `[3, K]`), K = 40 (not a multiple of the block of 16), N = 5.
fn nbits_call(bits: i64, zero_points: bool, bias: bool, rank3: bool) -> Graph {
    let (k, n, block) = (40i64, 5i64, 16i64);
    let blocks = (k + block - 1) / block;
    let mut b = GraphBuilder::new("g");
    let a_shape = if rank3 { vec![2, 3, k] } else { vec![3, k] };
    let mut out_shape = a_shape.clone();
    *out_shape.last_mut().unwrap() = n;
    let mut inputs = vec![
        b.input("A", DType::F32, Shape::new(a_shape)),
        b.input("B", DType::U8, Shape::new([n, blocks, block * bits / 8])),
        b.input("scales", DType::F32, Shape::new([n * blocks])),
    ];
    if zero_points {
        let bytes = (blocks * bits + 7) / 8;
        inputs.push(b.input("zero_points", DType::U8, Shape::new([n, bytes])));
    }
    if bias {
        inputs.resize(5, String::new());
        inputs.push(b.input("bias", DType::F32, Shape::new([n])));
    }
    b.output("Y", DType::F32, Shape::new(out_shape));
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    b.node(
        "com.microsoft",
        "MatMulNBits",
        &refs,
        vec![
            ("K", Attr::Int(k)),
            ("N", Attr::Int(n)),
            ("bits", Attr::Int(bits)),
            ("block_size", Attr::Int(block)),
        ],
        vec!["Y".into()],
    );
    b.finish()
}

#[test]
fn matmul_nbits_body_computes_the_op_on_random_inputs() {
    for (bits, zero_points, bias, rank3) in [
        (4, false, false, true),
        (4, true, false, false),
        (4, false, true, false),
        (4, true, true, true),
        (8, false, false, false),
        (8, true, true, true),
        (8, false, true, true),
        (8, true, false, false),
    ] {
        let what = format!("bits {bits}, zero points {zero_points}, bias {bias}, rank 3 {rank3}");
        let g = nbits_call(bits, zero_points, bias, rank3);
        let (functions, inlined) = saved_and_expanded(&g);
        assert_eq!(functions.len(), 1, "{what}: no body attached");
        assert!(
            inlined.graph.nodes.iter().all(|n| n.domain.is_empty()),
            "{what}"
        );
        for seed in 0..3 {
            let mut inputs = random_inputs(&g, seed, 1.0);
            let mut rng = Rng::new(seed + 100);
            for name in ["B", "zero_points"] {
                if let Some(t) = inputs.get_mut(name) {
                    let values = (0..t.shape.iter().product::<usize>())
                        .map(|_| rng.below(256) as i64)
                        .collect();
                    *t = Tensor::int(DType::U8, t.shape.clone(), values);
                }
            }
            let want = run_graph(&g, &inputs, &mut Evaluator::new(None)).unwrap();
            let got = run_graph(&inlined.graph, &inputs, &mut Evaluator::new(None)).unwrap();
            let (w, h) = (&want["Y"], &got["Y"]);
            let tol = Tol {
                atol: 1e-5,
                rtol: 1e-5,
            };
            assert_tensors_close(&what, w, h, tol);
        }
    }
}

#[test]
fn matmul_nbits_calls_of_both_kinds_or_with_g_idx_get_no_body() {
    let mut g = nbits_call(4, true, false, false);
    let mut other = g.nodes[0].clone();
    other.inputs.truncate(3);
    other.outputs = vec!["Y2".into()];
    g.nodes.push(other);
    assert!(bodies_for(&g).is_empty(), "with and without zero points");
    let mut g = nbits_call(4, false, false, false);
    g.nodes[0].inputs.extend(["".into(), "A".into()]);
    assert!(bodies_for(&g).is_empty(), "g_idx");
    assert!(is_known("com.microsoft", "MatMulNBits"));
}

#[test]
fn calls_the_rules_do_not_cover_get_no_body() {
    // FastGelu without bias: its rule is Gelu(x), not the two-input body with `bias` absent;
    // SkipSimplifiedLayerNormalization with a bias: no rule reads it.
    for (op, arity, outputs) in [
        ("FastGelu", 1, 1),
        ("SkipSimplifiedLayerNormalization", 4, 4),
    ] {
        let g = call_graph(op, arity, outputs, None);
        assert!(bodies_for(&g).is_empty(), "{op} with {arity} inputs");
    }
    assert!(!is_known("com.microsoft", "GroupQueryAttention"));
}
