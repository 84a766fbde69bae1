//! The appliers of `cleanup/algebraic.rules`: transpose∘transpose (one Transpose with the
//! composed permutation, or nothing when the two cancel), CastLike → Cast, and a computed
//! Reshape target written as a constant.

use egg::Id;

use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::rulebook::conditions::copied_dims_target;

/// `reshape-copying-dims`.
pub(super) const RESHAPE_COPYING_DIMS: Applier<3> =
    Applier::new(["?x", "?shape", "?allowzero"], reshape_copying_dims);

/// `compose-transposes`.
pub(super) const COMPOSE_TRANSPOSES: Applier<3> =
    Applier::new(["?x", "?p", "?q"], compose_transposes);

/// `castlike-to-cast`.
pub(super) const CASTLIKE_TO_CAST: Applier<4> =
    Applier::new(["?x", "?like", "?round", "?saturate"], castlike_to_cast);

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
fn compose_transposes(g: &mut OnnxGraph, _: Site<'_>, [x, p, q]: [Id; 3]) -> Option<Id> {
    let rank = g[x].data.tensor()?.rank()?;
    let (p, q) = (perm_of(g, p, rank)?, perm_of(g, q, rank)?);
    let composed: Vec<i64> = q
        .iter()
        .map(|&i| p.get(i as usize).copied())
        .collect::<Option<_>>()?;
    if composed.iter().enumerate().all(|(i, &v)| v == i as i64) {
        return Some(x);
    }
    Some(Emit::new(g).transpose(x, &composed))
}

/// Reads `?x ?like ?round ?saturate` of `(CastLike ?x ?like ?round ?saturate)`: `Cast(?x)` to
/// `?like`'s element type (when known), with the same `round_mode` and `saturate`.
fn castlike_to_cast(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, like, round, saturate]: [Id; 4],
) -> Option<Id> {
    let to = g[like].data.tensor()?.dtype?;
    let to = g.add(Onnx::Attr(AttrValue::Int(to.onnx_code() as i64)));
    Some(Emit::new(g).op_with(
        "Cast",
        &[x],
        &[("round_mode", round), ("saturate", saturate), ("to", to)],
    ))
}

/// Reads `?x ?shape ?allowzero` of `Reshape(x, shape; allowzero)` (proven by
/// `computed-target-copies-dims`): the same Reshape to the constant target of
/// [`copied_dims_target`] (its symbolic dims as 0s that copy them from `x`).
fn reshape_copying_dims(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 3]) -> Option<Id> {
    let target = copied_dims_target(g, vars)?;
    let [x, _, allowzero] = vars;
    let mut e = Emit::new(g);
    let shape = e.ints(&target);
    Some(e.op_with("Reshape", &[x, shape], &[("allowzero", allowzero)]))
}
