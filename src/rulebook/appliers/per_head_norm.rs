//! The appliers of the per-head norm rules of `recognize/head_layout.rules`: a norm applied to
//! each head of a split projection before the heads move to the front (qwen3's and cohere's
//! q/k norms, `Transpose(n(Reshape(x, [B, S, H, D])), [0, 2, 1, 3])`) read as the head view of
//! `n` merged back to `[B, S, H·D]`, which the head-layout rules then absorb as they do a plain
//! projection's view.

use egg::Id;

use crate::ops::schema;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::checked_union::check_union;
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::rulebook::head_layout::head_view;

/// `per-head-rms-norm-as-view`.
pub(super) const PER_HEAD_RMS_NORM_AS_VIEW: Applier<8> = Applier::new(
    [
        "?x",
        "?shape",
        "?allowzero",
        "?perm",
        "?w",
        "?axis",
        "?eps",
        "?stash",
    ],
    rms_norm_as_view,
);

/// `per-head-layer-norm-as-view`.
pub(super) const PER_HEAD_LAYER_NORM_AS_VIEW: Applier<9> = Applier::new(
    [
        "?x",
        "?shape",
        "?allowzero",
        "?perm",
        "?w",
        "?b",
        "?axis",
        "?eps",
        "?stash",
    ],
    layer_norm_as_view,
);

/// `rms-norm-before-transpose`.
pub(super) const RMS_NORM_BEFORE_TRANSPOSE: Applier<6> = Applier::new(
    ["?y", "?perm", "?w", "?axis", "?eps", "?stash"],
    rms_norm_before_transpose,
);

/// Reads `?y ?perm ?w ?axis ?eps ?stash` of `RMSNormalization(Transpose(y, perm), w)` (the
/// rule's condition proves the norm is over the last axis, which `perm` keeps, with a 1-D
/// scale): `Transpose(RMSNormalization(y, w), perm)`, the norm of the same rows.
fn rms_norm_before_transpose(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 6]) -> Option<Id> {
    let [y, perm, w, axis, eps, stash] = vars;
    let mut e = Emit::new(g);
    let norm = e.op_with(
        "RMSNormalization",
        &[y, w],
        &[("axis", axis), ("epsilon", eps), ("stash_type", stash)],
    );
    Some(e.op_with("Transpose", &[norm], &[("perm", perm)]))
}

/// Reads `?x ?shape ?allowzero ?perm ?w ?axis ?eps ?stash` of
/// `Transpose(RMSNormalization(Reshape(x, shape; allowzero), w), perm)` ([`norm_as_view`]).
fn rms_norm_as_view(g: &mut OnnxGraph, site: Site<'_>, vars: [Id; 8]) -> Option<Id> {
    let [x, shape, allowzero, perm, w, axis, eps, stash] = vars;
    norm_as_view(g, site, [x, shape, allowzero, perm], |split| {
        ("RMSNormalization", vec![split, w, axis, eps, stash], 2)
    })
}

/// Reads `?x ?shape ?allowzero ?perm ?w ?b ?axis ?eps ?stash` of
/// `Transpose(LayerNormalization(Reshape(x, shape; allowzero), w, b), perm)`
/// ([`norm_as_view`]).
fn layer_norm_as_view(g: &mut OnnxGraph, site: Site<'_>, vars: [Id; 9]) -> Option<Id> {
    let [x, shape, allowzero, perm, w, b, axis, eps, stash] = vars;
    norm_as_view(g, site, [x, shape, allowzero, perm], |split| {
        ("LayerNormalization", vec![split, w, b, axis, eps, stash], 3)
    })
}

/// `Transpose(n(Reshape(x, shape; allowzero)), perm)`, where `Transpose(Reshape(x, shape),
/// perm)` is a head view of `x` `[B, S, H·D]` ([`head_view`]) and `norm` gives the norm e-node
/// (op, children, input count) over the split: `Transpose(Reshape(Reshape(n, [0, 0, H·D]),
/// [0, 0, H, D]), perm)`. The split `Reshape(x, shape)` is united with `Reshape(x, [0, 0, H,
/// D])` (the same dims, `B` and `S` `x`'s own). Exact: both Reshapes keep the elements in
/// order, and `n` has the split's dims (a norm keeps its input's).
fn norm_as_view(
    g: &mut OnnxGraph,
    site: Site<'_>,
    [x, shape, allowzero, perm]: [Id; 4],
    norm: impl FnOnce(Id) -> (&'static str, Vec<Id>, usize),
) -> Option<Id> {
    let view = head_view(g, x, shape, allowzero, perm)?;
    let (heads, head_dim) = (view.heads, view.head_dim);
    let split = g.lookup(Onnx::op(
        "Reshape",
        schema("Reshape")?,
        2,
        1,
        vec![x, shape, allowzero],
    ))?;
    let (op, children, inputs) = norm(split);
    let n = g.lookup(Onnx::op(op, schema(op)?, inputs, 1, children))?;
    let mut e = Emit::new(g);
    let constant = e.reshape(x, &[0, 0, heads, head_dim]);
    let merged = e.reshape(n, &[0, 0, heads * head_dim]);
    let again = e.reshape(merged, &[0, 0, heads, head_dim]);
    let out = e.op_with("Transpose", &[again], &[("perm", perm)]);
    if check_union(g, split, constant, site.rule) {
        g.union(split, constant);
    }
    Some(out)
}
