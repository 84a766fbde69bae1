//! The appliers of `recognize/attention.rules`: the scaled-dot-product attention exporters
//! decompose (scores `q·kᵀ` scaled by constants, a float bias added, Softmax over the keys,
//! optionally NaN-guarded, times `v`; keys and values read through `repeat_kv` and a cache
//! `Concat`) → the ONNX `Attention` op on 4-D `[B, heads, S, D]` tensors, and the
//! Reshape/Transpose/Reshape spelling of `kᵀ` → one `Transpose`.

use egg::Id;

use crate::ops::schema;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::checked_union::check_union;
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::opt::query::{const_ints, find_op, known_dims, ops_named, scalar_float};
use crate::opt::shape_value::shape_value;

/// `transposed-key-through-3d`.
pub(super) const TRANSPOSED_KEY_THROUGH_3D: Applier<3> =
    Applier::new(["?k3", "?perm", "?shape"], transposed_key_through_3d);

/// `sdpa-to-attention`.
pub(super) const SDPA_TO_ATTENTION: Applier<3> =
    Applier::new(["?scores", "?bias", "?v"], sdpa_to_attention);

/// `masked-scores-to-attention`.
pub(super) const MASKED_SCORES_TO_ATTENTION: Applier<5> = Applier::new(
    ["?keep", "?scores", "?fill", "?bias", "?v"],
    masked_scores_to_attention,
);

/// Reads `?keep ?scores ?fill ?bias ?v` of `(MatMul (Softmax (Add (Where ?keep ?scores ?fill)
/// ?bias) ?axis) ?v)` (the rule checks the axis and that `fill` is at or below −FLT_MAX): the
/// scores masked by a boolean `keep` before the bias is added (GPT-Neo's eager attention) are
/// the scores plus the float mask `Where(keep, 0, fill) + bias`, which [`sdpa_to_attention`]
/// then reads as Attention's `attn_mask`.
fn masked_scores_to_attention(g: &mut OnnxGraph, site: Site<'_>, vars: [Id; 5]) -> Option<Id> {
    let [keep, s, fill, bias, v] = vars;
    let dtype = g[fill].data.tensor()?.dtype?;
    let mut e = Emit::new(g);
    let zero = e.float(dtype, 0.0)?;
    let masked = e.op("Where", &[keep, zero, fill], &[]);
    let mask = e.bin("Add", masked, bias);
    sdpa_to_attention(g, site, [s, mask, v])
}

/// Reads `?k3 ?perm ?shape` of `(Reshape (Transpose ?k3 ?perm) ?shape ?allowzero)`: when
/// `?k3` is `Reshape(k, [-1, t, d])` of a 4-D `k` `[b, h, t, d]` (the two leading axes merged),
/// `?perm` is `[0, 2, 1]` and `?shape` is `[b, h, d, t]` (the leading axis split back), the
/// match is `Transpose(k; [0, 1, 3, 2])`. The shape tensors may be computed from `Shape(k)`
/// (as the dynamo exporter writes them; see [`shape_value`]) or the reshaped classes' dims
/// inferred.
fn transposed_key_through_3d(
    g: &mut OnnxGraph,
    site: Site<'_>,
    [k3, perm, shape]: [Id; 3],
) -> Option<Id> {
    if g[perm].data.attr()?.ints()? != [0, 2, 1] {
        return None;
    }
    let reshape = find_op(g, k3, "Reshape")?;
    let [k, merged] = *reshape.input_ids() else {
        return None;
    };
    let kd = known_dims(g, k, 4)?;
    let merged_ok = match shape_value(g, merged) {
        Some(v) => v == [SymDim::Known(-1), kd[2].clone(), kd[3].clone()],
        None => known_dims(g, k3, 3).is_some_and(|d| d[1..] == kd[2..]),
    };
    let split = [kd[0].clone(), kd[1].clone(), kd[3].clone(), kd[2].clone()];
    let split_ok = output_dims(g, site.class, shape, 4).is_some_and(|d| d == split);
    (merged_ok && split_ok).then(|| Emit::new(g).transpose(k, &[0, 1, 3, 2]))
}

/// The dims of `out`, the `Reshape` or `Expand` of a tensor to the shape tensor `shape`: its
/// value when read (see [`shape_value`]) and free of the −1 and 0 a Reshape resolves, else
/// `out`'s inferred dims (rank `rank`, all known).
pub(super) fn output_dims(g: &OnnxGraph, out: Id, shape: Id, rank: usize) -> Option<Vec<SymDim>> {
    let special = |d: &SymDim| matches!(d, SymDim::Known(v) if *v <= 0);
    match shape_value(g, shape) {
        Some(v) if v.len() == rank && !v.iter().any(special) => Some(v),
        _ => known_dims(g, out, rank),
    }
}

/// Scores `q·kᵀ` times a constant scale, as one reading of a scores class.
pub(super) struct Scores {
    pub(super) q: Id,
    pub(super) kt: Id,
    pub(super) scale: f64,
}

/// `x` or, for each `Mul(x, c)` / `Mul(c, x)` in class `id` with `c` a one-element float
/// constant, `(x, c)`: the ways `id` reads as a tensor times a constant.
fn scaled(g: &OnnxGraph, id: Id) -> Vec<(Id, f64)> {
    let mut out = Vec::new();
    for mul in ops_named(g, id, "Mul") {
        let [a, b] = *mul.input_ids() else { continue };
        if let Some(c) = scalar_float(g, b) {
            out.push((a, c));
        } else if let Some(c) = scalar_float(g, a) {
            out.push((b, c));
        }
    }
    out.push((id, 1.0));
    out
}

/// The readings of class `s` as `(q·a)·(kᵀ·b)`, times or divided by a constant `c` (each
/// constant optional, each a one-element float constant): scale `a·b·c` (or `a·b/c`).
pub(super) fn readings(g: &OnnxGraph, s: Id) -> Vec<Scores> {
    let mut outer: Vec<(Id, f64)> = scaled(g, s);
    for div in ops_named(g, s, "Div") {
        let [x, c] = *div.input_ids() else { continue };
        if let Some(c) = scalar_float(g, c).filter(|c| *c != 0.0) {
            outer.push((x, 1.0 / c));
        }
    }
    let mut out = Vec::new();
    for (product, c) in outer {
        for matmul in ops_named(g, product, "MatMul") {
            let [x, y] = *matmul.input_ids() else {
                continue;
            };
            for (q, a) in scaled(g, x) {
                for (kt, b) in scaled(g, y) {
                    out.push(Scores {
                        q,
                        kt,
                        scale: a * b * c,
                    });
                }
            }
        }
    }
    out
}

/// Keys or values as the scores read them: `present` `[b, kv_heads, T, d]`, repeated `n_rep`
/// times per head (`repeat_kv`), `present` being `Concat(past, new)` on the sequence axis when
/// there is a cache.
pub(super) struct Source {
    pub(super) past: Option<Id>,
    pub(super) new: Id,
    pub(super) present: Id,
    pub(super) n_rep: i64,
    pub(super) dims: Vec<SymDim>,
}

/// Reads class `x` (4-D) as [`Source`]: `repeat_kv` is `Reshape(Expand(Unsqueeze(p, [2]),
/// ·), ·)` from `p` `[b, h, t, d]` through `[b, h, n, t, d]` to `[b, h·n, t, d]` (inferred
/// shapes), so head `i` of the result is head `i / n` of `p`, as `Attention` groups heads.
pub(super) fn source(g: &OnnxGraph, x: Id) -> Option<Source> {
    let (present, n_rep) = repeated(g, x).unwrap_or((x, 1));
    let dims = known_dims(g, present, 4)?;
    let (past, new) = match cache(g, present) {
        Some((past, new)) => (Some(past), new),
        None => (None, present),
    };
    Some(Source {
        past,
        new,
        present,
        n_rep,
        dims,
    })
}

/// `(p, n)` when class `x` is `repeat_kv(p, n)` (see [`source`]).
fn repeated(g: &OnnxGraph, x: Id) -> Option<(Id, i64)> {
    let [expanded, x_shape] = *find_op(g, x, "Reshape")?.input_ids() else {
        return None;
    };
    let [unsqueezed, e_shape] = *find_op(g, expanded, "Expand")?.input_ids() else {
        return None;
    };
    let unsqueeze = find_op(g, unsqueezed, "Unsqueeze")?;
    let [p, axes] = *unsqueeze.input_ids() else {
        return None;
    };
    if const_ints(g, axes)? != [2] {
        return None;
    }
    let pd = known_dims(g, p, 4)?;
    let ed = output_dims(g, expanded, e_shape, 5)?;
    let xd = output_dims(g, x, x_shape, 4)?;
    let (heads, n) = (pd[1].known()?, ed[2].known()?);
    let ok = ed[0] == pd[0]
        && ed[1] == pd[1]
        && ed[3] == pd[2]
        && ed[4] == pd[3]
        && xd[0] == pd[0]
        && xd[1] == SymDim::Known(heads * n)
        && xd[2] == pd[2]
        && xd[3] == pd[3];
    (ok && n > 0).then_some((p, n))
}

/// `(past, new)` when class `x` (4-D) is `Concat(past, new)` on axis 2 (or −2).
fn cache(g: &OnnxGraph, x: Id) -> Option<(Id, Id)> {
    ops_named(g, x, "Concat").into_iter().find_map(|concat| {
        let axis = g[concat.attr_id("axis")?].data.attr()?.int()?;
        match *concat.input_ids() {
            [past, new] if axis == 2 || axis == -2 => {
                known_dims(g, past, 4)?;
                known_dims(g, new, 4)?;
                Some((past, new))
            }
            _ => None,
        }
    })
}

/// Whether `bias` adds to scores of dims `scores` without growing them: its dtype is
/// `dtype`, its rank 2 to 4, and each of its dims (aligned on the right) is 1 or the scores'
/// dim, the last one the scores' (what `Attention` accepts as a float mask).
pub(super) fn bias_fits(
    g: &OnnxGraph,
    bias: Id,
    dtype: Option<crate::ir::DType>,
    scores: &[SymDim],
) -> bool {
    let Some(t) = g[bias].data.tensor() else {
        return false;
    };
    let Some(dims) = t.shape.as_ref() else {
        return false;
    };
    if t.dtype.is_none() || t.dtype != dtype || !(2..=4).contains(&dims.len()) {
        return false;
    }
    let offset = scores.len() - dims.len();
    let last = dims.len() - 1;
    dims.iter().enumerate().all(|(i, d)| {
        let want = &scores[offset + i];
        *d != SymDim::Unknown && (d == want || (i != last && *d == SymDim::Known(1)))
    })
}

/// Reads `?scores ?bias ?v` of `(MatMul (Softmax (Add ?scores ?bias) ?axis) ?v)` (or its
/// NaN-guarded form; the rules check the axis): one `Attention` on 4-D q/k/v with the float
/// mask `?bias`, the scale the graph multiplies the scores by, and the cache, if any, as
/// past/present (the present outputs united with the cache `Concat`s). Declines unless the
/// scores are `q·kᵀ` with `kᵀ` a `Transpose(k; [0, 1, 3, 2])`, q `[b, Hq, S, D]`, k and v
/// (before `repeat_kv`) `[b, Hkv, T, D]`/`[b, Hkv, T, Dv]` with `Hq = n_rep·Hkv`, both with a
/// cache or both without, the scale a positive finite product of one-element float constants.
fn sdpa_to_attention(g: &mut OnnxGraph, site: Site<'_>, [s, bias, v]: [Id; 3]) -> Option<Id> {
    let values = source(g, v)?;
    let reading = readings(g, s).into_iter().find_map(|r| {
        let transpose = ops_named(g, r.kt, "Transpose").into_iter().find(|t| {
            let perm = t
                .attr_id("perm")
                .and_then(|p| g[p].data.attr()?.ints().map(<[i64]>::to_vec));
            perm.as_deref() == Some(&[0, 1, 3, 2])
        })?;
        let keys = source(g, transpose.input_ids()[0])?;
        let q = known_dims(g, r.q, 4)?;
        let scores = [
            q[0].clone(),
            q[1].clone(),
            q[2].clone(),
            keys.dims[2].clone(),
        ];
        let dtype = g[r.q].data.tensor()?.dtype;
        let ok = fits(&q, &keys, &values) && bias_fits(g, bias, dtype, &scores);
        ok.then_some((r, keys))
    });
    let (reading, keys) = reading?;
    emit_attention(g, site, reading.q, &keys, &values, bias, reading.scale)
}

/// One opset-23 `Attention` over 4-D `q` (heads `q_heads` = its dim 1), `keys` and `values`
/// (with their cache as past/present when both have one, the present outputs united with the
/// cache `Concat`s), the float mask `bias` and `scale`: its output class. `None` for a scale
/// that is not positive and finite (as f32) or head counts not known.
pub(super) fn emit_attention(
    g: &mut OnnxGraph,
    site: Site<'_>,
    q: Id,
    keys: &Source,
    values: &Source,
    bias: Id,
    scale: f64,
) -> Option<Id> {
    let scale = scale as f32;
    if !(scale.is_finite() && scale > 0.0) {
        return None;
    }
    let q_heads = known_dims(g, q, 4)?[1].known()?;
    let kv_heads = keys.dims[1].known()?;
    let attr = |g: &mut OnnxGraph, v: AttrValue| g.add(Onnx::Attr(v));
    let unset = attr(g, AttrValue::Unset);
    let kvh = attr(g, AttrValue::Int(kv_heads));
    let qnh = attr(g, AttrValue::Int(q_heads));
    let scale = attr(g, AttrValue::Float(scale.to_bits()));
    // Schema order: is_causal, kv_num_heads, q_num_heads, qk_matmul_output_mode, scale,
    // softcap, softmax_precision.
    let attrs = [unset, kvh, qnh, unset, scale, unset, unset];
    let names = schema("Attention")?;
    let (Some(past_key), Some(past_value)) = (keys.past, values.past) else {
        let mut children = vec![q, keys.present, values.present, bias];
        children.extend(attrs);
        return Some(g.add(Onnx::op("Attention", names, 4, 1, children)));
    };
    let mut children = vec![q, keys.new, values.new, bias, past_key, past_value];
    children.extend(attrs);
    let attention = g.add(Onnx::op("Attention", names, 6, 3, children));
    for (index, present) in [(1, keys.present), (2, values.present)] {
        let out = g.add(Onnx::Get {
            index,
            tuple: [attention],
        });
        if check_union(g, present, out, site.rule) {
            g.union(present, out);
        }
    }
    Some(g.add(Onnx::Get {
        index: 0,
        tuple: [attention],
    }))
}

/// Whether the keys and values are one kv head that the score and output MatMuls broadcast
/// over every query head (multi-query attention written without `repeat_kv`, as Falcon's
/// export does): query head `i` reads kv head 0, as `Attention` groups all query heads on one
/// kv head. Exact (the same products).
fn broadcast_kv_head(kv_heads: i64, n_rep: i64) -> bool {
    kv_heads == 1 && n_rep == 1
}

/// Whether q of dims `q`, `keys` and `values` are what one `Attention` reads (see
/// [`sdpa_to_attention`]).
pub(super) fn fits(q: &[SymDim], keys: &Source, values: &Source) -> bool {
    let (k, v) = (&keys.dims, &values.dims);
    let (Some(q_heads), Some(kv_heads)) = (q[1].known(), k[1].known()) else {
        return false;
    };
    keys.n_rep == values.n_rep
        && (kv_heads * keys.n_rep == q_heads || broadcast_kv_head(kv_heads, keys.n_rep))
        && keys.past.is_some() == values.past.is_some()
        && q[0] == k[0]
        && v[0] == k[0]
        && v[1] == k[1]
        && v[2] == k[2]
        && q[3] == k[3]
}
