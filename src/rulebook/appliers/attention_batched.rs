//! The applier of `batched-sdpa-to-attention` (`recognize/attention.rules`): attention computed
//! on 3-D `[B·H, …]` tensors, as BLOOM's eager attention writes it — q, k and v reshaped from
//! `[B, H, ·, D]` to `[B·H, ·, D]`, the scores `c·(q·kᵀ)` (plus, optionally, a `[B·H | 1, S | 1,
//! T]` bias such as BLOOM's ALiBi term `β·alibi`, `baddbmm`'s other operand), reshaped to
//! `[B, H, S, T]`, a float mask added there, Softmax over the keys, reshaped back to
//! `[B·H, S, T]`, times v, reshaped to `[B, H, S, Dv]` → one `Attention` on the 4-D tensors
//! (the bias reshaped to `[B, H, ·, T]` and added to the mask: its float `attn_mask`).

use egg::Id;

use super::attention_recognize::{bias_fits, emit_attention, fits, output_dims, readings, source};
use crate::ops::types::SymDim;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::checked_union::check_union;
use crate::opt::emit::Emit;
use crate::opt::query::{find_op, int_attr, known_dims, ops_named};
use crate::opt::shape_value::shape_value;

/// `batched-sdpa-to-attention`.
pub(super) const BATCHED_SDPA_TO_ATTENTION: Applier<2> =
    Applier::new(["?m3", "?shape"], batched_sdpa_to_attention);

/// `x` when class `x3` (3-D, dims `want3`) is `Reshape(x, ·)` of a 4-D `x` of dims `want4`
/// (`[B, H, a, b]` → `[B·H, a, b]`: the leading axes merged, row-major, so element
/// `[b·H + h, i, j]` is `x[b, h, i, j]`).
fn merged(g: &OnnxGraph, x3: Id, want4: &[SymDim], want3: &[SymDim]) -> Option<Id> {
    if known_dims(g, x3, 3)? != want3 {
        return None;
    }
    ops_named(g, x3, "Reshape")
        .into_iter()
        .map(|r| r.input_ids()[0])
        .find(|&x| known_dims(g, x, 4).as_deref() == Some(want4))
}

/// The dims `[B·H, a, b]` of `[B, H, a, b]`; `None` when `B·H` is not a known or symbolic dim.
fn merge(d: &[SymDim]) -> Option<Vec<SymDim>> {
    let bh = d[0].mul(&d[1]);
    (bh != SymDim::Unknown).then(|| vec![bh, d[2].clone(), d[3].clone()])
}

/// The `(scores, mask)` readings of class `sum`: `Add(scores, mask)` in either order.
fn add_operands(g: &OnnxGraph, sum: Id) -> Vec<(Id, Id)> {
    ops_named(g, sum, "Add")
        .into_iter()
        .flat_map(|add| match *add.input_ids() {
            [a, b] => vec![(a, b), (b, a)],
            _ => Vec::new(),
        })
        .collect()
}

/// The Softmax input of class `p` when `p` holds a `Softmax` over its last axis.
fn softmax_input(g: &OnnxGraph, p: Id) -> Option<Id> {
    ops_named(g, p, "Softmax").into_iter().find_map(|s| {
        let x = s.input_ids()[0];
        let rank = g[x].data.tensor()?.rank()? as i64;
        let axis = s.attr_id("axis").and_then(|a| int_attr(g, a))?;
        (axis == -1 || axis == rank - 1).then_some(x)
    })
}

/// One reading of the 3-D scores: q and k (4-D), the scale, the optional 3-D bias.
struct Reading {
    q: Id,
    k: Id,
    scale: f64,
    bias: Option<Id>,
}

/// The readings of the 3-D scores class `s3` (`[B·H, S, T]`) as `c·(q3·kᵀ3)` or that plus a
/// bias (either order), q3 and k3 the merges of 4-D `q` `[B, H, S, D]` and `k` `[B, Hk, T, D]`
/// (`kᵀ3` a `Transpose(k3; [0, 2, 1])`).
fn scores3(g: &OnnxGraph, s3: Id, bhst: &[SymDim]) -> Vec<Reading> {
    let mut candidates: Vec<(Id, Option<Id>)> = vec![(s3, None)];
    candidates.extend(
        add_operands(g, s3)
            .into_iter()
            .map(|(x, bias)| (x, Some(bias))),
    );
    let mut out = Vec::new();
    for (x, bias) in candidates {
        for r in readings(g, x) {
            let Some(qd) = known_dims(g, r.q, 3) else {
                continue;
            };
            let Some(d) = qd[2].known() else { continue };
            let q4 = [
                bhst[0].clone(),
                bhst[1].clone(),
                bhst[2].clone(),
                SymDim::Known(d),
            ];
            let k4 = [
                bhst[0].clone(),
                bhst[1].clone(),
                bhst[3].clone(),
                SymDim::Known(d),
            ];
            let (Some(q3d), Some(k3d)) = (merge(&q4), merge(&k4)) else {
                continue;
            };
            let Some(q) = merged(g, r.q, &q4, &q3d) else {
                continue;
            };
            let key = ops_named(g, r.kt, "Transpose").into_iter().find_map(|t| {
                let perm = t.attr_id("perm").and_then(|p| g[p].data.attr()?.ints());
                (perm? == [0, 2, 1]).then_some(())?;
                merged(g, t.input_ids()[0], &k4, &k3d)
            });
            if let Some(k) = key {
                out.push(Reading {
                    q,
                    k,
                    scale: r.scale,
                    bias,
                });
            }
        }
    }
    out
}

/// Whether the 3-D bias `bias` (of `dtype`) adds to scores `[B·H, S, T]` without growing them:
/// dims `[B·H | 1, S | 1, T]`. Returns whether its leading dim is `B·H`.
fn bias3_fits(
    g: &OnnxGraph,
    bias: Id,
    dtype: Option<crate::ir::DType>,
    s3: &[SymDim],
) -> Option<bool> {
    let t = g[bias].data.tensor()?;
    (t.dtype.is_some() && t.dtype == dtype).then_some(())?;
    let d = known_dims(g, bias, 3)?;
    let one = SymDim::Known(1);
    let ok = (d[0] == s3[0] || d[0] == one) && (d[1] == s3[1] || d[1] == one) && d[2] == s3[2];
    ok.then_some(d[0] == s3[0] && d[0] != one)
}

/// Reads `?p3 ?v3 ?shape` of `(Reshape (MatMul ?p3 ?v3) ?shape ?allowzero)`: when the match
/// is `[B, H, S, Dv]`, `?p3` the merge (`[B·H, S, T]`) of a Softmax over the last axis of
/// `scores4 + mask` (either order), `scores4` `[B, H, S, T]` the split of the 3-D scores (see
/// [`scores3`]), `mask` a float tensor that broadcasts to `[B, H, S, T]` with the full key axis,
/// and `?v3` the merge of a 4-D v `[B, H, T, Dv]` (read through `repeat_kv` and the cache
/// `Concat` as the 4-D rule does): one `Attention` on the 4-D q, k, v, its `attn_mask`
/// `bias4 + mask` (`bias4` the 3-D bias as `[B, H, ·, T]`: `Reshape(Unsqueeze(bias, [1]),
/// [−1, H, 0, 0])`, or `Unsqueeze(bias, [0])` for a leading dim of 1), or `mask` without a bias.
///
/// Each batched MatMul is the 4-D one on the merged axes, element for element; the one
/// difference is the order of the two additions: `(c·q·kᵀ + bias) + mask` there,
/// `c·q·kᵀ + (bias + mask)` here (equal up to rounding; exactly equal where the mask is 0,
/// and both at or below −FLT_MAX where it is −FLT_MAX). The `−1` of the bias reshape needs a
/// nonempty key axis (T ≥ 1).
fn batched_sdpa_to_attention(
    g: &mut OnnxGraph,
    site: Site<'_>,
    [m3, shape]: [Id; 2],
) -> Option<Id> {
    let matmul = find_op(g, m3, "MatMul")?;
    let [p3, v3] = *matmul.input_ids() else {
        return None;
    };
    let out = output_dims(g, site.class, shape, 4)?;
    let p3d = known_dims(g, p3, 3)?;
    let bhst = [
        out[0].clone(),
        out[1].clone(),
        out[2].clone(),
        p3d[2].clone(),
    ];
    let s3d = merge(&bhst)?;
    if p3d != s3d {
        return None;
    }
    let (sum, pshape) = ops_named(g, p3, "Reshape").into_iter().find_map(|r| {
        let [p, pshape] = *r.input_ids() else {
            return None;
        };
        Some((softmax_input(g, p)?, pshape))
    })?;
    if known_dims(g, sum, 4)? != bhst {
        return None;
    }
    let v4d = [
        out[0].clone(),
        out[1].clone(),
        bhst[3].clone(),
        out[3].clone(),
    ];
    let values = source(g, merged(g, v3, &v4d, &merge(&v4d)?)?)?;
    let found = add_operands(g, sum)
        .into_iter()
        .find_map(|(scores4, mask)| {
            let s3 = ops_named(g, scores4, "Reshape")
                .into_iter()
                .map(|r| r.input_ids()[0])
                .find(|&s| known_dims(g, s, 3).as_deref() == Some(&s3d[..]))?;
            if known_dims(g, scores4, 4)? != bhst {
                return None;
            }
            scores3(g, s3, &bhst).into_iter().find_map(|r| {
                let dtype = g[r.q].data.tensor()?.dtype;
                let keys = source(g, r.k)?;
                let qd = known_dims(g, r.q, 4)?;
                if !(fits(&qd, &keys, &values) && bias_fits(g, mask, dtype, &bhst)) {
                    return None;
                }
                let full = match r.bias {
                    Some(b) => Some(bias3_fits(g, b, dtype, &s3d)?),
                    None => None,
                };
                Some((r, keys, mask, full))
            })
        });
    let (reading, keys, mask, full) = found?;
    let heads = bhst[1].known()?;
    let mask = match (reading.bias, full) {
        (Some(bias), Some(full)) => {
            let mut e = Emit::new(g);
            let bias4 = if full {
                let wide = e.unsqueeze(bias, &[1]);
                e.reshape(wide, &[-1, heads, 0, 0])
            } else {
                e.unsqueeze(bias, &[0])
            };
            e.op("Add", &[bias4, mask], &[])
        }
        _ => mask,
    };
    let attention = emit_attention(g, site, reading.q, &keys, &values, mask, reading.scale)?;
    merged_output(g, site, m3, attention, pshape, &s3d);
    Some(attention)
}

/// Unites the 3-D product `m3` (`[B·H, S, Dv]`) with `Reshape(attention, pshape)` when the
/// probabilities' merge target `pshape` reads `[B·H, S, −1]` (`s3d` = `[B·H, S, T]`): the same
/// merge of the 4-D output, so that shapes the graph takes of `m3` need not keep the 3-D
/// product alive. Exact where the graph's own merge of the probabilities is (its `−1` resolves
/// to T there, to Dv here).
fn merged_output(
    g: &mut OnnxGraph,
    site: Site<'_>,
    m3: Id,
    attention: Id,
    pshape: Id,
    s3d: &[SymDim],
) {
    let want = [s3d[0].clone(), s3d[1].clone(), SymDim::Known(-1)];
    if shape_value(g, pshape).as_deref() != Some(&want[..]) {
        return;
    }
    let reshaped = Emit::new(g).op("Reshape", &[attention, pshape], &[]);
    if check_union(g, m3, reshaped, site.rule) {
        g.union(m3, reshaped);
    }
}
