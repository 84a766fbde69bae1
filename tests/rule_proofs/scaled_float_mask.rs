//! Proofs of the scaled float-mask reading of `export-attention-to-gqa`
//! (`genai_contract::scaled_float_export_mask`): transformers' float 4-D causal mask `M`
//! divided by a constant `c` (CodeGen's `Softmax((q·kᵀ + M) / c)`, read by
//! `scaled-after-mask` as `q·kᵀ / c + M / c`) is read as `M` for `1 ≤ c ≤ 2^24`; the
//! rewritten graph computes what the export does on inputs that follow genai's contract, and
//! divisors outside the bound are not read (`c < 1` overflows −FLT_MAX to −∞, and `c` near
//! `2^126` weights the masked keys, through the interpreter).

use std::collections::HashMap;

use mobius::interp::{run_graph, Rng};
use mobius::ir::{Attr, DType, Graph, GraphBuilder};
use mobius::ops::Tensor;
use mobius::opt::{KvCache, OptimizeOptions};
use mobius::weights::eval::Evaluator;
use proptest::prelude::*;

use super::common::compare::max_abs_diff;
use super::gqa_genai::{float_mask, Miss};
use super::{contract_lengths, export_io, export_sizes, ExportIo};
use super::{
    decoder_dims, dims, model, optimize_with_rules, options, prove_on, random_tensor, scalar,
};

/// One exported attention block's sizes and the mask's divisor.
#[derive(Debug, Clone)]
struct Case {
    batch: usize,
    seq: usize,
    past: usize,
    kv_heads: usize,
    group: usize,
    head_dim: usize,
    divisor: f32,
}

/// The export's attention block: `M` (transformers' float causal padding mask over
/// `attention_mask`, [`float_mask`]), `Div(M, c)` as the Attention's mask, the opset-23
/// Attention on 3-D q/k/v with the cache; dims as a decoder's.
fn block(c: &Case) -> Graph {
    let (bsz, s, p, d) = (c.batch, c.seq, c.past, c.head_dim);
    let (kvh, h) = (c.kv_heads, c.kv_heads * c.group);
    let t = p + s;
    let mut b = GraphBuilder::new("g");
    let ids = b.input("input_ids", DType::I64, dims(&[bsz, s]));
    let mask = b.input("attention_mask", DType::I64, dims(&[bsz, t]));
    let ExportIo { q, k, v, pk, pv } = export_io(&mut b, (bsz, s, p), (h, kvh, d));
    let [batch0, seq0, past0, total0] = export_sizes(&mut b, (&pk, &pv), &ids);
    let m = float_mask(&mut b, &mask, [&batch0, &seq0, &past0, &total0], Miss::None);
    let divisor = scalar(&mut b, c.divisor);
    let bias = b.op("Div", &[&m, &divisor], vec![]);
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
    decoder_dims(b.finish())
}

/// Inputs with rows of `lengths` valid keys (right-padded), random q/k/v and cache.
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
    HashMap::from([
        (
            "input_ids".into(),
            Tensor::int(DType::I64, vec![bsz, s], vec![0; bsz * s]),
        ),
        (
            "attention_mask".into(),
            Tensor::int(DType::I64, vec![bsz, t], mask),
        ),
        ("q".into(), f(&[bsz, s, h * d])),
        ("k".into(), f(&[bsz, s, kvh * d])),
        ("v".into(), f(&[bsz, s, kvh * d])),
        ("past_key_values.0.key".into(), f(&[bsz, kvh, p, d])),
        ("past_key_values.0.value".into(), f(&[bsz, kvh, p, d])),
    ])
}

/// A block with a divisor in `[1, 2^24]` (CodeGen's √D among them) and the row lengths of
/// inputs that follow the contract: without past, rows right-padded to any length from 1 to
/// `seq`; with past, every row full.
fn contract_case() -> impl Strategy<Value = (Case, Vec<usize>, u64)> {
    (
        (1usize..3, 1usize..5, 0usize..4),
        (1usize..3, 1usize..3, prop_oneof![Just(16usize), Just(64)]),
        prop_oneof![
            Just(1.0f32),
            Just(4.0),
            Just(8.0),
            Just(16.0),
            Just(16_777_216.0),
            1.0f32..16_777_216.0
        ],
        prop::collection::vec(0usize..8, 2),
        any::<u64>(),
    )
        .prop_map(
            |((batch, seq, past), (kv_heads, group, head_dim), divisor, lens, seed)| {
                let c = Case {
                    batch,
                    seq,
                    past,
                    kv_heads,
                    group,
                    head_dim,
                    divisor,
                };
                let lengths = contract_lengths(batch, seq, past, &lens);
                (c, lengths, seed)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// GroupQueryAttention equals the export whose mask is `M / c` on inputs that follow the
    /// contract.
    #[test]
    fn scaled_float_mask_to_gqa((c, lengths, seed) in contract_case()) {
        let g = block(&c);
        prove_on("export-attention-to-gqa", "cpu", g, feeds(&c, &lengths, seed), 1e-4)?;
    }
}

fn base(divisor: f32) -> Case {
    Case {
        batch: 2,
        seq: 4,
        past: 0,
        kv_heads: 2,
        group: 2,
        head_dim: 16,
        divisor,
    }
}

fn gqa_count(g: &Graph) -> usize {
    let opts = OptimizeOptions {
        kv_cache: KvCache::Genai,
        ..options(None)
    };
    let rules = mobius::rulebook::rules().unwrap().rules;
    let cpu = mobius::ep::get_ep("cpu").unwrap();
    let out = optimize_with_rules(&model(g.clone()), &cpu, &opts, &rules)
        .unwrap()
        .0
        .graph;
    out.op_counts()
        .get("com.microsoft::GroupQueryAttention")
        .copied()
        .unwrap_or(0)
}

fn outputs(g: &Graph, inputs: &HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    run_graph(g, inputs, &mut Evaluator::new(None)).unwrap()
}

/// The bound is where the export itself changes: within it `M / c` gives the outputs of `M`
/// bit for bit (the masked keys' weights are exactly 0 either way); `c = 2^126` leaves the
/// masked scores near −4 (weighted). `c = 1/2` would overflow −FLT_MAX to −∞. Divisors
/// outside `[1, 2^24]` are not read.
#[test]
fn divisors_outside_the_bound_are_not_read() {
    let right = feeds(&base(1.0), &[2, 4], 7);
    let exact = outputs(&block(&base(1.0)), &right);
    for c in [4.0f32, 3.0, 16_777_216.0] {
        let y = outputs(&block(&base(c)), &right);
        assert_eq!(max_abs_diff(&exact["y"], &y["y"]), 0.0, "c = {c}");
        assert_eq!(gqa_count(&block(&base(c))), 1, "c = {c}");
    }
    let far = outputs(&block(&base(2f32.powi(126))), &right);
    assert!(max_abs_diff(&exact["y"], &far["y"]) > 1e-3);
    for c in [0.5f32, 0.999, 16_777_218.0, 2f32.powi(126), -4.0] {
        assert_eq!(gqa_count(&block(&base(c))), 0, "c = {c}");
    }
}
