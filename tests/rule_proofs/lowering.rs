//! Proofs of the lowering rules (`rewrites/lowering/`), on the `qnn` EP (which runs neither
//! Attention, RotaryEmbedding nor rank-4 RMSNormalization, so the rewritten form is chosen).

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::{dims, prove_on, random_tensor};

/// Random values for every graph input (integers below `positions` for `position_ids`).
fn inputs_for(graph: &Graph, positions: usize, rng: &mut Rng) -> HashMap<String, Tensor> {
    graph
        .inputs
        .iter()
        .map(|v| {
            let shape: Vec<usize> = v
                .shape
                .0
                .iter()
                .map(|d| match d {
                    mobius::ir::Dim::Fixed(x) => *x as usize,
                    _ => unreachable!("proof graphs have static shapes"),
                })
                .collect();
            let t = if v.name == "position_ids" {
                let n = shape.iter().product();
                let ids = (0..n).map(|_| rng.below(positions as u64) as i64).collect();
                Tensor::int(DType::I64, shape, ids)
            } else {
                random_tensor(v.dtype, &shape, rng)
            };
            (v.name.clone(), t)
        })
        .collect()
}

/// One rotary case: batch, sequence, heads, head size, rotary width (0 = full), interleaved,
/// whether the caches are indexed by `position_ids`.
type RotaryCase = (usize, usize, usize, usize, usize, bool, bool);

fn rotary_case() -> impl Strategy<Value = RotaryCase> {
    (1usize..3, 1usize..4, 1usize..4, 1usize..5)
        .prop_flat_map(|(b, s, h, half)| {
            let d = 2 * half;
            (
                Just((b, s, h, d)),
                prop_oneof![Just(0usize), (1..=half).prop_map(|r| 2 * r)],
                any::<bool>(),
                any::<bool>(),
            )
        })
        .prop_map(|((b, s, h, d), rd, inter, pos)| (b, s, h, d, rd, inter, pos))
}

/// `RotaryEmbedding` of a 3-D `x` with the given caches.
fn rotary_graph(case: RotaryCase, max_pos: usize) -> Graph {
    let (batch, seq, heads, d, rd, interleaved, positions) = case;
    let half = if rd == 0 { d / 2 } else { rd / 2 };
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(&[batch, seq, heads * d]));
    let table = if positions {
        vec![max_pos, half]
    } else {
        vec![batch, seq, half]
    };
    let cos = b.input("cos", DType::F32, dims(&table));
    let sin = b.input("sin", DType::F32, dims(&table));
    let mut ins = vec![x, cos, sin];
    if positions {
        ins.push(b.input("position_ids", DType::I64, dims(&[batch, seq])));
    }
    b.output("y", DType::F32, dims(&[batch, seq, heads * d]));
    let refs: Vec<&str> = ins.iter().map(String::as_str).collect();
    b.op_into(
        "RotaryEmbedding",
        &refs,
        vec![
            ("interleaved", Attr::Int(interleaved as i64)),
            ("num_heads", Attr::Int(heads as i64)),
            ("rotary_embedding_dim", Attr::Int(rd as i64)),
        ],
        "y",
    );
    b.finish()
}

/// An attention case: batch, sequence, past length (`None`: absent cache inputs), kv heads,
/// group, head size, value head size, mask kind (0 none, 1 bool `[B, 1, S, T]`, 2 bool
/// `[S, T]`, 3 float `[B, 1, S, T]`), causal, softcap, explicit scale.
#[derive(Debug, Clone, Copy)]
struct AttentionCase {
    batch: usize,
    seq: usize,
    past: Option<usize>,
    kv_heads: usize,
    group: usize,
    head: usize,
    value: usize,
    mask: u8,
    causal: bool,
    softcap: bool,
    scale: bool,
}

fn attention_case() -> impl Strategy<Value = AttentionCase> {
    (
        (1usize..3, 1usize..4, prop::option::of(0usize..3)),
        (
            1usize..3,
            1usize..3,
            prop_oneof![Just(2usize), Just(4)],
            1usize..4,
        ),
        (0u8..4, any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(
                (batch, seq, past),
                (kv_heads, group, head, value),
                (mask, causal, softcap, scale),
            )| {
                AttentionCase {
                    batch,
                    seq,
                    past,
                    kv_heads,
                    group,
                    head,
                    value,
                    mask,
                    causal,
                    softcap,
                    scale,
                }
            },
        )
}

/// An Attention node over graph inputs per `c`; `outputs` names its outputs ("" = unused;
/// one name = the single-output form) and which of them are graph outputs.
fn attention_graph(c: AttentionCase, outputs: &[&str]) -> Graph {
    let heads = c.kv_heads * c.group;
    let total = c.past.unwrap_or(0) + c.seq;
    let mut b = GraphBuilder::new("g");
    let q = b.input("q", DType::F32, dims(&[c.batch, c.seq, heads * c.head]));
    let k = b.input(
        "k",
        DType::F32,
        dims(&[c.batch, c.seq, c.kv_heads * c.head]),
    );
    let v = b.input(
        "v",
        DType::F32,
        dims(&[c.batch, c.seq, c.kv_heads * c.value]),
    );
    let mask = match c.mask {
        1 => b.input("mask", DType::Bool, dims(&[c.batch, 1, c.seq, total])),
        2 => b.input("mask", DType::Bool, dims(&[c.seq, total])),
        3 => b.input("mask", DType::F32, dims(&[c.batch, 1, c.seq, total])),
        _ => String::new(),
    };
    let mut ins = vec![q, k, v, mask];
    match c.past {
        Some(p) => {
            ins.push(b.input("pk", DType::F32, dims(&[c.batch, c.kv_heads, p, c.head])));
            ins.push(b.input("pv", DType::F32, dims(&[c.batch, c.kv_heads, p, c.value])));
        }
        None => ins.extend([String::new(), String::new()]),
    }
    let shapes = [
        vec![c.batch, c.seq, heads * c.value],
        vec![c.batch, c.kv_heads, total, c.head],
        vec![c.batch, c.kv_heads, total, c.value],
    ];
    for (name, shape) in outputs.iter().zip(&shapes) {
        if !name.is_empty() {
            b.output(name, DType::F32, dims(shape));
        }
    }
    let mut attrs = vec![
        ("is_causal", Attr::Int(c.causal as i64)),
        ("kv_num_heads", Attr::Int(c.kv_heads as i64)),
        ("q_num_heads", Attr::Int(heads as i64)),
    ];
    if c.softcap {
        attrs.push(("softcap", Attr::Float(2.5)));
    }
    if c.scale {
        attrs.push(("scale", Attr::Float(0.3)));
    }
    let refs: Vec<&str> = ins.iter().map(String::as_str).collect();
    let outs = outputs.iter().map(|s| s.to_string()).collect();
    b.node("", "Attention", &refs, attrs, outs);
    b.finish()
}

/// `RMSNormalization` of a rank-4 input over its last axis.
fn rank4_norm_graph(shape: &[usize], axis: i64, eps: f32) -> Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(shape));
    let w = b.input("w", DType::F32, dims(&shape[3..]));
    b.output("y", DType::F32, dims(shape));
    b.op_into(
        "RMSNormalization",
        &[&x, &w],
        vec![("axis", Attr::Int(axis)), ("epsilon", Attr::Float(eps))],
        "y",
    );
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn decompose_rotary_embedding(case in rotary_case(), seed in any::<u64>()) {
        let rule = if case.6 {
            "decompose-rotary-embedding-with-positions"
        } else {
            "decompose-rotary-embedding"
        };
        let graph = rotary_graph(case, 6);
        let inputs = inputs_for(&graph, 6, &mut Rng::new(seed));
        prove_on(rule, "qnn", graph, inputs, 1e-6)?;
    }

    #[test]
    fn decompose_attention(case in attention_case(), seed in any::<u64>()) {
        let with_cache = [
            ("decompose-attention-output", ["y", "", ""]),
            ("decompose-attention-present-key", ["", "present_key", ""]),
            ("decompose-attention-present-value", ["", "", "present_value"]),
        ];
        for (rule, outputs) in with_cache {
            let graph = attention_graph(case, &outputs);
            let inputs = inputs_for(&graph, 1, &mut Rng::new(seed));
            prove_on(rule, "qnn", graph, inputs, 1e-5)?;
        }
    }

    #[test]
    fn decompose_attention_without_cache(case in attention_case(), seed in any::<u64>()) {
        let case = AttentionCase { past: None, ..case };
        let mut graph = attention_graph(case, &["y"]);
        graph.nodes[0].inputs.truncate(4);
        let inputs = inputs_for(&graph, 1, &mut Rng::new(seed));
        prove_on("decompose-attention-without-cache", "qnn", graph, inputs, 1e-5)?;
    }

    #[test]
    fn htp_rank4_rmsnorm(
        shape in prop::collection::vec(1usize..4, 4..=4),
        axis_last in any::<bool>(),
        eps in prop_oneof![Just(1e-5f32), Just(1e-6f32)],
        seed in any::<u64>(),
    ) {
        let graph = rank4_norm_graph(&shape, if axis_last { -1 } else { 3 }, eps);
        let inputs = inputs_for(&graph, 1, &mut Rng::new(seed));
        prove_on("htp-rank4-rmsnorm", "qnn", graph, inputs, 1e-6)?;
    }
}

/// `Range(start, limit, delta)` of int64 scalars (`start`, `limit` graph inputs).
fn range_graph(delta: i64) -> Graph {
    let mut b = GraphBuilder::new("g");
    let start = b.input("start", DType::I64, dims(&[]));
    let limit = b.input("limit", DType::I64, dims(&[]));
    let delta = b.constant(mobius::ir::TensorData::from_i64(vec![], &[delta]));
    b.output("y", DType::I64, mobius::ir::Shape::new(["n"]));
    b.op_into("Range", &[&start, &limit, &delta], vec![], "y");
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn range_to_cumsum(start in -6i64..6, limit in -6i64..9) {
        let scalar = |v: i64| Tensor::int(DType::I64, vec![], vec![v]);
        let inputs = HashMap::from([
            ("start".to_string(), scalar(start)),
            ("limit".to_string(), scalar(limit)),
        ]);
        prove_on("range-to-cumsum", "qnn", range_graph(1), inputs, 0.0)?;
    }
}

/// `Range(start, limit, delta)` of `dtype` scalars.
fn typed_range_graph(dtype: DType, delta: f64) -> Graph {
    let mut b = GraphBuilder::new("g");
    let start = b.input("start", dtype, dims(&[]));
    let limit = b.input("limit", dtype, dims(&[]));
    let delta = match dtype {
        DType::I64 => b.constant(mobius::ir::TensorData::from_i64(vec![], &[delta as i64])),
        _ => b.constant(mobius::ir::TensorData::from_f32(vec![], &[delta as f32])),
    };
    b.output("y", dtype, mobius::ir::Shape::new(["n"]));
    b.op_into("Range", &[&start, &limit, &delta], vec![], "y");
    b.finish()
}

/// What the lowerings cannot rewrite exactly they leave alone: on qnn (which runs none of the
/// lowered ops) the graph is then refused, naming the op, instead of rewritten wrongly.
#[test]
fn lowerings_decline_what_they_cannot_rewrite() {
    let refused = |rule: &str, graph: Graph, op: &str| {
        let err = super::optimize_with_rules(
            &super::model(graph),
            &mobius::ep::get_ep("qnn").unwrap(),
            &super::options(None),
            &[super::rule(rule)],
        )
        .expect_err(rule)
        .to_string();
        assert!(err.contains(op), "{rule}: {err}");
    };
    // RangeToCumSum: only step 1, only int64.
    refused("range-to-cumsum", range_graph(2), "Range");
    refused("range-to-cumsum", range_graph(-1), "Range");
    refused(
        "range-to-cumsum",
        typed_range_graph(DType::F32, 1.0),
        "Range",
    );
    // HtpRank4RMSNorm: only the last axis.
    refused(
        "htp-rank4-rmsnorm",
        rank4_norm_graph(&[1, 2, 3, 4], 2, 1e-5),
        "RMSNormalization",
    );
    // DecomposeRotaryEmbedding: a rotary width larger than the head is not a rotation.
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(&[1, 2, 32]));
    let cos = b.input("cos", DType::F32, dims(&[1, 2, 8]));
    let sin = b.input("sin", DType::F32, dims(&[1, 2, 8]));
    b.output("y", DType::F32, dims(&[1, 2, 32]));
    b.op_into(
        "RotaryEmbedding",
        &[&x, &cos, &sin],
        vec![
            ("num_heads", Attr::Int(2)),
            ("rotary_embedding_dim", Attr::Int(18)),
        ],
        "y",
    );
    refused("decompose-rotary-embedding", b.finish(), "RotaryEmbedding");
    // TensorScatterToScatterND: linear mode on the sequence axis of a 3-D cache only.
    let sizes = (2, 5, 2, 3);
    refused(
        "tensor-scatter-to-scatternd",
        tensor_scatter_graph(sizes, Some(1), Some("circular")),
        "TensorScatter",
    );
    let mut written_without_indices = tensor_scatter_graph(sizes, None, None);
    written_without_indices.nodes[0].inputs.truncate(2);
    written_without_indices.inputs.truncate(2);
    refused(
        "tensor-scatter-to-scatternd",
        written_without_indices,
        "TensorScatter",
    );
}

/// `TensorScatter(cache [B, N, W], update [B, S, W], write_indices; axis)` as a graph, `axis`
/// and `mode` set only when given.
fn tensor_scatter_graph(
    (batch, slots, seq, width): (usize, usize, usize, usize),
    axis: Option<i64>,
    mode: Option<&str>,
) -> Graph {
    let mut b = GraphBuilder::new("g");
    let cache = b.input("cache", DType::F32, dims(&[batch, slots, width]));
    let update = b.input("update", DType::F32, dims(&[batch, seq, width]));
    let write = b.input("write_indices", DType::I64, dims(&[batch]));
    b.output("y", DType::F32, dims(&[batch, slots, width]));
    let mut attrs = Vec::new();
    if let Some(axis) = axis {
        attrs.push(("axis", Attr::Int(axis)));
    }
    if let Some(mode) = mode {
        attrs.push(("mode", Attr::String(mode.into())));
    }
    b.op_into("TensorScatter", &[&cache, &update, &write], attrs, "y");
    b.finish()
}

/// A static-cache attention: `Attention(q, k, v, mask?, -, -, nonpad_kv_seqlen)` with Y only,
/// over `total` cache slots.
fn nonpad_attention_graph(c: AttentionCase, total: usize) -> Graph {
    let heads = c.kv_heads * c.group;
    let mut b = GraphBuilder::new("g");
    let q = b.input("q", DType::F32, dims(&[c.batch, c.seq, heads * c.head]));
    let k = b.input(
        "k",
        DType::F32,
        dims(&[c.batch, total, c.kv_heads * c.head]),
    );
    let v = b.input(
        "v",
        DType::F32,
        dims(&[c.batch, total, c.kv_heads * c.value]),
    );
    let mask = match c.mask {
        1 | 2 => b.input("mask", DType::Bool, dims(&[c.batch, 1, c.seq, total])),
        _ => String::new(),
    };
    let nonpad = b.input("nonpad_kv_seqlen", DType::I64, dims(&[c.batch]));
    b.output("y", DType::F32, dims(&[c.batch, c.seq, heads * c.value]));
    let mut attrs = vec![
        ("is_causal", Attr::Int(c.causal as i64)),
        ("kv_num_heads", Attr::Int(c.kv_heads as i64)),
        ("q_num_heads", Attr::Int(heads as i64)),
    ];
    if c.softcap {
        attrs.push(("softcap", Attr::Float(2.5)));
    }
    if c.scale {
        attrs.push(("scale", Attr::Float(0.3)));
    }
    let ins = [&q, &k, &v, &mask, "", "", &nonpad];
    b.node("", "Attention", &ins, attrs, vec!["y".into()]);
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn tensor_scatter_to_scatternd(
        sizes in (1usize..3, 1usize..7, 1usize..4)
            .prop_flat_map(|(b, n, w)| (Just(b), Just(n), 1..=n, Just(w))),
        axis in prop_oneof![Just(None), Just(Some(1i64)), Just(Some(-2))],
        mode in prop_oneof![Just(None), Just(Some("linear"))],
        seed in any::<u64>(),
    ) {
        let (batch, slots, seq, _) = sizes;
        let graph = tensor_scatter_graph(sizes, axis, mode);
        let mut rng = Rng::new(seed);
        let mut inputs = inputs_for(&graph, 1, &mut rng);
        // Every row's write index keeps its update inside the cache.
        let starts = (0..batch).map(|_| rng.below((slots - seq + 1) as u64) as i64).collect();
        inputs.insert("write_indices".into(), Tensor::int(DType::I64, vec![batch], starts));
        prove_on("tensor-scatter-to-scatternd", "qnn", graph, inputs, 0.0)?;
    }

    #[test]
    fn decompose_attention_nonpad(
        case in attention_case(),
        total in 1usize..7,
        seed in any::<u64>(),
    ) {
        let case = AttentionCase { past: None, ..case };
        let graph = nonpad_attention_graph(case, total);
        let mut rng = Rng::new(seed);
        let mut inputs = inputs_for(&graph, 1, &mut rng);
        // Any number of valid slots, none included (a row then attends to nothing).
        let valid = (0..case.batch).map(|_| rng.below(total as u64 + 1) as i64).collect();
        inputs.insert("nonpad_kv_seqlen".into(), Tensor::int(DType::I64, vec![case.batch], valid));
        prove_on("decompose-attention-nonpad", "qnn", graph, inputs, 1e-5)?;
    }
}
