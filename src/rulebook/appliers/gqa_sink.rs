//! The applier of `sink-attention-to-gqa` (`fusion/gqa.rules`): attention with sinks as
//! [`crate::models::components::sink_attention`] spells it in standard ops, with RoPE on q
//! and k from tables gathered by `position_ids` → `com.microsoft::GroupQueryAttention`
//! (do_rotary=1) with the sink logits as `head_sink`; its present outputs are united with the
//! cache Concats.

use egg::Id;

use super::gqa::{
    cache_preconditions, gathered_table, gqa_op_with_sink, rotary_width_ok, rotations_agree,
    Attention,
};
use super::gqa_mask::causal_attention_window;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::checked_union::check_union;
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::opt::query::{const_ints, find_op, int_attr, scalar_float};

/// `sink-attention-to-gqa`.
pub(super) const SINK_ATTENTION_TO_GQA: Applier<21> = Applier::new(
    [
        "?q", "?cos", "?sin", "?qi", "?qh", "?qrd", "?qsplit", "?qgroup", "?pkcat", "?perhead",
        "?scale", "?neginf", "?mask", "?sinkcol", "?start", "?end", "?axes", "?pgroup", "?pvcat",
        "?heads", "?merged",
    ],
    sink_attention_to_gqa,
);

/// The attribute value of class `id`.
fn attr(g: &OnnxGraph, id: Id) -> Option<AttrValue> {
    g[id].data.attr().cloned()
}

/// `(x, split)` when class `id` is `Transpose(Reshape(x, split), [0, 2, 1, 3])` with the
/// Reshape's `allowzero` unset: a 3-D projection read as heads `[B, H, S, D]`.
fn head_view(g: &OnnxGraph, id: Id) -> Option<(Id, Id)> {
    let t = find_op(g, id, "Transpose")?;
    if attr(g, t.attr_id("perm")?) != Some(AttrValue::Ints(vec![0, 2, 1, 3])) {
        return None;
    }
    let r = find_op(g, t.input_ids()[0], "Reshape")?;
    if attr(g, r.attr_id("allowzero")?) != Some(AttrValue::Unset) {
        return None;
    }
    let [x, split] = r.input_ids() else {
        return None;
    };
    Some((*x, *split))
}

/// `(past, x, split)` when class `id` is `Concat(past, head_view(x, split); axis 2)`.
fn cache_concat(g: &OnnxGraph, id: Id) -> Option<(Id, Id, Id)> {
    let c = find_op(g, id, "Concat")?;
    if int_attr(g, c.attr_id("axis")?) != Some(2) {
        return None;
    }
    let [past, new] = c.input_ids() else {
        return None;
    };
    let (x, split) = head_view(g, *new)?;
    Some((*past, x, split))
}

/// Reads the variables of `sink-attention-to-gqa`; declines unless every reshape target is
/// the one [`crate::models::components::sink_attention`] writes for the heads RoPE and the
/// caches agree on, the scores are masked to −inf by the causal padding mask (optionally
/// restricted to a sliding window), the sink column is `[1, Hq, 1, 1]` logits broadcast to
/// one column, and the slice drops exactly that column.
fn sink_attention_to_gqa(g: &mut OnnxGraph, site: Site<'_>, vars: [Id; 21]) -> Option<Id> {
    let [q, cos, sin, qi, qh, qrd, qsplit, qgroup, pkcat, perhead, scale, neginf, mask, sinkcol, start, end, axes, pgroup, pvcat, heads, merged] =
        vars;
    let (pk, krot, ksplit) = cache_concat(g, pkcat)?;
    let (pv, v, vsplit) = cache_concat(g, pvcat)?;
    let rot = find_op(g, krot, "RotaryEmbedding")?;
    let [k, kcos, ksin] = rot.input_ids() else {
        return None;
    };
    let same = |a: Id, b: Id| g.find(a) == g.find(b);
    if !same(*kcos, cos) || !same(*ksin, sin) {
        return None;
    }
    let (ki, kh, krd) = (
        rot.attr_id("interleaved")?,
        rot.attr_id("num_heads")?,
        rot.attr_id("rotary_embedding_dim")?,
    );
    if int_attr(g, krd) != int_attr(g, qrd) {
        return None;
    }
    let [_, _, hq, d] = const_ints(g, qsplit)?[..] else {
        return None;
    };
    let [_, _, hkv, _] = const_ints(g, ksplit)?[..] else {
        return None;
    };
    let shapes_ok = const_ints(g, qsplit)? == [0, 0, hq, d]
        && const_ints(g, ksplit)? == [0, 0, hkv, d]
        && const_ints(g, vsplit)? == [0, 0, hkv, d]
        && const_ints(g, qgroup)? == [0, hkv, -1, d]
        && const_ints(g, perhead)? == [0, hq, -1, 0]
        && const_ints(g, pgroup)? == [0, hkv, -1, 0]
        && const_ints(g, heads)? == [0, hq, -1, d]
        && const_ints(g, merged)? == [0, 0, hq * d]
        && hkv > 0
        && hq % hkv == 0;
    let slice_ok = const_ints(g, start)? == [0]
        && const_ints(g, end)? == [-1]
        && matches!(const_ints(g, axes)?[..], [3] | [-1]);
    if !shapes_ok || !slice_ok || scalar_float(g, neginf)? != f64::NEG_INFINITY {
        return None;
    }
    let last = |g: &OnnxGraph, id: Id| {
        let t = g[id].data.tensor()?;
        (t.rank()? == 3).then_some(())?;
        t.shape.as_ref()?.last()?.known()
    };
    if last(g, q)? != hq * d || last(g, *k)? != hkv * d || last(g, v)? != hkv * d {
        return None;
    }
    let scale = scalar_float(g, scale).filter(|s| *s > 0.0 && s.is_finite())?;
    let sinks = sink_logits(g, sinkcol, hq)?;
    let window = causal_attention_window(g, mask)?;

    let attr_id = |g: &mut OnnxGraph, v: AttrValue| g.add(Onnx::Attr(v));
    let (kvh, qnh) = (
        attr_id(g, AttrValue::Int(hkv)),
        attr_id(g, AttrValue::Int(hq)),
    );
    let scale = attr_id(g, AttrValue::Float((scale as f32).to_bits()));
    let (causal, softcap) = (attr_id(g, AttrValue::Int(1)), attr_id(g, AttrValue::Unset));
    let attention = Attention::new([q, *k, v, mask, pk, pv, causal, kvh, qnh, scale, softcap]);
    let extras = cache_preconditions(g, &attention, window)?;
    let interleaved = rotations_agree(g, [kvh, qnh, qi, ki, qh, kh])?;
    let (cos, sin) = (rope_table(g, cos)?, rope_table(g, sin)?);
    let width = g[cos.0].data.tensor()?.static_shape()?.get(1).copied()?;
    rotary_width_ok(g, &extras, qrd, width)?;
    let attention_mask = g.lookup(Onnx::Input(egg::Symbol::from("attention_mask")))?;
    let mut e = Emit::new(g);
    let mut table = |(table, factor): (Id, Option<Id>)| match factor {
        Some(c) => e.bin("Mul", table, c),
        None => table,
    };
    let (cos, sin) = (table(cos), table(sin));
    let head_sink = {
        let mut e = Emit::new(g);
        let flat = e.ints(&[hq]);
        e.op("Reshape", &[sinks, flat], &[])
    };
    let gqa = gqa_op_with_sink(
        g,
        &attention,
        &extras,
        attention_mask,
        Some((interleaved, cos, sin)),
        Some(head_sink),
    )?;
    for (index, present) in [(1, pkcat), (2, pvcat)] {
        let out = g.add(Onnx::Get {
            index,
            tuple: [gqa],
        });
        if check_union(g, present, out, site.rule) {
            g.union(present, out);
        }
    }
    Some(g.add(Onnx::Get {
        index: 0,
        tuple: [gqa],
    }))
}

/// The sink logits `s` (`[1, Hq, 1, 1]`) when class `id` is `Expand(s, Concat(…, [1]; axis
/// 0))`: one column per query row (its other dims are the scores', which the Concat it joins
/// requires).
fn sink_logits(g: &OnnxGraph, id: Id, hq: i64) -> Option<Id> {
    let expand = find_op(g, id, "Expand")?;
    let [sinks, shape] = expand.input_ids() else {
        return None;
    };
    let concat = find_op(g, *shape, "Concat")?;
    let ones = const_ints(g, *concat.input_ids().last()?)?;
    let dims = g[*sinks].data.tensor()?.static_shape()?;
    let ok =
        int_attr(g, concat.attr_id("axis")?) == Some(0) && ones == [1] && dims == [1, hq, 1, 1];
    ok.then_some(*sinks)
}

/// The full RoPE table behind class `id` and the factor it is scaled by: `Gather(table,
/// position_ids)` (no factor) or `Mul(Gather(table, position_ids), c)` with `c` a
/// one-element float constant (YaRN's attention factor), whose gathered rows are those of
/// `Mul(table, c)`, rounded alike.
fn rope_table(g: &OnnxGraph, id: Id) -> Option<(Id, Option<Id>)> {
    if let Some(table) = gathered_table(g, id) {
        return Some((table, None));
    }
    let mul = find_op(g, id, "Mul")?;
    let [x, c] = mul.input_ids() else {
        return None;
    };
    scalar_float(g, *c)?;
    Some((gathered_table(g, *x)?, Some(*c)))
}
