//! Proof of `sliced-qkv-for-gqa` (`rewrites/fusion/pack_qkv.rules`): q, k and v three
//! last-axis Slices of one tensor, and the slices it must leave alone.

use std::collections::HashMap;

use mobius::ir::Graph;
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::{model, optimize_with_rules, options, packed_gqa, prove_on};

/// GroupQueryAttention over `Slice(x, bounds[i].0, bounds[i].1, axis)` for q, k and v
/// (`axis` 2 or −1), seqlens_k and total_sequence_length graph inputs.
fn sliced_gqa(
    rows: (usize, usize, usize),
    kv_heads: usize,
    group: usize,
    bounds: [(i64, i64); 3],
    axis: i64,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>) {
    packed_gqa(rows, kv_heads, group, seed, |b, x| {
        bounds.map(|(s, e)| {
            let (s, e, a) = (b.const_i64(&[s]), b.const_i64(&[e]), b.const_i64(&[axis]));
            b.op("Slice", &[x, &s, &e, &a], vec![])
        })
    })
}

/// The slices `[0, Hq·D)`, `[Hq·D, (Hq+Hkv)·D)`, `[(Hq+Hkv)·D, end)` written with the bounds
/// Falcon's export gives after head_layout (`negative`: the same bounds counted from the end,
/// `to_end`: the last end a large number).
fn bounds(kv: usize, group: usize, negative: bool, to_end: bool) -> [(i64, i64); 3] {
    let d = 16i64;
    let (q, k) = ((kv * group) as i64 * d, kv as i64 * d);
    let w = q + 2 * k;
    let at = |v: i64| if negative && v > 0 { v - w } else { v };
    let end = if to_end { i64::MAX } else { w };
    [(0, at(q)), (at(q), at(q + k)), (at(q + k), end)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Multi-query (Hkv 1, as Falcon) and grouped heads, bounds positive or from the end.
    #[test]
    fn sliced_qkv_for_gqa(
        (batch, seq, past) in (1usize..3, 1usize..4, 0usize..3),
        (kv, group) in (1usize..3, 1usize..4),
        (negative, to_end, last) in (any::<bool>(), any::<bool>(), any::<bool>()),
        seed in any::<u64>(),
    ) {
        let axis = if last { -1 } else { 2 };
        let (g, inputs) = sliced_gqa((batch, seq, past), kv, group, bounds(kv, group, negative, to_end), axis, seed);
        prove_on("sliced-qkv-for-gqa", "cpu", g, inputs, 0.0)?;
    }
}

/// Slices in another order stay.
#[test]
fn other_slices_are_not_packed() {
    let rules = mobius::rulebook::rules().unwrap().rules;
    let cpu = mobius::ep::get_ep("cpu").unwrap();
    let packed = |g: &Graph| {
        let (out, _) =
            optimize_with_rules(&model(g.clone()), &cpu, &options(None), &rules).unwrap();
        !out.graph.op_counts().contains_key("Slice")
    };
    let rows = (1, 2, 1);
    assert!(packed(
        &sliced_gqa(rows, 1, 2, bounds(1, 2, false, false), 2, 0).0
    ));
    // k and v swapped.
    let [q, k, v] = bounds(1, 2, false, false);
    assert!(!packed(&sliced_gqa(rows, 1, 2, [q, v, k], 2, 0).0));
}
