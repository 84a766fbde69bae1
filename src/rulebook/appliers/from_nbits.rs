//! The appliers of the standard form of `com.microsoft::MatMulNBits`
//! (`inline/matmul_nbits.rules`, the inverse of [`super::matmul_nbits`]): a MatMulNBits over initializers — as onnxruntime's quantizer,
//! onnxruntime-genai's builder or mobius write it — equals `MatMul(x, DequantizeLinear(values,
//! scales[, zero_points]; axis 0, block_size)) (+ bias)` over the same codes, scales and zero
//! points read back into the `DequantizeLinear` layout at save time (the
//! `ai.mobius::FromNBits*` relayouts, folded into initializers when the graph is lowered). The
//! extraction picks it for EPs that cannot run MatMulNBits.

use egg::Id;

use super::matmul_nbits::is_weight;
use crate::ir::DType;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;

/// `matmul-nbits-to-dequantize`.
pub(super) const MATMUL_NBITS_TO_DEQUANTIZE: Applier<7> = Applier::new(
    ["?x", "?b", "?s", "?k", "?n", "?bits", "?block"],
    matmul_nbits_to_dequantize,
);

/// `matmul-nbits-with-zero-points-to-dequantize`.
pub(super) const MATMUL_NBITS_WITH_ZERO_POINTS_TO_DEQUANTIZE: Applier<8> = Applier::new(
    ["?x", "?b", "?s", "?zp", "?k", "?n", "?bits", "?block"],
    matmul_nbits_with_zero_points_to_dequantize,
);

/// `matmul-nbits-with-bias-to-dequantize`.
pub(super) const MATMUL_NBITS_WITH_BIAS_TO_DEQUANTIZE: Applier<9> = Applier::new(
    [
        "?x", "?b", "?s", "?zp", "?bias", "?k", "?n", "?bits", "?block",
    ],
    matmul_nbits_with_bias_to_dequantize,
);

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

/// Reads `?x ?b ?s ?k ?n ?bits ?block` of a MatMulNBits call with 3 inputs: see [`inline`].
fn matmul_nbits_to_dequantize(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, b, scales, k, n, bits, block]: [Id; 7],
) -> Option<Id> {
    inline(g, [x, b, scales], None, None, [k, n, bits, block])
}

/// Reads `?x ?b ?s ?zp ?k ?n ?bits ?block` of a MatMulNBits call with zero points (`?zp` may
/// be an absent input): see [`inline`].
fn matmul_nbits_with_zero_points_to_dequantize(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, b, scales, zp, k, n, bits, block]: [Id; 8],
) -> Option<Id> {
    inline(g, [x, b, scales], Some(zp), None, [k, n, bits, block])
}

/// Reads `?x ?b ?s ?zp ?bias ?k ?n ?bits ?block` of a MatMulNBits call with a bias (`?zp` may
/// be an absent input): see [`inline`].
fn matmul_nbits_with_bias_to_dequantize(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, b, scales, zp, bias, k, n, bits, block]: [Id; 9],
) -> Option<Id> {
    inline(g, [x, b, scales], Some(zp), Some(bias), [k, n, bits, block])
}

/// `MatMulNBits(x, b, scales[, zp][, bias]; K, N, bits, block_size)` (attribute classes
/// `[k, n, bits, block]`; a `zp` bound to an absent input: no zero points) → its standard
/// form. Fires for 4 or 8 bits, a block
/// size that is a power of two from 16, `B` a u8 weight `[N, ⌈K/B⌉, B·bits/8]`, scales of x's
/// float dtype `[N, ⌈K/B⌉]` (or flat), packed u8 zero points `[N, ⌈⌈K/B⌉·bits/8⌉]` (or flat)
/// and a bias `[N]` of x's dtype. Declines otherwise (g_idx, float zero points, weights
/// computed in the graph, shapes that do not match K, N, bits and block_size): then the call
/// has no exact `DequantizeLinear` form here. `accuracy_level` does not matter: the standard
/// form is the op at level 0, which every level approximates.
fn inline(
    g: &mut OnnxGraph,
    [x, b, scales]: [Id; 3],
    zp: Option<Id>,
    bias: Option<Id>,
    [k, n, bits, block]: [Id; 4],
) -> Option<Id> {
    let e = Emit::new(g);
    let zp = zp.filter(|&zp| !e.is_absent(zp));
    let (k, n) = (e.int_or(k, 0)?, e.int_or(n, 0)?);
    let (bits, block) = (e.int_or(bits, 4)?, e.int_or(block, 0)?);
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
