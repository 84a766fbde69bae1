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

/// Restricts `mask` (`[B, 1, S, T]`) to keys less than `window` valid tokens behind each
/// query. Distances count valid tokens (`CumSum(attention_mask)`), not cache slots, so a row
/// with padding inside its cache sees the same keys as the unpadded sequence; for unpadded
/// input this is transformers' `j > i - window`.
pub fn sliding_window_mask(
    b: &mut GraphBuilder,
    mask: &str,
    input_ids: &str,
    attention_mask: &str,
    window: usize,
) -> String {
    let (distance, axes1) = token_distance(b, input_ids, attention_mask);
    let limit = b.scalar_i64(window as i64);
    let inside = b.op("Less", &[&distance, &limit], vec![]);
    let inside = b.op("Unsqueeze", &[&inside, &axes1], vec![]);
    b.op("And", &[mask, &inside], vec![])
}

/// The name prefix of every chunked-attention mask value; the optimizer keeps it, so the
/// GroupQueryAttention trace can say why an attention stayed `Attention` and the static cache
/// can refuse it.
pub const CHUNKED_MASK: &str = "chunked_mask";

/// Restricts `mask` (`[B, 1, S, T]`) to keys in the query's chunk of `chunk` valid tokens
/// (Llama 4's chunked local attention): key `j` is seen by query `i` only where
/// `(oⱼ − 1) div chunk = (oᵢ − 1) div chunk`, `o = CumSum(attention_mask)` (each token's count
/// of valid tokens up to it), so chunks start at a row's first valid token, as transformers
/// counts them past left padding. Causality is left to the attention. The result is named
/// `{CHUNKED_MASK}{chunk}`.
pub fn chunked_mask(
    b: &mut GraphBuilder,
    mask: &str,
    input_ids: &str,
    attention_mask: &str,
    chunk: usize,
) -> String {
    let axis1 = b.scalar_i64(1);
    let ordinal = b.op("CumSum", &[attention_mask, &axis1], vec![]);
    let one = b.scalar_i64(1);
    let before = b.op("Sub", &[&ordinal, &one], vec![]);
    let size = b.scalar_i64(chunk as i64);
    let key_chunk = b.op("Div", &[&before, &size], vec![]);
    let seq = b.op(
        "Shape",
        &[input_ids],
        vec![("end", Attr::Int(2)), ("start", Attr::Int(1))],
    );
    let start = b.op("Neg", &[&seq], vec![]);
    let end = b.const_i64(&[i64::MAX]);
    let axes1 = b.const_i64(&[1]);
    let query_chunk = b.op("Slice", &[&key_chunk, &start, &end, &axes1], vec![]);
    let axes2 = b.const_i64(&[2]);
    let query_col = b.op("Unsqueeze", &[&query_chunk, &axes2], vec![]);
    let key_row = b.op("Unsqueeze", &[&key_chunk, &axes1], vec![]);
    let same = b.op("Equal", &[&query_col, &key_row], vec![]);
    let same = b.op("Unsqueeze", &[&same, &axes1], vec![]);
    let name = format!("{CHUNKED_MASK}{chunk}");
    b.op_into("And", &[mask, &same], vec![], &name);
    name
}

/// How many valid tokens (counted by `CumSum(attention_mask)`, not by cache slot) each key
/// lies behind each query, `[B, S, T]` (negative for keys after the query); with the `[1]`
/// axes constant it made, for the caller's unsqueeze to `[B, 1, S, T]`.
pub(crate) fn token_distance(
    b: &mut GraphBuilder,
    input_ids: &str,
    attention_mask: &str,
) -> (String, String) {
    let axis1 = b.scalar_i64(1);
    let ordinal = b.op("CumSum", &[attention_mask, &axis1], vec![]);
    let seq = b.op(
        "Shape",
        &[input_ids],
        vec![("end", Attr::Int(2)), ("start", Attr::Int(1))],
    );
    let start = b.op("Neg", &[&seq], vec![]);
    let end = b.const_i64(&[i64::MAX]);
    let axes1 = b.const_i64(&[1]);
    let query_ordinal = b.op("Slice", &[&ordinal, &start, &end, &axes1], vec![]);
    let axes2 = b.const_i64(&[2]);
    let query_col = b.op("Unsqueeze", &[&query_ordinal, &axes2], vec![]);
    let key_row = b.op("Unsqueeze", &[&ordinal, &axes1], vec![]);
    (b.op("Sub", &[&query_col, &key_row], vec![]), axes1)
}
