//! Proofs of the PackQKV rules for q/k/v split from one tensor (`split-qkv-for-gqa`,
//! `split-qkv-with-sizes-for-gqa` in `rewrites/fusion/pack_qkv.rules`), and the splits they
//! must leave alone.

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder, Shape};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::{dims, model, optimize_with_rules, options, prove_on, random_tensor};

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
    let parts: Vec<String> = (0..3).map(|i| format!("part{i}")).collect();
    match sizes {
        Some(s) => {
            let s = b.const_i64(&s.map(|v| v as i64));
            b.node(
                "",
                "Split",
                &[&x, &s],
                vec![("axis", Attr::Int(-1))],
                parts.clone(),
            );
        }
        None => b.node(
            "",
            "Split",
            &[&x],
            vec![("axis", Attr::Int(2)), ("num_outputs", Attr::Int(3))],
            parts.clone(),
        ),
    }
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
