//! Side conditions and custom appliers that rule files name, registered here by name.

use egg::{Id, Subst, Var};

use super::analysis::OnnxGraph;
use super::fingerprint::check_union;
use super::infer::literal_ints;
use super::lang::{AttrValue, Onnx};
use crate::ir::DType;

/// A side condition over the match's variables (given in the order the rule lists them).
pub type ConditionFn = fn(&OnnxGraph, &Subst, &[Var]) -> bool;

/// A custom replacement: the class to union with the match, or `None` to leave it. It reads
/// the variables named in its registration; further unions it makes itself (other outputs of
/// a fused op) go through [`check_union`] under the rule's name (the last argument).
pub type ApplierFn = fn(&mut OnnxGraph, Id, &Subst, &str) -> Option<Id>;

const CONDITIONS: &[(&str, ConditionFn)] = &[
    ("attr-is-set", attr_is_set),
    ("cast-to-own-dtype", cast_to_own_dtype),
    ("normalizes-last-axis", normalizes_last_axis),
    ("reshape-keeps-shape", reshape_keeps_shape),
    ("same-rank", same_rank),
    ("stash-is-float", stash_is_float),
];

/// Appliers with the pattern variables each reads.
const APPLIERS: &[(&str, &[&str], ApplierFn)] = &[
    (
        "skip-simplified-layer-norm",
        &["?a", "?b", "?w", "?eps"],
        skip_simplified_layer_norm,
    ),
    (
        "compose-transposes",
        &["?x", "?p", "?q"],
        compose_transposes,
    ),
];

/// The condition registered under `name`.
pub fn condition(name: &str) -> Option<ConditionFn> {
    CONDITIONS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// The applier registered under `name`, with the variables it reads.
pub fn applier(name: &str) -> Option<(ApplierFn, &'static [&'static str])> {
    APPLIERS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, vars, f)| (*f, *vars))
}

fn var(name: &str) -> Var {
    name.parse().expect("static variable names are valid")
}

/// `?x ?to`: casting `?x` to type code `?to` does not change its dtype.
fn cast_to_own_dtype(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [x, to] = vars else { return false };
    let dtype = g[s[*x]].data.tensor().and_then(|t| t.dtype);
    let target = g[s[*to]]
        .data
        .attr()
        .and_then(AttrValue::int)
        .and_then(|c| DType::from_onnx_code(c as i32));
    dtype.is_some() && dtype == target
}

/// `?x ?shape`: `?shape` is a constant equal to `?x`'s fully known static shape.
fn reshape_keeps_shape(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [x, shape] = vars else { return false };
    let current = g[s[*x]].data.tensor().and_then(|t| t.static_shape());
    let target = g[s[*shape]].data.konst.as_ref().and_then(literal_ints);
    matches!((current, target), (Some(c), Some(t)) if c == t)
}

/// The permutation of a Transpose's `perm` attribute class (reversed axes when unset).
fn perm_of(g: &OnnxGraph, attr: Id, rank: usize) -> Option<Vec<i64>> {
    match g[attr].data.attr()? {
        AttrValue::Ints(p) if p.len() == rank => Some(p.clone()),
        AttrValue::Unset => Some((0..rank as i64).rev().collect()),
        _ => None,
    }
}

/// Reads `?x ?p ?q` of `(Transpose (Transpose ?x ?p) ?q)`: one Transpose with the composed
/// permutation, or `?x` itself when the two cancel.
fn compose_transposes(g: &mut OnnxGraph, _matched: Id, s: &Subst, _rule: &str) -> Option<Id> {
    let (x, p, q) = (s[var("?x")], s[var("?p")], s[var("?q")]);
    let rank = g[x].data.tensor()?.rank()?;
    let (p, q) = (perm_of(g, p, rank)?, perm_of(g, q, rank)?);
    let composed: Vec<i64> = q
        .iter()
        .map(|&i| p.get(i as usize).copied())
        .collect::<Option<_>>()?;
    if composed.iter().enumerate().all(|(i, &v)| v == i as i64) {
        return Some(x);
    }
    let perm = g.add(Onnx::Attr(AttrValue::Ints(composed)));
    Some(g.add(Onnx::op("Transpose", &["perm"], 1, 1, vec![x, perm])))
}

/// `?attr`: the attribute is set on the node.
fn attr_is_set(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [a] = vars else { return false };
    g[s[*a]].data.attr().is_some_and(|v| *v != AttrValue::Unset)
}

/// `?a ?b`: both ranks are known and equal (no broadcasting between them).
fn same_rank(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [a, b] = vars else { return false };
    let rank = |v: &Var| g[s[*v]].data.tensor().and_then(|t| t.rank());
    matches!((rank(a), rank(b)), (Some(x), Some(y)) if x == y)
}

/// `?axis ?x`: a normalization `axis` (unset = −1) that names the last axis of `?x`.
fn normalizes_last_axis(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [axis, x] = vars else { return false };
    let rank = g[s[*x]].data.tensor().and_then(|t| t.rank());
    match (g[s[*axis]].data.attr(), rank) {
        (Some(AttrValue::Unset), _) => true,
        (Some(AttrValue::Int(-1)), _) => true,
        (Some(AttrValue::Int(a)), Some(r)) => *a == r as i64 - 1,
        _ => false,
    }
}

/// `?stash`: statistics are computed in f32 (`stash_type` unset or 1), as the fused kernel does.
fn stash_is_float(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [stash] = vars else { return false };
    matches!(
        g[s[*stash]].data.attr(),
        Some(AttrValue::Unset) | Some(AttrValue::Int(1))
    )
}

/// Reads `?a ?b ?w ?eps` of `(RMSNormalization (Add ?a ?b) ?w ?axis ?eps ?stash)`: one
/// `com.microsoft::SkipSimplifiedLayerNormalization(a, b, w)` whose output 0 is the norm and
/// whose output 3 (the sum) is united with the Add, so the Add's other consumers read it.
fn skip_simplified_layer_norm(
    g: &mut OnnxGraph,
    _matched: Id,
    s: &Subst,
    rule: &str,
) -> Option<Id> {
    let (a, b, w, eps) = (s[var("?a")], s[var("?b")], s[var("?w")], s[var("?eps")]);
    let epsilon = match g[eps].data.attr()? {
        AttrValue::Float(bits) => *bits,
        AttrValue::Unset => 1e-5f32.to_bits(), // RMSNormalization's default
        _ => return None,
    };
    let add = g.lookup(Onnx::op("Add", &[], 2, 1, vec![a, b]))?;
    let eps = g.add(Onnx::Attr(AttrValue::Float(epsilon)));
    let fused = g.add(Onnx::op(
        "com.microsoft::SkipSimplifiedLayerNormalization",
        &["epsilon"],
        3,
        4,
        vec![a, b, w, eps],
    ));
    let norm = g.add(Onnx::Get {
        index: 0,
        tuple: [fused],
    });
    let sum = g.add(Onnx::Get {
        index: 3,
        tuple: [fused],
    });
    if check_union(g, add, sum, rule) {
        g.union(add, sum);
    }
    Some(norm)
}
