//! Proofs of the GroupQueryAttention rules for exports (`rewrites/fusion/gqa_genai.rules`),
//! which hold under onnxruntime-genai's KV-cache contract only (`--kv-cache genai`): on
//! inputs that follow it (a right-padded prompt without past, or a step whose rows are all
//! full), the rewritten graph computes what the export does; outside it (a left-padded prompt,
//! a step after a right-padded prompt in the export's own cache layout) it does not, which is
//! why the rules are opt-in. The graphs spell the mask as torch.onnx (dynamo) exports write it.

use std::collections::HashMap;

use super::{contract_lengths, export_io, optimized_under, ExportIo};
use mobius::interp::{run_graph, Rng};
use mobius::ir::{Attr, DType, Graph, GraphBuilder, TensorData};
use mobius::opt::KvCache;
use mobius::weights::eval::Evaluator;
use proptest::prelude::*;

use super::common::compare::max_abs_diff;
use super::{decoder_dims, dims, prove_on, random_tensor, rule, scalar};
use mobius::ops::Tensor;

/// One exported attention block.
#[derive(Debug, Clone)]
struct Case {
    batch: usize,
    seq: usize,
    past: usize,
    kv_heads: usize,
    group: usize,
    head_dim: usize,
    /// RoPE on q and k from `position_ids` (`Some(rotary width)`), or none.
    rope: Option<usize>,
    /// The sliding window of the mask (`Greater(key, position − W)`).
    window: Option<usize>,
    /// The TorchScript exporter's spellings (optimum-onnx's exports): the padding gathered from
    /// `Flatten(attention_mask ≠ 0)` at the flat index `batch · T + key` and reshaped back, the
    /// angles `Transpose(MatMul(inv_freq [1, r/2, 1] expanded, Cast(Unsqueeze(position_ids,
    /// [1]))))` scaled by 1; else torch.onnx dynamo's (`GatherND`, `Mul`).
    torchscript: bool,
    /// With `torchscript` RoPE: no `position_ids` input; the positions computed from the past
    /// length, `Unsqueeze(Range(P, P + S), [0])` `[1, S]` (optimum's exports of gemma,
    /// nemotron), the angles `[1, S, r/2]` and the caches expanded to the batch (as the rotary
    /// recognition writes them for such tables).
    past_positions: bool,
    /// transformers' float 4-D causal mask instead of the boolean one (optimum's exports of
    /// OPT, Nemotron, StableLM, GPT-J, CodeGen): `full((S, T), −FLT_MAX)`, `Trilu(upper, 1)`,
    /// times `Cast(Range(T) > Range(P, P + S)[:, None])`, expanded to `[B, 1, S, T]`, the
    /// padding (`causal + attention_mask == 0`) written back by `ScatterND` over the full index
    /// grid. No window.
    float_mask: bool,
    /// GPT-Neo's eager mask on top (optimum's export, as `masked-scores-to-attention` reads
    /// it): `Where(keep, 0, −FLT_MAX) + mask`, `keep` = `Slice(Slice(buffer, [T − S], [T],
    /// axes [2]), [0], [T], axes [3])` of a constant `[1, 1, N, N]` bool buffer, `Some((N,
    /// W))`: `c ≤ r`, and `r − c < W` when `W` is given (a local layer).
    buffer: Option<(usize, Option<usize>)>,
}

/// How a near miss differs from the export's mask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Miss {
    None,
    /// `Less` instead of `LessOrEqual`: a query does not see itself.
    StrictlyCausal,
    /// The query positions without the past length.
    NoPastOffset,
    /// The padding gathered at (batch, query) instead of (batch, key) (index pair swapped).
    PaddingOfQueries,
    /// Masked with −1e4, not −FLT_MAX (an additive bias, not a mask).
    SoftBias,
    /// Positions computed from 0, not the past length (the mask as the export's).
    PositionsFromZero,
    /// The buffer strictly lower-triangular (`c < r`).
    BufferStrict,
    /// The buffer's rows sliced `[0 : S]`, not `[T − S : T]`.
    BufferRowsFromZero,
    /// One element of the buffer flipped (row 1 does not see key 0).
    BufferFlipped,
    /// The buffer's `Where` fills with −1e4, not −FLT_MAX.
    BufferSoftFill,
}

/// The export's attention block: the mask subgraph of `attention_mask` (dynamo's spelling),
/// optionally RoPE computed from `position_ids`, the opset-23 Attention on 3-D q/k/v with the
/// cache, outputs `y`, `present.0.key`, `present.0.value`; dims as a decoder's.
fn export_block(c: &Case, miss: Miss) -> Graph {
    decoder_dims(export_graph(c, miss))
}

/// [`export_block`] with the case's sizes as static dims.
fn export_graph(c: &Case, miss: Miss) -> Graph {
    let (bsz, s, p, d) = (c.batch, c.seq, c.past, c.head_dim);
    let (kvh, h) = (c.kv_heads, c.kv_heads * c.group);
    let t = p + s;
    let mut b = GraphBuilder::new("g");
    let ids = b.input("input_ids", DType::I64, dims(&[bsz, s]));
    let mask = b.input("attention_mask", DType::I64, dims(&[bsz, t]));
    let computed = c.past_positions && c.torchscript && c.rope.is_some();
    let pos = if computed {
        String::new()
    } else {
        b.input("position_ids", DType::I64, dims(&[bsz, s]))
    };
    let ExportIo { q, k, v, pk, pv } = export_io(&mut b, (bsz, s, p), (h, kvh, d));

    // Sizes as the export reads them: batch and past from the cache, seq from input_ids.
    let shape = |b: &mut GraphBuilder, x: &str, start: i64| {
        b.op(
            "Shape",
            &[x],
            vec![("start", Attr::Int(start)), ("end", Attr::Int(start + 1))],
        )
    };
    let (batch1, past1, seq1) = (
        shape(&mut b, &pv, 0),
        shape(&mut b, &pk, 2),
        shape(&mut b, &ids, 1),
    );
    let squeeze = |b: &mut GraphBuilder, x: &str| b.op("Squeeze", &[x], vec![]);
    let (batch0, past0, seq0) = (
        squeeze(&mut b, &batch1),
        squeeze(&mut b, &past1),
        squeeze(&mut b, &seq1),
    );
    let total0 = b.op("Add", &[&past0, &seq0], vec![]);
    let (zero, one) = (b.scalar_i64(0), b.scalar_i64(1));
    let unsqueeze = |b: &mut GraphBuilder, x: &str, axes: &[i64]| {
        let axes = b.const_i64(axes);
        b.op("Unsqueeze", &[x, &axes], vec![])
    };
    // Keys [1, 1, 1, T]; query positions (past + i) [1, 1, S, 1]; batch rows [B, 1, 1, 1].
    let keys = b.op("Range", &[&zero, &total0, &one], vec![]);
    let keys = unsqueeze(&mut b, &keys, &[0, 1]);
    let keys = unsqueeze(&mut b, &keys, &[2]);
    let rows = b.op("Range", &[&zero, &seq0, &one], vec![]);
    let rows = if miss == Miss::NoPastOffset {
        rows
    } else {
        b.op("Add", &[&rows, &past0], vec![])
    };
    let rows = unsqueeze(&mut b, &rows, &[0, 1]);
    let rows = unsqueeze(&mut b, &rows, &[3]);
    let compare = if miss == Miss::StrictlyCausal {
        "Less"
    } else {
        "LessOrEqual"
    };
    let causal = b.op(compare, &[&keys, &rows], vec![]);
    let yes = b.constant(TensorData {
        dtype: DType::Bool,
        shape: vec![],
        bytes: vec![1],
    });
    let mut allowed = b.op("And", &[&yes, &causal], vec![]);
    if let Some(w) = c.window {
        let w = b.scalar_i64(w as i64);
        let lowest = b.op("Sub", &[&rows, &w], vec![]);
        let inside = b.op("Greater", &[&keys, &lowest], vec![]);
        let inside = b.op("And", &[&yes, &inside], vec![]);
        allowed = b.op("And", &[&inside, &allowed], vec![]);
    }
    let batch = b.op("Range", &[&zero, &batch0, &one], vec![]);
    let batch = unsqueeze(&mut b, &batch, &[1, 2]);
    let batch = unsqueeze(&mut b, &batch, &[3]);
    let column = if miss == Miss::PaddingOfQueries {
        &rows
    } else {
        &keys
    };
    let widest = b.op("Max", &[&batch, column], vec![]);
    let widest = b.op("Shape", &[&widest], vec![]);
    let index = |b: &mut GraphBuilder, x: &str| {
        let e = b.op("Expand", &[x, &widest], vec![]);
        unsqueeze(b, &e, &[-1])
    };
    let flags = b.op(
        "Cast",
        &[&mask],
        vec![("to", Attr::Int(DType::Bool.onnx_code() as i64))],
    );
    let padding = if c.torchscript {
        let width = b.op(
            "Shape",
            &[&flags],
            vec![("start", Attr::Int(1)), ("end", Attr::Int(2))],
        );
        let flat = b.op("Flatten", &[&flags], vec![("axis", Attr::Int(2))]);
        let scaled = b.op("Mul", &[&batch, &width], vec![]);
        let at = b.op("Add", &[column, &scaled], vec![]);
        let picked = b.op("Gather", &[&flat, &at], vec![("axis", Attr::Int(0))]);
        let flat_shape = b.const_i64(&[-1]);
        let picked = b.op("Reshape", &[&picked, &flat_shape], vec![]);
        let back = b.op("Shape", &[&at], vec![]);
        b.op("Reshape", &[&picked, &back], vec![])
    } else {
        let (bi, ki) = (index(&mut b, &batch), index(&mut b, column));
        let pairs = b.op("Concat", &[&bi, &ki], vec![("axis", Attr::Int(-1))]);
        b.op(
            "GatherND",
            &[&flags, &pairs],
            vec![("batch_dims", Attr::Int(0))],
        )
    };
    let allowed = b.op("And", &[&allowed, &padding], vec![]);
    let one1 = b.const_i64(&[1]);
    let minus1 = b.const_i64(&[-1]);
    let total1 = b.op("Reshape", &[&total0, &minus1], vec![]);
    let full = b.op(
        "Concat",
        &[&batch1, &one1, &seq1, &total1],
        vec![("axis", Attr::Int(0))],
    );
    let allowed = b.op("Expand", &[&allowed, &full], vec![]);
    let (keep, masked) = (
        scalar(&mut b, 0.0),
        scalar(
            &mut b,
            if miss == Miss::SoftBias {
                -1e4
            } else {
                -f32::MAX
            },
        ),
    );
    let bias = b.op("Where", &[&allowed, &keep, &masked], vec![]);
    let bias = if c.float_mask {
        float_mask(&mut b, &mask, [&batch0, &seq0, &past0, &total0], miss)
    } else {
        bias
    };
    let bias = match c.buffer {
        Some((n, w)) => {
            let keep = sliced_buffer(&mut b, n, w, [&seq0, &total0], miss);
            let fill = scalar(
                &mut b,
                if miss == Miss::BufferSoftFill {
                    -1e4
                } else {
                    -f32::MAX
                },
            );
            let zero = scalar(&mut b, 0.0);
            let masked = b.op("Where", &[&keep, &zero, &fill], vec![]);
            b.op("Add", &[&masked, &bias], vec![])
        }
        None => bias,
    };

    let (q, k) = match c.rope {
        Some(r) => {
            // Angles Cast(Unsqueeze(position_ids, [2])) · inv_freq [B, S, r/2].
            let inv: Vec<f32> = (0..r / 2)
                .map(|i| 10000f32.powf(-(2.0 * i as f32) / r as f32))
                .collect();
            let to_f32 = ("to", Attr::Int(DType::F32.onnx_code() as i64));
            let (cos, sin) = if c.torchscript {
                let inv = b.constant(TensorData::from_f32(vec![1, r / 2, 1], &inv));
                let rows = b.const_i64(&[if computed { 1 } else { bsz as i64 }, 1, 1]);
                let inv = b.op("Expand", &[&inv, &rows], vec![]);
                let pos = if computed {
                    let start = if miss == Miss::PositionsFromZero {
                        &zero
                    } else {
                        &past0
                    };
                    let end = b.op("Add", &[start, &seq0], vec![]);
                    let range = b.op("Range", &[start, &end, &one], vec![]);
                    unsqueeze(&mut b, &range, &[0])
                } else {
                    pos.clone()
                };
                let at = unsqueeze(&mut b, &pos, &[1]);
                let at = b.op("Cast", &[&at], vec![to_f32]);
                let outer = b.op("MatMul", &[&inv, &at], vec![]);
                let angles = b.op(
                    "Transpose",
                    &[&outer],
                    vec![("perm", Attr::Ints(vec![0, 2, 1]))],
                );
                let unit = scalar(&mut b, 1.0);
                let cos = b.op("Cos", &[&angles], vec![]);
                let sin = b.op("Sin", &[&angles], vec![]);
                let (cos, sin) = (
                    b.op("Mul", &[&cos, &unit], vec![]),
                    b.op("Mul", &[&sin, &unit], vec![]),
                );
                if computed {
                    let ones = b.const_i64(&[1, 1]);
                    let rows = shape(&mut b, &ids, 0);
                    let to = b.op("Concat", &[&rows, &ones], vec![("axis", Attr::Int(0))]);
                    (
                        b.op("Expand", &[&cos, &to], vec![]),
                        b.op("Expand", &[&sin, &to], vec![]),
                    )
                } else {
                    (cos, sin)
                }
            } else {
                let inv = b.constant(TensorData::from_f32(vec![r / 2], &inv));
                let at = unsqueeze(&mut b, &pos, &[2]);
                let at = b.op("Cast", &[&at], vec![to_f32]);
                let angles = b.op("Mul", &[&at, &inv], vec![]);
                (
                    b.op("Cos", &[&angles], vec![]),
                    b.op("Sin", &[&angles], vec![]),
                )
            };
            let rotate = |b: &mut GraphBuilder, x: &str, heads: usize| {
                let mut attrs = vec![("num_heads", Attr::Int(heads as i64))];
                if r < d {
                    attrs.push(("rotary_embedding_dim", Attr::Int(r as i64)));
                }
                b.op("RotaryEmbedding", &[x, &cos, &sin], attrs)
            };
            (rotate(&mut b, &q, h), rotate(&mut b, &k, kvh))
        }
        None => (q, k),
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
    b.finish()
}

/// transformers' float 4-D causal padding mask over `attention_mask` (see [`Case::float_mask`]),
/// from the scalar sizes `[B, S, P, T]`.
/// Near misses: `StrictlyCausal` compares with `GreaterOrEqual`, `SoftBias` fills with −1e4,
/// `NoPastOffset` numbers the queries from 0, `PaddingOfQueries` writes the padding back over
/// the first `S` keys only.
pub(super) fn float_mask(b: &mut GraphBuilder, mask: &str, sizes: [&str; 4], miss: Miss) -> String {
    let [batch0, seq0, past0, total0] = sizes;
    let minus1 = b.const_i64(&[-1]);
    let row = |b: &mut GraphBuilder, x: &str| b.op("Reshape", &[x, &minus1], vec![]);
    let (seq1, total1, batch1) = (row(b, seq0), row(b, total0), row(b, batch0));
    let square = b.op("Concat", &[&seq1, &total1], vec![("axis", Attr::Int(0))]);
    let fill = if miss == Miss::SoftBias {
        -1e4
    } else {
        -f32::MAX
    };
    let lowest = TensorData::from_f32(vec![1], &[fill]);
    let full = b.op(
        "ConstantOfShape",
        &[&square],
        vec![("value", Attr::Tensor(lowest))],
    );
    let one = b.scalar_i64(1);
    let upper = b.op("Trilu", &[&full, &one], vec![("upper", Attr::Int(1))]);
    let zero = b.scalar_i64(0);
    let keys = b.op("Range", &[&zero, total0, &one], vec![]);
    let cache = if miss == Miss::NoPastOffset {
        b.op("Range", &[&zero, seq0, &one], vec![])
    } else {
        b.op("Range", &[past0, total0, &one], vec![])
    };
    let column = b.const_i64(&[-1, 1]);
    let cache = b.op("Reshape", &[&cache, &column], vec![]);
    let compare = if miss == Miss::StrictlyCausal {
        "GreaterOrEqual"
    } else {
        "Greater"
    };
    let after = b.op(compare, &[&keys, &cache], vec![]);
    let to_f32 = ("to", Attr::Int(DType::F32.onnx_code() as i64));
    let after = b.op("Cast", &[&after], vec![to_f32.clone()]);
    let causal = b.op("Mul", &[&upper, &after], vec![]);
    let front = b.const_i64(&[0, 1]);
    let causal = b.op("Unsqueeze", &[&causal, &front], vec![]);
    let ones = b.const_i64(&[1, 1, 1]);
    let rows = b.op("Concat", &[&batch1, &ones], vec![("axis", Attr::Int(0))]);
    let causal = b.op("Expand", &[&causal, &rows], vec![]);
    // Padding: masked_fill(causal + attention_mask[:, None, None, :] == 0, −FLT_MAX).
    let middle = b.const_i64(&[1, 2]);
    let pad = b.op("Unsqueeze", &[mask, &middle], vec![]);
    let pad = b.op(
        "Cast",
        &[&pad],
        vec![("to", Attr::Int(DType::I64.onnx_code() as i64))],
    );
    let pad = b.op("Cast", &[&pad], vec![to_f32]);
    let sum = b.op("Add", &[&causal, &pad], vec![]);
    let nothing = scalar(b, 0.0);
    let unseen = b.op("Equal", &[&sum, &nothing], vec![]);
    let masked = scalar(b, fill);
    let updates = b.op("Where", &[&unseen, &masked, &causal], vec![]);
    // Written back over every element: ScatterND(causal, grid, updates), grid[b, h, i, j] =
    // (b, h, i, j).
    let everywhere = b.op("Shape", &[&causal], vec![]);
    let ones1 = b.const_i64(&[1]);
    let written = if miss == Miss::PaddingOfQueries {
        seq0
    } else {
        total0
    };
    let extents = [batch0, one.as_str(), seq0, written];
    let parts: Vec<String> = (0..4)
        .map(|k| {
            let along = b.op("Range", &[&zero, extents[k], &one], vec![]);
            let mut shape = vec![1i64; 4 - k];
            shape[0] = -1;
            let along = if k == 3 {
                along
            } else {
                let shape = b.const_i64(&shape);
                b.op("Reshape", &[&along, &shape], vec![])
            };
            let region = if miss == Miss::PaddingOfQueries {
                b.op(
                    "Concat",
                    &[&batch1, &ones1, &seq1, &seq1],
                    vec![("axis", Attr::Int(0))],
                )
            } else {
                everywhere.clone()
            };
            let along = b.op("Expand", &[&along, &region], vec![]);
            b.op("Unsqueeze", &[&along, &minus1], vec![])
        })
        .collect();
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let grid = b.op("Concat", &refs, vec![("axis", Attr::Int(-1))]);
    let updates = if miss == Miss::PaddingOfQueries {
        let (starts, ends, axes) = (b.const_i64(&[0]), row(b, seq0), b.const_i64(&[3]));
        b.op("Slice", &[&updates, &starts, &ends, &axes], vec![])
    } else {
        b.op("Reshape", &[&updates, &everywhere], vec![])
    };
    b.op("ScatterND", &[&causal, &grid, &updates], vec![])
}

/// GPT-Neo's `bias[:, :, T − S : T, :T]` of its constant causal buffer `[1, 1, N, N]` (see
/// [`Case::buffer`]), from the scalar sizes `[S, T]`. Near misses: `BufferStrict`,
/// `BufferRowsFromZero`, `BufferFlipped` (`BufferSoftFill` is the caller's).
fn sliced_buffer(
    b: &mut GraphBuilder,
    n: usize,
    window: Option<usize>,
    sizes: [&str; 2],
    miss: Miss,
) -> String {
    let [seq0, total0] = sizes;
    let mut bytes: Vec<u8> = (0..n * n)
        .map(|e| {
            let (r, c) = (e / n, e % n);
            let seen = if miss == Miss::BufferStrict {
                c < r
            } else {
                c <= r
            };
            u8::from(seen && window.is_none_or(|w| r - c < w))
        })
        .collect();
    if miss == Miss::BufferFlipped {
        // Row 1 does not see key 0 (its own window would see it).
        bytes[n] ^= 1;
    }
    let buffer = b.constant(TensorData {
        dtype: DType::Bool,
        shape: vec![1, 1, n, n],
        bytes,
    });
    let front = b.const_i64(&[0]);
    let first = if miss == Miss::BufferRowsFromZero {
        b.scalar_i64(0)
    } else {
        b.op("Sub", &[total0, seq0], vec![])
    };
    let last = if miss == Miss::BufferRowsFromZero {
        seq0.to_string()
    } else {
        total0.to_string()
    };
    let starts = b.op("Unsqueeze", &[&first, &front], vec![]);
    let ends = b.op("Unsqueeze", &[&last, &front], vec![]);
    let (rows, one) = (b.const_i64(&[2]), b.const_i64(&[1]));
    let kept = b.op("Slice", &[&buffer, &starts, &ends, &rows, &one], vec![]);
    let total1 = b.op("Unsqueeze", &[total0, &front], vec![]);
    let (zero1, cols) = (b.const_i64(&[0]), b.const_i64(&[3]));
    b.op("Slice", &[&kept, &zero1, &total1, &cols, &one], vec![])
}

/// Inputs of `c`'s block (`lengths`: each row's valid tokens, past included; positions are
/// each row's past length + offset, as the contract has them).
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
    let positions: Vec<i64> = (0..bsz)
        .flat_map(|_| (p..p + s).map(|x| x as i64))
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
        (
            "position_ids".into(),
            Tensor::int(DType::I64, vec![bsz, s], positions),
        ),
        ("q".into(), f(&[bsz, s, h * d])),
        ("k".into(), f(&[bsz, s, kvh * d])),
        ("v".into(), f(&[bsz, s, kvh * d])),
        ("past_key_values.0.key".into(), f(&[bsz, kvh, p, d])),
        ("past_key_values.0.value".into(), f(&[bsz, kvh, p, d])),
    ])
}

/// A block and the row lengths of inputs that follow the contract: without past, rows
/// right-padded to any length from 1 to `seq`; with past, every row full.
fn contract_case(rope: bool) -> impl Strategy<Value = (Case, Vec<usize>, u64)> {
    (
        (1usize..3, 1usize..5, 0usize..4),
        (1usize..3, 1usize..3, prop_oneof![Just(16usize), Just(32)]),
        (
            any::<bool>(),
            prop::option::of(1usize..6),
            (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        ),
        prop::collection::vec(0usize..8, 2),
        any::<u64>(),
    )
        .prop_map(
            move |(
                (batch, seq, past),
                (kv_heads, group, head_dim),
                (partial, window, (torchscript, past_positions, float_mask, buffer)),
                lens,
                seed,
            )| {
                let rotary = if partial && head_dim == 32 {
                    16
                } else {
                    head_dim
                };
                let c = Case {
                    batch,
                    seq,
                    past,
                    kv_heads,
                    group,
                    head_dim,
                    rope: rope.then_some(rotary),
                    window: window.filter(|_| !float_mask),
                    torchscript,
                    past_positions,
                    float_mask,
                    // T ≤ 7 keys: within the buffer's 8.
                    buffer: buffer.then_some((8, window)),
                };
                let lengths = contract_lengths(batch, seq, past, &lens);
                (c, lengths, seed)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// GroupQueryAttention(do_rotary=0) equals the export on inputs that follow the contract.
    #[test]
    fn export_attention_to_gqa((c, lengths, seed) in contract_case(false)) {
        let g = export_block(&c, Miss::None);
        prove_on("export-attention-to-gqa", "cpu", g, feeds(&c, &lengths, seed), 1e-4)?;
    }

    /// GroupQueryAttention(do_rotary=1) over tables of the export's own angle ops, partial
    /// rotary included.
    #[test]
    fn export_rotary_attention_to_gqa((c, lengths, seed) in contract_case(true)) {
        let g = export_block(&c, Miss::None);
        let mut inputs = feeds(&c, &lengths, seed);
        inputs.retain(|name, _| g.inputs.iter().any(|i| &i.name == name));
        prove_on("export-rotary-attention-to-gqa", "cpu", g, inputs, 1e-4)?;
    }
}

fn base() -> Case {
    Case {
        batch: 2,
        seq: 5,
        past: 0,
        kv_heads: 2,
        group: 2,
        head_dim: 16,
        rope: Some(16),
        window: None,
        torchscript: false,
        past_positions: false,
        float_mask: false,
        buffer: None,
    }
}

fn gqa_count(g: &Graph) -> usize {
    g.op_counts()
        .get("com.microsoft::GroupQueryAttention")
        .copied()
        .unwrap_or(0)
}

/// The largest difference of output `name` between `a` and `b` on `inputs` (∞ when NaN or an
/// infinity meets a different value; shapes must match).
fn difference(a: &Graph, b: &Graph, inputs: &HashMap<String, Tensor>, name: &str) -> f64 {
    let run = |g: &Graph| run_graph(g, inputs, &mut Evaluator::new(None)).unwrap();
    let (x, y) = (run(a), run(b));
    max_abs_diff(&x[name], &y[name])
}

/// Without `--kv-cache genai` the export keeps its Attention; with it, GroupQueryAttention
/// (rotary fused) replaces it, and only inputs that follow the contract give the export's
/// outputs.
#[test]
fn the_rewrite_needs_the_declared_contract() {
    let c = base();
    let g = export_block(&c, Miss::None);
    let as_is = optimized_under(&g, KvCache::AsIs);
    assert_eq!(gqa_count(&as_is), 0, "{:?}", as_is.op_counts());
    let genai = optimized_under(&g, KvCache::Genai);
    assert_eq!(gqa_count(&genai), 1, "{:?}", genai.op_counts());
    assert!(!genai.op_counts().contains_key("RotaryEmbedding"));
    // The export's inputs stay the graph's; position_ids is no longer read (the positions
    // come from seqlens_k), mobius optimize keeps it declared.
    // Right-padded prompt: the same outputs.
    let right = feeds(&c, &[3, 5], 1);
    for out in ["y", "present.0.key", "present.0.value"] {
        assert!(difference(&g, &genai, &right, out) <= 1e-4, "{out}");
    }
    // Counterexample 1, a left-padded prompt (mask 0 0 1 1 1): GroupQueryAttention reads the
    // row's length only, so its first three queries see other keys than the export's.
    let mut left = right.clone();
    left.insert(
        "attention_mask".into(),
        Tensor::int(DType::I64, vec![2, 5], vec![0, 0, 1, 1, 1, 1, 1, 1, 1, 1]),
    );
    assert!(difference(&g, &genai, &left, "y") > 1e-2);
    // Counterexample 2, the decode step after a right-padded prompt in the export's layout
    // (keys 0 1 2 valid, 3 4 padding, the new key at index 5, mask 1 1 1 0 0 1): the export
    // writes the new key at index 5, GroupQueryAttention at the row's length, index 3. The
    // step's output is the same (the same keys are seen), the present cache is not.
    let step = Case {
        seq: 1,
        past: 5,
        ..c
    };
    let g = export_block(&step, Miss::None);
    let genai = optimized_under(&g, KvCache::Genai);
    assert_eq!(gqa_count(&genai), 1);
    let mut hf = feeds(&step, &[6, 6], 2);
    hf.insert(
        "attention_mask".into(),
        Tensor::int(
            DType::I64,
            vec![2, 6],
            vec![1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1],
        ),
    );
    hf.insert(
        "position_ids".into(),
        Tensor::int(DType::I64, vec![2, 1], vec![3, 5]),
    );
    assert!(difference(&g, &genai, &hf, "y") <= 1e-4);
    assert!(difference(&g, &genai, &hf, "present.0.key") > 1e-2);
}

/// transformers' float 4-D mask is read (with and without past, torch.onnx's and TorchScript's
/// RoPE); its near misses are not.
#[test]
fn float_masks_are_read() {
    for (past, seq, rope, torchscript) in [
        (0, 4, None, false),
        (3, 2, Some(16), true),
        (0, 3, Some(16), false),
    ] {
        let c = Case {
            past,
            seq,
            rope,
            torchscript,
            float_mask: true,
            ..base()
        };
        read_and_misses_declined(
            &c,
            5,
            &[
                Miss::StrictlyCausal,
                Miss::NoPastOffset,
                Miss::PaddingOfQueries,
                Miss::SoftBias,
            ],
        );
    }
}

/// Case `c`'s export block is read (one GroupQueryAttention, equal to the export within 1e-4
/// on contract inputs drawn from `seed`: a first prompt right-padded by row, or full rows after
/// a past), and each of `misses` is not.
fn read_and_misses_declined(c: &Case, seed: u64, misses: &[Miss]) {
    let g = export_block(c, Miss::None);
    let out = optimized_under(&g, KvCache::Genai);
    assert_eq!(gqa_count(&out), 1, "{c:?}: {:?}", out.op_counts());
    let (past, seq) = (c.past, c.seq);
    let lengths: Vec<usize> = (0..c.batch)
        .map(|r| if past == 0 { seq - r } else { past + seq })
        .collect();
    let mut inputs = feeds(c, &lengths, seed);
    inputs.retain(|name, _| g.inputs.iter().any(|i| &i.name == name));
    for name in ["y", "present.0.key", "present.0.value"] {
        assert!(difference(&g, &out, &inputs, name) <= 1e-4, "{c:?} {name}");
    }
    for &miss in misses {
        let g = export_block(c, miss);
        let out = optimized_under(&g, KvCache::Genai);
        assert_eq!(gqa_count(&out), 0, "{miss:?} {c:?}: {:?}", out.op_counts());
    }
}

/// GPT-Neo's sliced causal buffer added to the float or the boolean mask is read (global and
/// local layers, with and without past); its near misses are not. Over `T > N` keys the
/// export itself fails (the column slice clamps to `N ≠ T`), which is why the read holds.
#[test]
fn buffer_masks_are_read() {
    for (past, seq, float_mask, window) in [
        (0, 4, true, None),
        (3, 2, true, Some(4)),
        (0, 5, true, Some(2)),
        (2, 3, false, None),
        (1, 4, false, Some(3)),
    ] {
        let c = Case {
            past,
            seq,
            rope: None,
            float_mask,
            window: window.filter(|_| !float_mask),
            buffer: Some((8, window)),
            ..base()
        };
        read_and_misses_declined(
            &c,
            7,
            &[
                Miss::BufferStrict,
                Miss::BufferRowsFromZero,
                Miss::BufferFlipped,
                Miss::BufferSoftFill,
                Miss::SoftBias,
            ],
        );
    }
    // More keys than the buffer has columns: the export fails at run time.
    let c = Case {
        past: 6,
        seq: 3,
        rope: None,
        float_mask: true,
        buffer: Some((8, None)),
        ..base()
    };
    let g = export_graph(&c, Miss::None);
    let mut inputs = feeds(&c, &[9, 9], 3);
    inputs.retain(|name, _| g.inputs.iter().any(|i| &i.name == name));
    assert!(run_graph(&g, &inputs, &mut Evaluator::new(None)).is_err());
}

/// Masks that are not the export's causal padding mask are left alone, under the contract too.
#[test]
fn other_masks_are_not_rewritten() {
    let c = base();
    for miss in [
        Miss::StrictlyCausal,
        Miss::NoPastOffset,
        Miss::PaddingOfQueries,
        Miss::SoftBias,
    ] {
        for case in [
            c.clone(),
            Case {
                seq: 2,
                past: 3,
                rope: None,
                window: Some(2),
                ..c.clone()
            },
            Case {
                torchscript: true,
                ..c.clone()
            },
        ] {
            let g = export_block(&case, miss);
            let out = optimized_under(&g, KvCache::Genai);
            assert_eq!(
                gqa_count(&out),
                0,
                "{miss:?} {case:?}: {:?}",
                out.op_counts()
            );
        }
    }
    // The rule is the one the gate holds back.
    assert!(rule("export-attention-to-gqa")
        .gate
        .0
        .contains(&mobius::opt::gate::GateAtom::GenaiKvCache));
}

/// An export with static dims (batch 1: the batch positions are all 0) is read too.
#[test]
fn static_dims_are_read() {
    for (past, seq, window, torchscript) in [
        (0, 4, None, false),
        (3, 2, Some(2), false),
        (0, 4, None, true),
    ] {
        let c = Case {
            batch: 1,
            seq,
            past,
            window,
            torchscript,
            ..base()
        };
        let g = export_graph(&c, Miss::None);
        let out = optimized_under(&g, KvCache::Genai);
        assert_eq!(gqa_count(&out), 1, "{c:?}: {:?}", out.op_counts());
        let lengths = [if past == 0 { seq - 1 } else { past + seq }];
        let inputs = feeds(&c, &lengths, 3);
        for name in ["y", "present.0.key", "present.0.value"] {
            assert!(difference(&g, &out, &inputs, name) <= 1e-4, "{c:?} {name}");
        }
    }
}

/// Positions computed from the past length are read when they are `P + s` for the cache's
/// `P`; numbered from 0 instead (the near miss), the rotation is not taken into the fused op.
#[test]
fn past_length_positions_are_read() {
    let c = Case {
        past: 3,
        seq: 2,
        rope: Some(16),
        torchscript: true,
        past_positions: true,
        ..base()
    };
    let rotary = |g: &Graph| g.op_counts().get("RotaryEmbedding").copied().unwrap_or(0);
    let g = export_block(&c, Miss::None);
    let out = optimized_under(&g, KvCache::Genai);
    assert_eq!(
        (gqa_count(&out), rotary(&out)),
        (1, 0),
        "{:?}",
        out.op_counts()
    );
    let mut inputs = feeds(&c, &[5, 5], 3);
    inputs.retain(|name, _| g.inputs.iter().any(|i| &i.name == name));
    for name in ["y", "present.0.key", "present.0.value"] {
        assert!(difference(&g, &out, &inputs, name) <= 1e-4, "{name}");
    }
    // Not taken into the fused op, the rotation would stay in front of a
    // GroupQueryAttention(do_rotary=0) and rotate a right-padded row's steps by positions the
    // export computes from the cache, not the row's: the attention is left as it is.
    let g = export_block(&c, Miss::PositionsFromZero);
    let out = optimized_under(&g, KvCache::Genai);
    assert_eq!(
        (gqa_count(&out), rotary(&out)),
        (0, 2),
        "{:?}",
        out.op_counts()
    );
}

/// [`contract_case`] with RoPE over a rotary width GroupQueryAttention cannot take in (8 of
/// 16 channels, or 8 or 24 of 32) whose positions are computed from the past length
/// (optimum's export of Nemotron).
fn partial_rotary_case() -> impl Strategy<Value = (Case, Vec<usize>, u64)> {
    (contract_case(true), any::<bool>()).prop_map(|((c, lengths, seed), wide)| {
        let rotary = if wide && c.head_dim == 32 { 24 } else { 8 };
        let c = Case {
            rope: Some(rotary),
            torchscript: true,
            past_positions: true,
            ..c
        };
        (c, lengths, seed)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// GroupQueryAttention(do_rotary=0) behind the rotations re-indexed by genai's positions
    /// (`s + max(0, Σ attention_mask[b] − S)`) equals the export on inputs that follow the
    /// contract.
    #[test]
    fn export_partial_rotary_attention_to_gqa((c, lengths, seed) in partial_rotary_case()) {
        let g = export_block(&c, Miss::None);
        let mut inputs = feeds(&c, &lengths, seed);
        inputs.retain(|name, _| g.inputs.iter().any(|i| &i.name == name));
        prove_on("export-partial-rotary-attention-to-gqa", "cpu", g, inputs, 1e-4)?;
    }
}

/// A partial RoPE computed from the past length is taken behind GroupQueryAttention re-indexed
/// by genai's positions: on genai's step after a right-padded prompt (the new key written at
/// the row's length), the rewritten export rotates by the row's length, as the same block
/// reading `position_ids` does when fed genai's `position_ids`; the export's own `P + s` does
/// not. Numbered from 0 (the near miss), the positions are not read.
#[test]
fn partial_rotary_is_reindexed_by_genai_positions() {
    let c = Case {
        seq: 1,
        past: 5,
        rope: Some(8),
        torchscript: true,
        past_positions: true,
        ..base()
    };
    let count = |g: &Graph, op: &str| g.op_counts().get(op).copied().unwrap_or(0);
    let g = export_block(&c, Miss::None);
    let out = optimized_under(&g, KvCache::Genai);
    assert_eq!(
        (gqa_count(&out), count(&out, "RotaryEmbedding")),
        (1, 2),
        "{:?}",
        out.op_counts()
    );
    // The same block reading position_ids (the build's form): GroupQueryAttention(do_rotary=0)
    // behind its rotations.
    let with_ids = export_block(
        &Case {
            past_positions: false,
            ..c.clone()
        },
        Miss::None,
    );
    let reference = optimized_under(&with_ids, KvCache::Genai);
    assert_eq!(gqa_count(&reference), 1, "{:?}", reference.op_counts());
    // genai's step: row 0 holds 3 keys and its new one at index 3 (mask 1 1 1 1 0 0, position
    // 3); row 1 is full (position 5).
    let mut step = feeds(&c, &[6, 6], 4);
    step.insert(
        "attention_mask".into(),
        Tensor::int(
            DType::I64,
            vec![2, 6],
            vec![1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1],
        ),
    );
    step.insert(
        "position_ids".into(),
        Tensor::int(DType::I64, vec![2, 1], vec![3, 5]),
    );
    let mut without_ids = step.clone();
    without_ids.remove("position_ids");
    let run = |g: &Graph, inputs: &HashMap<String, Tensor>| {
        run_graph(g, inputs, &mut Evaluator::new(None)).unwrap()
    };
    let (ours, theirs) = (run(&out, &without_ids), run(&reference, &step));
    for name in ["y", "present.0.key", "present.0.value"] {
        assert!(max_abs_diff(&ours[name], &theirs[name]) <= 1e-4, "{name}");
    }
    // Without the re-indexing (the export's P + s = 5 for row 0) the keys differ.
    let mut at_five = step.clone();
    at_five.insert(
        "position_ids".into(),
        Tensor::int(DType::I64, vec![2, 1], vec![5, 5]),
    );
    let stale = run(&reference, &at_five);
    assert!(max_abs_diff(&ours["present.0.key"], &stale["present.0.key"]) > 1e-2);
    // Near miss: positions numbered from 0, not the past length.
    let g = export_block(&c, Miss::PositionsFromZero);
    let out = optimized_under(&g, KvCache::Genai);
    assert_eq!(gqa_count(&out), 0, "{:?}", out.op_counts());
}
