//! GPT-Neo's eager attention mask as optimum-onnx exports it (transformers ≤ 4.57): the scores
//! masked by a slice of the constant causal buffer `bias` before transformers' float 4-D mask
//! is added, which `masked-scores-to-attention` turns into the float mask
//! `Where(keep, 0, fill) + bias` (`fill ≤ −FLT_MAX`), `keep` =
//! `Slice(Slice(buffer, [T − S], [T], axes [2]), [0], [T], axes [3])` of a constant boolean
//! buffer `[1, 1, N, N]` (`tril(ones)` in global layers, `tril(ones) ^ tril(ones, −W)` in local
//! ones).
//!
//! [`summed_export_mask`] reads it exactly:
//! - the buffer is checked element by element to be `c ≤ r` (and `r − c < W`, `0 < W < N`, when
//!   some element below the diagonal is false) for every row `r` and column `c`;
//! - the sliced element `(i, j)` is `buffer[T − S + i, j]` = `buffer[P + i, j]` when `T ≤ N`
//!   (no slice clamps: `0 ≤ P ≤ T ≤ N`), i.e. `j ≤ P + i` (and `P + i − j < W`): the causal
//!   (sliding-window) predicate of [`super::export_mask`]. When `T > N ≥ 2` the column slice
//!   clamps to `N ≠ T` columns and the export's broadcast against the `[B, ·, S, T]` scores fails
//!   at run time, so the read is exact for every input the export runs (it holds no value for
//!   the others);
//! - the sum of two masks, each `±0` where its predicate holds and `≤ −FLT_MAX` elsewhere (the
//!   other term read by [`super::float_export_mask`] or [`super::export_mask`]), is `±0` where
//!   both hold and `≤ −FLT_MAX` elsewhere (`x + y ≤ −FLT_MAX` for `x ≤ −FLT_MAX`, `y ≤ 0`; two
//!   masked terms give `−∞`): the conjunction.

use std::collections::HashMap;

use egg::Id;

use super::{export_mask, float_export_mask, ExportMask, Reader, MAX_DEPTH};
use crate::ir::DType;
use crate::ops::types::SymDim;
use crate::opt::analysis::OnnxGraph;
use crate::opt::lang::OpNode;
use crate::opt::query::{const_ints, ops_named, scalar_float};

/// The causal predicate a constant boolean buffer `[1, 1, N, N]` holds: `Some(None)` for
/// `c ≤ r` everywhere, `Some(Some(W))` for `c ≤ r ∧ r − c < W` (`0 < W < N`), else `None`.
/// Also returns `N` (at least 2).
fn buffer_window(g: &OnnxGraph, id: Id) -> Option<(usize, Option<i64>)> {
    let lit = g[g.find(id)].data.konst.as_ref()?;
    if lit.dtype != DType::Bool {
        return None;
    }
    let [1, 1, n, m] = lit.shape[..] else {
        return None;
    };
    if n != m || n < 2 || lit.bytes.len() != n * n {
        return None;
    }
    let at = |r: usize, c: usize| lit.bytes[r * n + c] != 0;
    // The keys the last row sees: W (or N, no window).
    let w = (0..n).filter(|&c| at(n - 1, c)).count();
    if w == 0 {
        return None;
    }
    let holds = (0..n).all(|r| (0..n).all(|c| at(r, c) == (c <= r && r - c.min(r) < w)));
    holds.then_some((n, (w < n).then_some(w as i64)))
}

/// `Slice(x, starts, ends, [axis], [1])` of one axis: `(x, start, end)` as symbolic scalars.
fn one_axis_slice(
    g: &OnnxGraph,
    reader: &mut Reader<'_>,
    op: &OpNode,
    axis: i64,
) -> Option<(Id, SymDim, SymDim)> {
    let ins = op.input_ids();
    let [x, starts, ends, axes, rest @ ..] = ins else {
        return None;
    };
    let steps_ok = match rest {
        [] => true,
        [steps] => const_ints(g, *steps)? == [1],
        _ => false,
    };
    let axes = const_ints(g, *axes)?;
    if !steps_ok || !(axes == [axis] || axes == [axis - 4]) {
        return None;
    }
    let start = reader.scalar(*starts, MAX_DEPTH)?;
    let end = reader.scalar(*ends, MAX_DEPTH)?;
    Some((*x, start, end))
}

/// Whether `a` and `b` are the same symbolic size.
fn same(a: &SymDim, b: &SymDim) -> bool {
    a != &SymDim::Unknown && a.sub(b) == SymDim::Known(0)
}

/// Reads `keep` = `Slice(Slice(buffer, [P'], [T], axes [2]), [0], [T], axes [3])` (`P' = T − S`,
/// `T = P + S`) of a causal buffer (see the module doc): its window (`None` = global).
fn sliced_buffer(g: &OnnxGraph, keep: Id, p: &SymDim, t: &SymDim) -> Option<Option<i64>> {
    let mut reader = Reader {
        g,
        memo: HashMap::new(),
    };
    ops_named(g, keep, "Slice").iter().find_map(|cols| {
        let (rows, c0, c1) = one_axis_slice(g, &mut reader, cols, 3)?;
        if c0 != SymDim::Known(0) || !same(&c1, t) {
            return None;
        }
        ops_named(g, rows, "Slice").iter().find_map(|r| {
            let (buffer, r0, r1) = one_axis_slice(g, &mut reader, r, 2)?;
            if !same(&r0, p) || !same(&r1, t) {
                return None;
            }
            let (_, window) = buffer_window(g, buffer)?;
            Some(window)
        })
    })
}

/// Reads `Where(keep, 0, fill)` (`fill ≤ −FLT_MAX`) with `keep` a sliced causal buffer: its
/// window (`None` = global).
fn buffer_bias(g: &OnnxGraph, x: Id, p: &SymDim, t: &SymDim) -> Option<Option<i64>> {
    ops_named(g, x, "Where").iter().find_map(|w| {
        let [keep, zero, fill] = w.input_ids() else {
            return None;
        };
        let zero_ok = scalar_float(g, *zero) == Some(0.0);
        let fill_ok = scalar_float(g, *fill).is_some_and(|v| v <= -(f32::MAX as f64));
        if !zero_ok || !fill_ok {
            return None;
        }
        sliced_buffer(g, *keep, p, t)
    })
}

/// Reads the float attention bias `mask` as [`super::export_mask`] does (same `q`, `past_key`,
/// same predicate over `[B, 1, S, T]`), for `Add(Where(keep, 0, fill), bias)` (either order):
/// `keep` a slice of a constant causal buffer (see the module doc), `bias` a mask
/// [`float_export_mask`] or [`export_mask`] reads. The window is the buffer's or the bias's
/// (declined when both have different ones).
pub fn summed_export_mask(g: &OnnxGraph, mask: Id, q: Id, past_key: Id) -> Option<ExportMask> {
    let q_dims = g[q].data.tensor()?.shape.clone()?;
    let [_, s, _] = q_dims.as_slice() else {
        return None;
    };
    let p = g[past_key].data.tensor()?.shape.as_ref()?.get(2)?.clone();
    let t = p.add(s);
    if [s, &p, &t].contains(&&SymDim::Unknown) {
        return None;
    }
    ops_named(g, mask, "Add").iter().find_map(|add| {
        let [a, b] = add.input_ids() else {
            return None;
        };
        [(*a, *b), (*b, *a)].into_iter().find_map(|(x, y)| {
            let window = buffer_bias(g, x, &p, &t)?;
            let rest =
                float_export_mask(g, y, q, past_key).or_else(|| export_mask(g, y, q, past_key))?;
            let window = match (window, rest.window) {
                (None, w) | (w, None) => w,
                (Some(u), Some(v)) if u == v => Some(u),
                (Some(_), Some(_)) => return None,
            };
            Some(ExportMask {
                attention_mask: rest.attention_mask,
                window,
            })
        })
    })
}
