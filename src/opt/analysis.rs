//! The e-class analysis: every class knows what it holds (a tensor with dtype and symbolic
//! shape, a tuple of them, an attribute value, …), its value when it is a small constant
//! (constant folding happens in `modify`), and whether it depends only on initializers.

use std::collections::HashMap;

use egg::{merge_max, Analysis, DidMerge, EGraph, Id, Symbol};

use super::fingerprint::{self, Fingerprint, LeafValues, Violation};
use super::fold::{fold, MAX_OUTPUT_ELEMS};
use super::lang::{Onnx, OpNode};
use super::sym_value::{op_value, value_literal};
use crate::ops::infer::{infer, literal_elements, Attrs, InputView};
use crate::ops::types::{SymDim, TensorType};
use crate::ops::value::{AttrValue, Literal};

/// What an e-class holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A tensor.
    Tensor(TensorType),
    /// The outputs of a multi-output op.
    Tuple(Vec<TensorType>),
    /// An attribute value.
    Attr(AttrValue),
    /// An absent optional input.
    Absent,
    /// The graph outputs.
    Root,
}

/// The analysis data of one e-class.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassData {
    /// What the class holds.
    pub kind: Kind,
    /// Its value, when it is a small constant (boxed: most classes have none, and every class
    /// carries the field).
    pub konst: Option<Box<Literal>>,
    /// Its value as dims, when it is a small shape tensor that is not constant but computed
    /// from dims (see [`super::sym_value`]); `None` whenever `konst` is set.
    pub value: Option<Vec<SymDim>>,
    /// Whether it depends only on initializers (and so can be computed at save time).
    pub init_only: bool,
    /// Its value on the fingerprint input (verification mode only).
    pub fingerprint: Option<Fingerprint>,
}

impl ClassData {
    /// The tensor type, if the class holds a tensor.
    pub fn tensor(&self) -> Option<&TensorType> {
        match &self.kind {
            Kind::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The attribute value, if the class holds one.
    pub fn attr(&self) -> Option<&AttrValue> {
        match &self.kind {
            Kind::Attr(a) => Some(a),
            _ => None,
        }
    }
}

/// Analysis state: the types of graph inputs and initializers, and the values of small
/// initializers.
#[derive(Debug, Clone, Default)]
pub struct OnnxAnalysis {
    /// Type of each graph input and initializer, by name.
    pub leaf_types: HashMap<Symbol, TensorType>,
    /// Value of each small initializer, by name.
    pub leaf_values: HashMap<Symbol, Literal>,
    /// Output types declared for op e-nodes whose types cannot be inferred (imported
    /// `value_info`).
    pub declared: HashMap<Onnx, Vec<TensorType>>,
    /// Verification mode: the graph input and initializer values fingerprints start from.
    pub fingerprint_leaves: Option<LeafValues>,
    /// Unsound unions refused in verification mode.
    pub violations: Vec<Violation>,
    /// The `accuracy_level` written on the `MatMulNBits` the optimizer creates (0: unset).
    pub nbits_accuracy_level: i64,
    /// How many classes were created or merged so far: unchanged between two moments exactly
    /// when the e-graph gained no class and no union in between (so its extraction stands).
    pub changes: u64,
}

/// The e-graph type of the optimizer.
pub type OnnxGraph = EGraph<Onnx, OnnxAnalysis>;

/// [`EGraph::rebuild`] without calibrating egg's timer. egg times every rebuild with `quanta`,
/// whose first reading on a machine with an invariant TSC calibrates the TSC against the OS
/// clock in a busy loop of up to 200 ms (1–30 ms on a loaded 2-vCPU VM: up to as long as a
/// whole 100-layer build takes otherwise). egg only logs that time, so the rebuild reads a mock
/// clock instead. Returns what [`EGraph::rebuild`] returns (the unions it made).
pub fn rebuild(egraph: &mut OnnxGraph) -> usize {
    let (clock, _) = quanta::Clock::mock();
    quanta::with_clock(&clock, || egraph.rebuild())
}

fn op_data<'a>(
    analysis: &OnnxAnalysis,
    op: &OpNode,
    data: impl Fn(Id) -> &'a ClassData,
) -> ClassData {
    let names = op.attr_names();
    let attr = Attrs::new(
        names
            .iter()
            .zip(op.attr_ids())
            .filter_map(|(n, &id)| Some((*n, data(id).attr()?))),
    );
    let views: Vec<InputView<'_>> = op
        .input_ids()
        .iter()
        .map(|&id| InputView {
            ty: data(id).tensor(),
            konst: data(id).konst.as_deref(),
            value: data(id).value.as_deref(),
        })
        .collect();
    let mut types = infer(op.op.as_str(), &views, &attr, op.outputs);
    // Most graphs declare no intermediate types: skip building the lookup key (a copy of
    // the node) then.
    let declared = match analysis.declared.is_empty() {
        true => None,
        false => analysis.declared.get(&Onnx::Op(op.clone())),
    };
    if let Some(declared) = declared {
        types = types.iter().zip(declared).map(|(t, d)| t.join(d)).collect();
    }
    let init_only = op
        .input_ids()
        .iter()
        .all(|&id| data(id).init_only || matches!(data(id).kind, Kind::Absent));
    let (konst, value) = match op.outputs {
        1 => {
            let value = op_value(op.op.as_str(), &views, &attr, &types[0]);
            // A value known in full is a constant.
            match fold_op(op, &views, &attr)
                .or_else(|| value.as_deref().and_then(|v| value_literal(v, &types[0])))
            {
                Some(k) => (Some(k), None),
                None => (None, value),
            }
        }
        _ => (None, None),
    };
    let kind = if op.outputs == 1 {
        Kind::Tensor(types.remove(0))
    } else {
        Kind::Tuple(types)
    };
    let fingerprint = analysis.fingerprint_leaves.as_ref().and_then(|leaves| {
        let input = |id: Id| match (&data(id).kind, &data(id).fingerprint) {
            (Kind::Absent, _) => Some(None),
            (_, Some(Fingerprint::Tensor(t))) => Some(Some(t.clone())),
            _ => None,
        };
        fingerprint::of_op(leaves, op, input, |id| data(id).attr()?.to_attr())
    });
    ClassData {
        kind,
        konst: konst.map(Box::new),
        value,
        init_only,
        fingerprint,
    }
}

/// The type of a constant: its dtype and shape, all dims known.
pub(super) fn literal_type(lit: &Literal) -> TensorType {
    TensorType::new(
        lit.dtype,
        lit.shape.iter().map(|&d| SymDim::Known(d as i64)).collect(),
    )
}

/// The data of a class made of `enode` alone, `data` giving its children's: what
/// [`Analysis::make`] computes, for the e-graph and for [`crate::opt::lift::output_types`].
pub(super) fn class_data<'a>(
    analysis: &OnnxAnalysis,
    enode: &Onnx,
    data: impl Fn(Id) -> &'a ClassData,
) -> ClassData {
    let leaf_type = |name: &Symbol| analysis.leaf_types.get(name).cloned().unwrap_or_default();
    let (kind, konst, init_only) = match enode {
        Onnx::Op(op) => return op_data(analysis, op, data),
        Onnx::Get { index, tuple } => {
            let t = data(tuple[0]);
            let ty = match &t.kind {
                Kind::Tuple(types) => types.get(*index).cloned().unwrap_or_default(),
                _ => TensorType::default(),
            };
            let fingerprint = match &t.fingerprint {
                Some(Fingerprint::Tuple(values)) => {
                    values.get(*index).cloned().map(Fingerprint::Tensor)
                }
                _ => None,
            };
            return ClassData {
                kind: Kind::Tensor(ty),
                konst: None,
                value: None,
                init_only: t.init_only,
                fingerprint,
            };
        }
        Onnx::Input(name) => (Kind::Tensor(leaf_type(name)), None, false),
        Onnx::Init(name) => (
            Kind::Tensor(leaf_type(name)),
            analysis.leaf_values.get(name).cloned().map(Box::new),
            true,
        ),
        Onnx::Const(lit) => (Kind::Tensor(literal_type(lit)), Some(lit.clone()), true),
        Onnx::Attr(a) => (Kind::Attr(a.clone()), None, false),
        Onnx::Absent => (Kind::Absent, None, false),
        Onnx::Root(_) => (Kind::Root, None, false),
    };
    let fingerprint = analysis
        .fingerprint_leaves
        .as_ref()
        .and_then(|leaves| fingerprint::of_leaf(leaves, enode));
    ClassData {
        kind,
        konst,
        value: None,
        init_only,
        fingerprint,
    }
}

fn fold_op(op: &OpNode, views: &[InputView<'_>], attr: &Attrs<'_>) -> Option<Literal> {
    let consts: Option<Vec<&Literal>> = views.iter().map(|v| v.konst).collect();
    let lit = fold(op.op.as_str(), &consts?, attr)?;
    (lit.shape.iter().product::<usize>() <= MAX_OUTPUT_ELEMS).then_some(lit)
}

impl Analysis<Onnx> for OnnxAnalysis {
    type Data = ClassData;

    fn make(egraph: &mut OnnxGraph, enode: &Onnx, _id: Id) -> ClassData {
        egraph.analysis.changes += 1;
        class_data(&egraph.analysis, enode, |id| &egraph[id].data)
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        self.changes += 1;
        let mut changed_a = false;
        let mut changed_b = false;
        match (&mut a.kind, &b.kind) {
            (Kind::Tensor(x), Kind::Tensor(y)) => {
                debug_assert!(
                    x.compatible(y),
                    "unsound rewrite: merged e-classes of types {x} and {y}"
                );
                let joined = x.join(y);
                changed_a |= joined != *x;
                changed_b |= joined != *y;
                *x = joined;
            }
            (Kind::Tuple(x), Kind::Tuple(y)) => {
                debug_assert!(
                    x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.compatible(q)),
                    "unsound rewrite: merged tuples of different types"
                );
                if x.len() == y.len() {
                    let joined: Vec<TensorType> = x.iter().zip(y).map(|(p, q)| p.join(q)).collect();
                    changed_a |= joined != *x;
                    changed_b |= joined != *y;
                    *x = joined;
                }
            }
            (x, y) => debug_assert!(
                std::mem::discriminant(x) == std::mem::discriminant(y),
                "unsound rewrite: merged e-classes of kinds {x:?} and {y:?}"
            ),
        }
        match (&a.konst, b.konst) {
            (None, Some(k)) => {
                a.konst = Some(k);
                changed_a = true;
            }
            (Some(_), None) => changed_b = true,
            _ => {}
        }
        let (value_a, value_b) = merge_values(&mut a.value, b.value, a.konst.as_deref());
        changed_a |= value_a;
        changed_b |= value_b;
        match (&a.fingerprint, b.fingerprint) {
            (None, Some(f)) => {
                a.fingerprint = Some(f);
                changed_a = true;
            }
            (Some(_), None) => changed_b = true,
            _ => {}
        }
        let init = merge_max(&mut a.init_only, b.init_only);
        DidMerge(changed_a || init.0, changed_b || init.1)
    }

    fn modify(egraph: &mut OnnxGraph, id: Id) {
        let Some(lit) = egraph[id].data.konst.clone() else {
            return;
        };
        let has_leaf = egraph[id]
            .nodes
            .iter()
            .any(|n| matches!(n, Onnx::Init(_) | Onnx::Const(_) | Onnx::Input(_)));
        if !has_leaf {
            let c = egraph.add(Onnx::Const(lit));
            egraph.union(id, c);
        }
    }
}

/// Merges the symbolic value `b` into `a` (element by element, the better-known of each), or
/// drops both when the merged class is a constant (`konst`); an element known differently on
/// the two sides means an unsound union. Returns whether the result differs from `a` and `b`.
fn merge_values(
    a: &mut Option<Vec<SymDim>>,
    b: Option<Vec<SymDim>>,
    konst: Option<&Literal>,
) -> (bool, bool) {
    let agree = |x: &[SymDim], y: &[SymDim]| {
        x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.compatible(q))
    };
    if let Some(k) = konst {
        let known = literal_elements(k);
        for v in a.iter().chain(b.iter()) {
            debug_assert!(
                known.as_deref().is_none_or(|k| agree(k, v)),
                "unsound rewrite: merged a constant {known:?} with a class of value {v:?}"
            );
        }
        // `a` had a constant already when it had no value; `b`'s value is then not kept.
        return (a.take().is_some(), b.is_some());
    }
    match (a.as_mut(), b) {
        (Some(x), Some(y)) => {
            debug_assert!(
                agree(x, &y),
                "unsound rewrite: merged e-classes of values {x:?} and {y:?}"
            );
            if x.len() != y.len() {
                return (false, true);
            }
            let joined: Vec<SymDim> = x.iter().zip(&y).map(|(p, q)| p.join(q)).collect();
            let changed = (joined != *x, joined != y);
            *x = joined;
            changed
        }
        (None, Some(y)) => {
            *a = Some(y);
            (true, false)
        }
        (Some(_), None) => (false, true),
        (None, None) => (false, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, DType, Dim, Graph, GraphBuilder, Shape, TensorData};
    use crate::opt::lift::{lift, Lifted};

    fn sym(s: &str) -> SymDim {
        SymDim::expr(s)
    }

    /// A legacy (TorchScript) export's `Constant` node.
    fn constant(b: &mut GraphBuilder, values: &[i64], shape: Vec<usize>) -> String {
        let data = TensorData::from_i64(shape, values);
        b.op("Constant", &[], vec![("value", Attr::Tensor(data))])
    }

    /// `Unsqueeze(Gather(Shape(x), i), [0])`: dim `i` of `x` as a 1-element shape tensor.
    fn dim_of(b: &mut GraphBuilder, x: &str, i: i64) -> String {
        let shape = b.op("Shape", &[x], vec![]);
        let index = constant(b, &[i], vec![]);
        let gather = b.op("Gather", &[&shape, &index], vec![("axis", Attr::Int(0))]);
        let axes = constant(b, &[0], vec![1]);
        b.op("Unsqueeze", &[&gather, &axes], vec![])
    }

    /// `x` `[batch, past + seq, 64]` f32 → `y` built by `body` (its type left unknown).
    fn legacy(body: impl FnOnce(&mut GraphBuilder, &str) -> String) -> (Graph, Lifted) {
        let mut b = GraphBuilder::new("g");
        let x = b.input(
            "x",
            DType::F32,
            Shape(vec![
                Dim::Sym("batch".into()),
                Dim::Sym("past + seq".into()),
                Dim::Fixed(64),
            ]),
        );
        let y = body(&mut b, &x);
        b.output("y", DType::F32, Shape(Vec::new()));
        b.op_into("Identity", &[&y], vec![], "y");
        let graph = b.finish();
        let lifted = lift(&graph).unwrap();
        (graph, lifted)
    }

    fn class_of(l: &Lifted, name: &str) -> Id {
        l.names.iter().find(|(n, _)| n == name).unwrap().1
    }

    fn type_of(l: &Lifted, name: &str) -> TensorType {
        l.egraph[class_of(l, name)].data.tensor().unwrap().clone()
    }

    #[test]
    fn a_legacy_reshape_target_gives_the_symbolic_heads_shape() {
        let (_, l) = legacy(|b, x| {
            let (batch, seq) = (dim_of(b, x, 0), dim_of(b, x, 1));
            let heads = constant(b, &[-1], vec![1]);
            let head_dim = constant(b, &[16], vec![1]);
            let target = b.op(
                "Concat",
                &[&batch, &seq, &heads, &head_dim],
                vec![("axis", Attr::Int(0))],
            );
            b.op_into("Reshape", &[x, &target], vec![], "heads");
            b.op("Identity", &["heads"], vec![])
        });
        let target = l
            .names
            .iter()
            .find(|(n, _)| n.starts_with("Concat"))
            .unwrap()
            .1;
        assert_eq!(
            l.egraph[target].data.value,
            Some(vec![
                sym("batch"),
                sym("seq + past"),
                SymDim::Known(-1),
                SymDim::Known(16)
            ])
        );
        assert_eq!(
            type_of(&l, "heads").shape,
            Some(vec![
                sym("batch"),
                sym("past + seq"),
                SymDim::Known(4),
                SymDim::Known(16)
            ])
        );
    }

    #[test]
    fn a_fully_known_value_is_a_constant_with_a_const_node() {
        let (_, l) = legacy(|b, x| {
            let shape = b.op("Shape", &[x], vec![]);
            let index = constant(b, &[2], vec![]);
            let width = b.op("Gather", &[&shape, &index], vec![]);
            let two = constant(b, &[2], vec![]);
            b.op_into("Div", &[&width, &two], vec![], "half");
            x.to_string()
        });
        let half = class_of(&l, "half");
        let data = &l.egraph[half].data;
        assert_eq!(
            data.konst
                .as_deref()
                .and_then(crate::ops::infer::literal_ints),
            Some(vec![32])
        );
        assert_eq!(data.value, None);
        assert!(l.egraph[half]
            .nodes
            .iter()
            .any(|n| matches!(n, Onnx::Const(_))));
    }

    #[test]
    fn the_minus_one_guard_of_repeat_kv_folds_away_for_dims() {
        // Where(Equal(t, -1 · ConstantOfShape(Shape(t), 1)), ConstantOfShape(…), t) is `t`
        // when no element of `t` can be -1; Expand then has t's dims.
        let (_, l) = legacy(|b, x| {
            let (batch, seq) = (dim_of(b, x, 0), dim_of(b, x, 1));
            let two = constant(b, &[2], vec![1]);
            let width = constant(b, &[64], vec![1]);
            let t = b.op(
                "Concat",
                &[&batch, &two, &seq, &width],
                vec![("axis", Attr::Int(0))],
            );
            let len = b.op("Shape", &[&t], vec![]);
            let ones = b.op(
                "ConstantOfShape",
                &[&len],
                vec![("value", Attr::Tensor(TensorData::from_i64(vec![1], &[1])))],
            );
            let minus = constant(b, &[-1], vec![]);
            let minus_ones = b.op("Mul", &[&ones, &minus], vec![]);
            let is_minus = b.op("Equal", &[&t, &minus_ones], vec![]);
            let guarded = b.op("Where", &[&is_minus, &ones, &t], vec![]);
            let axes = constant(b, &[1], vec![1]);
            let x4 = b.op("Unsqueeze", &[x, &axes], vec![]);
            b.op_into("Expand", &[&x4, &guarded], vec![], "expanded");
            b.op("Identity", &["expanded"], vec![])
        });
        assert_eq!(
            type_of(&l, "expanded").shape,
            Some(vec![
                sym("batch"),
                SymDim::Known(2),
                sym("past + seq"),
                SymDim::Known(64)
            ])
        );
    }

    #[test]
    fn values_merge_to_the_better_known_and_a_constant_drops_them() {
        let mut a = Some(vec![sym("batch"), SymDim::Unknown]);
        let b = Some(vec![SymDim::Unknown, SymDim::Known(4)]);
        assert_eq!(merge_values(&mut a, b, None), (true, true));
        assert_eq!(a, Some(vec![sym("batch"), SymDim::Known(4)]));
        let same = a.clone();
        assert_eq!(merge_values(&mut a, same, None), (false, false));
        assert_eq!(merge_values(&mut a, None, None), (false, true));
        let mut none = None;
        assert_eq!(
            merge_values(&mut none, Some(vec![sym("seq")]), None),
            (true, false)
        );
        let four = Literal::from(&TensorData::from_i64(vec![1], &[4]));
        let mut partial = Some(vec![SymDim::Unknown]);
        assert_eq!(merge_values(&mut partial, None, Some(&four)), (true, false));
        assert_eq!(partial, None);
    }

    #[test]
    #[should_panic(expected = "unsound rewrite")]
    #[cfg(debug_assertions)]
    fn merging_different_values_is_reported() {
        let mut a = Some(vec![sym("batch")]);
        merge_values(&mut a, Some(vec![sym("seq")]), None);
    }
}
