//! Verification mode: every e-class carries its value on one small concrete input (its
//! fingerprint). A rule whose result has a different fingerprint than what it matched is
//! unsound; the applier refuses the union and the run stops naming the rule and both values.
//!
//! Fingerprints are held in memory for the whole run, so their bytes are bounded
//! ([`crate::limits::MAX_FINGERPRINT_BYTES`]): past the bound, new classes get no fingerprint
//! and verification becomes partial — unions with a class that has none are allowed unchecked,
//! counted, and reported in a warning at the end of the run ([`FingerprintStats`]). Partial
//! rather than an error: a large model is still checked on every class that fit.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use egg::{Id, Symbol};

use super::lang::{Onnx, OpNode};
use crate::interp::eval_op;
use crate::limits::InterpLimits;
use crate::ops::Tensor;

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

/// Values of graph inputs and initializers for the fingerprint run, by name, with the memory
/// budget of the fingerprints computed from them. Clones share the budget.
#[derive(Debug, Clone, Default)]
pub struct LeafValues {
    /// The leaf values, by name.
    pub values: HashMap<Symbol, Arc<Tensor>>,
    budget: Arc<Budget>,
}

/// Bytes of fingerprints held and what was left unchecked, shared by the clones of a
/// [`LeafValues`].
#[derive(Debug)]
struct Budget {
    limit: u64,
    used: AtomicU64,
    skipped_classes: AtomicU64,
    unchecked_unions: AtomicU64,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            limit: crate::limits::MAX_FINGERPRINT_BYTES,
            used: AtomicU64::new(0),
            skipped_classes: AtomicU64::new(0),
            unchecked_unions: AtomicU64::new(0),
        }
    }
}

/// How complete a verification run was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FingerprintStats {
    /// Bytes of fingerprints computed.
    pub bytes: u64,
    /// Classes left without a fingerprint because the memory budget was spent.
    pub skipped_classes: u64,
    /// Unions allowed unchecked because one side had no fingerprint (budget spent, or an op
    /// the interpreter cannot evaluate).
    pub unchecked_unions: u64,
}

impl LeafValues {
    /// `values` with the default fingerprint memory budget.
    pub fn new(values: HashMap<Symbol, Arc<Tensor>>) -> LeafValues {
        LeafValues::with_budget(values, crate::limits::MAX_FINGERPRINT_BYTES)
    }

    /// `values` with a budget of `limit` bytes of fingerprints.
    pub fn with_budget(values: HashMap<Symbol, Arc<Tensor>>, limit: u64) -> LeafValues {
        LeafValues {
            values,
            budget: Arc::new(Budget {
                limit,
                ..Budget::default()
            }),
        }
    }

    /// What the run checked so far.
    pub fn stats(&self) -> FingerprintStats {
        let b = &self.budget;
        FingerprintStats {
            bytes: b.used.load(Ordering::Relaxed),
            skipped_classes: b.skipped_classes.load(Ordering::Relaxed),
            unchecked_unions: b.unchecked_unions.load(Ordering::Relaxed),
        }
    }

    /// The budget's limit in bytes.
    pub fn budget_bytes(&self) -> u64 {
        self.budget.limit
    }

    /// Whether the budget is spent (new classes get no fingerprint).
    fn exhausted(&self) -> bool {
        self.budget.used.load(Ordering::Relaxed) >= self.budget.limit
    }

    /// Charges `bytes` for a new fingerprint; false (and the budget marked spent) when they do
    /// not fit.
    fn charge(&self, bytes: u64) -> bool {
        let b = &self.budget;
        let used = b.used.load(Ordering::Relaxed);
        match used.checked_add(bytes).filter(|&n| n <= b.limit) {
            Some(n) => {
                b.used.store(n, Ordering::Relaxed);
                true
            }
            None => {
                b.used.store(b.limit, Ordering::Relaxed);
                false
            }
        }
    }

    fn skip_class(&self) {
        self.budget.skipped_classes.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a union allowed unchecked because one side has no fingerprint.
    pub(crate) fn count_unchecked_union(&self) {
        self.budget.unchecked_unions.fetch_add(1, Ordering::Relaxed);
    }
}

impl From<HashMap<Symbol, Arc<Tensor>>> for LeafValues {
    fn from(values: HashMap<Symbol, Arc<Tensor>>) -> LeafValues {
        LeafValues::new(values)
    }
}

impl FingerprintStats {
    /// A warning when verification was partial, `None` when every union was checked.
    pub fn partial_warning(&self, budget: u64) -> Option<String> {
        if self.skipped_classes == 0 && self.unchecked_unions == 0 {
            return None;
        }
        let mut parts = Vec::new();
        if self.skipped_classes > 0 {
            parts.push(format!(
                "{} e-classes got no fingerprint because fingerprints reached the limit of {:.1}                  MiB",
                self.skipped_classes,
                budget as f64 / (1u64 << 20) as f64
            ));
        }
        parts.push(format!(
            "{} rewrites were applied unchecked because one side could not be evaluated",
            self.unchecked_unions
        ));
        Some(format!(
            "--verify-rewrites: verification was partial: {}",
            parts.join("; ")
        ))
    }
}

/// Bytes the interpreter holds for a fingerprint.
fn fingerprint_bytes(f: &Fingerprint) -> u64 {
    let one = |t: &Tensor| {
        crate::limits::numel(&t.shape)
            .map_or(u64::MAX, |n| n as u64)
            .saturating_mul(crate::interp::run::held_bytes_per_element(t.dtype))
    };
    match f {
        Fingerprint::Tensor(t) => one(t),
        Fingerprint::Tuple(ts) => ts.iter().map(|t| one(t)).fold(0, u64::saturating_add),
    }
}

/// The fingerprint of an op e-node from its inputs' and attributes' classes: `input(id)` is
/// `Some(None)` for an absent input, `Some(Some(value))` for a tensor fingerprint and `None`
/// when the class has none; `attr(id)` is the attribute value of class `id` (`None`: unset).
/// `None` when an input has no fingerprint, the interpreter cannot evaluate the op, or the
/// fingerprint memory budget is spent.
pub fn of_op(
    leaves: &LeafValues,
    op: &OpNode,
    input: impl Fn(Id) -> Option<Option<Arc<Tensor>>>,
    attr: impl Fn(Id) -> Option<crate::ir::Attr>,
) -> Option<Fingerprint> {
    if leaves.exhausted() {
        leaves.skip_class();
        return None;
    }
    let inputs: Vec<Option<Arc<Tensor>>> = op
        .input_ids()
        .iter()
        .map(|&id| input(id))
        .collect::<Option<_>>()?;
    let attrs: crate::ir::Attrs = op
        .attr_names()
        .iter()
        .zip(op.attr_ids())
        .filter_map(|(n, &id)| Some((n.to_string(), attr(id)?)))
        .collect();
    let (domain, kind) = op.domain_and_type();
    if domain == "ai.mobius" {
        // A weight relayout: the value the saved initializer will hold.
        let value = inputs.first()?.as_ref()?.to_data();
        let int = |name: &str| match attrs.get(name) {
            Some(crate::ir::Attr::Int(v)) => Some(*v),
            _ => None,
        };
        let out = crate::weights::relayout(kind, &value, &int).ok()?;
        let fingerprint = Fingerprint::Tensor(Arc::new(Tensor::from_data(&out).ok()?));
        if !leaves.charge(fingerprint_bytes(&fingerprint)) {
            leaves.skip_class();
            return None;
        }
        return Some(fingerprint);
    }
    let outputs: Vec<String> = (0..op.outputs).map(|i| format!("out{i}")).collect();
    let outputs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|t| t.as_deref()).collect();
    let mut outs = eval_op(
        "fingerprint",
        op.domain_and_type(),
        attrs,
        &inputs,
        &outputs,
        &InterpLimits::default(),
    )
    .ok()?;
    let fingerprint = if op.outputs == 1 {
        Fingerprint::Tensor(Arc::new(outs.remove(0)))
    } else {
        Fingerprint::Tuple(outs.into_iter().map(Arc::new).collect())
    };
    if !leaves.charge(fingerprint_bytes(&fingerprint)) {
        leaves.skip_class();
        return None;
    }
    Some(fingerprint)
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

/// Whether this e-node is a leaf whose fingerprint comes from the leaf values.
pub fn of_leaf(values: &LeafValues, node: &Onnx) -> Option<Fingerprint> {
    match node {
        Onnx::Input(n) | Onnx::Init(n) => values.values.get(n).cloned().map(Fingerprint::Tensor),
        Onnx::Const(lit) => crate::ops::Tensor::from_data(&lit.to_tensor())
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
    let mut rng = crate::interp::Rng::new(0x5eed);
    let mut leaves: HashMap<Symbol, Arc<Tensor>> =
        crate::interp::inputs::random_inputs(graph, &mut dims, &mut rng, false)
            .map_err(for_verify_rewrites)?
            .into_iter()
            .map(|(k, v)| (Symbol::from(k.as_str()), Arc::new(v)))
            .collect();
    for init in graph.initializers.iter().filter(|i| i.source.is_some()) {
        let value =
            crate::interp::run::initializer_tensor(init, weights).map_err(for_verify_rewrites)?;
        leaves.insert(Symbol::from(init.name.as_str()), Arc::new(value));
    }
    Ok(LeafValues::new(leaves))
}

/// An error of the fingerprint input's evaluation, worded for `--verify-rewrites`: `optimize`
/// and `build` have no `--dims` or interpreter budget flags, so their hints are dropped.
fn for_verify_rewrites(e: crate::Error) -> crate::Error {
    let reword = |m: String| {
        format!(
            "--verify-rewrites cannot evaluate the model on its fingerprint input (batch 1, 3 new \
             tokens, 2 cached; fixed budgets): {}",
            crate::limits::without_flag_hints(&m)
                .replace(" from --dims or defaults", " of the fingerprint input")
        )
    };
    match e {
        crate::Error::Limit(m) => crate::Error::Limit(reword(m)),
        crate::Error::Graph(m) => crate::Error::Graph(reword(m)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Graph, Node, Shape, ValueInfo};
    use crate::opt::checked_union::check_union;
    use crate::opt::lift::lift_with;

    /// `x → Neg → … → Neg` (`n` nodes) on f32[4] (16 bytes a value).
    fn chain(n: usize) -> Graph {
        let value = |i: usize| {
            if i == 0 {
                "x".to_string()
            } else {
                format!("v{i}")
            }
        };
        Graph {
            name: "chain".into(),
            inputs: vec![ValueInfo::new("x", DType::F32, Shape::new(["4"]))],
            outputs: vec![ValueInfo::new(&value(n), DType::F32, Shape::new(["4"]))],
            value_info: vec![],
            unshaped: vec![],
            untyped: vec![],
            nodes: (0..n)
                .map(|i| Node {
                    name: format!("neg{i}"),
                    domain: String::new(),
                    op_type: "Neg".into(),
                    inputs: vec![value(i)],
                    outputs: vec![value(i + 1)],
                    attrs: Default::default(),
                })
                .collect(),
            initializers: vec![],
        }
    }

    fn leaves(budget: u64) -> LeafValues {
        let x = Tensor::float(DType::F32, vec![4], vec![1.0, -2.0, 3.0, -4.0]);
        LeafValues::with_budget(HashMap::from([(Symbol::from("x"), Arc::new(x))]), budget)
    }

    #[test]
    fn fingerprints_stop_at_the_memory_budget_and_say_so() {
        let leaves = leaves(64);
        lift_with(&chain(10), Some(leaves.clone())).unwrap();
        let stats = leaves.stats();
        assert_eq!(stats.bytes, 64);
        assert_eq!(stats.skipped_classes, 6);
        let w = stats.partial_warning(leaves.budget_bytes()).unwrap();
        assert!(
            w.contains("verification was partial") && w.contains("6 e-classes got no fingerprint"),
            "{w}"
        );
    }

    #[test]
    fn within_the_budget_every_class_is_fingerprinted() {
        let leaves = leaves(1 << 20);
        lift_with(&chain(10), Some(leaves.clone())).unwrap();
        assert_eq!(leaves.stats().bytes, 160);
        assert_eq!(leaves.stats().partial_warning(1 << 20), None);
    }

    #[test]
    fn unions_with_an_unevaluated_side_are_counted() {
        let leaves = leaves(32);
        let mut lifted = lift_with(&chain(4), Some(leaves.clone())).unwrap();
        let ids: Vec<Id> = lifted.egraph.classes().map(|c| c.id).collect();
        let with = ids
            .iter()
            .copied()
            .find(|&id| lifted.egraph[id].data.fingerprint.is_some())
            .unwrap();
        let without = ids
            .iter()
            .copied()
            .find(|&id| lifted.egraph[id].data.fingerprint.is_none())
            .unwrap();
        assert!(check_union(&mut lifted.egraph, with, without, "r"));
        let stats = leaves.stats();
        assert_eq!(stats.unchecked_unions, 1);
        let w = stats.partial_warning(32).unwrap();
        assert!(w.contains("1 rewrites were applied unchecked"), "{w}");
    }
}
