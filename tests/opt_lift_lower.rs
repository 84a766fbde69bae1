//! Lifting a graph into the e-graph and lowering it without rewrites gives back an equivalent
//! graph: same interface, same ops, same initializers.

mod common;

use common::*;
use egg::Language;
use mobius::ir::{DType, Graph};
use mobius::models::build_model;
use mobius::opt::lang::Onnx;
use mobius::opt::lift::lift;
use mobius::opt::lower::{lower, Picked};
use mobius::rulebook::contrib_functions::ContribFunctions;

fn round_trip(graph: &Graph) -> Graph {
    let lifted = lift(graph).unwrap();
    let eg = &lifted.egraph;
    // Without rewrites every class has its original node; prefer it over folded constants.
    let chosen = |class: egg::Id| -> Onnx {
        let nodes = &eg[class].nodes;
        nodes
            .iter()
            .find(|n| !matches!(n, Onnx::Const(_)))
            .unwrap_or(&nodes[0])
            .clone()
            .map_children(|c| eg.find(c))
    };
    let picked = Picked::new(eg, lifted.root, &chosen, lifted.names.clone()).unwrap();
    lower(graph, picked).unwrap()
}

fn assert_equivalent(a: &Graph, b: &Graph, what: &str) {
    assert_eq!(a.inputs, b.inputs, "{what}: inputs");
    assert_eq!(a.outputs, b.outputs, "{what}: outputs");
    // Hash-consing merges identical nodes (CSE), so counts may only shrink.
    let (ca, cb) = (a.op_counts(), b.op_counts());
    assert_eq!(
        ca.keys().collect::<Vec<_>>(),
        cb.keys().collect::<Vec<_>>(),
        "{what}: op kinds"
    );
    assert!(
        ca.iter().all(|(op, n)| cb[op] <= *n && cb[op] > 0),
        "{what}: {ca:?} → {cb:?}"
    );
    let names = |g: &Graph| {
        g.initializers
            .iter()
            .map(|i| i.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(a), names(b), "{what}: initializers");
    let signatures = |g: &Graph| {
        let mut v: Vec<String> = g
            .nodes
            .iter()
            .map(|n| format!("{} {:?}", n.op_type, n.attrs))
            .collect();
        v.sort();
        v
    };
    let (sa, sb) = (signatures(a), signatures(b));
    assert!(
        sb.iter().all(|s| sa.contains(s)),
        "{what}: node attributes changed"
    );
}

#[test]
fn fixtures_and_published_configs_round_trip() {
    let mut dirs: Vec<_> = ["llama", "qwen2", "mistral", "llama-bf16-sharded"]
        .iter()
        .map(|f| fixture(f))
        .collect();
    dirs.extend(
        ["llama-3.2-1b", "qwen2.5-0.5b", "llama-3-70b"]
            .iter()
            .map(|c| real_config(c)),
    );
    for dir in dirs {
        let cfg = mobius::models::load_config(&dir.join("config.json")).unwrap();
        for dtype in [DType::F32, DType::F16] {
            let model = build_model(&cfg, dtype).unwrap();
            let back = round_trip(&model.graph);
            let what = format!("{} {dtype}", dir.display());
            assert_equivalent(&model.graph, &back, &what);
            if !cfg.layer_windows.iter().any(Option::is_some) {
                assert_eq!(
                    model.graph.nodes.len(),
                    back.nodes.len(),
                    "{what}: no duplicate nodes to merge"
                );
            }
        }
    }
}

#[test]
fn analysis_infers_the_declared_output_types() {
    let cfg = mobius::models::load_config(&fixture("qwen2").join("config.json")).unwrap();
    let model = build_model(&cfg, DType::F16).unwrap();
    let lifted = lift(&model.graph).unwrap();
    let eg = &lifted.egraph;
    let Onnx::Root(outs) = eg[lifted.root].nodes[0].clone() else {
        panic!("root")
    };
    for (out, class) in model.graph.outputs.iter().zip(outs) {
        let ty = eg[class].data.tensor().unwrap();
        assert_eq!(
            ty,
            &mobius::ops::types::TensorType::of(out.dtype, &out.shape),
            "{}",
            out.name
        );
    }
}

#[test]
fn unknown_ops_take_their_types_from_value_info() {
    use mobius::ir::{GraphBuilder, Shape, ValueInfo};
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, Shape::new([2i64, 5]));
    b.output("y", DType::F32, Shape::new([2i64, 5]));
    let s = b.op("GridSample", &[&x], vec![]);
    b.op_into("Relu", &[&s], vec![], "y");
    let mut graph = b.finish();
    let lifted = lift(&graph).unwrap();
    let unknown_op = |l: &mobius::opt::lift::Lifted| {
        let (_, id) = l.names.iter().find(|(n, _)| *n == s).unwrap();
        l.egraph[*id].data.tensor().unwrap().clone()
    };
    assert_eq!(
        unknown_op(&lifted).shape,
        None,
        "no inference rule for GridSample"
    );
    graph.value_info.push(ValueInfo {
        name: s.clone(),
        dtype: DType::F32,
        shape: Shape::new([2i64, 5]),
    });
    let lifted = lift(&graph).unwrap();
    let declared = mobius::ops::types::TensorType::of(DType::F32, &Shape::new([2i64, 5]));
    assert_eq!(unknown_op(&lifted), declared);
    let back = round_trip(&graph);
    assert_eq!(
        back.value_info, graph.value_info,
        "value_info of surviving values is kept"
    );
}

/// An exported graph may declare a cache length as `seq + past` where inference computes
/// `past + seq`: symbolic sums compare in any order, so it is checked and optimized (it was
/// refused as "declared … but computes …").
#[test]
fn symbolic_sums_in_another_order_are_the_same_dim() {
    use mobius::ir::{GraphBuilder, Shape};
    let mut b = GraphBuilder::new("g");
    let past = b.input(
        "past",
        DType::F32,
        Shape::new(vec![
            mobius::ir::Dim::Fixed(1),
            mobius::ir::Dim::sym("past"),
            mobius::ir::Dim::Fixed(4),
        ]),
    );
    let cur = b.input(
        "cur",
        DType::F32,
        Shape::new(vec![
            mobius::ir::Dim::Fixed(1),
            mobius::ir::Dim::sym("seq"),
            mobius::ir::Dim::Fixed(4),
        ]),
    );
    b.output(
        "y",
        DType::F32,
        Shape::new(vec![
            mobius::ir::Dim::Fixed(1),
            mobius::ir::Dim::sym("seq + past"),
            mobius::ir::Dim::Fixed(4),
        ]),
    );
    b.op_into(
        "Concat",
        &[&past, &cur],
        vec![("axis", mobius::ir::Attr::Int(1))],
        "y",
    );
    let graph = b.finish();
    mobius::opt::pipeline::check_output_types(&graph, "the test graph").unwrap();
    let model = mobius::ir::Model {
        graph,
        opsets: std::collections::BTreeMap::from([(String::new(), 24)]),
        ir_version: 11,
        producer_name: "test".into(),
        producer_version: "0".into(),
    };
    let opts = optimize_options(DType::F32, mobius::opt::Role::Decoder);
    mobius::rulebook::optimize(&model, &mobius::get_ep("cpu").unwrap(), &opts).unwrap();
}

/// What the legacy (TorchScript) exporter writes for positions: `Constant` nodes for the
/// bounds and `Gather(Shape(x))` for the limit, with no declared intermediate types. qnn has
/// no `Range`: its lowering needs the bounds' dtypes, which come from the Constant nodes'
/// attributes and from Shape/Gather/Squeeze inference.
#[test]
fn range_bounds_from_constant_nodes_and_shapes_lower_for_qnn() {
    use mobius::ir::{Attr, Dim, GraphBuilder, Shape};
    for squeeze in [false, true] {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, Shape::new(vec![Dim::sym("n")]));
        b.output("y", DType::F32, Shape::new(vec![Dim::sym("n")]));
        let zero = b.op("Constant", &[], vec![("value_int", Attr::Int(0))]);
        let one = b.op("Constant", &[], vec![("value_int", Attr::Int(1))]);
        let shape = b.op("Shape", &[&x], vec![]);
        let limit = if squeeze {
            b.op("Squeeze", &[&shape], vec![])
        } else {
            let first = b.op("Constant", &[], vec![("value_int", Attr::Int(0))]);
            b.op("Gather", &[&shape, &first], vec![("axis", Attr::Int(0))])
        };
        let positions = b.op("Range", &[&zero, &limit, &one], vec![]);
        let positions = b.op("Cast", &[&positions], vec![("to", Attr::Int(1))]);
        b.op_into("Add", &[&x, &positions], vec![], "y");
        let model = mobius::ir::Model {
            graph: b.finish(),
            opsets: std::collections::BTreeMap::from([(String::new(), 18)]),
            ir_version: 8,
            producer_name: "test".into(),
            producer_version: "0".into(),
        };
        let opts = optimize_options(DType::F32, mobius::opt::Role::Decoder);
        let (out, _) = mobius::rulebook::optimize(&model, &mobius::get_ep("qnn").unwrap(), &opts)
            .unwrap_or_else(|e| panic!("squeeze={squeeze}: {e}"));
        let ops: Vec<&str> = out.graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert!(
            ops.contains(&"CumSum") && !ops.contains(&"Range"),
            "{ops:?}"
        );
    }
}

/// The root classes' types of the lifted graph.
fn lifted_output_types(graph: &Graph) -> Vec<Option<mobius::ops::types::TensorType>> {
    let lifted = lift(graph).unwrap();
    let eg = &lifted.egraph;
    let Onnx::Root(outs) = eg[lifted.root].nodes[0].clone() else {
        panic!("root")
    };
    outs.iter()
        .map(|&class| eg[class].data.tensor().cloned())
        .collect()
}

#[test]
fn one_inference_pass_gives_the_output_types_lifting_gives() {
    use mobius::opt::lift::output_types;
    let mut graphs: Vec<(String, Graph)> = Vec::new();
    for name in decoder_fixtures() {
        let cfg = fixture_config(&name);
        graphs.push((
            format!("{name} f32"),
            build_model(&cfg, DType::F32).unwrap().graph,
        ));
        graphs.push((
            format!("{name} cuda f16"),
            optimized(&cfg, "cuda", DType::F16),
        ));
    }
    for name in ["llama", "qwen2"] {
        for ep in ["cpu", "qnn", "onnx-standard"] {
            graphs.push((
                format!("{name} {ep}"),
                optimized(&fixture_config(name), ep, DType::F32),
            ));
        }
    }
    let exports = fixture("exports");
    let mut exported: Vec<_> = std::fs::read_dir(&exports)
        .unwrap()
        .map(|e| e.unwrap().path().join("model.onnx"))
        .filter(|p| p.exists())
        .collect();
    exported.extend(
        std::fs::read_dir(fixture("recognize"))
            .unwrap()
            .map(|e| e.unwrap().path()),
    );
    exported.sort();
    assert!(exported.len() >= 10, "{exported:?}");
    for path in exported {
        let model = mobius::onnx::import::load(&path, &ContribFunctions).unwrap();
        graphs.push((path.display().to_string(), model.graph));
    }
    for (what, graph) in &graphs {
        let types = output_types(graph).unwrap();
        assert_eq!(types, lifted_output_types(graph), "{what}");
        assert!(types.iter().all(Option::is_some), "{what}: {types:?}");
    }
}
