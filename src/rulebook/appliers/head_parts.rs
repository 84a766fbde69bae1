//! The appliers of the head parts in `recognize/head_layout.rules`, as Falcon's multi-query
//! export writes them: the packed projection `x [B, S, G·D]` reshaped to its `G` heads
//! `[B, S, G, D]`, the query heads a Slice of the first `H` (axis 2) and the single key and
//! value head a Gather of one index `[i]` (axis 2, keeping the axis). Each part is read as the
//! head split of a 3-D slice of `x`: `Reshape(Slice(x, s·D, e·D, 2), [0, 0, e − s, D])`, the
//! same elements in the same places, so the head-view rules see views of 3-D tensors.

use egg::Id;

use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::query::{const_ints, int_attr, known_dims};
use crate::rulebook::head_layout::reshaped_dims;

/// `head-slice-of-split`.
pub(super) const HEAD_SLICE_OF_SPLIT: Applier<6> = Applier::new(
    ["?x", "?shape", "?allowzero", "?starts", "?ends", "?axes"],
    head_slice_of_split,
);

/// `head-slice-of-split-with-steps`.
pub(super) const HEAD_SLICE_OF_SPLIT_WITH_STEPS: Applier<7> = Applier::new(
    [
        "?x",
        "?shape",
        "?allowzero",
        "?starts",
        "?ends",
        "?axes",
        "?steps",
    ],
    head_slice_of_split_with_steps,
);

/// `head-gather-of-split`.
pub(super) const HEAD_GATHER_OF_SPLIT: Applier<5> = Applier::new(
    ["?x", "?shape", "?allowzero", "?idx", "?axis"],
    head_gather_of_split,
);

/// `(G, D)` when `Reshape(x, shape; allowzero)` splits a 3-D `x` `[B, S, N]` (known dims) into
/// `[B, S, G, D]`: the same `B` and `S`, `G` and `D` positive numbers with `G·D = N`.
fn head_split(g: &OnnxGraph, x: Id, shape: Id, allowzero: Id) -> Option<(i64, i64)> {
    let xd = known_dims(g, x, 3)?;
    let split = reshaped_dims(g, &xd, shape, allowzero)?;
    let [b, s, h, d] = split.as_slice() else {
        return None;
    };
    let (heads, head_dim) = (h.known()?, d.known()?);
    let ok = *b == xd[0]
        && *s == xd[1]
        && heads > 0
        && head_dim > 0
        && xd[2].known() == heads.checked_mul(head_dim);
    ok.then_some((heads, head_dim))
}

/// The one value of a one-element constant.
fn one(g: &OnnxGraph, c: Id) -> Option<i64> {
    match const_ints(g, c)?.as_slice() {
        [v] => Some(*v),
        _ => None,
    }
}

/// `Reshape(Slice(x, start·D, end·D, 2), [0, 0, end − start, D])`: heads `start … end − 1`
/// of the split `[B, S, G, D]` of `x`.
fn heads_part(g: &mut OnnxGraph, x: Id, head_dim: i64, start: i64, end: i64) -> Id {
    let mut e = Emit::new(g);
    let part = e.slice(x, start * head_dim, end * head_dim, 2);
    e.reshape(part, &[0, 0, end - start, head_dim])
}

/// `Slice(Reshape(x, [B, S, G, D]), starts, ends, axes[, steps])` with one-element constant
/// bounds, axes `[2]` or `[−2]`, steps absent or `[1]`: the bounds clamped as Slice does them
/// (negative ones counted from `G`), a non-empty range → [`heads_part`].
fn sliced(g: &mut OnnxGraph, vars: [Id; 6], steps: Option<Id>) -> Option<Id> {
    let [x, shape, allowzero, starts, ends, axes] = vars;
    let (heads, head_dim) = head_split(g, x, shape, allowzero)?;
    if !matches!(one(g, axes)?, 2 | -2) || steps.is_some_and(|s| one(g, s) != Some(1)) {
        return None;
    }
    let clamp = |v: i64| if v < 0 { v.saturating_add(heads) } else { v }.clamp(0, heads);
    let (start, end) = (clamp(one(g, starts)?), clamp(one(g, ends)?));
    (start < end).then(|| heads_part(g, x, head_dim, start, end))
}

/// Reads `head-slice-of-split`: [`sliced`].
fn head_slice_of_split(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 6]) -> Option<Id> {
    sliced(g, vars, None)
}

/// Reads `head-slice-of-split-with-steps`: [`sliced`] with steps `[1]`.
fn head_slice_of_split_with_steps(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 7]) -> Option<Id> {
    let [x, shape, allowzero, starts, ends, axes, steps] = vars;
    sliced(g, [x, shape, allowzero, starts, ends, axes], Some(steps))
}

/// Reads `head-gather-of-split`: `Gather(Reshape(x, [B, S, G, D]), [i], axis 2 or −2)`, the
/// index a constant of shape `[1]` in `−G … G − 1` → [`heads_part`] of head `i` (mod `G`).
fn head_gather_of_split(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 5]) -> Option<Id> {
    let [x, shape, allowzero, idx, axis] = vars;
    let (heads, head_dim) = head_split(g, x, shape, allowzero)?;
    if !matches!(int_attr(g, axis)?, 2 | -2) {
        return None;
    }
    let lit = g[idx].data.konst.as_deref()?;
    if lit.shape != [1] {
        return None;
    }
    let i = one(g, idx)?;
    let i = if i < 0 { i + heads } else { i };
    (0..heads)
        .contains(&i)
        .then(|| heads_part(g, x, head_dim, i, i + 1))
}
