//! The applier of `sliced-qkv-for-gqa` (`fusion/pack_qkv.rules`): a GroupQueryAttention whose
//! q, k and v are three last-axis Slices of one tensor `x` `[B, S, (Hq + 2·Hkv)·D]` covering
//! it in order at the widths `Hq·D`, `Hkv·D`, `Hkv·D` → GroupQueryAttention reading `x`
//! itself as packed q|k|v (key and value absent), which it splits at the same widths.

use egg::Id;

use super::pack_qkv::GQA_REST;
use crate::ops::schema;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{vars, Applier, Site};
use crate::opt::lang::Onnx;
use crate::opt::query::{const_ints, int_attr};

/// `sliced-qkv-for-gqa`: `?x`, the three Slices' `starts ends axes`, then the
/// GroupQueryAttention's inputs from past_key on and its attributes.
pub(super) const SLICED_QKV: Applier<25> = Applier::new(
    vars(
        [
            "?x", "?s0", "?e0", "?a0", "?s1", "?e1", "?a1", "?s2", "?e2", "?a2",
        ],
        GQA_REST,
    ),
    sliced_qkv,
);

/// The one value of a one-element constant.
fn one(g: &OnnxGraph, c: Id) -> Option<i64> {
    match const_ints(g, c)?.as_slice() {
        [v] => Some(*v),
        _ => None,
    }
}

/// The channels `[start, end)` a last-axis `Slice(x, starts, ends, axes)` of a tensor of last
/// dim `width` takes: one-element constants, axes `[2]` or `[−1]`, bounds clamped as Slice
/// clamps them (negative ones counted from `width`).
fn last_axis_range(g: &OnnxGraph, [s, e, a]: [Id; 3], width: i64) -> Option<(i64, i64)> {
    if !matches!(one(g, a)?, 2 | -1) {
        return None;
    }
    let clamp = |v: i64| if v < 0 { v.saturating_add(width) } else { v }.clamp(0, width);
    Some((clamp(one(g, s)?), clamp(one(g, e)?)))
}

/// Reads `sliced-qkv-for-gqa`: the ranges must be exactly `[0, Hq·D)`, `[Hq·D, (Hq+Hkv)·D)`,
/// `[(Hq+Hkv)·D, (Hq+2·Hkv)·D)` with `(Hq+2·Hkv)·D` `x`'s last dim (`D` past_key's last dim).
fn sliced_qkv(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 25]) -> Option<Id> {
    let [x, s0, e0, a0, s1, e1, a1, s2, e2, a2, rest @ ..] = vars;
    let [pk, _, _, _, _, _, _, kvh, _, heads, ..] = rest;
    let d = g[pk].data.tensor()?.shape.as_ref()?.get(3)?.known()?;
    let (hq, hkv) = (int_attr(g, heads)?, int_attr(g, kvh)?);
    let width = match g[x].data.tensor()?.shape.as_deref()? {
        [_, _, w] => w.known()?,
        _ => return None,
    };
    let (q, k) = (hq.checked_mul(d)?, hkv.checked_mul(d)?);
    let want = [(0, q), (q, q + k), (q + k, q + 2 * k)];
    let got = [
        last_axis_range(g, [s0, e0, a0], width)?,
        last_axis_range(g, [s1, e1, a1], width)?,
        last_axis_range(g, [s2, e2, a2], width)?,
    ];
    if got != want || width != q + 2 * k || k == 0 {
        return None;
    }
    let absent = g.add(Onnx::Absent);
    let mut children = vec![x, absent, absent];
    children.extend_from_slice(&rest);
    let attrs = schema("com.microsoft::GroupQueryAttention")?;
    Some(g.add(Onnx::op(
        "com.microsoft::GroupQueryAttention",
        attrs,
        9,
        3,
        children,
    )))
}
