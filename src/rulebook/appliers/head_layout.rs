//! The appliers of `recognize/head_layout.rules`: `RotaryEmbedding` and `Attention` over head
//! views (`Transpose(Reshape(x, [B, S, H, D]), [0, 2, 1, 3])`, see
//! [`crate::rulebook::head_layout`]) → the same ops on the 3-D `x` with head-count attributes, as
//! `mobius build` emits them. The 4-D results become head views of the 3-D ones.

use egg::Id;

use crate::ops::schema;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::checked_union::check_union;
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::rulebook::head_layout::{
    gathered_head_view, head_view, sliced_head_view, HeadView, SlicedView,
};

/// `rotary-on-3d-heads`.
pub(super) const ROTARY_ON_3D_HEADS: Applier<9> = Applier::new(
    [
        "?x",
        "?shape",
        "?allowzero",
        "?perm",
        "?cos",
        "?sin",
        "?inter",
        "?heads",
        "?rd",
    ],
    rotary_on_3d_heads,
);

/// `sliced-head-view`.
pub(super) const SLICED_HEAD_VIEW: Applier<7> = Applier::new(
    [
        "?x",
        "?shape",
        "?allowzero",
        "?perm",
        "?starts",
        "?ends",
        "?axes",
    ],
    sliced_head_view_3d,
);

/// `sliced-head-view-with-steps`.
pub(super) const SLICED_HEAD_VIEW_WITH_STEPS: Applier<8> = Applier::new(
    [
        "?x",
        "?shape",
        "?allowzero",
        "?perm",
        "?starts",
        "?ends",
        "?axes",
        "?steps",
    ],
    sliced_head_view_3d_with_steps,
);

/// `gathered-head-view`.
pub(super) const GATHERED_HEAD_VIEW: Applier<6> = Applier::new(
    ["?x", "?shape", "?allowzero", "?index", "?axis", "?perm"],
    gathered_head_view_3d,
);

/// `attention-on-3d-heads`.
pub(super) const ATTENTION_ON_3D_HEADS: Applier<22> = Applier::new(
    [
        "?q",
        "?qs",
        "?qz",
        "?qp",
        "?k",
        "?ks",
        "?kz",
        "?kp",
        "?v",
        "?vs",
        "?vz",
        "?vp",
        "?mask",
        "?causal",
        "?kvh",
        "?qnh",
        "?mode",
        "?scale",
        "?softcap",
        "?precision",
        "?pk",
        "?pv",
    ],
    attention_on_3d_heads,
);

/// `attention-on-3d-heads-without-cache`.
pub(super) const ATTENTION_ON_3D_HEADS_WITHOUT_CACHE: Applier<20> = Applier::new(
    [
        "?q",
        "?qs",
        "?qz",
        "?qp",
        "?k",
        "?ks",
        "?kz",
        "?kp",
        "?v",
        "?vs",
        "?vz",
        "?vp",
        "?mask",
        "?causal",
        "?kvh",
        "?qnh",
        "?mode",
        "?scale",
        "?softcap",
        "?precision",
    ],
    attention_on_3d_heads_without_cache,
);

/// Whether the head-count attribute class `attr` is unset or `heads`.
fn unset_or(g: &OnnxGraph, attr: Id, heads: i64) -> bool {
    match g[attr].data.attr() {
        Some(AttrValue::Unset) => true,
        Some(AttrValue::Int(v)) => *v == heads,
        _ => false,
    }
}

/// Reads `?x ?shape ?allowzero ?perm ?cos ?sin ?inter ?heads ?rd` of
/// `RotaryEmbedding(Transpose(Reshape(x, shape), perm), cos, sin)` over the head view of `x`
/// (`num_heads` unset or the view's heads): the head view of `RotaryEmbedding(x, cos, sin;
/// num_heads H)`, which rotates every head of the 3-D `x` the same way (same caches, same
/// `interleaved` and `rotary_embedding_dim`).
fn rotary_on_3d_heads(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, shape, allowzero, perm, cos, sin, inter, heads, rd]: [Id; 9],
) -> Option<Id> {
    let view = head_view(g, x, shape, allowzero, perm)?;
    if !unset_or(g, heads, view.heads) {
        return None;
    }
    let num_heads = g.add(Onnx::Attr(AttrValue::Int(view.heads)));
    let mut e = Emit::new(g);
    let rotated = e.op_with(
        "RotaryEmbedding",
        &[x, cos, sin],
        &[
            ("interleaved", inter),
            ("num_heads", num_heads),
            ("rotary_embedding_dim", rd),
        ],
    );
    let split = e.op_with("Reshape", &[rotated, shape], &[("allowzero", allowzero)]);
    Some(e.op_with("Transpose", &[split], &[("perm", perm)]))
}

/// What the 3-D Attention is built from: its q/k/v (the 3-D tensors under the views), its
/// attributes in schema order, and the shape of its output.
struct Heads3d {
    inputs: [Id; 3],
    attrs: [Id; 7],
    q_heads: i64,
    v_head_dim: i64,
}

/// Reads q, k and v (each `?x ?shape ?allowzero ?perm` of a head view) and the attributes
/// `?causal ?kvh ?qnh ?mode ?scale ?softcap ?precision` of a 4-D Attention: q `[B, S, Hq·D]`,
/// k `[B, T, Hkv·D]`, v `[B, T, Hkv·Dv]` (one batch, the heads of k and v equal and dividing
/// Hq, the head sizes of q and k equal), `q_num_heads`/`kv_num_heads` unset or Hq/Hkv. The
/// 3-D Attention takes q/k/v under the views with Hq/Hkv as its head counts, every other
/// attribute as it was.
fn heads_3d(g: &mut OnnxGraph, views: [[Id; 4]; 3], attrs: [Id; 7]) -> Option<Heads3d> {
    let read = |[x, s, z, p]: [Id; 4]| head_view(g, x, s, z, p);
    let (q, k, v): (HeadView, HeadView, HeadView) =
        (read(views[0])?, read(views[1])?, read(views[2])?);
    let [causal, kvh, qnh, mode, scale, softcap, precision] = attrs;
    let batch = |i: usize| {
        g[views[i][0]]
            .data
            .tensor()?
            .shape
            .clone()?
            .first()
            .cloned()
    };
    let ok = k.heads == v.heads
        && q.heads % k.heads == 0
        && q.head_dim == k.head_dim
        && batch(0).is_some()
        && batch(0) == batch(1)
        && batch(0) == batch(2)
        && unset_or(g, qnh, q.heads)
        && unset_or(g, kvh, k.heads);
    if !ok {
        return None;
    }
    let kvh = g.add(Onnx::Attr(AttrValue::Int(k.heads)));
    let qnh = g.add(Onnx::Attr(AttrValue::Int(q.heads)));
    Some(Heads3d {
        inputs: [views[0][0], views[1][0], views[2][0]],
        // Schema order: is_causal, kv_num_heads, q_num_heads, qk_matmul_output_mode, scale,
        // softcap, softmax_precision.
        attrs: [causal, kvh, qnh, mode, scale, softcap, precision],
        q_heads: q.heads,
        v_head_dim: v.head_dim,
    })
}

/// The head view `[B, Hq, S, Dv]` of the 3-D Attention output `y` `[B, S, Hq·Dv]`.
fn output_view(g: &mut OnnxGraph, y: Id, heads: &Heads3d) -> Id {
    let mut e = Emit::new(g);
    let split = e.reshape(y, &[0, 0, heads.q_heads, heads.v_head_dim]);
    e.transpose(split, &[0, 2, 1, 3])
}

/// The class of `Transpose(Reshape(x, shape; allowzero), perm)`, when the e-graph has it.
fn view_class(g: &OnnxGraph, [x, shape, allowzero, perm]: [Id; 4]) -> Option<Id> {
    let split = g.lookup(Onnx::op(
        "Reshape",
        schema("Reshape")?,
        2,
        1,
        vec![x, shape, allowzero],
    ))?;
    g.lookup(Onnx::op(
        "Transpose",
        schema("Transpose")?,
        1,
        1,
        vec![split, perm],
    ))
}

/// Reads the variables of `(get0 (Attention/3 view(q) view(k) view(v) ?mask ?pk ?pv …))`
/// (see [`heads_3d`]): the head view of the output of the 3-D Attention over the same mask and
/// caches, its present outputs (the caches are `[B, Hkv, P, D]` in both forms) united with the
/// 4-D Attention's. Exact: the 3-D Attention splits q/k/v into heads as the views do and
/// merges its output's heads back (checked against onnxruntime 1.32, masks of every
/// broadcast shape).
fn attention_on_3d_heads(g: &mut OnnxGraph, site: Site<'_>, vars: [Id; 22]) -> Option<Id> {
    let [q, qs, qz, qp, k, ks, kz, kp, v, vs, vz, vp, mask, causal, kvh, qnh, mode, scale, softcap, precision, pk, pv] =
        vars;
    let views = [[q, qs, qz, qp], [k, ks, kz, kp], [v, vs, vz, vp]];
    let old_attrs = [causal, kvh, qnh, mode, scale, softcap, precision];
    let heads = heads_3d(g, views, old_attrs)?;
    let names = schema("Attention")?;
    let mut old = views
        .iter()
        .map(|view| view_class(g, *view))
        .collect::<Option<Vec<Id>>>()?;
    old.extend([mask, pk, pv]);
    old.extend(old_attrs);
    let old = g.lookup(Onnx::op("Attention", names, 6, 3, old))?;
    let mut children = heads.inputs.to_vec();
    children.extend([mask, pk, pv]);
    children.extend(heads.attrs);
    let attention = g.add(Onnx::op("Attention", names, 6, 3, children));
    for index in [1, 2] {
        let present = g.add(Onnx::Get {
            index,
            tuple: [old],
        });
        let out = g.add(Onnx::Get {
            index,
            tuple: [attention],
        });
        if check_union(g, present, out, site.rule) {
            g.union(present, out);
        }
    }
    let y = g.add(Onnx::Get {
        index: 0,
        tuple: [attention],
    });
    Some(output_view(g, y, &heads))
}

/// [`attention_on_3d_heads`] without a cache: `Attention(view(q), view(k), view(v), ?mask)`.
fn attention_on_3d_heads_without_cache(
    g: &mut OnnxGraph,
    _: Site<'_>,
    vars: [Id; 20],
) -> Option<Id> {
    let [q, qs, qz, qp, k, ks, kz, kp, v, vs, vz, vp, mask, causal, kvh, qnh, mode, scale, softcap, precision] =
        vars;
    let views = [[q, qs, qz, qp], [k, ks, kz, kp], [v, vs, vz, vp]];
    let heads = heads_3d(
        g,
        views,
        [causal, kvh, qnh, mode, scale, softcap, precision],
    )?;
    let mut children = heads.inputs.to_vec();
    children.push(mask);
    children.extend(heads.attrs);
    let attention = g.add(Onnx::op("Attention", schema("Attention")?, 4, 1, children));
    Some(output_view(g, attention, &heads))
}

/// The head view of the 3-D slice that a last-axis slice of a head view is (see
/// [`sliced_head_view`]): with `x` `[B, S, H·E]` and channels `start … end − 1` (`W` of them)
/// taken from every head, the view of `Reshape(Slice(Reshape(x, [0, 0, H, E]), start, end, 3),
/// [0, 0, H·W])` split `[0, 0, H, W]` — the same elements in the same places (exact; the
/// split's target a constant, as the view's is `[B, S, H, E]` of `x`'s own B and S).
fn sliced_view(g: &mut OnnxGraph, vars: [Id; 7], steps: Option<Id>) -> Option<Id> {
    let read = sliced_head_view(g, vars, steps)?;
    Some(sliced_view_of(g, vars[0], read))
}

/// The head view of the 3-D slice `read` of `x` (see [`sliced_view`]).
fn sliced_view_of(g: &mut OnnxGraph, x: Id, read: SlicedView) -> Id {
    let (heads, width) = (read.view.heads, read.end - read.start);
    let mut e = Emit::new(g);
    let split = e.reshape(x, &[0, 0, heads, read.view.head_dim]);
    let part = e.slice(split, read.start, read.end, 3);
    let flat = e.reshape(part, &[0, 0, heads * width]);
    let view = e.reshape(flat, &[0, 0, heads, width]);
    e.transpose(view, &[0, 2, 1, 3])
}

/// Reads `gathered-head-view` ([`gathered_head_view`]): the part gathered is the slice of
/// channels `j·D … (j + 1)·D − 1` of every head of `x` split `[B, S, H, P·D]`, emitted as
/// [`sliced_view`] emits a slice.
fn gathered_head_view_3d(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 6]) -> Option<Id> {
    let read = gathered_head_view(g, vars)?;
    Some(sliced_view_of(g, vars[0], read))
}

/// Reads `sliced-head-view` (a Slice without steps): [`sliced_view`].
fn sliced_head_view_3d(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 7]) -> Option<Id> {
    sliced_view(g, vars, None)
}

/// Reads `sliced-head-view-with-steps`: [`sliced_view`] with steps `[1]`.
fn sliced_head_view_3d_with_steps(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, shape, allowzero, perm, starts, ends, axes, steps]: [Id; 8],
) -> Option<Id> {
    sliced_view(
        g,
        [x, shape, allowzero, perm, starts, ends, axes],
        Some(steps),
    )
}
