//! The reference interpreter: evaluates any IR graph on concrete inputs, computing in f32
//! (f16/bf16 rounded at op boundaries), each node by its op's evaluator in the op registry
//! ([`crate::ops`]). An op without one is an error naming the op.

pub mod inputs;
pub mod npy;
mod rng;
pub mod run;

use crate::ir::{Attrs, Node};
use crate::limits::InterpLimits;
use crate::ops::{OpCall, Tensor};
use crate::{Error, Result};
pub use rng::Rng;
pub use run::{run_graph, run_graph_with};

/// Evaluates one op outside a graph: a node named `name` (errors name it) running `domain::op`
/// with `attrs` on `inputs` (`None`: an absent optional input), writing the outputs named in
/// `outputs` (an empty name: an optional output not asked for), within `limits`. A control-flow
/// op runs its subgraphs when they read nothing from outside them (e.g. a `Scan` body of its
/// own inputs and constants); one that does is an error.
pub fn eval_op(
    name: &str,
    (domain, op): (&str, &str),
    attrs: Attrs,
    inputs: &[Option<&Tensor>],
    outputs: &[&str],
    limits: &InterpLimits,
) -> Result<Vec<Tensor>> {
    let node = Node {
        name: name.to_string(),
        domain: domain.to_string(),
        op_type: op.to_string(),
        inputs: inputs
            .iter()
            .enumerate()
            .map(|(i, t)| t.map_or_else(String::new, |_| format!("in{i}")))
            .collect(),
        outputs: outputs.iter().map(|o| o.to_string()).collect(),
        attrs,
    };
    run::with_closed_scope(limits, |scope| {
        eval_node(&OpCall {
            node: &node,
            inputs: inputs.to_vec(),
            limits,
            scope: Some(scope),
        })
    })
}

/// Every op the interpreter implements, as `(domain, op type)` (domain `""` for ONNX's
/// default domain), in registry order.
pub fn implemented_ops() -> impl Iterator<Item = (&'static str, &'static str)> {
    crate::ops::all()
        .filter(|def| def.eval.is_some())
        .map(|def| (def.domain, def.op))
}

/// Evaluates one node with its op's evaluator. Every error names the node: one that does not
/// yet (from a shared helper) gets the node's op and name in front.
pub fn eval_node(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let tag = call.tag();
    dispatch(call).map_err(|e| match e {
        Error::Graph(m) if !m.contains(&tag) => Error::Graph(format!("{tag}: {m}")),
        e => e,
    })
}

/// Evaluates one node with the registered evaluator of its domain and op type.
fn dispatch(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (domain, op) = (call.node.domain.as_str(), call.node.op_type.as_str());
    if let Some(eval) = crate::ops::find_in(domain, op).and_then(|def| def.eval) {
        return eval(call);
    }
    let name = if domain.is_empty() {
        op.to_string()
    } else {
        format!("{domain}::{op}")
    };
    Err(Error::Graph(format!(
        "the reference interpreter does not implement `{name}`"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Tensor;

    /// The list of ops the onnxruntime cross-check (tests/ort/test_interp_ops.py) must cover.
    const CROSS_CHECKED: &str = include_str!("../../tests/ort/interp_ops.txt");

    /// How the list names an op: `Op`, or `domain.Op` outside ONNX's default domain.
    fn listed_name((domain, op): (&str, &str)) -> String {
        if domain.is_empty() {
            op.to_string()
        } else {
            format!("{domain}.{op}")
        }
    }

    #[test]
    fn the_cross_checked_op_list_is_the_dispatch_table() {
        let mut want: Vec<String> = implemented_ops().map(listed_name).collect();
        want.sort();
        let listed: Vec<&str> = CROSS_CHECKED
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        assert_eq!(
            listed,
            want,
            "tests/ort/interp_ops.txt must list exactly the dispatched ops, sorted; expected:\n{}",
            want.join("\n")
        );
    }

    #[test]
    fn an_op_of_the_ai_onnx_domain_is_the_default_domain_op() {
        let x = Tensor::float(crate::ir::DType::F32, vec![2], vec![1.0, -2.0]);
        let y = eval_op(
            "n",
            ("ai.onnx", "Neg"),
            Attrs::new(),
            &[Some(&x)],
            &["y"],
            &InterpLimits::default(),
        )
        .unwrap();
        assert_eq!(y[0].floats().unwrap(), &[-1.0, 2.0]);
        let err = eval_op(
            "n",
            ("com.microsoft", "Neg"),
            Attrs::new(),
            &[Some(&x)],
            &["y"],
            &InterpLimits::default(),
        )
        .unwrap_err();
        assert!(err
            .to_string()
            .contains("does not implement `com.microsoft::Neg`"));
    }

    /// A `Scan` running sum over `[3]`, its body adding `extra` to the state: `extra` is the
    /// body's second input (closed) or a value of the enclosing graph (open).
    fn running_sum(closed: bool) -> Result<Vec<Tensor>> {
        use crate::ir::{Attr, DType, GraphBuilder, Shape};
        let mut body = GraphBuilder::new("body");
        let sum = body.input("sum", DType::F32, Shape(vec![]));
        let step = body.input("step", DType::F32, Shape(vec![]));
        let extra = if closed { step.as_str() } else { "outer" };
        body.op_into("Add", &[&sum, extra], vec![], "next");
        body.op_into("Identity", &["next"], vec![], "seen");
        body.output("next", DType::F32, Shape(vec![]));
        body.output("seen", DType::F32, Shape(vec![]));
        let attrs = [
            ("body".to_string(), Attr::Graph(Box::new(body.finish()))),
            ("num_scan_inputs".to_string(), Attr::Int(1)),
        ];
        let zero = Tensor::float(DType::F32, vec![], vec![0.0]);
        let xs = Tensor::float(DType::F32, vec![3], vec![1.0, 2.0, 3.0]);
        eval_op(
            "scan",
            ("", "Scan"),
            attrs.into_iter().collect(),
            &[Some(&zero), Some(&xs)],
            &["sum", "sums"],
            &InterpLimits::default(),
        )
    }

    #[test]
    fn a_control_flow_op_runs_a_closed_subgraph_outside_a_graph() {
        let out = running_sum(true).unwrap();
        assert_eq!(out[0].floats().unwrap(), &[6.0]);
        assert_eq!(out[1].floats().unwrap(), &[1.0, 3.0, 6.0]);
        let err = running_sum(false).unwrap_err().to_string();
        assert!(err.contains("outer"), "{err}");
    }
}
