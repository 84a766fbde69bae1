//! Proofs of the PackQKV rules for q/k/v split from one tensor (`split-qkv-for-gqa`,
//! `split-qkv-with-sizes-for-gqa` in `rewrites/fusion/pack_qkv.rules`), and the splits they
//! must leave alone.

use std::collections::HashMap;

use mobius::ir::{Attr, Graph};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::{model, optimize_with_rules, options, packed_gqa, prove_on};

/// GroupQueryAttention over the three last-axis parts of `Split(x)` (`sizes`: the split
/// input, else `num_outputs` 3), seqlens_k and total_sequence_length graph inputs.
fn split_gqa(
    batch: usize,
    seq: usize,
    past: usize,
    kv_heads: usize,
    group: usize,
    sizes: Option<[usize; 3]>,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>) {
    packed_gqa((batch, seq, past), kv_heads, group, seed, |b, x| {
        let parts = ["part0", "part1", "part2"].map(String::from);
        match sizes {
            Some(s) => {
                let s = b.const_i64(&s.map(|v| v as i64));
                b.node(
                    "",
                    "Split",
                    &[x, &s],
                    vec![("axis", Attr::Int(-1))],
                    parts.to_vec(),
                );
            }
            None => b.node(
                "",
                "Split",
                &[x],
                vec![("axis", Attr::Int(2)), ("num_outputs", Attr::Int(3))],
                parts.to_vec(),
            ),
        }
        parts
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Equal thirds (num_outputs 3): multi-head attention (Hq = Hkv), as GPT-2's c_attn.
    #[test]
    fn split_qkv_for_gqa(batch in 1usize..3, seq in 1usize..4, past in 0usize..3, heads in 1usize..4, seed in any::<u64>()) {
        let (g, inputs) = split_gqa(batch, seq, past, heads, 1, None, seed);
        prove_on("split-qkv-for-gqa", "cpu", g, inputs, 0.0)?;
    }

    /// Constant split sizes Hq·D, Hkv·D, Hkv·D (grouped heads too).
    #[test]
    fn split_qkv_with_sizes_for_gqa(batch in 1usize..3, seq in 1usize..4, past in 0usize..3, kv in 1usize..3, group in 1usize..3, seed in any::<u64>()) {
        let (d, h) = (16, kv * group);
        let (g, inputs) = split_gqa(batch, seq, past, kv, group, Some([h * d, kv * d, kv * d]), seed);
        prove_on("split-qkv-with-sizes-for-gqa", "cpu", g, inputs, 0.0)?;
    }
}

/// Splits at other widths than the heads' stay split.
#[test]
fn other_splits_are_not_packed() {
    let rules = mobius::rulebook::rules().unwrap().rules;
    let cpu = mobius::ep::get_ep("cpu").unwrap();
    let packed = |g: &Graph| {
        let (out, _) =
            optimize_with_rules(&model(g.clone()), &cpu, &options(None), &rules).unwrap();
        !out.graph.op_counts().contains_key("Split")
    };
    assert!(packed(&split_gqa(1, 2, 1, 2, 1, None, 0).0));
    // Grouped heads split in equal thirds: q is wider than k and v, thirds are not the heads.
    let mut g = split_gqa(1, 2, 1, 1, 2, Some([32, 16, 16]), 0).0;
    assert!(packed(&g));
    for node in &mut g.nodes {
        if node.op_type == "Split" {
            node.inputs.truncate(1);
            node.attrs.insert("num_outputs".into(), Attr::Int(3));
        }
    }
    assert!(!packed(&g), "thirds of (2 + 2·1)·16 are not 32, 16, 16");
    // Sizes in another order (k first) are not q|k|v.
    let swapped = split_gqa(1, 2, 1, 1, 2, Some([16, 32, 16]), 0).0;
    assert!(!packed(&swapped));
}
