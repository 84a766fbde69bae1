//! The applier of `export-partial-rotary-attention-to-gqa` (`fusion/gqa_genai.rules`, enabled
//! by `--kv-cache genai`): an exported Attention whose q and k are rotated by RoPE caches
//! computed from the past length (`P + s`, optimum's exports without `position_ids`, e.g.
//! Nemotron) over a rotary width GroupQueryAttention cannot take in (not a multiple of 16) →
//! `com.microsoft::GroupQueryAttention(do_rotary=0)` behind the same rotations re-indexed by
//! the positions onnxruntime-genai means ([`genai_positions`]), as `mobius build` keeps a
//! partial RoPE in front of its GroupQueryAttention (there over the `position_ids` genai feeds).
//!
//! The positions are the ones GroupQueryAttention's own rotation uses: token `s` of row `b` at
//! `s` on a first prompt and at `seqlens_k[b] + 1 − S + s` after it, i.e.
//! `s + max(0, Σ attention_mask[b] − S)`. On inputs that follow the contract (a right-padded
//! prompt without past, or a step whose rows are all full) that is the export's `P + s`
//! (`P = 0` and `Σ attention_mask[b] ≤ S`, or `Σ attention_mask[b] = P + S`); on genai's steps
//! after a right-padded prompt it is the row's length, which the export's `P + s` is not.

use egg::Id;

use super::gqa::{rotary_width_ok, rotations_agree, Attention};
use super::gqa_genai::{cache_steps, flat_frequencies, past_positions_ok, preconditions};
use crate::ir::DType;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::rulebook::genai_contract::{position_table, rows_input, PositionTable};

/// `export-partial-rotary-attention-to-gqa`.
pub(super) const EXPORT_PARTIAL_ROTARY_ATTENTION_TO_GQA: Applier<19> = Applier::new(
    [
        "?q", "?k", "?v", "?mask", "?pk", "?pv", "?causal", "?kvh", "?qnh", "?scale", "?softcap",
        "?cos", "?sin", "?qi", "?ki", "?qh", "?kh", "?qrd", "?krd",
    ],
    export_partial_rotary_attention_to_gqa,
);

/// Reads the variables of `export-partial-rotary-attention-to-gqa`: RotaryEmbedding(q) and
/// RotaryEmbedding(k) over the same caches computed from the past length (`P` the cache's
/// length, `S` the queries'), of a rotary width [`rotary_width_ok`] refuses (the fused rule,
/// `export-rotary-attention-to-gqa`, takes the others) → GroupQueryAttention(do_rotary=0) over
/// the same rotations of caches computed by the same ops at [`genai_positions`].
fn export_partial_rotary_attention_to_gqa(
    g: &mut OnnxGraph,
    _: Site<'_>,
    vars: [Id; 19],
) -> Option<Id> {
    let [q, k, v, mask, pk, pv, causal, kvh, qnh, scale, softcap, cos, sin, qi, ki, qh, kh, qrd, krd] =
        vars;
    let attention = Attention::new([q, k, v, mask, pk, pv, causal, kvh, qnh, scale, softcap]);
    let (extras, attention_mask) = preconditions(g, &attention)?;
    rotations_agree(g, [kvh, qnh, qi, ki, qh, kh])?;
    if g[qrd].data.attr() != g[krd].data.attr() {
        return None;
    }
    let (cos_read, sin_read) = (position_table(g, cos)?, position_table(g, sin)?);
    if !same_past_angles(&cos_read, &sin_read) || !past_positions_ok(g, &cos_read, q, pk) {
        return None;
    }
    let width = g[cos_read.frequencies]
        .data
        .tensor()?
        .static_shape()?
        .iter()
        .product::<i64>();
    if rotary_width_ok(g, &extras, qrd, width).is_some() {
        return None;
    }
    cos_read.past.as_ref()?;
    // q is [B, S, ·] ([`preconditions`]).
    let positions = genai_positions(g, attention_mask, q);
    let (cos, sin) = (
        angles_at(g, &cos_read, positions),
        angles_at(g, &sin_read, positions),
    );
    let mut e = Emit::new(g);
    let mut rotate = |x: Id, interleaved: Id, heads: Id, dim: Id| {
        e.op_with(
            "RotaryEmbedding",
            &[x, cos, sin],
            &[
                ("interleaved", interleaved),
                ("num_heads", heads),
                ("rotary_embedding_dim", dim),
            ],
        )
    };
    let (q, k) = (rotate(q, qi, qh, qrd), rotate(k, ki, kh, krd));
    let attention = Attention::new([q, k, v, mask, pk, pv, causal, kvh, qnh, scale, softcap]);
    super::gqa::gqa_op(g, &attention, &extras, attention_mask, None)
}

/// Whether the cos and sin caches are read as the angles of the same positions, computed
/// from the past length.
fn same_past_angles(cos: &PositionTable, sin: &PositionTable) -> bool {
    cos.past.is_some()
        && cos.positions == sin.positions
        && cos.past == sin.past
        && cos.frequencies == sin.frequencies
        && cos.frequencies_first == sin.frequencies_first
        && cos.dtype == sin.dtype
}

/// The positions onnxruntime-genai means for the `S` queries of each row, `[B, S]` int64:
/// `s + max(0, Σ attention_mask[b] − S)` (GroupQueryAttention's rotation: `s` on a first
/// prompt, `seqlens_k[b] + 1 − S + s` after it). `S` is read from a graph input whose dims are
/// x's `[B, S]` ([`rows_input`]: one computation for every layer), else from `x` `[B, S, ·]`.
fn genai_positions(g: &mut OnnxGraph, attention_mask: Id, x: Id) -> Id {
    let ids = g[x]
        .data
        .tensor()
        .and_then(|t| t.shape.as_ref()?.get(..2).map(<[SymDim]>::to_vec))
        .and_then(|rows| rows_input(g, &rows));
    let int64 = g[attention_mask].data.tensor().and_then(|t| t.dtype) == Some(DType::I64);
    let mut e = Emit::new(g);
    // The sum is taken in int64, the positions' type, whatever integer type the mask has.
    let attention_mask = if int64 {
        attention_mask
    } else {
        let to = ("to", AttrValue::Int(DType::I64.onnx_code() as i64));
        e.op("Cast", &[attention_mask], &[to])
    };
    let (zero, one) = (e.int(0), e.int(1));
    let shape = e.op("Shape", &[ids.unwrap_or(x)], &[]);
    let seq = e.op("Gather", &[shape, one], &[("axis", AttrValue::Int(0))]);
    let axes = e.ints(&[1]);
    let sum = e.op(
        "ReduceSum",
        &[attention_mask, axes],
        &[("keepdims", AttrValue::Int(0))],
    );
    let past = e.bin("Sub", sum, seq);
    let past = e.bin("Max", past, zero);
    let past = e.unsqueeze(past, &[1]);
    let steps = e.op("Range", &[zero, seq, one], &[]);
    e.bin("Add", past, steps)
}

/// The cache `read` describes at the int64 positions `[B, S]`: `Cast(positions)` times each
/// frequency, `Einsum("bs,j->bsj")` (one product per element, no sum: the export's
/// `positions · frequency`), then the export's elementwise steps; `[B, S, D/2]`.
fn angles_at(g: &mut OnnxGraph, read: &PositionTable, positions: Id) -> Id {
    let frequencies = flat_frequencies(g, read);
    let mut e = Emit::new(g);
    let to = ("to", AttrValue::Int(read.dtype.onnx_code() as i64));
    let positions = e.op("Cast", &[positions], &[to]);
    let equation = ("equation", AttrValue::Str(egg::Symbol::from("bs,j->bsj")));
    let angles = e.op("Einsum", &[positions, frequencies], &[equation]);
    cache_steps(g, read, angles)
}
