//! The applier of the standard form of `com.microsoft::MatMulNBits` (the inverse of
//! [`super::nbits`]): a MatMulNBits over initializers — as onnxruntime's quantizer,
//! onnxruntime-genai's builder or mobius write it — equals `MatMul(x, DequantizeLinear(values,
//! scales[, zero_points]; axis 0, block_size)) (+ bias)` over the same codes, scales and zero
//! points read back into the `DequantizeLinear` layout at save time (the
//! `ai.mobius::FromNBits*` relayouts, folded into initializers when the graph is lowered). The
//! extraction picks it for EPs that cannot run MatMulNBits.

use egg::{Id, Subst};

use super::analysis::OnnxGraph;
use super::emit::Emit;
use super::lang::AttrValue;
use super::nbits::is_weight;
use crate::ir::DType;

/// The known static shape of class `id`.
fn static_shape(g: &OnnxGraph, id: Id) -> Option<Vec<i64>> {
    g[id].data.tensor()?.static_shape()
}

/// Whether class `id` is a weight of `dtype` shaped `[n, width]` or flat `[n * width]`.
fn per_column(g: &OnnxGraph, id: Id, dtype: DType, n: i64, width: i64) -> bool {
    let shape_ok = match static_shape(g, id).as_deref() {
        Some(&[rows, w]) => rows == n && w == width,
        Some(&[len]) => len == n * width,
        _ => false,
    };
    shape_ok && g[id].data.tensor().and_then(|t| t.dtype) == Some(dtype) && is_weight(g, id)
}

/// Reads `?x ?b ?s [?zp] [?bias] ?k ?n ?bits ?block` of a MatMulNBits call (no `?zp`, or one
/// bound to an absent input: no zero points; no `?bias`: none). Fires for 4 or 8 bits, a block
/// size that is a power of two from 16, `B` a u8 weight `[N, ⌈K/B⌉, B·bits/8]`, scales of x's
/// float dtype `[N, ⌈K/B⌉]` (or flat), packed u8 zero points `[N, ⌈⌈K/B⌉·bits/8⌉]` (or flat)
/// and a bias `[N]` of x's dtype. Declines otherwise (g_idx, float zero points, weights
/// computed in the graph, shapes that do not match K, N, bits and block_size): then the call
/// has no exact `DequantizeLinear` form here. `accuracy_level` does not matter: the standard
/// form is the op at level 0, which every level approximates.
pub(crate) fn matmul_nbits_to_dequantize(
    g: &mut OnnxGraph,
    _matched: Id,
    s: &Subst,
    _rule: &str,
) -> Option<Id> {
    let v = |name: &str| Emit::bound(s, name);
    let (x, b, scales) = (v("?x")?, v("?b")?, v("?s")?);
    let e = Emit::new(g);
    let zp = v("?zp").filter(|&zp| !e.is_absent(zp));
    let bias = v("?bias");
    let (k, n) = (e.int_or(v("?k")?, 0)?, e.int_or(v("?n")?, 0)?);
    let (bits, block) = (e.int_or(v("?bits")?, 4)?, e.int_or(v("?block")?, 0)?);
    if k <= 0 || n <= 0 || !matches!(bits, 4 | 8) || block < 16 || block.count_ones() != 1 {
        return None;
    }
    let x_type = e.tensor(x)?;
    let dtype = x_type.dtype.filter(|d| d.is_float())?;
    if x_type
        .shape
        .as_ref()?
        .last()?
        .known()
        .is_some_and(|last| last != k)
    {
        return None;
    }
    let blocks = (k + block - 1) / block;
    let b_ok = static_shape(g, b) == Some(vec![n, blocks, block * bits / 8])
        && g[b].data.tensor()?.dtype == Some(DType::U8)
        && is_weight(g, b);
    if !b_ok || !per_column(g, scales, dtype, n, blocks) {
        return None;
    }
    if zp.is_some_and(|zp| !per_column(g, zp, DType::U8, n, (blocks * bits + 7) / 8)) {
        return None;
    }
    if let Some(bias) = bias {
        let t = g[bias].data.tensor()?;
        if t.dtype != Some(dtype) || t.static_shape() != Some(vec![n]) {
            return None;
        }
    }
    let mut e = Emit::new(g);
    let relayout = [
        ("K", AttrValue::Int(k)),
        ("bits", AttrValue::Int(bits)),
        ("block_size", AttrValue::Int(block)),
        ("signed", AttrValue::Int(i64::from(zp.is_none()))),
    ];
    let mut parts = vec![
        e.op("ai.mobius::FromNBitsWeight", &[b], &relayout),
        e.op("ai.mobius::FromNBitsScales", &[scales], &relayout),
    ];
    if let Some(zp) = zp {
        parts.push(e.op("ai.mobius::FromNBitsZeroPoints", &[zp], &relayout));
    }
    let weight = e.op(
        "DequantizeLinear",
        &parts,
        &[
            ("axis", AttrValue::Int(0)),
            ("block_size", AttrValue::Int(block)),
        ],
    );
    let product = e.bin("MatMul", x, weight);
    Some(match bias {
        Some(bias) => e.bin("Add", product, bias),
        None => product,
    })
}
