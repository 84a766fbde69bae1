//! The head layout exporters give attention inputs: a `[B, S, H·D]` projection split into heads
//! by `Reshape(x, [B, S, H, D])` and moved to `[B, H, S, D]` by `Transpose [0, 2, 1, 3]` — the
//! *head view* of `x` — and merged back after attention by the inverse `Transpose` and a
//! `Reshape` to `[B, S, H·D]`. Opset-23 `Attention` and `RotaryEmbedding` read the 3-D `x`
//! itself (with `q_num_heads`/`kv_num_heads`, `num_heads`), which makes the view unnecessary.
//! The predicates here prove a head view and a split merged back (rules in
//! `rewrites/recognize/head_layout.rules`; appliers in `appliers/head_layout.rs`).
//!
//! Reshape targets are read as values ([`shape_value`]: constants or computed from `Shape`) and
//! resolved against the input's dims ([`reshaped_dims`]), so a `−1`, a `0` that copies a dim,
//! and symbolic batch and sequence dims are understood; a target that cannot be proven to keep
//! the element count is not read.

use egg::Id;

use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::query::{const_ints, known_dims};
use crate::opt::shape_value::shape_value;

/// The permutation between `[B, S, H, D]` and `[B, H, S, D]` (its own inverse).
const HEADS_FIRST: [i64; 4] = [0, 2, 1, 3];

/// The split of a head view: `x` `[B, S, heads·head_dim]` read as `[B, heads, S, head_dim]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadView {
    /// Heads (`H`).
    pub heads: i64,
    /// Channels per head (`D`).
    pub head_dim: i64,
}

/// Whether the `allowzero` attribute class `allowzero` lets a 0 in a Reshape target copy the
/// input's dim (unset or 0); `None` when it is not an integer attribute.
fn zero_copies(g: &OnnxGraph, allowzero: Id) -> Option<bool> {
    match g[allowzero].data.attr()? {
        AttrValue::Unset | AttrValue::Int(0) => Some(true),
        AttrValue::Int(_) => Some(false),
        _ => None,
    }
}

/// The dims `Reshape(input, shape; allowzero)` gives an input of dims `input` (all known, maybe
/// symbolic), when the target `shape` is read ([`shape_value`]) and provably keeps the element
/// count: equal dims of input and target cancel, and what is left of the target (but a −1) is
/// numbers; what is left of the input is then numbers with the same product, or, for a single
/// −1, anything whose numbers that product divides (the −1 is the quotient, `batch*seq` for
/// named dims). A 0 copies the input's dim unless `allowzero` is set.
pub fn reshaped_dims(
    g: &OnnxGraph,
    input: &[SymDim],
    shape: Id,
    allowzero: Id,
) -> Option<Vec<SymDim>> {
    if input.contains(&SymDim::Unknown) {
        return None;
    }
    let copies = zero_copies(g, allowzero)?;
    let mut out = Vec::new();
    let mut inferred = None;
    for (i, d) in shape_value(g, shape)?.into_iter().enumerate() {
        match d {
            SymDim::Known(0) if copies => out.push(input.get(i)?.clone()),
            SymDim::Known(-1) if inferred.is_none() => {
                inferred = Some(i);
                out.push(SymDim::Known(-1));
            }
            SymDim::Known(v) if v < 0 => return None,
            SymDim::Unknown => return None,
            d => out.push(d),
        }
    }
    let mut rest: Vec<&SymDim> = input.iter().collect();
    let mut others = 1i64;
    for (i, d) in out.iter().enumerate() {
        if Some(i) == inferred {
            continue;
        }
        match rest.iter().position(|r| *r == d) {
            Some(j) => {
                rest.remove(j);
            }
            None => others = others.checked_mul(d.known()?)?,
        }
    }
    match inferred {
        Some(i) if others > 0 => out[i] = quotient(&rest, others)?,
        None if rest.iter().try_fold(1i64, |p, d| p.checked_mul(d.known()?)) == Some(others) => {}
        _ => return None,
    }
    Some(out)
}

/// The product of `dims` divided by `divisor`, when the numbers among them are divisible by it:
/// a number, or a product of names (`batch*seq`; a factor that is not a plain name is
/// parenthesised, and such a product only equals itself).
fn quotient(dims: &[&SymDim], divisor: i64) -> Option<SymDim> {
    let mut known = 1i64;
    let mut names = Vec::new();
    for d in dims {
        match d {
            SymDim::Known(v) => known = known.checked_mul(*v)?,
            SymDim::Sym(s) => names.push(s.as_str()),
            SymDim::Unknown => return None,
        }
    }
    if known % divisor != 0 {
        return None;
    }
    let known = known / divisor;
    if names.is_empty() {
        return Some(SymDim::Known(known));
    }
    let plain = |n: &str| {
        n.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
    };
    let factors = names.iter().map(|n| {
        if plain(n) {
            n.to_string()
        } else {
            format!("({n})")
        }
    });
    let text = std::iter::once(known.to_string())
        .chain(factors)
        .collect::<Vec<_>>()
        .join("*");
    Some(SymDim::expr(&text))
}

/// The permutation of a `Transpose`'s `perm` attribute class, when it is set.
fn perm(g: &OnnxGraph, p: Id) -> Option<Vec<i64>> {
    g[p].data.attr()?.ints().map(<[i64]>::to_vec)
}

/// Reads `Transpose(Reshape(x, shape; allowzero), perm)` as the head view of `x`: `x` 3-D
/// `[B, S, N]` with known dims, the Reshape giving `[B, S, H, D]` (the same `B` and `S`, `H`
/// and `D` numbers with `H·D = N`), `perm` `[0, 2, 1, 3]`.
pub fn head_view(g: &OnnxGraph, x: Id, shape: Id, allowzero: Id, p: Id) -> Option<HeadView> {
    if perm(g, p)? != HEADS_FIRST {
        return None;
    }
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
    ok.then_some(HeadView { heads, head_dim })
}

/// For `Reshape(Transpose(Transpose(Reshape(x, split), p1), p2), merge)` whose transposes
/// cancel (`p1` then `p2` is the identity): `x`'s dims (all known) and the dims of the whole
/// chain, which is then `Reshape(x, merge)` reshaped to those dims.
fn cancelled_split(
    g: &OnnxGraph,
    [x, split, split_zero, p1, p2, merge, merge_zero]: [Id; 7],
) -> Option<(Vec<SymDim>, Vec<SymDim>)> {
    let xd = g[x].data.tensor()?.shape.clone()?;
    let inner = reshaped_dims(g, &xd, split, split_zero)?;
    let (p1, p2) = (perm(g, p1)?, perm(g, p2)?);
    let n = inner.len();
    let mut sorted = p1.clone();
    sorted.sort_unstable();
    // Transpose gives out[i] = in[perm[i]]: p1 then p2 reads in[p1[p2[i]]], which must be in[i].
    let cancel = p2.len() == n
        && sorted.iter().copied().eq(0..n as i64)
        && (0..n).all(|i| usize::try_from(p2[i]).is_ok_and(|j| j < n && p1[j] == i as i64));
    let outer = reshaped_dims(g, &inner, merge, merge_zero)?;
    cancel.then_some((xd, outer))
}

/// `?x ?split ?split_zero ?p1 ?p2 ?merge ?merge_zero` of
/// `Reshape(Transpose(Transpose(Reshape(x, split), p1), p2), merge)`: the transposes cancel and
/// the outer Reshape gives back `x`'s own dims, so the whole chain is `x`.
pub fn heads_merged_back(g: &OnnxGraph, vars: [Id; 7]) -> bool {
    cancelled_split(g, vars).is_some_and(|(xd, outer)| outer == xd)
}

/// The variables of [`heads_merged_back`]: the transposes cancel, and `Reshape(x, merge)` gives
/// the chain's dims (a 0 in `merge` copies the same dim from `x` as from the split), so the
/// whole chain is `Reshape(x, merge)`.
pub fn split_then_reshaped(g: &OnnxGraph, vars: [Id; 7]) -> bool {
    let [.., merge, merge_zero] = vars;
    cancelled_split(g, vars).is_some_and(|(xd, outer)| {
        outer != xd && reshaped_dims(g, &xd, merge, merge_zero).is_some_and(|d| d == outer)
    })
}

/// `?y ?perm ?w ?axis` of `RMSNormalization(Transpose(y, perm), w; axis)`: the norm is over the
/// last axis only (`axis` −1 or the rank − 1), `perm` keeps that axis last, and the scale `w`
/// is 1-D (it varies along the normalized axis only), so the norm of each last-axis row does
/// not depend on where the Transpose moves it.
pub fn last_axis_norm_through_transpose(g: &OnnxGraph, [y, p, w, axis]: [Id; 4]) -> bool {
    let Some(rank) = g[y].data.tensor().and_then(|t| t.rank()) else {
        return false;
    };
    let last = rank as i64 - 1;
    let axis_ok = matches!(g[axis].data.attr(), Some(AttrValue::Int(a)) if *a == -1 || *a == last);
    let perm_ok = perm(g, p).is_some_and(|p| p.len() == rank && p.last() == Some(&last));
    let w_ok = g[w].data.tensor().and_then(|t| t.rank()) == Some(1);
    rank > 0 && axis_ok && perm_ok && w_ok
}

/// `?shape ?allowzero`: a Reshape to `shape` gives the same result for any input of the same
/// elements in the same order: the target is read ([`shape_value`]) and has no 0 that would
/// copy an input dim (or `allowzero` is set, and a 0 is a 0). A −1 is resolved from the element
/// count, which every such input shares.
pub fn target_copies_no_dim(g: &OnnxGraph, [shape, allowzero]: [Id; 2]) -> bool {
    let Some(copies) = zero_copies(g, allowzero) else {
        return false;
    };
    shape_value(g, shape).is_some_and(|v| !copies || !v.contains(&SymDim::Known(0)))
}

/// A last-axis slice of a head view: `Slice(view(x), start, end, axis)` takes channels
/// `start … end − 1` of every head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlicedView {
    /// The head view sliced.
    pub view: HeadView,
    /// The first channel taken (`0 ≤ start < end`).
    pub start: i64,
    /// One past the last channel taken (`≤ head_dim`).
    pub end: i64,
}

/// Reads `Slice(Transpose(Reshape(x, shape; allowzero), perm), starts, ends, axes[, steps])`
/// as a last-axis slice of the head view of `x` ([`head_view`]): one-element constant starts
/// and ends, axes `[3]` or `[−1]`, steps absent or `[1]`; the bounds clamped as `Slice` does
/// them (negative ones counted from the end), and a non-empty range.
pub fn sliced_head_view(
    g: &OnnxGraph,
    [x, shape, allowzero, p, starts, ends, axes]: [Id; 7],
    steps: Option<Id>,
) -> Option<SlicedView> {
    let view = head_view(g, x, shape, allowzero, p)?;
    let one = |c: Id| match const_ints(g, c)?.as_slice() {
        [v] => Some(*v),
        _ => None,
    };
    if !matches!(one(axes)?, 3 | -1) || steps.is_some_and(|s| one(s) != Some(1)) {
        return None;
    }
    let d = view.head_dim;
    let clamp = |v: i64| if v < 0 { v.saturating_add(d) } else { v }.clamp(0, d);
    let (start, end) = (clamp(one(starts)?), clamp(one(ends)?));
    (start < end).then_some(SlicedView { view, start, end })
}

/// Reads `Transpose(Gather(Reshape(x, shape; allowzero), index; axis), perm)` as a slice of a
/// head view: `x` 3-D `[B, S, N]` with known dims, the Reshape giving `[B, S, H, P, D]` (`x`'s
/// own `B` and `S`, numbers `H`, `P`, `D` with `H·P·D = N`), `index` a scalar (rank-0) integer
/// constant `j` with `−P ≤ j < P`, `axis` 3 or −2 and `perm` `[0, 2, 1, 3]`: the result is
/// channels `j·D … (j + 1)·D − 1` of every head of the view of `x` split `[B, S, H, P·D]`.
pub fn gathered_head_view(
    g: &OnnxGraph,
    [x, shape, allowzero, index, axis, p]: [Id; 6],
) -> Option<SlicedView> {
    if perm(g, p)? != HEADS_FIRST || !matches!(g[axis].data.attr()?, AttrValue::Int(3 | -2)) {
        return None;
    }
    if g[index].data.tensor()?.rank()? != 0 {
        return None;
    }
    let index = const_ints(g, index)?;
    let [j] = index.as_slice() else {
        return None;
    };
    let xd = known_dims(g, x, 3)?;
    let split = reshaped_dims(g, &xd, shape, allowzero)?;
    let [b, s, h, parts, d] = split.as_slice() else {
        return None;
    };
    let (heads, parts, head_dim) = (h.known()?, parts.known()?, d.known()?);
    let j = if *j < 0 { j.checked_add(parts)? } else { *j };
    let ok = *b == xd[0]
        && *s == xd[1]
        && heads > 0
        && head_dim > 0
        && (0..parts).contains(&j)
        && xd[2].known() == heads.checked_mul(parts)?.checked_mul(head_dim);
    let view = HeadView {
        heads,
        head_dim: parts * head_dim,
    };
    ok.then_some(SlicedView {
        view,
        start: j * head_dim,
        end: (j + 1) * head_dim,
    })
}
