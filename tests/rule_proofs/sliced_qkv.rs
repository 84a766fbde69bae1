//! Proof of `sliced-qkv-for-gqa` (`rewrites/fusion/pack_qkv.rules`): q, k and v three
//! last-axis Slices of one tensor, and the slices it must leave alone.

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder, Shape};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::{dims, model, optimize_with_rules, options, prove_on, random_tensor};

/// GroupQueryAttention over `Slice(x, bounds[i].0, bounds[i].1, axis)` for q, k and v
/// (`axis` 2 or −1), seqlens_k and total_sequence_length graph inputs.
fn sliced_gqa(
    (batch, seq, past): (usize, usize, usize),
    kv_heads: usize,
    group: usize,
    bounds: [(i64, i64); 3],
    axis: i64,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>) {
    let (d, heads) = (16usize, kv_heads * group);
    let width = (heads + 2 * kv_heads) * d;
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(&[batch, seq, width]));
    let pk = b.input("past_key", DType::F32, dims(&[batch, kv_heads, past, d]));
    let pv = b.input("past_value", DType::F32, dims(&[batch, kv_heads, past, d]));
    let seqlens = b.input("seqlens_k", DType::I32, dims(&[batch]));
    let total = b.input(
        "total_sequence_length",
        DType::I32,
        Shape::new(Vec::<i64>::new()),
    );
    b.output("y", DType::F32, dims(&[batch, seq, heads * d]));
    for name in ["present_key", "present_value"] {
        b.output(name, DType::F32, dims(&[batch, kv_heads, past + seq, d]));
    }
    let parts: Vec<String> = bounds
        .iter()
        .map(|&(s, e)| {
            let (s, e, a) = (b.const_i64(&[s]), b.const_i64(&[e]), b.const_i64(&[axis]));
            b.op("Slice", &[&x, &s, &e, &a], vec![])
        })
        .collect();
    b.node(
        "com.microsoft",
        "GroupQueryAttention",
        &[
            &parts[0], &parts[1], &parts[2], &pk, &pv, &seqlens, &total, "", "",
        ],
        vec![
            ("kv_num_heads", Attr::Int(kv_heads as i64)),
            ("num_heads", Attr::Int(heads as i64)),
        ],
        vec!["y".into(), "present_key".into(), "present_value".into()],
    );
    let mut rng = Rng::new(seed);
    let inputs = HashMap::from([
        (
            "x".to_string(),
            random_tensor(DType::F32, &[batch, seq, width], &mut rng),
        ),
        (
            "past_key".to_string(),
            random_tensor(DType::F32, &[batch, kv_heads, past, d], &mut rng),
        ),
        (
            "past_value".to_string(),
            random_tensor(DType::F32, &[batch, kv_heads, past, d], &mut rng),
        ),
        (
            "seqlens_k".to_string(),
            Tensor::int(
                DType::I32,
                vec![batch],
                vec![(past + seq - 1) as i64; batch],
            ),
        ),
        (
            "total_sequence_length".to_string(),
            Tensor::int(DType::I32, vec![], vec![(past + seq) as i64]),
        ),
    ]);
    (b.finish(), inputs)
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
