//! Sliding-window masks measured in token positions rather than cache slots.

use crate::ir::{Attr, GraphBuilder};

/// Restricts `mask` (`[B, 1, S, T]`) to keys less than `window` *positions* behind each query,
/// as transformers' `kv_idx > q_idx - window` over an unpadded sequence.
///
/// Positions are counted over the valid (`attention_mask` = 1) slots, `CumSum(attention_mask)`
/// along the sequence, so padding anywhere in the cache takes no room in the window: a
/// right-padded prefill followed by decode steps (onnxruntime-genai's layout) sees the same
/// keys as the unpadded sequence, and so does a left-padded one.
pub fn position_window_mask(
    b: &mut GraphBuilder,
    mask: &str,
    input_ids: &str,
    attention_mask: &str,
    window: usize,
) -> String {
    let axis1 = b.scalar_i64(1);
    // 1-based position of every slot (padding slots repeat their predecessor's).
    let k_pos = b.op("CumSum", &[attention_mask, &axis1], vec![]);
    let s = b.op("Shape", &[input_ids], vec![("start", Attr::Int(1))]);
    let t = b.op("Shape", &[attention_mask], vec![("start", Attr::Int(1))]);
    let first_query = b.op("Sub", &[&t, &s], vec![]);
    let axes1 = b.const_i64(&[1]);
    let q_pos = b.op("Slice", &[&k_pos, &first_query, &t, &axes1], vec![]);
    let axes2 = b.const_i64(&[2]);
    let q_col = b.op("Unsqueeze", &[&q_pos, &axes2], vec![]);
    let k_row = b.op("Unsqueeze", &[&k_pos, &axes1], vec![]);
    let distance = b.op("Sub", &[&q_col, &k_row], vec![]);
    let limit = b.scalar_i64(window as i64);
    let inside = b.op("Less", &[&distance, &limit], vec![]);
    let inside = b.op("Unsqueeze", &[&inside, &axes1], vec![]);
    b.op("And", &[mask, &inside], vec![])
}
