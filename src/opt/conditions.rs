//! Side conditions and custom appliers that rule files name, registered here by name.

use egg::{Id, Subst, Var};

use super::analysis::OnnxGraph;
use super::infer::literal_ints;
use super::lang::{AttrValue, Onnx};
use crate::ir::DType;

/// A side condition over the match's variables (given in the order the rule lists them).
pub type ConditionFn = fn(&OnnxGraph, &Subst, &[Var]) -> bool;

/// A custom replacement: the class to union with the match, or `None` to leave it.
/// It reads the variables named in its registration.
pub type ApplierFn = fn(&mut OnnxGraph, Id, &Subst) -> Option<Id>;

const CONDITIONS: &[(&str, ConditionFn)] = &[
    ("cast-to-own-dtype", cast_to_own_dtype),
    ("reshape-keeps-shape", reshape_keeps_shape),
];

/// Appliers with the pattern variables each reads.
const APPLIERS: &[(&str, &[&str], ApplierFn)] = &[(
    "compose-transposes",
    &["?x", "?p", "?q"],
    compose_transposes,
)];

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
fn compose_transposes(g: &mut OnnxGraph, _matched: Id, s: &Subst) -> Option<Id> {
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
