//! The applier of `fusion/alibi_genai.rules` (enabled by `--kv-cache genai`): an Attention
//! whose bias is the ALiBi bias over the export's causal padding mask (BLOOM, Falcon-ALiBi;
//! read by [`alibi_export_bias`]; MPT's sliced table, by [`table_export_bias`]) → the same
//! Attention over the bias `mobius build` writes,
//! `Where(attention_mask ≠ 0, slopes · (CumSum(attention_mask, 1) − 1), −FLT_MAX)` broadcast
//! to `[B, H, S, T]`, with `is_causal=1`.

use egg::Id;

use crate::ir::{DType, TensorData};
use crate::limits::config::MAX_HEADS;
use crate::ops::schema;
use crate::ops::value::{AttrValue, Literal};
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::opt::query::int_attr;
use crate::rulebook::genai_contract::{
    alibi_export_bias, rows_input, table_export_bias, AlibiExportBias,
};

/// `export-alibi-attention`.
pub(super) const EXPORT_ALIBI_ATTENTION: Applier<13> = Applier::new(
    [
        "?q",
        "?k",
        "?v",
        "?bias",
        "?pk",
        "?pv",
        "?causal",
        "?kvh",
        "?qnh",
        "?mode",
        "?scale",
        "?softcap",
        "?precision",
    ],
    export_alibi_attention,
);

/// Reads the variables of `export-alibi-attention`: the Attention, on 3-D q, without
/// `is_causal`, its bias read by [`alibi_export_bias`] or [`table_export_bias`] → the
/// Attention over [`build_bias`] with `is_causal=1`, the other inputs and attributes
/// unchanged.
fn export_alibi_attention(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 13]) -> Option<Id> {
    let [q, k, v, bias, pk, pv, causal, kvh, qnh, mode, scale, softcap, precision] = vars;
    let unset = matches!(
        g[causal].data.attr(),
        Some(AttrValue::Unset | AttrValue::Int(0))
    );
    if !unset || g[q].data.tensor()?.rank()? != 3 {
        return None;
    }
    let heads = usize::try_from(int_attr(g, qnh)?).ok()?;
    if heads == 0 || heads > MAX_HEADS {
        return None;
    }
    let read = alibi_export_bias(g, bias, q, pk, heads)
        .or_else(|| table_export_bias(g, bias, q, pk, heads))?;
    let bias = build_bias(g, &read, q);
    let causal = g.add(Onnx::Attr(AttrValue::Int(1)));
    let children = vec![
        q, k, v, bias, pk, pv, causal, kvh, qnh, mode, scale, softcap, precision,
    ];
    Some(g.add(Onnx::op("Attention", schema("Attention")?, 6, 3, children)))
}

/// A graph input whose dims read as q's first two, `[B, S]` ([`rows_input`]): its `Shape` is
/// the bias's rows for every layer, as the build's one bias is, where `Shape(q)[0:2]` would be
/// a shape per layer.
fn rows_of(g: &OnnxGraph, q: Id) -> Option<Id> {
    rows_input(g, g[q].data.tensor()?.shape.as_ref()?.get(..2)?)
}

/// `Where(Unsqueeze(Expand(Unsqueeze(Cast_bool(m), [1]), Concat(rows, Shape(m)[1:])), [1]), Mul(slopes [1, H, 1, 1], Unsqueeze(Cast_f32(CumSum(m, 1) − 1),
/// [1, 2])), −FLT_MAX)`, `m` the `attention_mask`, rows `Shape` of a `[B, S]` input ([`rows_of`]) or
/// `Shape(q)[0:2]`: the bias `mobius build` writes for ALiBi.
fn build_bias(g: &mut OnnxGraph, read: &AlibiExportBias, q: Id) -> Id {
    let m = read.attention_mask;
    let int64 = g[m].data.tensor().and_then(|t| t.dtype) == Some(DType::I64);
    let slopes = TensorData::from_f32(vec![1, read.slopes.len(), 1, 1], &read.slopes);
    let slopes = g.add(Onnx::Const(Box::new(Literal::from(&slopes))));
    let mut e = Emit::new(g);
    let bool_to = ("to", AttrValue::Int(DType::Bool.onnx_code() as i64));
    let keep = e.op("Cast", &[m], &[bool_to]);
    let keep = e.unsqueeze(keep, &[1]);
    let rows = match rows_of(e.g, q) {
        Some(ids) => e.op("Shape", &[ids], &[]),
        None => e.shape(q, 0, 2),
    };
    let keys = e.op("Shape", &[m], &[("start", AttrValue::Int(1))]);
    let dims = e.concat(&[rows, keys], 0);
    let keep = e.op("Expand", &[keep, dims], &[]);
    let keep = e.unsqueeze(keep, &[1]);
    let one = e.int(1);
    let counts = e.op("CumSum", &[m, one], &[]);
    // The count less the int64 one: in int64 whatever integer type the mask has.
    let counts = if int64 {
        counts
    } else {
        let to_i64 = ("to", AttrValue::Int(DType::I64.onnx_code() as i64));
        e.op("Cast", &[counts], &[to_i64])
    };
    let positions = e.bin("Sub", counts, one);
    let float_to = ("to", AttrValue::Int(DType::F32.onnx_code() as i64));
    let positions = e.op("Cast", &[positions], &[float_to]);
    let positions = e.unsqueeze(positions, &[1, 2]);
    let alibi = e.bin("Mul", slopes, positions);
    let fill = e
        .float(DType::F32, -f32::MAX)
        .expect("f32 is a float dtype");
    e.op("Where", &[keep, alibi, fill], &[])
}
