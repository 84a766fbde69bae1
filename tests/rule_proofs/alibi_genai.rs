//! Proof of `export-alibi-attention` (`rewrites/fusion/alibi_genai.rules`), which holds under
//! onnxruntime-genai's KV-cache contract only (`--kv-cache genai`): on inputs that follow it
//! (0/1 masks, a right-padded prompt without past, or a step whose rows are all full, so every
//! query sees at least key 0), the Attention over the bias `mobius build` writes computes what
//! the export's does. The graphs spell the bias as optimum-onnx exports BLOOM (`Add(A, M)`)
//! and Falcon-ALiBi (`Where(Less(M, c), f, Div(A, d))`), `M` transformers' float 4-D mask.

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder, TensorData};
use mobius::ops::Tensor;
use mobius::opt::KvCache;
use proptest::prelude::*;

use super::gqa_genai::{float_mask, Miss};
use super::{contract_lengths, export_io, export_sizes, optimized_under, ExportIo};
use super::{decoder_dims, dims, prove_on, random_tensor};

/// One exported ALiBi attention block.
#[derive(Debug, Clone)]
struct Case {
    batch: usize,
    seq: usize,
    past: usize,
    kv_heads: usize,
    group: usize,
    head_dim: usize,
    /// Falcon's `Where(Less(M, c), f, Div(A, d))` instead of BLOOM's `Add(A, M)`.
    falcon: bool,
    /// BLOOM's `Add(M, A)` instead of `Add(A, M)`.
    swapped: bool,
    /// The graph has `input_ids` `[B, S]` (the bias then takes its rows from it, one shape for
    /// every layer).
    ids: bool,
}

/// How a near miss differs from the export's bias.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Near {
    None,
    /// Falcon's divisor 3, not a power of two (`(s · x) / 3 ≠ (s / 3) · x` in general).
    Divisor,
    /// The ALiBi positions counted from another mask input than the padding mask's.
    OtherMask,
    /// Falcon's fill −1e4 instead of ≤ −FLT_MAX (masked keys keep a weight).
    SoftFill,
    /// BLOOM's mask filled with −1e4 (an additive bias, not a mask).
    SoftMask,
}

/// The export's block: ALiBi bias and float mask over `attention_mask`, the opset-23
/// Attention on 3-D q/k/v with the cache; dims as a decoder's.
fn block(c: &Case, near: Near) -> Graph {
    let (bsz, s, p, d) = (c.batch, c.seq, c.past, c.head_dim);
    let (kvh, h) = (c.kv_heads, c.kv_heads * c.group);
    let t = p + s;
    let mut b = GraphBuilder::new("g");
    let mask = b.input("attention_mask", DType::I64, dims(&[bsz, t]));
    let other = if near == Near::OtherMask {
        b.input("other_mask", DType::I64, dims(&[bsz, t]))
    } else {
        mask.clone()
    };
    if c.ids {
        b.input("input_ids", DType::I64, dims(&[bsz, s]));
    }
    let ExportIo { q, k, v, pk, pv } = export_io(&mut b, (bsz, s, p), (h, kvh, d));

    let [batch0, seq0, past0, total0] = export_sizes(&mut b, (&pk, &pv), &q);
    let miss = if near == Near::SoftMask {
        Miss::SoftBias
    } else {
        Miss::None
    };
    let m = float_mask(&mut b, &mask, [&batch0, &seq0, &past0, &total0], miss);

    // build_alibi_tensor: slopes[:, None] · ((cumsum(m, -1) − 1) · m)[:, None, :], [B, H, T],
    // then [B, H, 1, T].
    let one = b.scalar_i64(1);
    let counts = b.op("CumSum", &[&other, &one], vec![]);
    let counts = b.op("Sub", &[&counts, &one], vec![]);
    let positions = b.op("Mul", &[&counts, &other], vec![]);
    let axis1 = b.const_i64(&[1]);
    let positions = b.op("Unsqueeze", &[&positions, &axis1], vec![]);
    let to_f32 = ("to", Attr::Int(DType::F32.onnx_code() as i64));
    let positions = b.op("Cast", &[&positions], vec![to_f32]);
    let base = 2f32.powf(-8.0 / h as f32);
    let slopes: Vec<f32> = (1..=h).map(|i| base.powi(i as i32)).collect();
    let slopes = b.constant(TensorData::from_f32(vec![h, 1], &slopes));
    let alibi = b.op("Mul", &[&slopes, &positions], vec![]);
    let axis2 = b.const_i64(&[2]);
    let alibi = b.op("Unsqueeze", &[&alibi, &axis2], vec![]);

    let bias = if c.falcon {
        let below = b.constant(TensorData::from_f32(vec![], &[-1.0]));
        let masked = b.op("Less", &[&m, &below], vec![]);
        let fill = if near == Near::SoftFill {
            -1e4
        } else {
            -f32::MAX
        };
        let fill = b.constant(TensorData::from_f32(vec![], &[fill]));
        let d = if near == Near::Divisor { 3.0 } else { 4.0 };
        let d = b.constant(TensorData::from_f32(vec![], &[d]));
        let scaled = b.op("Div", &[&alibi, &d], vec![]);
        b.op("Where", &[&masked, &fill, &scaled], vec![])
    } else if c.swapped {
        b.op("Add", &[&m, &alibi], vec![])
    } else {
        b.op("Add", &[&alibi, &m], vec![])
    };
    b.node(
        "",
        "Attention",
        &[&q, &k, &v, &bias, &pk, &pv],
        vec![
            ("kv_num_heads", Attr::Int(kvh as i64)),
            ("q_num_heads", Attr::Int(h as i64)),
            ("scale", Attr::Float((d as f32).powf(-0.5))),
        ],
        vec!["y".into(), "present.0.key".into(), "present.0.value".into()],
    );
    let mut g = decoder_dims(b.finish());
    let shape = g.inputs[0].shape.clone();
    for i in g.inputs.iter_mut().filter(|i| i.name == "other_mask") {
        i.shape = shape.clone();
    }
    g
}

/// Inputs of `c`'s block (`lengths`: each row's valid tokens, past included).
fn feeds(c: &Case, lengths: &[usize], seed: u64) -> HashMap<String, Tensor> {
    let (bsz, s, p, d) = (c.batch, c.seq, c.past, c.head_dim);
    let (kvh, h) = (c.kv_heads, c.kv_heads * c.group);
    let t = p + s;
    let mut rng = Rng::new(seed);
    let mut f = |shape: &[usize]| random_tensor(DType::F32, shape, &mut rng);
    let mask: Vec<i64> = lengths
        .iter()
        .flat_map(|&l| (0..t).map(move |j| i64::from(j < l)))
        .collect();
    let ids = Tensor::int(DType::I64, vec![bsz, s], vec![0; bsz * s]);
    let mut feeds = HashMap::from([
        (
            "attention_mask".into(),
            Tensor::int(DType::I64, vec![bsz, t], mask.clone()),
        ),
        (
            "other_mask".into(),
            Tensor::int(DType::I64, vec![bsz, t], mask),
        ),
        ("q".into(), f(&[bsz, s, h * d])),
        ("k".into(), f(&[bsz, s, kvh * d])),
        ("v".into(), f(&[bsz, s, kvh * d])),
        ("past_key_values.0.key".into(), f(&[bsz, kvh, p, d])),
        ("past_key_values.0.value".into(), f(&[bsz, kvh, p, d])),
    ]);
    if c.ids {
        feeds.insert("input_ids".into(), ids);
    }
    feeds
}

/// A block and the row lengths of inputs that follow the contract: without past, rows
/// right-padded to any length from 1 to `seq` (every query sees key 0); with past, every row
/// full.
fn contract_case() -> impl Strategy<Value = (Case, Vec<usize>, u64)> {
    (
        (1usize..3, 1usize..5, 0usize..4),
        (
            1usize..3,
            1usize..3,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        prop::collection::vec(0usize..8, 2),
        any::<u64>(),
    )
        .prop_map(
            |((batch, seq, past), (kv_heads, group, falcon, swapped, ids), lens, seed)| {
                // Two heads at least: one head's slope is not read (its axis is not told apart
                // from the axes of extent 1), and the rule declines it.
                let group = if kv_heads * group == 1 { 2 } else { group };
                let c = Case {
                    batch,
                    seq,
                    past,
                    kv_heads,
                    group,
                    head_dim: 16,
                    falcon,
                    swapped,
                    ids,
                };
                let lengths = contract_lengths(batch, seq, past, &lens);
                (c, lengths, seed)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The Attention over the build's ALiBi bias (`is_causal=1`) equals the export's on inputs
    /// that follow the contract.
    #[test]
    fn export_alibi_attention((c, lengths, seed) in contract_case()) {
        let g = block(&c, Near::None);
        prove_on("export-alibi-attention", "cpu", g, feeds(&c, &lengths, seed), 1e-4)?;
    }
}

/// Whether `g`'s Attention has `is_causal=1` (the rewrite's).
pub(super) fn causal(g: &Graph) -> bool {
    g.nodes
        .iter()
        .filter(|n| n.op_type == "Attention")
        .any(|n| matches!(n.attrs.get("is_causal"), Some(Attr::Int(1))))
}

/// Only under `--kv-cache genai` is the bias rewritten; its near misses are not.
#[test]
fn alibi_near_misses_are_not_rewritten() {
    for falcon in [false, true] {
        let c = Case {
            batch: 2,
            seq: 4,
            past: 0,
            kv_heads: 2,
            group: 2,
            head_dim: 16,
            falcon,
            swapped: false,
            ids: false,
        };
        let g = block(&c, Near::None);
        assert!(
            !causal(&optimized_under(&g, KvCache::AsIs)),
            "falcon {falcon}"
        );
        assert!(
            causal(&optimized_under(&g, KvCache::Genai)),
            "falcon {falcon}"
        );
        let misses: &[Near] = if falcon {
            &[Near::Divisor, Near::OtherMask, Near::SoftFill]
        } else {
            &[Near::OtherMask, Near::SoftMask]
        };
        for &near in misses {
            let g = block(&c, near);
            assert!(!causal(&optimized_under(&g, KvCache::Genai)), "{near:?}");
        }
    }
}
