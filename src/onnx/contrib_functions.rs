//! Standard-ONNX bodies of the contrib ops mobius emits, written into each model that calls
//! them as model-local functions: a runtime without the contrib kernel can inline the body,
//! while onnxruntime keeps its kernel. Only ops whose every call fits the body get one:
//! SkipSimplifiedLayerNormalization, SkipLayerNormalization, BiasGelu, FastGelu.

use super::proto::{self, attribute_type as at, AttributeProto, FunctionProto, NodeProto};
use crate::ir::Graph;

/// The default-domain opset the bodies use.
const BODY_OPSET: i64 = 24;
/// onnxruntime's default `epsilon` of the Skip*Normalization ops.
const SKIP_NORM_EPSILON: f32 = 1e-12;

/// A function body and how many of its leading inputs every call must give (the rest are
/// optional inputs the body tolerates being absent).
struct Body {
    function: FunctionProto,
    required_inputs: usize,
}

/// Every body mobius writes.
fn all_bodies() -> [Body; 4] {
    [
        Body {
            function: skip_simplified_layer_norm(),
            required_inputs: 3,
        },
        Body {
            function: skip_layer_norm(),
            required_inputs: 3,
        },
        Body {
            function: bias_gelu(),
            required_inputs: 2,
        },
        Body {
            function: fast_gelu(),
            required_inputs: 2,
        },
    ]
}

/// Whether mobius writes the body of `domain::name` itself (such calls are kept as the op on
/// import; the body is attached again on save).
pub fn is_known(domain: &str, name: &str) -> bool {
    all_bodies()
        .iter()
        .any(|b| b.function.domain == domain && b.function.name == name)
}

/// The function bodies for the contrib ops `graph` calls, in a fixed order.
pub fn bodies_for(graph: &Graph) -> Vec<FunctionProto> {
    all_bodies()
        .into_iter()
        .filter(|b| {
            let f = &b.function;
            let mut calls = graph
                .nodes
                .iter()
                .filter(|n| n.domain == f.domain && n.op_type == f.name)
                .peekable();
            calls.peek().is_some()
                && calls.all(|n| {
                    n.inputs.len() <= f.input.len()
                        && n.outputs.len() <= f.output.len()
                        && n.inputs.len() >= b.required_inputs
                        && n.inputs[..b.required_inputs].iter().all(|i| !i.is_empty())
                })
        })
        .map(|b| b.function)
        .collect()
}

/// `SkipSimplifiedLayerNormalization(input, skip, gamma; epsilon)`: `sum = input + skip`,
/// `output = RMSNormalization(sum, gamma)`; `mean` and `inv_std_var` are placeholders (0).
fn skip_simplified_layer_norm() -> FunctionProto {
    skip_norm(
        "SkipSimplifiedLayerNormalization",
        &["input", "skip", "gamma"],
        &["output", "mean", "inv_std_var", "input_skip_bias_sum"],
        vec![
            node("Add", &["input", "skip"], &["input_skip_bias_sum"], vec![]),
            node(
                "RMSNormalization",
                &["input_skip_bias_sum", "gamma"],
                &["output"],
                vec![int_attr("axis", -1), epsilon_ref()],
            ),
            node("Constant", &[], &["mean"], vec![zero_floats()]),
            node("Constant", &[], &["inv_std_var"], vec![zero_floats()]),
        ],
    )
}

/// `SkipLayerNormalization(input, skip, gamma, beta; epsilon)`: `sum = input + skip`, then a
/// three-output `LayerNormalization(sum, gamma, beta)` over the last axis.
fn skip_layer_norm() -> FunctionProto {
    skip_norm(
        "SkipLayerNormalization",
        &["input", "skip", "gamma", "beta"],
        &["output", "mean", "inv_std_var", "input_skip_bias_sum"],
        vec![
            node("Add", &["input", "skip"], &["input_skip_bias_sum"], vec![]),
            node(
                "LayerNormalization",
                &["input_skip_bias_sum", "gamma", "beta"],
                &["output", "mean", "inv_std_var"],
                vec![int_attr("axis", -1), epsilon_ref()],
            ),
        ],
    )
}

/// `BiasGelu(A, B)`: the exact (erf) GELU of `A + B`, as onnxruntime's kernel computes it.
fn bias_gelu() -> FunctionProto {
    gelu_of_sum("BiasGelu", "none")
}

/// `FastGelu(X, bias)`: the tanh GELU of `X + bias`.
fn fast_gelu() -> FunctionProto {
    gelu_of_sum("FastGelu", "tanh")
}

fn gelu_of_sum(name: &str, approximate: &str) -> FunctionProto {
    function(
        name,
        &["input", "bias"],
        &["output"],
        vec![
            node("Add", &["input", "bias"], &["sum"], vec![]),
            node(
                "Gelu",
                &["sum"],
                &["output"],
                vec![AttributeProto {
                    name: "approximate".to_string(),
                    r#type: at::STRING,
                    s: approximate.as_bytes().to_vec(),
                    ..Default::default()
                }],
            ),
        ],
    )
}

/// A Skip*Normalization body: [`function`] whose `epsilon` defaults to onnxruntime's.
fn skip_norm(
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    nodes: Vec<NodeProto>,
) -> FunctionProto {
    FunctionProto {
        attribute_proto: vec![AttributeProto {
            name: "epsilon".to_string(),
            r#type: at::FLOAT,
            f: SKIP_NORM_EPSILON,
            ..Default::default()
        }],
        ..function(name, inputs, outputs, nodes)
    }
}

/// A `com.microsoft` function over opset-24 standard ops.
fn function(name: &str, inputs: &[&str], outputs: &[&str], nodes: Vec<NodeProto>) -> FunctionProto {
    FunctionProto {
        name: name.to_string(),
        domain: "com.microsoft".to_string(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        node: nodes,
        opset_import: vec![proto::OperatorSetIdProto {
            domain: String::new(),
            version: BODY_OPSET,
        }],
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: op.to_string(),
        name: format!("{op}_{}", outputs[0]),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute,
        ..Default::default()
    }
}

fn int_attr(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: name.to_string(),
        r#type: at::INT,
        i: value,
        ..Default::default()
    }
}

/// `epsilon`, taken from the call.
fn epsilon_ref() -> AttributeProto {
    AttributeProto {
        name: "epsilon".to_string(),
        r#type: at::FLOAT,
        ref_attr_name: "epsilon".to_string(),
        ..Default::default()
    }
}

fn zero_floats() -> AttributeProto {
    AttributeProto {
        name: "value_floats".to_string(),
        r#type: at::FLOATS,
        floats: vec![0.0],
        ..Default::default()
    }
}
