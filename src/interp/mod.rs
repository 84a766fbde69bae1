//! The reference interpreter: evaluates any IR graph on concrete inputs, computing in f32
//! (f16/bf16 rounded at op boundaries), one file per op family. An op it does not know is an
//! error naming the op.

pub mod attention;
pub mod elementwise;
pub mod inputs;
pub mod matmul;
pub mod moe;
pub mod norm;
pub mod npy;
pub mod quant;
pub mod reduce;
mod rng;
pub mod rope;
pub mod run;
pub mod shape;
pub mod tensor;
pub mod topk;

use crate::ir::{Attr, Attrs, Node};
use crate::limits::InterpLimits;
use crate::{Error, Result};
pub use rng::Rng;
pub use run::{run_graph, run_graph_with};
pub use tensor::{Tensor, Values};

/// What an op family's evaluator receives: the node's attributes and its inputs (`None` for
/// an absent optional input).
#[derive(Debug)]
pub struct OpCall<'a> {
    /// The node being evaluated.
    pub node: &'a Node,
    /// Its inputs, positionally.
    pub inputs: Vec<Option<&'a Tensor>>,
    /// The run's budgets: an op checks every output shape it computes with [`OpCall::alloc`]
    /// before allocating it.
    pub limits: &'a InterpLimits,
}

impl<'a> OpCall<'a> {
    /// Input `i`, which must be present.
    pub fn input(&self, i: usize) -> Result<&'a Tensor> {
        self.inputs
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| Error::Graph(format!("{}: input {i} is required", self.tag())))
    }

    /// Input `i`, if present.
    pub fn optional(&self, i: usize) -> Option<&'a Tensor> {
        self.inputs.get(i).copied().flatten()
    }

    /// The attributes.
    pub fn attrs(&self) -> &'a Attrs {
        &self.node.attrs
    }

    /// Integer attribute `name`, or `default`.
    pub fn int(&self, name: &str, default: i64) -> i64 {
        match self.node.attrs.get(name) {
            Some(Attr::Int(v)) => *v,
            _ => default,
        }
    }

    /// Float attribute `name`, or `default`.
    pub fn float(&self, name: &str, default: f32) -> f32 {
        match self.node.attrs.get(name) {
            Some(Attr::Float(v)) => *v,
            _ => default,
        }
    }

    /// Integer-list attribute `name`, if set.
    pub fn ints(&self, name: &str) -> Option<&'a [i64]> {
        match self.node.attrs.get(name) {
            Some(Attr::Ints(v)) => Some(v),
            _ => None,
        }
    }

    /// String attribute `name`, if set.
    pub fn string(&self, name: &str) -> Option<&'a str> {
        match self.node.attrs.get(name) {
            Some(Attr::String(v)) => Some(v),
            _ => None,
        }
    }

    /// The element count of an output of shape `shape`, checked against the per-tensor budget
    /// (the error names this node). Call it before allocating the output.
    pub fn alloc(&self, shape: &[usize]) -> Result<usize> {
        self.limits
            .elements(&format!("{} output", self.tag()), shape)
    }

    /// An error about this node.
    pub fn error(&self, message: impl std::fmt::Display) -> Error {
        Error::Graph(format!("{}: {message}", self.tag()))
    }

    /// How errors name this node: its op and name, or for an unnamed node the value it writes.
    pub fn tag(&self) -> String {
        let node = self.node;
        match (node.name.is_empty(), node.outputs.first()) {
            (true, Some(out)) if !out.is_empty() => {
                format!("{} node writing `{out}`", node.op_type)
            }
            (true, _) => format!("{} node (unnamed)", node.op_type),
            (false, _) => format!("{} `{}`", node.op_type, node.name),
        }
    }
}

/// Evaluates one op outside a graph: a node named `name` (errors name it) running `domain::op`
/// with `attrs` on `inputs` (`None`: an absent optional input), writing the outputs named in
/// `outputs` (an empty name: an optional output not asked for), within `limits`.
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
    eval_node(&OpCall {
        node: &node,
        inputs: inputs.to_vec(),
        limits,
    })
}

/// The domain of onnxruntime's contrib ops.
pub const CONTRIB_DOMAIN: &str = "com.microsoft";

/// How an op is evaluated: the node's outputs, from its call.
pub type OpEval = fn(&OpCall<'_>) -> Result<Vec<Tensor>>;

/// One op the interpreter implements: the dispatch table's entry.
#[derive(Debug, Clone, Copy)]
pub struct OpImpl {
    /// The op's domain: `""` for ONNX's default domain (also reached as `ai.onnx`), or
    /// [`CONTRIB_DOMAIN`].
    pub domain: &'static str,
    /// The op type.
    pub op: &'static str,
    /// Its evaluator.
    pub eval: OpEval,
}

impl OpImpl {
    /// An op of ONNX's default domain.
    pub const fn onnx(op: &'static str, eval: OpEval) -> Self {
        Self {
            domain: "",
            op,
            eval,
        }
    }

    /// An op of onnxruntime's contrib domain.
    pub const fn ms(op: &'static str, eval: OpEval) -> Self {
        Self {
            domain: CONTRIB_DOMAIN,
            op,
            eval,
        }
    }
}

/// The dispatch table, one slice per op family.
const FAMILIES: [&[OpImpl]; 10] = [
    elementwise::OPS,
    matmul::OPS,
    reduce::OPS,
    shape::OPS,
    norm::OPS,
    rope::OPS,
    attention::OPS,
    quant::OPS,
    topk::OPS,
    moe::OPS,
];

/// Every op the interpreter implements, as `(domain, op type)` (domain `""` for ONNX's
/// default domain), in dispatch order.
pub fn implemented_ops() -> impl Iterator<Item = (&'static str, &'static str)> {
    FAMILIES
        .iter()
        .flat_map(|f| f.iter())
        .map(|o| (o.domain, o.op))
}

/// Evaluates one node through the dispatch table. Every error names the node: one that
/// does not yet (from a shared helper) gets the node's op and name in front.
pub fn eval_node(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let tag = call.tag();
    dispatch(call).map_err(|e| match e {
        Error::Graph(m) if !m.contains(&tag) => Error::Graph(format!("{tag}: {m}")),
        e => e,
    })
}

/// Evaluates one node with the dispatch table's entry for its domain and op type.
fn dispatch(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (domain, op) = (call.node.domain.as_str(), call.node.op_type.as_str());
    let key = if domain == "ai.onnx" { "" } else { domain };
    if let Some(entry) = FAMILIES
        .iter()
        .flat_map(|f| f.iter())
        .find(|o| o.domain == key && o.op == op)
    {
        return (entry.eval)(call);
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
    fn the_dispatch_table_has_one_entry_per_op() {
        let mut seen = std::collections::HashSet::new();
        for key in implemented_ops() {
            assert!(seen.insert(key), "{key:?} is dispatched twice");
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
}
