//! The appliers of `fusion/gqa_genai.rules` (enabled by `--kv-cache genai`): an Attention
//! over the causal padding (or sliding-window) mask an exporter builds from `attention_mask`
//! → `com.microsoft::GroupQueryAttention`, as [`super::gqa`] does for the builder's mask,
//! taking in the RotaryEmbeddings of q and k (`do_rotary=1`) when their caches are computed
//! from `position_ids`: the caches become tables over positions `0 … T−1` computed by the
//! same ops. The readings are in [`crate::rulebook::genai_contract`].

use egg::Id;

use super::gqa::{
    cache_preconditions, gqa_op, rotary_width_ok, rotations_agree, Attention, GqaExtras,
};
use crate::ops::value::{AttrValue, Literal};
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::opt::query::scalar_float;
use crate::rulebook::genai_contract::{
    export_mask, float_export_mask, position_table, scaled_float_export_mask, summed_export_mask,
    PositionTable,
};

/// `export-attention-to-gqa`.
pub(super) const EXPORT_ATTENTION_TO_GQA: Applier<11> = Applier::new(
    [
        "?q", "?k", "?v", "?mask", "?pk", "?pv", "?causal", "?kvh", "?qnh", "?scale", "?softcap",
    ],
    export_attention_to_gqa,
);

/// `export-rotary-attention-to-gqa`.
pub(super) const EXPORT_ROTARY_ATTENTION_TO_GQA: Applier<18> = Applier::new(
    [
        "?q", "?k", "?v", "?mask", "?pk", "?pv", "?causal", "?kvh", "?qnh", "?scale", "?softcap",
        "?cos", "?sin", "?qi", "?ki", "?qh", "?kh", "?qrd",
    ],
    export_rotary_attention_to_gqa,
);

/// The matched Attention, on 3-D q/k/v, without `is_causal` (the mask is causal), its mask
/// the export's ([`export_mask`]), and [`cache_preconditions`]: the GroupQueryAttention extras
/// and the `attention_mask` class.
pub(super) fn preconditions(g: &OnnxGraph, a: &Attention) -> Option<(GqaExtras, Id)> {
    if !matches!(
        g[a.causal].data.attr(),
        Some(AttrValue::Unset | AttrValue::Int(0))
    ) {
        return None;
    }
    if g[a.q].data.tensor()?.rank()? != 3 {
        return None;
    }
    let mask = export_mask(g, a.mask, a.q, a.past_key)
        .or_else(|| float_export_mask(g, a.mask, a.q, a.past_key))
        .or_else(|| summed_export_mask(g, a.mask, a.q, a.past_key))
        .or_else(|| scaled_float_export_mask(g, a.mask, a.q, a.past_key))?;
    let extras = cache_preconditions(g, a, mask.window)?;
    Some((extras, mask.attention_mask))
}

/// Reads the variables of `export-attention-to-gqa`: GroupQueryAttention(do_rotary=0) on the
/// same q/k/v (RoPE, if any, stays in front of it).
fn export_attention_to_gqa(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 11]) -> Option<Id> {
    if rotated_by_past_length(g, vars[0]) || rotated_by_past_length(g, vars[1]) {
        return None;
    }
    let attention = Attention::new(vars);
    let (extras, attention_mask) = preconditions(g, &attention)?;
    gqa_op(g, &attention, &extras, attention_mask, None)
}

/// Whether class `x` is a RotaryEmbedding whose caches are computed from the past length
/// (`P + s`, [`PositionTable::past`]) rather than read from `position_ids`. Left in front of a
/// GroupQueryAttention(do_rotary=0), it would rotate the tokens of a row that genai right-padded
/// (a step after a padded prompt: the row's position is its length, not the cache's `P + s`) by
/// positions the export cannot know, so the export is not genai's model there; only the fused
/// rotation (seqlens_k) is.
fn rotated_by_past_length(g: &OnnxGraph, x: Id) -> bool {
    g[g.find(x)]
        .nodes
        .iter()
        .filter_map(|n| n.as_op())
        .filter(|o| o.op.as_str() == "RotaryEmbedding")
        .any(|o| {
            o.input_ids()
                .get(1)
                .and_then(|&cos| position_table(g, cos))
                .is_some_and(|t| t.past.is_some())
        })
}

/// Reads the variables of `export-rotary-attention-to-gqa`: RotaryEmbedding(q) and
/// RotaryEmbedding(k) over caches computed from `position_ids` by the same ops
/// ([`position_table`]) → GroupQueryAttention(do_rotary=1) over those ops applied to
/// positions `0 … T−1` (`T` = the `attention_mask` width, the total length).
fn export_rotary_attention_to_gqa(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 18]) -> Option<Id> {
    let [q, k, v, mask, pk, pv, causal, kvh, qnh, scale, softcap, cos, sin, qi, ki, qh, kh, qrd] =
        vars;
    let attention = Attention::new([q, k, v, mask, pk, pv, causal, kvh, qnh, scale, softcap]);
    let (extras, attention_mask) = preconditions(g, &attention)?;
    let interleaved = rotations_agree(g, [kvh, qnh, qi, ki, qh, kh])?;
    let (cos, sin) = (position_table(g, cos)?, position_table(g, sin)?);
    let same_angles = cos.positions == sin.positions
        && cos.frequencies == sin.frequencies
        && cos.frequencies_first == sin.frequencies_first
        && cos.dtype == sin.dtype;
    if !same_angles || !past_positions_ok(g, &cos, q, pk) {
        return None;
    }
    let width = g[cos.frequencies]
        .data
        .tensor()?
        .static_shape()?
        .iter()
        .product::<i64>();
    rotary_width_ok(g, &extras, qrd, width)?;
    let (cos, sin) = (
        table(g, &cos, attention_mask),
        table(g, &sin, attention_mask),
    );
    gqa_op(
        g,
        &attention,
        &extras,
        attention_mask,
        Some((interleaved, cos, sin)),
    )
}

/// Whether positions computed from the past length (`P + s`, [`PositionTable::past`]) are
/// the ones the attention's tokens sit at: `P` the cache `pk`'s length and `S` the queries'
/// (`q` `[B, S, ·]`), so token `s` is at `P + s`, which the contract makes its row's position
/// on a first prompt (`P` = 0) and on steps whose rows are full. Positions from `position_ids`
/// need nothing more.
pub(super) fn past_positions_ok(g: &OnnxGraph, read: &PositionTable, q: Id, pk: Id) -> bool {
    let Some((past, seq)) = &read.past else {
        return true;
    };
    let dim = |id: Id, axis: usize| {
        g[id]
            .data
            .tensor()
            .and_then(|t| t.shape.as_ref()?.get(axis).cloned())
    };
    dim(pk, 2).as_ref() == Some(past) && dim(q, 1).as_ref() == Some(seq)
}

/// The cache `read` describes, over positions `Range(0, T)` (`T` read from
/// `attention_mask`'s shape as GroupQueryAttention's total length is) instead of
/// `position_ids`: `[T, D/2]`. Frequencies stored `[1, D/2, 1]` are taken as the `[D/2]`
/// constant of the same values; a step that multiplies or divides by exactly 1 (an
/// `attention_scaling` of 1) is left out, as it changes no value.
fn table(g: &mut OnnxGraph, read: &PositionTable, attention_mask: Id) -> Id {
    let mut e = Emit::new(g);
    let (zero, one) = (e.int(0), e.int(1));
    let shape = e.op("Shape", &[attention_mask], &[]);
    let total = e.op("Gather", &[shape, one], &[("axis", AttrValue::Int(0))]);
    let positions = e.op("Range", &[zero, total, one], &[]);
    let column = e.unsqueeze(positions, &[1]);
    angles_at(g, read, column)
}

/// The cache `read` describes, over the int64 positions `column` (`[…, 1]`: the positions
/// with a trailing axis) instead of the export's: `Cast(column) · frequencies` and the
/// export's elementwise steps, `[…, D/2]`.
fn angles_at(g: &mut OnnxGraph, read: &PositionTable, column: Id) -> Id {
    let frequencies = flat_frequencies(g, read);
    let mut e = Emit::new(g);
    let to = ("to", AttrValue::Int(read.dtype.onnx_code() as i64));
    let column = e.op("Cast", &[column], &[to]);
    let angles = if read.frequencies_first {
        e.bin("Mul", frequencies, column)
    } else {
        e.bin("Mul", column, frequencies)
    };
    cache_steps(g, read, angles)
}

/// The frequencies of `read` as a `[D/2]` constant (stored `[1, D/2, 1]`: the same values).
pub(super) fn flat_frequencies(g: &mut OnnxGraph, read: &PositionTable) -> Id {
    match g[read.frequencies].data.konst.as_deref() {
        Some(lit) if lit.shape.len() != 1 => {
            let flat = Literal {
                shape: vec![lit.shape.iter().product()],
                ..lit.clone()
            };
            g.add(Onnx::Const(Box::new(flat)))
        }
        _ => read.frequencies,
    }
}

/// The export's elementwise steps of `read` (`Cos`/`Sin`, a `Cast`, a scale) applied to
/// `angles`, innermost first; a step that multiplies or divides by exactly 1 (an
/// `attention_scaling` of 1) is left out, as it changes no value.
pub(super) fn cache_steps(g: &mut OnnxGraph, read: &PositionTable, angles: Id) -> Id {
    let identity = |g: &OnnxGraph, node: &crate::opt::lang::OpNode, carrier: usize| {
        matches!(node.op.as_str(), "Mul" | "Div")
            && scalar_float(g, node.children[1 - carrier]) == Some(1.0)
    };
    let steps: Vec<_> = read
        .steps
        .iter()
        .filter(|(node, carrier)| !identity(g, node, *carrier))
        .cloned()
        .collect();
    steps.iter().fold(angles, |inner, (node, carrier)| {
        let mut node = node.clone();
        node.children[*carrier] = inner;
        g.add(Onnx::Op(node))
    })
}
