//! The appliers of `fusion/gqa.rules` (GQAFusion): an Attention with a causal padding (or
//! sliding-window) mask over caches that are graph inputs → `com.microsoft::GroupQueryAttention`,
//! taking the RotaryEmbeddings of q and k in with it (`do_rotary=1`) when their tables are
//! gathered by `position_ids`.

use egg::Id;

use super::gqa_mask::attention_window;
use crate::ir::DType;
use crate::ops::schema;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::opt::query::{find_op, int_attr, is_input};

/// `attention-to-gqa`.
pub(super) const ATTENTION_TO_GQA: Applier<11> = Applier::new(
    [
        "?q", "?k", "?v", "?mask", "?pk", "?pv", "?causal", "?kvh", "?qnh", "?scale", "?softcap",
    ],
    attention_to_gqa,
);

/// `rotary-attention-to-gqa`.
pub(super) const ROTARY_ATTENTION_TO_GQA: Applier<18> = Applier::new(
    [
        "?q", "?k", "?v", "?mask", "?pk", "?pv", "?causal", "?kvh", "?qnh", "?scale", "?softcap",
        "?cos", "?sin", "?qi", "?ki", "?qh", "?kh", "?qrd",
    ],
    rotary_attention_to_gqa,
);

/// The matched Attention's classes that GroupQueryAttention takes over: its inputs (q and k
/// before any RotaryEmbedding) and attributes.
pub(super) struct Attention {
    pub(super) q: Id,
    k: Id,
    v: Id,
    pub(super) mask: Id,
    pub(super) past_key: Id,
    past_value: Id,
    pub(super) causal: Id,
    kv_heads: Id,
    q_heads: Id,
    scale: Id,
    softcap: Id,
}

impl Attention {
    /// From the variables `?q ?k ?v ?mask ?pk ?pv ?causal ?kvh ?qnh ?scale ?softcap`.
    pub(super) fn new(
        [q, k, v, mask, past_key, past_value, causal, kv_heads, q_heads, scale, softcap]: [Id; 11],
    ) -> Attention {
        Attention {
            q,
            k,
            v,
            mask,
            past_key,
            past_value,
            causal,
            kv_heads,
            q_heads,
            scale,
            softcap,
        }
    }
}

/// `seqlens_k` (last valid key index per batch, int32 `[B]`) and `total_sequence_length`
/// (int32 scalar), computed once from the `attention_mask` input (hash-consing shares them).
fn gqa_lengths(g: &mut OnnxGraph, mask: Id) -> (Id, Id) {
    let int64 = g[mask].data.tensor().and_then(|t| t.dtype) == Some(DType::I64);
    let mut e = Emit::new(g);
    let to_i32 = ("to", AttrValue::Int(DType::I32.onnx_code() as i64));
    let axes = e.ints(&[1]);
    let one = e.int(1);
    let sum = e.op(
        "ReduceSum",
        &[mask, axes],
        &[("keepdims", AttrValue::Int(0))],
    );
    // The count less the int64 one: in int64 whatever integer type the mask has.
    let sum = if int64 {
        sum
    } else {
        let to_i64 = ("to", AttrValue::Int(DType::I64.onnx_code() as i64));
        e.op("Cast", &[sum], &[to_i64])
    };
    let last = e.bin("Sub", sum, one);
    let seqlens = e.op("Cast", &[last], std::slice::from_ref(&to_i32));
    let shape = e.op("Shape", &[mask], &[]);
    let total = e.op("Gather", &[shape, one], &[("axis", AttrValue::Int(0))]);
    let total = e.op("Cast", &[total], &[to_i32]);
    (seqlens, total)
}

/// What the matched Attention carries into GroupQueryAttention besides its inputs.
pub(super) struct GqaExtras {
    /// Channels per head.
    head_dim: i64,
    /// `local_window_size`: keys a query sees, counting itself (`None` = all).
    window: Option<i64>,
    /// The `softcap` attribute class when it is set and non-zero.
    softcap: Option<Id>,
}

/// What both attention → GroupQueryAttention rules require of the matched Attention: causal,
/// the padding mask of `attention_mask` (or it restricted to a sliding window), and
/// [`cache_preconditions`].
fn gqa_preconditions(g: &OnnxGraph, a: &Attention) -> Option<GqaExtras> {
    if int_attr(g, a.causal) != Some(1) {
        return None;
    }
    let window = attention_window(g, a.mask)?;
    cache_preconditions(g, a, window)
}

/// What every attention → GroupQueryAttention rule requires of the matched Attention besides
/// its mask (which gave `window`): caches that are graph inputs, head counts, a head size ORT
/// accepts (a multiple of 16). Soft-capping and the window are carried over.
pub(super) fn cache_preconditions(
    g: &OnnxGraph,
    a: &Attention,
    window: Option<i64>,
) -> Option<GqaExtras> {
    let (pk, pv) = (a.past_key, a.past_value);
    if !is_input(g, pk, None) || !is_input(g, pv, None) {
        return None;
    }
    int_attr(g, a.q_heads)?;
    int_attr(g, a.kv_heads)?;
    let softcap = match g[a.softcap].data.attr()? {
        AttrValue::Unset => None,
        AttrValue::Float(bits) if f32::from_bits(*bits) == 0.0 => None,
        AttrValue::Float(bits) if f32::from_bits(*bits) > 0.0 => Some(a.softcap),
        _ => return None,
    };
    let head_dim = g[pk].data.tensor()?.shape.as_ref()?.last()?.known()?;
    (head_dim % 16 == 0).then_some(GqaExtras {
        head_dim,
        window,
        softcap,
    })
}

/// The table of `Gather(table, position_ids; axis 0)` in class `id`.
pub(super) fn gathered_table(g: &OnnxGraph, id: Id) -> Option<Id> {
    let gather = find_op(g, id, "Gather")?;
    let axis = g[gather.attr_id("axis")?].data.attr()?;
    let axis_ok = matches!(axis, AttrValue::Unset | AttrValue::Int(0));
    let [table, positions] = gather.input_ids() else {
        return None;
    };
    (axis_ok && is_input(g, *positions, Some("position_ids"))).then_some(*table)
}

/// `com.microsoft::GroupQueryAttention(q, k, v, past k/v, seqlens_k, total, cos, sin)` with the
/// matched Attention's head counts and scale, `seqlens_k`/`total_sequence_length` from the
/// graph input `attention_mask` (class); `rotary` is `(interleaved attr, cos, sin)` for
/// do_rotary=1.
pub(super) fn gqa_op(
    g: &mut OnnxGraph,
    a: &Attention,
    extras: &GqaExtras,
    attention_mask: Id,
    rotary: Option<(AttrValue, Id, Id)>,
) -> Option<Id> {
    gqa_op_with_sink(g, a, extras, attention_mask, rotary, None)
}

/// [`gqa_op`], with the per-head sink logits `head_sink` (`[Hq]`, input 11; position_ids and
/// attention_bias absent) when given.
pub(super) fn gqa_op_with_sink(
    g: &mut OnnxGraph,
    a: &Attention,
    extras: &GqaExtras,
    attention_mask: Id,
    rotary: Option<(AttrValue, Id, Id)>,
    head_sink: Option<Id>,
) -> Option<Id> {
    let (seqlens, total) = gqa_lengths(g, attention_mask);
    let unset = g.add(Onnx::Attr(AttrValue::Unset));
    let absent = g.add(Onnx::Absent);
    let (do_rotary, interleaved, cos, sin) = match rotary {
        Some((interleaved, cos, sin)) => {
            let interleaved = match interleaved {
                AttrValue::Unset => AttrValue::Int(0),
                other => other,
            };
            (1, g.add(Onnx::Attr(interleaved)), cos, sin)
        }
        None => (0, unset, absent, absent),
    };
    let do_rotary = g.add(Onnx::Attr(AttrValue::Int(do_rotary)));
    let attrs = schema("com.microsoft::GroupQueryAttention")?;
    // Attribute children in schema order: do_rotary, kv_num_heads, local_window_size,
    // num_heads, qk_output, rotary_interleaved, scale, smooth_softmax, softcap.
    let window = match extras.window {
        Some(w) => g.add(Onnx::Attr(AttrValue::Int(w))),
        None => unset,
    };
    let attr_children = [
        do_rotary,
        a.kv_heads,
        window,
        a.q_heads,
        unset,
        interleaved,
        a.scale,
        unset,
        extras.softcap.unwrap_or(unset),
    ];
    let mut children = vec![
        a.q,
        a.k,
        a.v,
        a.past_key,
        a.past_value,
        seqlens,
        total,
        cos,
        sin,
    ];
    if let Some(sink) = head_sink {
        children.extend([absent, absent, sink]);
    }
    let inputs = children.len();
    children.extend(attr_children);
    Some(g.add(Onnx::op(
        "com.microsoft::GroupQueryAttention",
        attrs,
        inputs,
        3,
        children,
    )))
}

/// Reads the variables of the `rotary-attention-to-gqa` pattern: RotaryEmbedding(q) and
/// RotaryEmbedding(k) over tables gathered by `position_ids` feeding an Attention that meets
/// [`gqa_preconditions`] → GroupQueryAttention(do_rotary=1) over the full tables. Declines
/// unless both rotations agree (heads, interleaving) and the rotary width is one ORT derives
/// from the tables.
fn rotary_attention_to_gqa(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 18]) -> Option<Id> {
    let [q, k, v, mask, pk, pv, causal, kvh, qnh, scale, softcap, cos, sin, qi, ki, qh, kh, qrd] =
        vars;
    let attention = Attention::new([q, k, v, mask, pk, pv, causal, kvh, qnh, scale, softcap]);
    let extras = gqa_preconditions(g, &attention)?;
    let interleaved = rotations_agree(g, [kvh, qnh, qi, ki, qh, kh])?;
    let (cos, sin) = (gathered_table(g, cos)?, gathered_table(g, sin)?);
    let width = g[cos].data.tensor()?.static_shape()?.get(1).copied()?;
    rotary_width_ok(g, &extras, qrd, width)?;
    let attention_mask = g.lookup(Onnx::Input(egg::Symbol::from("attention_mask")))?;
    gqa_op(
        g,
        &attention,
        &extras,
        attention_mask,
        Some((interleaved, cos, sin)),
    )
}

/// The interleaving of RotaryEmbedding(q) and RotaryEmbedding(k) (variables `?kvh ?qnh ?qi ?ki
/// ?qh ?kh`) when they agree with each other and rotate the Attention's head counts.
pub(super) fn rotations_agree(
    g: &OnnxGraph,
    [kvh, qnh, qi, ki, qh, kh]: [Id; 6],
) -> Option<AttrValue> {
    let (heads, kv_heads) = (int_attr(g, qnh)?, int_attr(g, kvh)?);
    if int_attr(g, qh) != Some(heads) || int_attr(g, kh) != Some(kv_heads) {
        return None;
    }
    let interleaved = g[qi].data.attr().cloned()?;
    (g[ki].data.attr() == Some(&interleaved)).then_some(interleaved)
}

/// Whether tables of half-width `width` give the rotary width of RotaryEmbedding(q)'s
/// `rotary_embedding_dim` (`qrd`; unset or 0: the whole head) and ORT accepts it (at most the
/// head, a multiple of 16).
pub(super) fn rotary_width_ok(
    g: &OnnxGraph,
    extras: &GqaExtras,
    qrd: Id,
    width: i64,
) -> Option<()> {
    let head_dim = extras.head_dim;
    let rotary = match int_attr(g, qrd) {
        None | Some(0) => head_dim,
        Some(r) => r,
    };
    (2 * width == rotary && rotary <= head_dim && rotary % 16 == 0).then_some(())
}

/// Reads the variables of `attention-to-gqa`: an Attention that meets [`gqa_preconditions`]
/// on 3-D q/k/v → GroupQueryAttention(do_rotary=0) on the same inputs (RoPE, if any, stays in
/// front of it).
fn attention_to_gqa(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 11]) -> Option<Id> {
    let attention = Attention::new(vars);
    let extras = gqa_preconditions(g, &attention)?;
    if g[attention.q].data.tensor()?.rank()? != 3 {
        return None;
    }
    let attention_mask = g.lookup(Onnx::Input(egg::Symbol::from("attention_mask")))?;
    gqa_op(g, &attention, &extras, attention_mask, None)
}
