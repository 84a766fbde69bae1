//! Verification mode: every e-class carries its value on one small concrete input (its
//! fingerprint). A rule whose result has a different fingerprint than what it matched is
//! unsound; the applier refuses the union and the run stops naming the rule and both values.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use egg::{Id, Symbol};

use super::analysis::{Kind, OnnxGraph};
use super::lang::{Onnx, OpNode};
use crate::interp::{eval_node, OpCall, Tensor};
use crate::ir::Node;
use crate::limits::InterpLimits;

/// The value of a class on the fingerprint input.
#[derive(Debug, Clone, PartialEq)]
pub enum Fingerprint {
    /// A tensor value.
    Tensor(Arc<Tensor>),
    /// The outputs of a multi-output op.
    Tuple(Vec<Arc<Tensor>>),
}

/// A union that changed a value: which rule, and both values (summarised).
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// The rule.
    pub rule: String,
    /// The matched value (before).
    pub before: String,
    /// The rewritten value.
    pub after: String,
}

/// Values of graph inputs and initializers for the fingerprint run, by name.
pub type LeafValues = HashMap<Symbol, Arc<Tensor>>;

/// The fingerprint of an op e-node from its children's fingerprints (`None` when a child has
/// none or the interpreter cannot evaluate the op).
pub fn of_op(egraph: &OnnxGraph, op: &OpNode) -> Option<Fingerprint> {
    let mut inputs: Vec<Option<Arc<Tensor>>> = Vec::new();
    for &id in op.input_ids() {
        let data = &egraph[id].data;
        match (&data.kind, &data.fingerprint) {
            (Kind::Absent, _) => inputs.push(None),
            (_, Some(Fingerprint::Tensor(t))) => inputs.push(Some(t.clone())),
            _ => return None,
        }
    }
    let attrs: BTreeMap<String, crate::ir::Attr> = op
        .attr_names()
        .iter()
        .zip(op.attr_ids())
        .filter_map(|(n, &id)| Some((n.to_string(), egraph[id].data.attr()?.to_attr()?)))
        .collect();
    let (domain, op_type) = op.domain_and_type();
    let node = Node {
        name: "fingerprint".into(),
        domain: domain.into(),
        op_type: op_type.into(),
        inputs: (0..inputs.len()).map(|i| format!("in{i}")).collect(),
        outputs: (0..op.outputs).map(|i| format!("out{i}")).collect(),
        attrs,
    };
    let call = OpCall {
        node: &node,
        inputs: inputs.iter().map(|t| t.as_deref()).collect(),
        limits: &InterpLimits::default(),
    };
    let mut outs = eval_node(&call).ok()?;
    if op.outputs == 1 {
        Some(Fingerprint::Tensor(Arc::new(outs.remove(0))))
    } else {
        Some(Fingerprint::Tuple(outs.into_iter().map(Arc::new).collect()))
    }
}

/// Whether two fingerprints agree: same shapes, values within `1e-4 + 1e-3·|x|` (f16/bf16:
/// `1e-2 + 1e-2·|x|`), NaN only where the other is NaN.
pub fn agree(a: &Fingerprint, b: &Fingerprint) -> bool {
    fn close(x: &Tensor, y: &Tensor) -> bool {
        let (atol, rtol) = match x.dtype {
            crate::ir::DType::F16 | crate::ir::DType::BF16 => (1e-2, 1e-2),
            _ => (1e-4, 1e-3),
        };
        x.shape == y.shape
            && x.as_f64().iter().zip(y.as_f64()).all(|(p, q)| {
                (p.is_nan() && q.is_nan()) || (p - q).abs() <= atol + rtol * p.abs().max(q.abs())
            })
    }
    match (a, b) {
        (Fingerprint::Tensor(x), Fingerprint::Tensor(y)) => close(x, y),
        (Fingerprint::Tuple(xs), Fingerprint::Tuple(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| close(x, y))
        }
        _ => false,
    }
}

/// A short description of a fingerprint for error messages.
pub fn describe(f: &Fingerprint) -> String {
    let one = |t: &Tensor| {
        let v = t.as_f64();
        let head: Vec<String> = v.iter().take(6).map(|x| format!("{x:.5}")).collect();
        format!(
            "{}{:?} [{}{}]",
            t.dtype,
            t.shape,
            head.join(", "),
            if v.len() > 6 { ", …" } else { "" }
        )
    };
    match f {
        Fingerprint::Tensor(t) => one(t),
        Fingerprint::Tuple(ts) => format!(
            "({})",
            ts.iter().map(|t| one(t)).collect::<Vec<_>>().join("; ")
        ),
    }
}

/// Checks a rule's result class against the class it matched before they are united.
pub fn check_union(egraph: &mut OnnxGraph, matched: Id, result: Id, rule: &str) -> bool {
    let (a, b) = (
        &egraph[matched].data.fingerprint,
        &egraph[result].data.fingerprint,
    );
    match (a, b) {
        (Some(x), Some(y)) if !agree(x, y) => {
            let violation = Violation {
                rule: rule.to_string(),
                before: describe(x),
                after: describe(y),
            };
            egraph.analysis.violations.push(violation);
            false
        }
        _ => true,
    }
}

/// Whether this e-node is a leaf whose fingerprint comes from the leaf values.
pub fn of_leaf(values: &LeafValues, node: &Onnx) -> Option<Fingerprint> {
    match node {
        Onnx::Input(n) | Onnx::Init(n) => values.get(n).cloned().map(Fingerprint::Tensor),
        Onnx::Const(lit) => crate::interp::Tensor::from_data(&lit.to_tensor())
            .ok()
            .map(|t| Fingerprint::Tensor(Arc::new(t))),
        _ => None,
    }
}

/// Leaf values for verification mode: random graph inputs (batch 1, 3 new tokens, 2 cached)
/// and every initializer's data read through `weights`.
pub fn leaf_values(
    graph: &crate::ir::Graph,
    weights: &mut crate::weights::eval::Evaluator<'_>,
) -> crate::Result<LeafValues> {
    let mut dims = BTreeMap::from([
        ("batch".to_string(), 1),
        ("sequence_len".to_string(), 3),
        ("seq_len".to_string(), 3),
        ("past_sequence_len".to_string(), 2),
        ("past_seq_len".to_string(), 2),
    ]);
    let mut rng = crate::verify::Rng::new(0x5eed);
    let mut leaves: LeafValues = crate::verify::random_inputs(graph, &mut dims, &mut rng, false)?
        .into_iter()
        .map(|(k, v)| (Symbol::from(k.as_str()), Arc::new(v)))
        .collect();
    for init in graph.initializers.iter().filter(|i| i.source.is_some()) {
        let value = crate::interp::run::initializer_tensor(init, weights)?;
        leaves.insert(Symbol::from(init.name.as_str()), Arc::new(value));
    }
    Ok(leaves)
}
