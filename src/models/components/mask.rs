//! Attention masks: boolean `[B, 1, S, T]` (true = may attend); causality is left to the
//! `Attention` op's `is_causal`.

use crate::ir::{Attr, DType, GraphBuilder};

/// `Cast(attention_mask → bool)` broadcast to `[B, 1, S, T]`. The explicit singleton head axis
/// keeps the batch axis from being read as the head axis when B > 1.
pub fn padding_mask(b: &mut GraphBuilder, input_ids: &str, attention_mask: &str) -> String {
    let as_bool = b.op(
        "Cast",
        &[attention_mask],
        vec![("to", Attr::Int(DType::Bool.onnx_code() as i64))],
    );
    let axis1 = b.const_i64(&[1]);
    let b1t = b.op("Unsqueeze", &[&as_bool, &axis1], vec![]);
    let bs = b.op("Shape", &[input_ids], vec![]);
    let t = b.op("Shape", &[attention_mask], vec![("start", Attr::Int(1))]);
    let bst = b.op("Concat", &[&bs, &t], vec![("axis", Attr::Int(0))]);
    let expanded = b.op("Expand", &[&b1t, &bst], vec![]);
    b.op("Unsqueeze", &[&expanded, &axis1], vec![])
}

/// Restricts `mask` (`[B, 1, S, T]`) to keys less than `window` positions behind each query:
/// query `i` (absolute index `T - S + i`) may see key `j` only if `T - S + i - j < window`.
pub fn sliding_window_mask(
    b: &mut GraphBuilder,
    mask: &str,
    input_ids: &str,
    attention_mask: &str,
    window: usize,
) -> String {
    let one = b.scalar_i64(1);
    let zero = b.scalar_i64(0);
    let shape_ids = b.op("Shape", &[input_ids], vec![]);
    let s = b.op("Gather", &[&shape_ids, &one], vec![("axis", Attr::Int(0))]);
    let shape_mask = b.op("Shape", &[attention_mask], vec![]);
    let t = b.op("Gather", &[&shape_mask, &one], vec![("axis", Attr::Int(0))]);
    let past = b.op("Sub", &[&t, &s], vec![]);
    let q_pos = b.op("Range", &[&past, &t, &one], vec![]);
    let k_pos = b.op("Range", &[&zero, &t, &one], vec![]);
    let axis1 = b.const_i64(&[1]);
    let q_col = b.op("Unsqueeze", &[&q_pos, &axis1], vec![]);
    let distance = b.op("Sub", &[&q_col, &k_pos], vec![]);
    let limit = b.scalar_i64(window as i64);
    let inside = b.op("Less", &[&distance, &limit], vec![]);
    b.op("And", &[mask, &inside], vec![])
}
