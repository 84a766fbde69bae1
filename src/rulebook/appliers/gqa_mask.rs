//! The attention masks the GroupQueryAttention fusion understands: the padding mask the
//! builder makes of the `attention_mask` input, alone or restricted to a sliding window
//! ([`crate::models::components::sliding_window_mask`]); GroupQueryAttention computes both
//! from `seqlens_k` and `local_window_size`.

use egg::Id;

use crate::ir::DType;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::query::{const_ints, find_op, int_attr, is_input};

/// Whether `mask` is exactly the boolean padding mask built from the `attention_mask` input:
/// `Unsqueeze(Expand(Unsqueeze(Cast(attention_mask → bool), [1]), [B, S, T]), [1])`.
fn is_padding_mask(g: &OnnxGraph, mask: Id) -> bool {
    let step = |id: Id, op: &str| find_op(g, id, op).map(|o| o.input_ids()[0]);
    let to_bool = |id: Id| {
        find_op(g, id, "Cast").and_then(|c| {
            let to = int_attr(g, c.attr_id("to")?)?;
            (to == DType::Bool.onnx_code() as i64).then(|| c.input_ids()[0])
        })
    };
    let chain = unsqueezed(g, mask, 1)
        .and_then(|x| step(x, "Expand"))
        .and_then(|x| unsqueezed(g, x, 1))
        .and_then(to_bool);
    chain.is_some_and(|x| is_input(g, x, Some("attention_mask")))
}

/// The window an attention mask encodes: `Some(None)` for the padding mask of
/// `attention_mask`, `Some(Some(w))` for it restricted by
/// [`crate::models::components::sliding_window_mask`] to keys less than `w` valid tokens
/// behind the query, `None` for any other mask.
pub(super) fn attention_window(g: &OnnxGraph, mask: Id) -> Option<Option<i64>> {
    if is_padding_mask(g, mask) {
        return Some(None);
    }
    let and = find_op(g, mask, "And")?;
    let [a, b] = and.input_ids() else {
        return None;
    };
    let inside = match (is_padding_mask(g, *a), is_padding_mask(g, *b)) {
        (true, _) => *b,
        (_, true) => *a,
        _ => return None,
    };
    let less = find_op(g, unsqueezed(g, inside, 1)?, "Less")?;
    let [distance, limit] = less.input_ids() else {
        return None;
    };
    let window = match const_ints(g, *limit)?.as_slice() {
        [w] if *w > 0 => *w,
        _ => return None,
    };
    is_token_distance(g, *distance).then_some(Some(window))
}

/// The input of class `id` when it is `Unsqueeze(x, [axis])`.
fn unsqueezed(g: &OnnxGraph, id: Id, axis: i64) -> Option<Id> {
    find_op(g, id, "Unsqueeze").and_then(|u| match u.input_ids() {
        [x, axes] if const_ints(g, *axes) == Some(vec![axis]) => Some(*x),
        _ => None,
    })
}

/// Whether `distance` is `Sub(Unsqueeze(Slice(o, −S, ∞, [1]), [2]), Unsqueeze(o, [1]))` with
/// `o = CumSum(attention_mask, 1)` and `S = Shape(input_ids)[1:2]`: how many valid tokens
/// key `j` lies behind query `i` (`[B, S, T]`).
fn is_token_distance(g: &OnnxGraph, distance: Id) -> bool {
    let Some(sub) = find_op(g, distance, "Sub") else {
        return false;
    };
    let [query_col, key_row] = sub.input_ids() else {
        return false;
    };
    let Some(ordinal) = unsqueezed(g, *key_row, 1) else {
        return false;
    };
    let slice = unsqueezed(g, *query_col, 2).and_then(|x| find_op(g, x, "Slice"));
    let Some(slice) = slice else {
        return false;
    };
    let [sliced, start, end, axes] = slice.input_ids() else {
        return false;
    };
    let Some(cumsum) = find_op(g, ordinal, "CumSum") else {
        return false;
    };
    let [summed, cumsum_axis] = cumsum.input_ids() else {
        return false;
    };
    let seq = find_op(g, *start, "Neg").and_then(|n| find_op(g, n.input_ids()[0], "Shape"));
    let seq_ok = seq.is_some_and(|shape| {
        let attr = |name: &str| shape.attr_id(name).and_then(|a| int_attr(g, a));
        is_input(g, shape.input_ids()[0], Some("input_ids"))
            && attr("start") == Some(1)
            && attr("end") == Some(2)
    });
    let cumsum_plain = ["exclusive", "reverse"].iter().all(|name| {
        cumsum
            .attr_id(name)
            .is_none_or(|a| matches!(g[a].data.attr(), Some(AttrValue::Unset | AttrValue::Int(0))))
    });
    g.find(*sliced) == g.find(ordinal)
        && is_input(g, *summed, Some("attention_mask"))
        && const_ints(g, *cumsum_axis) == Some(vec![1])
        && cumsum_plain
        && seq_ok
        && const_ints(g, *end) == Some(vec![i64::MAX])
        && const_ints(g, *axes) == Some(vec![1])
}

/// The window of an attention mask that is a mask [`attention_window`] reads restricted to
/// keys at or behind each query in valid tokens (`And(mask, Unsqueeze(distance ≥ 0, [1]))`,
/// [`crate::models::components::sink_attention`]'s causal mask): under the padding mask the
/// causal mask GroupQueryAttention applies.
pub(super) fn causal_attention_window(g: &OnnxGraph, mask: Id) -> Option<Option<i64>> {
    let and = find_op(g, mask, "And")?;
    let [inner, behind] = and.input_ids() else {
        return None;
    };
    let ge = find_op(g, unsqueezed(g, *behind, 1)?, "GreaterOrEqual")?;
    let [distance, zero] = ge.input_ids() else {
        return None;
    };
    let zero_ok = const_ints(g, *zero) == Some(vec![0]);
    (zero_ok && is_token_distance(g, *distance)).then_some(())?;
    attention_window(g, *inner)
}
