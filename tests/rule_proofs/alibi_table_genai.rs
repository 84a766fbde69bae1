//! Proof of `export-alibi-attention` (`rewrites/fusion/alibi_genai.rules`) on MPT's spelling
//! (read by `genai_contract::table_export_bias`): the bias `Where(Cast_bool(M), −FLT_MAX,
//! Slice(table, L − T, ∞, −1))`, `table` `[H, 1, L]` of rows `slope_h · (k − (L − 1))`, `M`
//! transformers' legacy float 4-D mask (`_prepare_4d_causal_attention_mask`).
//!
//! The table is computed as torch computes it, each entry the f32 product
//! `fl32(s_h · f32(k − (L − 1)))` of MPT's f32 slopes (`build_mpt_alibi_tensor`); the head
//! counts drawn include ones whose slopes are not powers of two (12, 24, 32 heads: `2^(−i/2)`,
//! `2^(−i/4)`), whose rows are then not exactly on a line.
//!
//! The contract the rule holds under (onnxruntime-genai's, `--kv-cache genai`), the inputs
//! drawn here: 0/1 masks; a right-padded prompt without past, or a step whose rows are all
//! full (every visible key's position is its cache index); at most `L` keys (genai's context
//! length is the model's `max_seq_len`, the table's length). The build's positions
//! `CumSum(m) − 1` then differ from the table's `L − T + j − (L − 1)` by a constant along each
//! row, which softmax does not see.

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder, TensorData};
use mobius::ops::Tensor;
use mobius::opt::KvCache;
use proptest::prelude::*;

use super::alibi_genai::causal;
use super::{contract_lengths, export_io, export_sizes, optimized_under, ExportIo};
use super::{decoder_dims, dims, prove_on, random_tensor};

/// One exported MPT attention block.
#[derive(Debug, Clone)]
struct Case {
    batch: usize,
    seq: usize,
    past: usize,
    heads: usize,
    head_dim: usize,
    /// The table's length `L` (≥ the keys).
    table: usize,
}

/// How a near miss differs from the export's bias.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Near {
    None,
    /// One entry of the table off its line (not ALiBi).
    Bent,
    /// One entry of the table one ulp from its rounded product `fl32(s_h · f32(k − c))`.
    Ulp,
    /// Rows `−s_h · (k − c)²`: 0 at `c` and `−s_h` at `c − 1` as ALiBi's, not linear.
    Curved,
    /// The table sliced from `L − T + 1` (not the keys' cache indices).
    Start,
    /// The past keys of the causal part filled with −FLT_MAX (hidden), not 0.
    HiddenPast,
    /// The bias's fill −1e4 (masked keys keep a weight).
    SoftFill,
}

/// `x` as a 1-D tensor of one element.
fn row(b: &mut GraphBuilder, x: &str) -> String {
    let minus1 = b.const_i64(&[-1]);
    b.op("Reshape", &[x, &minus1], vec![])
}

/// `ConstantOfShape(shape, value)` (f32).
fn filled(b: &mut GraphBuilder, shape: &str, value: f32) -> String {
    let value = TensorData::from_f32(vec![1], &[value]);
    b.op(
        "ConstantOfShape",
        &[shape],
        vec![("value", Attr::Tensor(value))],
    )
}

/// `Cast(x, to)`.
fn cast(b: &mut GraphBuilder, x: &str, to: DType) -> String {
    b.op("Cast", &[x], vec![("to", Attr::Int(to.onnx_code() as i64))])
}

/// transformers' `_prepare_4d_causal_attention_mask` as MPT's export spells it: the causal
/// part `Where(Range(S) < Range(S) + 1 as a column, 0, full(−FLT_MAX))` after `P` zeros,
/// expanded to `[B, 1, S, T]`, masked where the inverted padding `1 − m` is nonzero.
fn converter_mask(b: &mut GraphBuilder, mask: &str, sizes: [&str; 4], near: Near) -> String {
    let [batch0, seq0, past0, total0] = sizes;
    let (batch1, seq1, past1, total1) =
        (row(b, batch0), row(b, seq0), row(b, past0), row(b, total0));
    let axis0 = ("axis", Attr::Int(0));
    let square = b.op("Concat", &[&seq1, &seq1], vec![axis0.clone()]);
    let full = filled(b, &square, -f32::MAX);
    let (zero, one) = (b.scalar_i64(0), b.scalar_i64(1));
    let cond = b.op("Range", &[&zero, seq0, &one], vec![]);
    let next = b.op("Add", &[&cond, &one], vec![]);
    let one1 = b.const_i64(&[1]);
    let column = b.op("Concat", &[&seq1, &one1], vec![axis0.clone()]);
    let next = b.op("Reshape", &[&next, &column], vec![]);
    let less = b.op("Less", &[&cond, &next], vec![]);
    let zero_f = b.constant(TensorData::from_f32(vec![], &[0.0]));
    let causal = b.op("Where", &[&less, &zero_f, &full], vec![]);
    let past_shape = b.op("Concat", &[&seq1, &past1], vec![axis0.clone()]);
    let past_fill = if near == Near::HiddenPast {
        -f32::MAX
    } else {
        0.0
    };
    let past = filled(b, &past_shape, past_fill);
    let causal = b.op("Concat", &[&past, &causal], vec![("axis", Attr::Int(-1))]);
    let axis_0 = b.const_i64(&[0]);
    let axis_1 = b.const_i64(&[1]);
    let axis_2 = b.const_i64(&[2]);
    let causal = b.op("Unsqueeze", &[&causal, &axis_0], vec![]);
    let causal = b.op("Unsqueeze", &[&causal, &axis_1], vec![]);
    let full4 = b.op(
        "Concat",
        &[&batch1, &one1, &seq1, &total1],
        vec![axis0.clone()],
    );
    let causal = b.op("Expand", &[&causal, &full4], vec![]);
    let padding = b.op("Unsqueeze", &[mask, &axis_1], vec![]);
    let padding = b.op("Unsqueeze", &[&padding, &axis_2], vec![]);
    let padding = b.op("Expand", &[&padding, &full4], vec![]);
    let padding = cast(b, &padding, DType::F32);
    let one_f = b.constant(TensorData::from_f32(vec![], &[1.0]));
    let inverted = b.op("Sub", &[&one_f, &padding], vec![]);
    let lowest = b.constant(TensorData::from_f32(vec![], &[-f32::MAX]));
    let off = cast(b, &inverted, DType::Bool);
    let inverted = b.op("Where", &[&off, &lowest, &inverted], vec![]);
    let off = cast(b, &inverted, DType::Bool);
    b.op("Where", &[&off, &lowest, &causal], vec![])
}

/// The export's block: MPT's ALiBi table and mask over `attention_mask`, the opset-23
/// Attention on 3-D q/k/v with the cache; dims as a decoder's.
fn block(c: &Case, near: Near) -> Graph {
    let (bsz, s, p, d, h) = (c.batch, c.seq, c.past, c.head_dim, c.heads);
    let t = p + s;
    let mut b = GraphBuilder::new("g");
    let mask = b.input("attention_mask", DType::I64, dims(&[bsz, t]));
    let ExportIo { q, k, v, pk, pv } = export_io(&mut b, (bsz, s, p), (h, h, d));

    let [batch0, seq0, past0, total0] = export_sizes(&mut b, (&pk, &pv), &q);
    let m = converter_mask(&mut b, &mask, [&batch0, &seq0, &past0, &total0], near);
    let masked = cast(&mut b, &m, DType::Bool);

    // build_mpt_alibi_tensor: slopes[h] · (k − (L − 1)), [H, 1, L], sliced to the last T.
    let l = c.table;
    let mut table = Vec::with_capacity(h * l);
    for slope in mpt_slopes(h) {
        // int32 arange(1 − L, 1) times the f32 slope, rounded to f32.
        let n = |k: usize| (k as i32 - (l - 1) as i32) as f32;
        match near {
            Near::Curved => table.extend((0..l).map(|k| -slope * (n(k) * n(k)))),
            _ => table.extend((0..l).map(|k| slope * n(k))),
        }
    }
    match near {
        Near::Bent => table[1] += 0.5,
        Near::Ulp => {
            // The first row's entry at k − c = −3 (for 32 heads a rounded product, of
            // 2^(−1/4)).
            let at = l - 4;
            table[at] = f32::from_bits(table[at].to_bits() + 1);
        }
        _ => {}
    }
    let table = b.constant(TensorData::from_f32(vec![h, 1, l], &table));
    let length = b.scalar_i64(l as i64 + i64::from(near == Near::Start));
    let start = b.op("Sub", &[&length, &total0], vec![]);
    let axis_0 = b.const_i64(&[0]);
    let start = b.op("Unsqueeze", &[&start, &axis_0], vec![]);
    let (end, axes, steps) = (
        b.const_i64(&[i64::MAX]),
        b.const_i64(&[2]),
        b.const_i64(&[1]),
    );
    let alibi = b.op("Slice", &[&table, &start, &end, &axes, &steps], vec![]);
    let fill = if near == Near::SoftFill {
        -1e4
    } else {
        -f32::MAX
    };
    let fill = b.constant(TensorData::from_f32(vec![], &[fill]));
    let bias = b.op("Where", &[&masked, &fill, &alibi], vec![]);
    b.node(
        "",
        "Attention",
        &[&q, &k, &v, &bias, &pk, &pv],
        vec![
            ("kv_num_heads", Attr::Int(h as i64)),
            ("q_num_heads", Attr::Int(h as i64)),
            ("scale", Attr::Float((d as f32).powf(-0.5))),
        ],
        vec!["y".into(), "present.0.key".into(), "present.0.value".into()],
    );
    decoder_dims(b.finish())
}

/// MPT's slopes as transformers computes them in f32 (`build_mpt_alibi_tensor`,
/// `alibi_bias_max` 8): `1 / 2^(k · (8 / H'))` for `k` in `1..=H'`, `H'` the power of two at
/// least `heads`; when `H' ≠ heads`, the odd-indexed ones (`slopes[1::2]`) then the
/// even-indexed, the first `heads`.
fn mpt_slopes(heads: usize) -> Vec<f32> {
    let wide = heads.next_power_of_two();
    let slopes: Vec<f32> = (1..=wide)
        .map(|k| 1.0 / 2f32.powf(k as f32 * (8.0 / wide as f32)))
        .collect();
    if wide == heads {
        return slopes;
    }
    let odd = slopes.iter().skip(1).step_by(2);
    let even = slopes.iter().step_by(2);
    odd.chain(even).take(heads).copied().collect()
}

/// Inputs of `c`'s block (`lengths`: each row's valid tokens, past included).
fn feeds(c: &Case, lengths: &[usize], seed: u64) -> HashMap<String, Tensor> {
    let (bsz, s, p, d, h) = (c.batch, c.seq, c.past, c.head_dim, c.heads);
    let t = p + s;
    let mut rng = Rng::new(seed);
    let mut f = |shape: &[usize]| random_tensor(DType::F32, shape, &mut rng);
    let mask: Vec<i64> = lengths
        .iter()
        .flat_map(|&l| (0..t).map(move |j| i64::from(j < l)))
        .collect();
    HashMap::from([
        (
            "attention_mask".into(),
            Tensor::int(DType::I64, vec![bsz, t], mask),
        ),
        ("q".into(), f(&[bsz, s, h * d])),
        ("k".into(), f(&[bsz, s, h * d])),
        ("v".into(), f(&[bsz, s, h * d])),
        ("past_key_values.0.key".into(), f(&[bsz, h, p, d])),
        ("past_key_values.0.value".into(), f(&[bsz, h, p, d])),
    ])
}

/// A block and the row lengths of inputs that follow the contract: without past, rows
/// right-padded to any length from 1 to `seq`; with past, every row full; the table at least
/// as long as the keys.
fn contract_case() -> impl Strategy<Value = (Case, Vec<usize>, u64)> {
    (
        (1usize..3, 1usize..5, 0usize..4),
        (
            prop::sample::select(vec![2usize, 3, 4, 5, 6, 12, 24, 32]),
            0usize..10,
        ),
        prop::collection::vec(0usize..8, 2),
        any::<u64>(),
    )
        .prop_map(|((batch, seq, past), (heads, extra), lens, seed)| {
            let c = Case {
                batch,
                seq,
                past,
                heads,
                head_dim: if heads > 8 { 2 } else { 8 },
                table: (past + seq + extra).max(2),
            };
            let lengths = contract_lengths(batch, seq, past, &lens);
            (c, lengths, seed)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The Attention over the build's ALiBi bias (`is_causal=1`) equals the export's MPT bias
    /// on inputs that follow the contract.
    #[test]
    fn export_table_alibi_attention((c, lengths, seed) in contract_case()) {
        let g = block(&c, Near::None);
        prove_on("export-alibi-attention", "cpu", g, feeds(&c, &lengths, seed), 1e-4)?;
    }
}

/// Whether some entry of `heads`' table of length `l` is a rounded product, not `s · n`
/// exactly (the rows then not exactly on a line).
fn rounded(heads: usize, l: usize) -> bool {
    mpt_slopes(heads).iter().any(|&s| {
        (0..l).any(|k| {
            let n = k as i32 - (l - 1) as i32;
            f64::from(s * n as f32) != f64::from(s) * f64::from(n)
        })
    })
}

/// The head counts drawn: powers of two as slopes for 2–6 heads, rounded products for 12, 24
/// and 32 (MPT-7B's).
#[test]
fn mpt_slopes_round_for_twelve_and_more_heads() {
    for heads in [2, 3, 4, 5, 6] {
        assert!(!rounded(heads, 16), "{heads}");
    }
    for heads in [12, 24, 32] {
        assert!(rounded(heads, 8), "{heads}");
    }
    // Near::Ulp's entry for 32 heads.
    let s = mpt_slopes(32)[0];
    assert_ne!(f64::from(s * -3.0), f64::from(s) * -3.0);
    assert_eq!(
        mpt_slopes(6),
        [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]
    );
}

/// Only under `--kv-cache genai` is MPT's bias rewritten; its near misses are not, with
/// slopes that are powers of two (4 heads) or not (32 heads).
#[test]
fn table_alibi_near_misses_are_not_rewritten() {
    for (heads, head_dim) in [(4, 8), (32, 2)] {
        let c = Case {
            batch: 2,
            seq: 3,
            past: 2,
            heads,
            head_dim,
            table: 8,
        };
        let g = block(&c, Near::None);
        assert!(!causal(&optimized_under(&g, KvCache::AsIs)), "{heads}");
        assert!(causal(&optimized_under(&g, KvCache::Genai)), "{heads}");
        let nears = [
            Near::Bent,
            Near::Ulp,
            Near::Curved,
            Near::Start,
            Near::HiddenPast,
            Near::SoftFill,
        ];
        for near in nears {
            let g = block(&c, near);
            assert!(
                !causal(&optimized_under(&g, KvCache::Genai)),
                "{heads} {near:?}"
            );
        }
    }
}
