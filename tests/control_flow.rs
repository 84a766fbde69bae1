//! Control flow in the IR: what a subgraph reads from its enclosing scopes, renaming those
//! reads (shadowing respected), initializers moved out of subgraphs at import (renamed where two
//! share a name), the interpreter running the result, and the file written back.

use std::collections::HashMap;
use std::path::Path;

use mobius::interp::run_graph;
use mobius::ir::{Attr, DType, Graph, Node, Shape, ValueInfo};
use mobius::onnx::proto::{self, attribute_type as at};
use mobius::onnx::{export, import};
use mobius::ops::Tensor;
use mobius::rulebook::contrib_functions::ContribFunctions;
use mobius::weights::eval::Evaluator;
use prost::Message;
use rustc_hash::FxHashMap;

fn node(op: &str, inputs: &[&str], output: &str) -> Node {
    Node {
        name: format!("{output}_node"),
        op_type: op.into(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![output.into()],
        ..Node::default()
    }
}

fn with_graph(mut n: Node, name: &str, g: Graph) -> Node {
    n.attrs.insert(name.into(), Attr::Graph(Box::new(g)));
    n
}

fn scalar(name: &str) -> ValueInfo {
    ValueInfo::new(name, DType::F32, Shape::new(Vec::<i64>::new()))
}

/// then-branch: `t = Neg(a)`, then a nested `If` whose branch reads `a` and `t`; out = `u`.
fn branch() -> Graph {
    let inner = Graph {
        nodes: vec![node("Add", &["a", "t"], "w")],
        outputs: vec![scalar("w")],
        ..Graph::default()
    };
    Graph {
        nodes: vec![
            node("Neg", &["a"], "t"),
            with_graph(
                with_graph(node("If", &["c"], "u"), "then_branch", inner.clone()),
                "else_branch",
                inner,
            ),
        ],
        outputs: vec![scalar("u")],
        ..Graph::default()
    }
}

#[test]
fn free_values_are_the_reads_of_enclosing_scopes_nested_ones_included() {
    let g = branch();
    assert_eq!(g.free_values(), ["a", "c"]);
    let n = with_graph(node("If", &["c0"], "y"), "then_branch", g);
    assert_eq!(n.captures(), ["a", "c"]);
    assert_eq!(n.reads(), ["c0", "a", "c"]);
}

#[test]
fn renaming_free_values_leaves_names_the_subgraph_defines() {
    let mut g = branch();
    let map: FxHashMap<String, String> = [("a", "z"), ("t", "q")]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    g.rename_free(&map);
    assert_eq!(g.nodes[0].inputs, ["z"]);
    let Some(Attr::Graph(inner)) = g.nodes[1].attrs.get("then_branch") else {
        panic!("the nested branch is gone");
    };
    // `a` is read from two scopes out and renamed; `t` is the branch's own value and is not.
    assert_eq!(inner.nodes[0].inputs, ["z", "t"]);
    assert_eq!(g.free_values(), ["z", "c"]);
}

fn tensor_proto(name: &str, v: f32) -> proto::TensorProto {
    proto::TensorProto {
        name: name.into(),
        data_type: DType::F32.onnx_code(),
        raw_data: v.to_le_bytes().to_vec(),
        ..Default::default()
    }
}

fn value_proto(name: &str, elem: DType) -> proto::ValueInfoProto {
    proto::ValueInfoProto {
        name: name.into(),
        r#type: Some(proto::TypeProto {
            tensor_type: Some(proto::TypeProtoTensor {
                elem_type: elem.onnx_code(),
                shape: Some(proto::TensorShapeProto { dim: vec![] }),
            }),
        }),
        ..Default::default()
    }
}

/// `y = If(c)`, each branch `Add(x, k)` with its own initializer `k` (1 and 2); the main
/// graph's value `k` is `x * 10`, so all three share a name.
fn shared_name_model() -> Vec<u8> {
    let branch = |out: &str, k: f32| proto::GraphProto {
        name: out.into(),
        node: vec![proto::NodeProto {
            input: vec!["x".into(), "k".into()],
            output: vec![out.into()],
            op_type: "Add".into(),
            ..Default::default()
        }],
        initializer: vec![tensor_proto("k", k)],
        output: vec![value_proto(out, DType::F32)],
        ..Default::default()
    };
    let graph_attr = |name: &str, g: proto::GraphProto| proto::AttributeProto {
        name: name.into(),
        r#type: at::GRAPH,
        g: Some(Box::new(g)),
        ..Default::default()
    };
    let graph = proto::GraphProto {
        name: "g".into(),
        node: vec![
            proto::NodeProto {
                input: vec!["x".into(), "ten".into()],
                output: vec!["k".into()],
                op_type: "Mul".into(),
                ..Default::default()
            },
            proto::NodeProto {
                input: vec!["c".into()],
                output: vec!["y".into()],
                op_type: "If".into(),
                attribute: vec![
                    graph_attr("else_branch", branch("e", 2.0)),
                    graph_attr("then_branch", branch("t", 1.0)),
                ],
                ..Default::default()
            },
            proto::NodeProto {
                input: vec!["y".into(), "k".into()],
                output: vec!["z".into()],
                op_type: "Add".into(),
                ..Default::default()
            },
        ],
        initializer: vec![tensor_proto("ten", 10.0)],
        input: vec![value_proto("x", DType::F32), value_proto("c", DType::Bool)],
        output: vec![value_proto("z", DType::F32)],
        ..Default::default()
    };
    proto::ModelProto {
        ir_version: 10,
        opset_import: vec![proto::OperatorSetIdProto {
            domain: String::new(),
            version: 21,
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

fn run(graph: &Graph, x: f32, c: bool) -> f32 {
    let inputs = HashMap::from([
        ("x".to_string(), Tensor::float(DType::F32, vec![], vec![x])),
        ("c".to_string(), Tensor::bool(vec![], vec![c])),
    ]);
    let out = run_graph(graph, &inputs, &mut Evaluator::new(None)).unwrap();
    out["z"].floats().unwrap()[0]
}

#[test]
fn subgraph_initializers_move_to_the_main_graph_renamed_where_names_clash() {
    let model =
        import::decode(&shared_name_model(), Path::new("m.onnx"), &ContribFunctions).unwrap();
    let names: Vec<&str> = model
        .graph
        .initializers
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(names, ["ten", "k__else_branch_1", "k__then_branch_1"]);
    let if_node = &model.graph.nodes[1];
    assert_eq!(
        if_node.captures(),
        ["x", "k__else_branch_1", "k__then_branch_1"]
    );
    // z = (x + k_branch) + 10x
    assert_eq!(run(&model.graph, 0.5, true), 0.5 + 1.0 + 5.0);
    assert_eq!(run(&model.graph, 0.5, false), 0.5 + 2.0 + 5.0);

    // Written and read back: the same graph.
    let dir = tempfile::tempdir().unwrap();
    export::save(
        &model,
        dir.path(),
        &mut Evaluator::new(None),
        &indicatif::ProgressBar::hidden(),
        &ContribFunctions,
    )
    .unwrap();
    let again = import::load(&dir.path().join("model.onnx"), &ContribFunctions).unwrap();
    assert_eq!(again.graph.nodes, model.graph.nodes);
    assert_eq!(run(&again.graph, 0.5, true), 6.5);
}

#[test]
fn a_subgraph_reading_a_value_computed_after_its_node_is_refused() {
    // The branch reads `late`, which the main graph computes after the If.
    let g = Graph {
        inputs: vec![ValueInfo::new(
            "c",
            DType::Bool,
            Shape::new(Vec::<i64>::new()),
        )],
        nodes: vec![
            with_graph(
                with_graph(
                    node("If", &["c"], "y"),
                    "then_branch",
                    Graph {
                        nodes: vec![node("Neg", &["late"], "o")],
                        outputs: vec![scalar("o")],
                        ..Graph::default()
                    },
                ),
                "else_branch",
                Graph {
                    nodes: vec![node("Neg", &["late"], "o2")],
                    outputs: vec![scalar("o2")],
                    ..Graph::default()
                },
            ),
            node("Identity", &["y"], "late"),
        ],
        outputs: vec![scalar("late")],
        ..Graph::default()
    };
    let e = mobius::onnx::order::check_order(&g).unwrap_err();
    assert!(e.contains("reads value `late`"), "{e}");
    let e = g.validate().unwrap_err().to_string();
    assert!(e.contains("`late` before it is defined"), "{e}");
}
