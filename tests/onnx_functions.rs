//! Model-local functions are expanded at their call sites on import (attribute references
//! resolved from the call, nested calls too), so the optimizer and the interpreter see plain
//! nodes.

use std::collections::HashMap;
use std::path::Path;

use mobius::interp::run_graph;

use mobius::ir::DType;
use mobius::onnx::import;
use mobius::onnx::proto::{
    attribute_type, AttributeProto, Dimension, DimensionValue, FunctionProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto, TypeProtoTensor,
    ValueInfoProto,
};
use mobius::ops::Tensor;
use mobius::rulebook::contrib_functions::ContribFunctions;
use mobius::weights::eval::Evaluator;
use prost::Message;

fn node(
    op: &str,
    domain: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: format!("{op}_node"),
        op_type: op.into(),
        domain: domain.into(),
        attribute: attrs,
        ..Default::default()
    }
}

fn value(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: [2i64, 3]
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(DimensionValue::DimValue(d)),
                        })
                        .collect(),
                }),
            }),
        }),
        ..Default::default()
    }
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: v,
        ..Default::default()
    }
}

/// `local::SoftmaxPlus(X; axis) = Softmax(X; axis=@axis) + X`, and
/// `local::Twice(X) = SoftmaxPlus(SoftmaxPlus(X; axis=0); axis=1)` (a nested call).
fn model() -> ModelProto {
    let softmax_plus = FunctionProto {
        name: "SoftmaxPlus".into(),
        domain: "local".into(),
        input: vec!["X".into()],
        output: vec!["Y".into()],
        attribute: vec!["axis".into()],
        node: vec![
            node(
                "Softmax",
                "",
                &["X"],
                &["S"],
                vec![AttributeProto {
                    name: "axis".into(),
                    r#type: attribute_type::INT,
                    ref_attr_name: "axis".into(),
                    ..Default::default()
                }],
            ),
            node("Add", "", &["S", "X"], &["Y"], vec![]),
        ],
        ..Default::default()
    };
    let twice = FunctionProto {
        name: "Twice".into(),
        domain: "local".into(),
        input: vec!["A".into()],
        output: vec!["B".into()],
        node: vec![
            node(
                "SoftmaxPlus",
                "local",
                &["A"],
                &["M"],
                vec![int_attr("axis", 0)],
            ),
            node(
                "SoftmaxPlus",
                "local",
                &["M"],
                &["B"],
                vec![int_attr("axis", 1)],
            ),
        ],
        ..Default::default()
    };
    ModelProto {
        ir_version: 11,
        opset_import: vec![
            OperatorSetIdProto {
                domain: String::new(),
                version: 24,
            },
            OperatorSetIdProto {
                domain: "local".into(),
                version: 1,
            },
        ],
        graph: Some(GraphProto {
            name: "g".into(),
            node: vec![node("Twice", "local", &["x"], &["y"], vec![])],
            input: vec![value("x")],
            output: vec![value("y")],
            ..Default::default()
        }),
        functions: vec![softmax_plus, twice],
        ..Default::default()
    }
}

fn softmax_plus(x: &[f32], axis: usize) -> Vec<f32> {
    let (rows, cols) = (2, 3);
    let mut out = x.to_vec();
    let lines: Vec<Vec<usize>> = if axis == 1 {
        (0..rows)
            .map(|r| (0..cols).map(|c| r * cols + c).collect())
            .collect()
    } else {
        (0..cols)
            .map(|c| (0..rows).map(|r| r * cols + c).collect())
            .collect()
    };
    for line in lines {
        let max = line.iter().map(|&i| x[i]).fold(f32::MIN, f32::max);
        let sum: f32 = line.iter().map(|&i| (x[i] - max).exp()).sum();
        for &i in &line {
            out[i] = (x[i] - max).exp() / sum + x[i];
        }
    }
    out
}

#[test]
fn nested_functions_expand_and_evaluate() {
    let m = import::decode(
        &model().encode_to_vec(),
        Path::new("f.onnx"),
        &ContribFunctions,
    )
    .unwrap();
    let ops: Vec<&str> = m.graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(ops, ["Softmax", "Add", "Softmax", "Add"]);
    let axes: Vec<_> = m
        .graph
        .nodes
        .iter()
        .filter_map(|n| n.attrs.get("axis").cloned())
        .collect();
    assert_eq!(axes, [mobius::ir::Attr::Int(0), mobius::ir::Attr::Int(1)]);
    let x = vec![0.5f32, -1.0, 2.0, 0.25, 1.5, -0.75];
    let inputs = HashMap::from([(
        "x".to_string(),
        Tensor::float(DType::F32, vec![2, 3], x.clone()),
    )]);
    let out = run_graph(&m.graph, &inputs, &mut Evaluator::new(None)).unwrap();
    let want = softmax_plus(&softmax_plus(&x, 0), 1);
    let got = out["y"].floats().unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
}

#[test]
fn recursive_functions_are_an_error() {
    let mut m = model();
    m.functions[1].node[1].op_type = "Twice".into();
    let err = import::decode(&m.encode_to_vec(), Path::new("f.onnx"), &ContribFunctions)
        .unwrap_err()
        .to_string();
    assert!(err.contains("nests more than"), "{err}");
}

/// A function output the call leaves unnamed may still be read inside the body: it keeps an
/// internal name instead of becoming an absent value.
#[test]
fn unnamed_function_outputs_read_inside_the_body_keep_their_values() {
    let mut m = model();
    // SoftmaxPlus also returns its Softmax (`S`), which its Add reads; calls name only `Y`.
    m.functions[0].output.push("S".into());
    for call in &mut m.functions[1].node {
        call.output.push(String::new());
    }
    let m = import::decode(&m.encode_to_vec(), Path::new("f.onnx"), &ContribFunctions).unwrap();
    assert!(m
        .graph
        .nodes
        .iter()
        .all(|n| n.inputs.iter().chain(&n.outputs).all(|v| !v.is_empty())));
    let x = vec![0.5f32, -1.0, 2.0, 0.25, 1.5, -0.75];
    let inputs = HashMap::from([(
        "x".to_string(),
        Tensor::float(DType::F32, vec![2, 3], x.clone()),
    )]);
    let out = run_graph(&m.graph, &inputs, &mut Evaluator::new(None)).unwrap();
    let want = softmax_plus(&softmax_plus(&x, 0), 1);
    for (g, w) in out["y"].floats().unwrap().iter().zip(&want) {
        assert!((g - w).abs() < 1e-6);
    }
}
