//! Recognition of interleaved rotary embeddings (rules in
//! `rewrites/recognize/rotary_interleaved.rules`): the predicates that prove an exported chain
//! computes exactly an ONNX `RotaryEmbedding` with `interleaved = 1` (registered in
//! [`super::conditions`]), and the readings the appliers in
//! `appliers/rotary_interleaved.rs` rebuild from.
//!
//! transformers writes interleaved RoPE (helium, cohere, glm, gpt-j, codegen) as
//! `x · cos + rotate_every_two(x) · sin`, `rotate_every_two(x)` the pairs
//! `(−x[…, 2i + 1], x[…, 2i])` stacked on a new last axis and merged back, over tables whose
//! entries `2i` and `2i + 1` are equal: `repeat_interleave(2)` of a half-width table. The
//! TorchScript exporter writes `repeat_interleave(t, 2, dim)` as a `GatherND` of
//! `Expand(Unsqueeze(Transpose(t, p), [1]))` at indices `NonZero(Less(Range(0, max(r)),
//! r[:, None]))ᵀ` with `r` the repeat counts (all 2), transposed back: data-dependent in form
//! only, read here as exactly the pairwise repetition `Reshape(Concat(u, u), …)` of
//! `u = Unsqueeze(t', [−1])`.

use egg::Id;

use crate::ir::DType;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::lang::{Onnx, OpNode};
use crate::opt::query::{const_ints, int_attr};
use crate::rulebook::recognize_rotary::{rotary_table_rows, HalfTable};

/// The deepest chain of elementwise steps read above a pairwise repetition in a table.
const MAX_TABLE_STEPS: usize = 6;

/// The op e-nodes named `op` in class `id`.
fn ops<'a>(g: &'a OnnxGraph, id: Id, op: &'a str) -> impl Iterator<Item = &'a OpNode> + 'a {
    g[id]
        .nodes
        .iter()
        .filter_map(move |n| n.as_op().filter(|o| o.op.as_str() == op))
}

/// The elements of a small integer class: its constant values, else its symbolic value.
fn elements(g: &OnnxGraph, id: Id) -> Option<Vec<SymDim>> {
    match const_ints(g, id) {
        Some(v) => Some(v.into_iter().map(SymDim::Known).collect()),
        None => g[id].data.value.clone(),
    }
}

/// Whether `a` and `b` are the same dim, known or the same symbol.
fn same(a: &SymDim, b: &SymDim) -> bool {
    *a != SymDim::Unknown && a == b
}

/// The `perm` of a Transpose attribute class.
fn perm(g: &OnnxGraph, p: Id) -> Option<Vec<usize>> {
    match g[p].data.attr() {
        Some(AttrValue::Ints(v)) => v.iter().map(|&i| usize::try_from(i).ok()).collect(),
        _ => None,
    }
}

/// Whether attribute class `a` is unset or the integer `v`.
fn unset_or(g: &OnnxGraph, a: Id, v: i64) -> bool {
    match g[a].data.attr() {
        Some(AttrValue::Unset) => true,
        Some(AttrValue::Int(x)) => *x == v,
        _ => false,
    }
}

/// A proven `repeat_interleave(2)` of the last axis ([`repeat_interleave`]): the output is
/// `RI(Transpose(t, perm))`, element `k` of the last axis being element `k / 2` of the input's.
#[derive(Debug, Clone, PartialEq)]
pub struct Interleave {
    /// The tensor `t` repeated.
    pub input: Id,
    /// The permutation taking `t` to the layout whose last axis is repeated (None: identity).
    pub perm: Option<Vec<i64>>,
    /// The rank of `t` (and of the output).
    pub rank: usize,
    /// The width `m` of the repeated axis (the output's is `2m`).
    pub width: i64,
}

/// Whether `r` is the repeat counts of width `m`: a 1-D class whose `m` elements are all 2.
fn repeat_counts(g: &OnnxGraph, r: Id, m: i64) -> bool {
    elements(g, r).is_some_and(|v| v.len() as i64 == m && v.iter().all(|d| *d == SymDim::Known(2)))
}

/// Whether class `c` is the scalar `v` (a constant of one element).
fn scalar_is(g: &OnnxGraph, c: Id, v: i64) -> bool {
    matches!(const_ints(g, c).as_deref(), Some([x]) if *x == v)
}

/// Whether class `l` is `max(r)`, as an int64 scalar: `ReduceMax(r; keepdims 0)` over all
/// axes, possibly `Cast` to int64.
fn max_of(g: &OnnxGraph, l: Id, r: Id) -> bool {
    let direct = ops(g, l, "ReduceMax").any(|n| {
        let whole = match n.input_ids() {
            [x] => g.find(*x) == g.find(r),
            [x, axes] => g.find(*x) == g.find(r) && matches!(g[*axes].nodes[..], [Onnx::Absent]),
            _ => false,
        };
        whole
            && n.attr_id("keepdims")
                .is_some_and(|k| int_attr(g, k) == Some(0))
            && n.attr_id("noop_with_empty_axes")
                .is_none_or(|k| unset_or(g, k, 0))
    });
    direct
        || ops(g, l, "Cast").any(|n| {
            n.attr_id("to").and_then(|t| int_attr(g, t)) == Some(DType::I64.onnx_code() as i64)
                && n.input_ids().first().is_some_and(|x| max_of(g, *x, r))
        })
}

/// Whether class `idx` is the `[2m, 2]` int64 index `[[k / 2, k % 2] for k < 2m]`: a constant
/// of those values, or TorchScript's `Transpose(NonZero(Less(Range(0, max(r), 1),
/// Unsqueeze(r, [1]))), [1, 0])` with `r` `m` counts all 2 — `Less` is then true at every
/// `[i, j]`, `j < 2`, and NonZero lists those coordinates in row-major order.
fn pair_indices(g: &OnnxGraph, idx: Id, m: i64) -> bool {
    let literal = const_ints(g, idx).is_some_and(|v| {
        let shape = g[idx].data.tensor().and_then(|t| t.static_shape());
        shape.as_deref() == Some(&[2 * m, 2])
            && v.chunks(2)
                .enumerate()
                .all(|(k, p)| p == [k as i64 / 2, k as i64 % 2])
    });
    literal
        || ops(g, idx, "Transpose").any(|t| {
            let [nz] = t.input_ids() else { return false };
            let flipped = t.attr_id("perm").and_then(|p| perm(g, p)) == Some(vec![1, 0]);
            flipped
                && ops(g, *nz, "NonZero").any(|n| {
                    let [less] = n.input_ids() else { return false };
                    ops(g, *less, "Less").any(|l| {
                        let [range, col] = l.input_ids() else {
                            return false;
                        };
                        ops(g, *col, "Unsqueeze").any(|u| {
                            let [r, axes] = u.input_ids() else {
                                return false;
                            };
                            matches!(const_ints(g, *axes).as_deref(), Some([1] | [-1]))
                                && repeat_counts(g, *r, m)
                                && ops(g, *range, "Range").any(|rg| match rg.input_ids() {
                                    [start, limit, delta] => {
                                        scalar_is(g, *start, 0)
                                            && scalar_is(g, *delta, 1)
                                            && max_of(g, *limit, *r)
                                    }
                                    _ => false,
                                })
                        })
                    })
                })
        })
}

/// `?t ?p1 ?axes ?shape ?idx ?bd ?p2` of `Transpose(GatherND(Expand(Unsqueeze(Transpose(t,
/// p1), axes), shape), idx; batch_dims bd), p2)` read as `repeat_interleave(2)`: `t` of known
/// rank `n` with the dim `m` it moves to the front (`p1[0]`) known; `axes` `[1]`; the Expand
/// target of `n + 1` elements, each but the second 1 or the Unsqueeze's own dim there (so the
/// Expand broadcasts only the new axis); `idx` the pairs `[k / 2, k % 2]` ([`pair_indices`]);
/// `bd` 0; `p2` a permutation of rank `n` taking the repeated axis last (`p2[n − 1] = 0`).
/// Then `GatherND(…)[k, rest] = Transpose(t, p1)[k / 2, rest]`, so the whole is the last-axis
/// repetition of `Transpose(t, c)`, `c[i] = p1[p2[i]]`.
pub fn read_interleave(
    g: &OnnxGraph,
    [t, p1, axes, shape, idx, bd, p2]: [Id; 7],
) -> Option<Interleave> {
    let dims = g[t].data.tensor()?.shape.clone()?;
    let n = dims.len();
    let (p1, p2) = (perm(g, p1)?, perm(g, p2)?);
    let valid = |p: &[usize]| {
        let mut s = p.to_vec();
        s.sort_unstable();
        s == (0..n).collect::<Vec<_>>()
    };
    (n >= 2 && valid(&p1) && valid(&p2) && p2[n - 1] == 0).then_some(())?;
    let m = dims[p1[0]].known().filter(|&m| m > 0)?;
    matches!(const_ints(g, axes).as_deref(), Some([1])).then_some(())?;
    let unsqueezed: Vec<SymDim> = [SymDim::Known(m), SymDim::Known(1)]
        .into_iter()
        .chain(p1[1..].iter().map(|&a| dims[a].clone()))
        .collect();
    let target = elements(g, shape)?;
    let broadcast_ok = target.len() == n + 1
        && target
            .iter()
            .enumerate()
            .all(|(i, d)| i == 1 || *d == SymDim::Known(1) || same(d, &unsqueezed[i]));
    (broadcast_ok && unset_or(g, bd, 0) && pair_indices(g, idx, m)).then_some(())?;
    let c: Vec<i64> = (0..n).map(|i| p1[p2[i]] as i64).collect();
    let identity = c.iter().enumerate().all(|(i, &a)| a == i as i64);
    Some(Interleave {
        input: g.find(t),
        perm: (!identity).then_some(c),
        rank: n,
        width: m,
    })
}

/// `?t ?p1 ?axes ?shape ?idx ?bd ?p2`: the GatherND subgraph is `repeat_interleave(2)` of a
/// last axis ([`read_interleave`]).
pub fn repeat_interleave(g: &OnnxGraph, vars: [Id; 7]) -> bool {
    read_interleave(g, vars).is_some()
}

/// The input `h` of a pairwise repetition in class `c` as the appliers write it:
/// `Reshape(Concat(Unsqueeze(h, [n]), Unsqueeze(h, [n]); axis n), [0, …, 0, 2m])` with `h` of
/// rank `n`, last dim `m` known (allowzero unset or 0; a `−1` for the axis also read). Element
/// `2i + j` of the last axis is `h[…, i]`.
pub fn pairwise_of(g: &OnnxGraph, c: Id) -> Option<Id> {
    ops(g, c, "Reshape").find_map(|r| {
        let [cat, target] = r.input_ids() else { return None };
        let zero_copies = r.attr_id("allowzero").is_none_or(|a| unset_or(g, a, 0));
        let target = const_ints(g, *target)?;
        ops(g, *cat, "Concat").find_map(|cn| {
            let [u1, u2] = cn.input_ids() else { return None };
            (g.find(*u1) == g.find(*u2)).then_some(())?;
            ops(g, *u1, "Unsqueeze").find_map(|u| {
                let [h, axes] = u.input_ids() else { return None };
                let dims = g[*h].data.tensor()?.shape.clone()?;
                let n = dims.len() as i64;
                let m = dims.last()?.known()?;
                let axis = int_attr(g, cn.attr_id("axis")?)?;
                let last = matches!(const_ints(g, *axes).as_deref(), Some([a]) if *a == n || *a == -1)
                    && (axis == n || axis == -1);
                let merged = target.len() as i64 == n
                    && target[..target.len() - 1].iter().all(|&v| v == 0)
                    && matches!(target.last(), Some(&v) if v == 2 * m || v == -1);
                (zero_copies && last && merged && n >= 1).then(|| g.find(*h))
            })
        })
    })
}

/// A table of class `c` whose last-axis entries `2i` and `2i + 1` are equal, within `depth`
/// steps: a pairwise repetition ([`pairwise_of`]) of `f`, or `Cos`, `Sin`, `Cast` of such a
/// table, or such a table multiplied or divided by a single-element float constant. The
/// reading's leaf is `f` and its steps rebuild the half-width table on `f`.
fn pairs_within(g: &OnnxGraph, c: Id, depth: usize) -> Option<HalfTable> {
    if let Some(f) = pairwise_of(g, c) {
        return Some(HalfTable {
            leaf: f,
            steps: Vec::new(),
        });
    }
    if depth == 0 {
        return None;
    }
    let rank = g[c].data.tensor()?.rank()?;
    let single = |k: Id| {
        g[k].data.konst.as_deref().is_some_and(|lit| {
            lit.dtype.is_float()
                && lit.shape.iter().product::<usize>() == 1
                && lit.shape.len() <= rank
        })
    };
    g[c].nodes.iter().filter_map(Onnx::as_op).find_map(|n| {
        let carrier = match (n.op.as_str(), n.input_ids()) {
            ("Cos" | "Sin" | "Cast", [_]) => 0,
            ("Mul", [_, k]) if single(*k) => 0,
            ("Mul", [k, _]) if single(*k) => 1,
            ("Div", [_, k]) if single(*k) => 0,
            _ => return None,
        };
        let mut inner = pairs_within(g, n.children[carrier], depth - 1)?;
        inner.steps.push((n.clone(), carrier));
        Some(inner)
    })
}

/// The shape of a rotary input `x`: 4-D `[B, H, S, D]` of a float type `RotaryEmbedding`
/// takes, `D` known, even and positive.
fn rotary_input(g: &OnnxGraph, x: Id) -> Option<Vec<SymDim>> {
    let t = g[x].data.tensor()?;
    matches!(t.dtype, Some(DType::F32 | DType::F16 | DType::BF16)).then_some(())?;
    let dims = t.shape.clone()?;
    let d = dims.get(3)?.known()?;
    (dims.len() == 4 && d > 0 && d % 2 == 0).then_some(dims)
}

/// The half-width cache of an interleaved rotary factor `c4` applied to `x` `[B, H, S, D]`
/// (entries `2i` and `2i + 1` of its last axis equal), and whether it has one batch row (as
/// [`rotary_table_rows`]): either
/// - `c4` the pairwise repetition of `Slice(u, [0], [D/2], [3 | −1])` with `u` a rotate-half
///   factor (`Unsqueeze(c, [1])`, `c` with equal halves over angles `[B | 1, S, D/2]`,
///   [`rotary_table_rows`]): the first half of such a table is its half-width cache; or
/// - `c4 = Unsqueeze(c, [1])`, `c` `[B | 1, S, D]` of `x`'s dtype, `Cos`/`Sin`/`Cast`/a scale
///   of a pairwise repetition of angles `f` `[B | 1, S, D/2]` ([`pairs_within`]): the cache is
///   those steps on `f`.
pub fn pair_table_rows(g: &OnnxGraph, c4: Id, x: Id) -> Option<(HalfTable, bool)> {
    let dims = rotary_input(g, x)?;
    let d = dims[3].known()?;
    let from_halves = pairwise_of(g, c4).and_then(|h| {
        ops(g, h, "Slice").find_map(|sl| {
            let ins = sl.input_ids();
            let (u, start, end, axis) = (*ins.first()?, *ins.get(1)?, *ins.get(2)?, *ins.get(3)?);
            let step_one = match ins.get(4) {
                Some(&st) if !matches!(g[st].nodes[..], [Onnx::Absent]) => scalar_is(g, st, 1),
                _ => true,
            };
            let bounds = scalar_is(g, start, 0)
                && scalar_is(g, end, d / 2)
                && matches!(const_ints(g, axis).as_deref(), Some([3] | [-1]));
            (step_one && bounds).then_some(())?;
            rotary_table_rows(g, u, x)
        })
    });
    from_halves.or_else(|| {
        let dtype = g[x].data.tensor()?.dtype;
        ops(g, c4, "Unsqueeze").find_map(|u| {
            let [c, axes] = u.input_ids() else {
                return None;
            };
            let ct = g[*c].data.tensor()?;
            (matches!(const_ints(g, *axes).as_deref(), Some([1] | [-3]))
                && ct.rank() == Some(3)
                && ct.dtype == dtype)
                .then_some(())?;
            let table = (0..=MAX_TABLE_STEPS).find_map(|k| pairs_within(g, *c, k))?;
            let f = g[table.leaf].data.tensor()?.shape.clone()?;
            let one_row = !same(&f[0], &dims[0]) && f[0] == SymDim::Known(1);
            (f.len() == 3
                && (one_row || same(&f[0], &dims[0]))
                && same(&f[1], &dims[2])
                && f[2].known() == Some(d / 2))
            .then_some((table, one_row))
        })
    })
}

/// Whether class `s` is `x[…, start::2]` on the last axis of 4-D `x` (last dim `d`): constant
/// one-element start, an end at or past `d`, axis `3` or `−1`, step 2.
fn every_other(g: &OnnxGraph, s: Id, x: Id, d: i64, start: i64) -> bool {
    let x = g.find(x);
    ops(g, s, "Slice").any(|sl| match sl.input_ids() {
        [data, st, end, axis, step] => {
            g.find(*data) == x
                && scalar_is(g, *st, start)
                && matches!(const_ints(g, *end).as_deref(), Some([e]) if *e >= d)
                && matches!(const_ints(g, *axis).as_deref(), Some([3] | [-1]))
                && scalar_is(g, *step, 2)
        }
        _ => false,
    })
}

/// `?x ?odd ?a1 ?even ?a2 ?axis ?shape ?az ?cos ?sin` of `x · cos + Reshape(Concat(
/// Unsqueeze(−odd, a1), Unsqueeze(even, a2); axis), shape) · sin`: `x` 4-D `[B, H, S, D]`
/// (float, `D` known and even), `odd` = `x[…, 1::2]` and `even` = `x[…, 0::2]`, both
/// unsqueezed and concatenated on a new last axis (`[B, H, S, D/2, 2]`, entry `[…, i, 0]` =
/// `−x[…, 2i + 1]`, `[…, i, 1]` = `x[…, 2i]`) and reshaped to `[B, H, S, D]` (target elements
/// x's own B, H, S or 0 copying them, and D or −1), so the rotated element `2i` is
/// `−x[2i + 1]` and `2i + 1` is `x[2i]`; `cos` and `sin` interleaved rotary factors
/// ([`pair_table_rows`]). That is `RotaryEmbedding(…; interleaved 1)` exactly.
pub fn rotate_pairs(
    g: &OnnxGraph,
    [x, odd, a1, even, a2, axis, shape, az, cos, sin]: [Id; 10],
) -> bool {
    let Some(dims) = rotary_input(g, x) else {
        return false;
    };
    let d = dims[3].known().unwrap_or(0);
    let new_last = |a: Id| matches!(const_ints(g, a).as_deref(), Some([4] | [-1]));
    let copies = unset_or(g, az, 0);
    let target_ok = elements(g, shape).is_some_and(|t| {
        t.len() == 4
            && (0..3).all(|i| same(&t[i], &dims[i]) || (copies && t[i] == SymDim::Known(0)))
            && matches!(t[3], SymDim::Known(v) if v == d || v == -1)
    });
    new_last(a1)
        && new_last(a2)
        && matches!(g[axis].data.attr(), Some(AttrValue::Int(4 | -1)))
        && every_other(g, odd, x, d, 1)
        && every_other(g, even, x, d, 0)
        && target_ok
        && pair_table_rows(g, cos, x).is_some()
        && pair_table_rows(g, sin, x).is_some()
}

/// `?x ?r` of `Tile(x, r)`: every axis `i` of `x` (rank known) has the repeat `r[i]` 1 or the
/// dim 1 (`r`'s `rank` elements read as a constant or a symbolic value), so the Tile is the
/// broadcast `Expand(x, r)`.
pub fn tile_repeats_ones(g: &OnnxGraph, [x, r]: [Id; 2]) -> bool {
    let Some(dims) = g[x].data.tensor().and_then(|t| t.shape.clone()) else {
        return false;
    };
    elements(g, r).is_some_and(|reps| {
        reps.len() == dims.len()
            && reps
                .iter()
                .zip(&dims)
                .all(|(r, d)| *r == SymDim::Known(1) || *d == SymDim::Known(1))
    })
}

/// A rotate-every-two rotation of the first `rotary` channels of `[B, S, H, D]` heads, read by
/// [`read_heads_last_rotation`].
#[derive(Debug, Clone, PartialEq)]
pub struct HeadsLastRotation {
    /// The heads `x` `[B, S, H, D]`.
    pub x: Id,
    /// `H`.
    pub heads: i64,
    /// `D`.
    pub head_dim: i64,
    /// The rotated width `r` (even, `0 < r < D`).
    pub rotary: i64,
    /// The half-width caches `[B, S, r/2]`.
    pub cos: Id,
    /// See `cos`.
    pub sin: Id,
}

/// `(x, start, end)` of a class holding `Slice(x, [start], [end], [3 | −1])` on the last axis
/// of a 4-D `x`, with constant one-element bounds and the step absent or 1.
fn last_axis_slice(g: &OnnxGraph, s: Id) -> Option<(Id, i64, i64)> {
    ops(g, s, "Slice").find_map(|sl| {
        let ins = sl.input_ids();
        let (x, start, end, axis) = (*ins.first()?, *ins.get(1)?, *ins.get(2)?, *ins.get(3)?);
        let step_one = match ins.get(4) {
            Some(&st) if !matches!(g[st].nodes[..], [Onnx::Absent]) => scalar_is(g, st, 1),
            _ => true,
        };
        let rank4 = g[x].data.tensor()?.rank() == Some(4);
        let on_last = matches!(const_ints(g, axis).as_deref(), Some([3] | [-1]));
        let (start, end) = match (
            const_ints(g, start)?.as_slice(),
            const_ints(g, end)?.as_slice(),
        ) {
            ([a], [b]) => (*a, *b),
            _ => return None,
        };
        (step_one && rank4 && on_last && start >= 0 && end >= 0).then(|| (g.find(x), start, end))
    })
}

/// The half-width cache `h` `[B, S, r/2]` (`x`'s `B` and `S`, `x`'s dtype) of a factor `f`
/// `[B, S, 1, r]` over `[B, S, H, D]` heads whose last-axis entries `2i` and `2i + 1` are both
/// `h[…, i]`, as GPT-J's export writes `repeat_interleave(2)` of its sin/cos: `f = Reshape(p,
/// t)` (its inferred dims `[B, S, 1, r]`), `p = Tile(w, [1, 1, 1, 1, 2])` or `Expand(w, e)`
/// (`e` five elements, each 1 or `w`'s dim there but the last 2), `w = Unsqueeze(v, [4 | −1])`,
/// `v = Unsqueeze(h, [2 | −2])`: `p[…, 0, i, j] = h[…, i]` `[B, S, 1, r/2, 2]`, which the
/// Reshape keeps in order, so `f[…, 0, 2i + j] = h[…, i]`.
fn heads_last_factor(g: &OnnxGraph, f: Id, x: Id, r: i64) -> Option<Id> {
    let xt = g[x].data.tensor()?;
    let (dtype, xd) = (xt.dtype, xt.shape.clone()?);
    let fd = g[f].data.tensor()?.shape.clone()?;
    let f_ok = fd.len() == 4
        && same(&fd[0], &xd[0])
        && same(&fd[1], &xd[1])
        && fd[2] == SymDim::Known(1)
        && fd[3] == SymDim::Known(r);
    f_ok.then_some(())?;
    ops(g, f, "Reshape").find_map(|rs| {
        let [p, _target] = rs.input_ids() else {
            return None;
        };
        let from_w = |w: Id| -> Option<Id> {
            ops(g, w, "Unsqueeze").find_map(|u| {
                let [v, a4] = u.input_ids() else { return None };
                matches!(const_ints(g, *a4).as_deref(), Some([4] | [-1])).then_some(())?;
                ops(g, *v, "Unsqueeze").find_map(|u2| {
                    let [h, a2] = u2.input_ids() else { return None };
                    matches!(const_ints(g, *a2).as_deref(), Some([2] | [-2])).then_some(())?;
                    let ht = g[*h].data.tensor()?;
                    let hd = ht.shape.clone()?;
                    (ht.dtype == dtype
                        && hd.len() == 3
                        && same(&hd[0], &xd[0])
                        && same(&hd[1], &xd[1])
                        && hd[2] == SymDim::Known(r / 2))
                    .then(|| g.find(*h))
                })
            })
        };
        let tiled = ops(g, *p, "Tile").find_map(|t| {
            let [w, reps] = t.input_ids() else {
                return None;
            };
            (const_ints(g, *reps).as_deref() == Some(&[1, 1, 1, 1, 2])).then_some(())?;
            from_w(*w)
        });
        tiled.or_else(|| {
            ops(g, *p, "Expand").find_map(|ex| {
                let [w, e] = ex.input_ids() else { return None };
                let wd = g[*w].data.tensor()?.shape.clone()?;
                let e = elements(g, *e)?;
                let ok = wd.len() == 5
                    && e.len() == 5
                    && wd[4] == SymDim::Known(1)
                    && e[4] == SymDim::Known(2)
                    && (0..4).all(|i| e[i] == SymDim::Known(1) || same(&e[i], &wd[i]));
                ok.then_some(())?;
                from_w(*w)
            })
        })
    })
}

/// `?xr ?odd ?a1 ?even ?a2 ?axis ?shape ?az ?cos ?sin ?pass ?caxis` of `Concat(xr · cos +
/// Reshape(Concat(Unsqueeze(−odd, a1), Unsqueeze(even, a2); axis), shape) · sin, pass; caxis)`
/// read as GPT-J's partial rotate-every-two on `[B, S, H, D]` heads `x` (before the heads are
/// transposed): `xr = x[…, :r]` and `pass = x[…, r:]` (last-axis slices of the same `x`, float,
/// `H` and `D` known, `r` even, `0 < r < D`), `odd = xr[…, 1::2]`, `even = xr[…, 0::2]`, both
/// unsqueezed and concatenated on a new last axis and reshaped to `[B, S, H, r]` (target
/// elements `x`'s own `B`, `S`, `H` or 0 copying them, and `r` or −1), so the rotated element
/// `2i` is `−xr[2i + 1]` and `2i + 1` is `xr[2i]`; `cos` and `sin` factors `[B, S, 1, r]` with
/// entries `2i`, `2i + 1` equal ([`heads_last_factor`]); `caxis` the last. Then every head's
/// element `2i < r` is `x[2i]·c[i] − x[2i + 1]·s[i]`, `2i + 1` is `x[2i + 1]·c[i] + x[2i]·s[i]`
/// and the rest is `x`: `RotaryEmbedding(Reshape(x, [B, S, H·D]); interleaved 1, num_heads H,
/// rotary_embedding_dim r)` viewed as `[B, S, H, D]`, exactly.
pub fn read_heads_last_rotation(
    g: &OnnxGraph,
    [xr, odd, a1, even, a2, axis, shape, az, cos, sin, pass, caxis]: [Id; 12],
) -> Option<HeadsLastRotation> {
    let (x, s0, r) = last_axis_slice(g, xr)?;
    let (x2, r2, end) = last_axis_slice(g, pass)?;
    let t = g[x].data.tensor()?;
    matches!(t.dtype, Some(DType::F32 | DType::F16 | DType::BF16)).then_some(())?;
    let dims = t.shape.clone()?;
    let (h, d) = (dims[2].known()?, dims[3].known()?);
    let bounds = x == x2 && s0 == 0 && r2 == r && end >= d && r > 0 && r < d && r % 2 == 0;
    bounds.then_some(())?;
    let new_last = |a: Id| matches!(const_ints(g, a).as_deref(), Some([4] | [-1]));
    let copies = unset_or(g, az, 0);
    let target_ok = elements(g, shape).is_some_and(|t| {
        t.len() == 4
            && (0..3).all(|i| same(&t[i], &dims[i]) || (copies && t[i] == SymDim::Known(0)))
            && matches!(t[3], SymDim::Known(v) if v == r || v == -1)
    });
    let ok = new_last(a1)
        && new_last(a2)
        && matches!(g[axis].data.attr(), Some(AttrValue::Int(4 | -1)))
        && matches!(g[caxis].data.attr(), Some(AttrValue::Int(3 | -1)))
        && every_other(g, odd, xr, r, 1)
        && every_other(g, even, xr, r, 0)
        && target_ok;
    ok.then_some(())?;
    Some(HeadsLastRotation {
        x,
        heads: h,
        head_dim: d,
        rotary: r,
        cos: heads_last_factor(g, cos, x, r)?,
        sin: heads_last_factor(g, sin, x, r)?,
    })
}

/// `?xr ?odd ?a1 ?even ?a2 ?axis ?shape ?az ?cos ?sin ?pass ?caxis`: a partial rotate-every-two
/// on `[B, S, H, D]` heads ([`read_heads_last_rotation`]).
pub fn rotate_pairs_heads_last(g: &OnnxGraph, vars: [Id; 12]) -> bool {
    read_heads_last_rotation(g, vars).is_some()
}

/// The `[B, S, H·D]` tensor `p` that the `[B, S, H, D]` heads `x` split, where `x`'s class
/// holds `Reshape(p, t)` (`p` 3-D with `x`'s `B` and `S` and last dim `H·D`): then
/// `Reshape(x, [0, 0, −1])` is `p` itself (a Reshape keeps the elements in order).
pub fn merged_heads_source(g: &OnnxGraph, x: Id) -> Option<Id> {
    let xd = g[x].data.tensor()?.shape.clone()?;
    let width = xd.get(2)?.known()? * xd.get(3)?.known()?;
    ops(g, x, "Reshape").find_map(|r| {
        let [p, _] = r.input_ids() else { return None };
        let pd = g[*p].data.tensor()?.shape.clone()?;
        (pd.len() == 3 && same(&pd[0], &xd[0]) && same(&pd[1], &xd[1])).then_some(())?;
        (pd[2] == SymDim::Known(width)).then(|| g.find(*p))
    })
}
