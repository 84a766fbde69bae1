//! The appliers of the MatMulNBits fusion (`fusion/matmul_nbits.rules`): `MatMul(x,
//! DequantizeLinear(q, scales[, zp]))` over a weight block-quantized along K becomes
//! `com.microsoft::MatMulNBits`, its weight, scales and zero points re-laid out at save time
//! (the `ai.mobius::NBits*` relayouts, folded into initializers when the graph is lowered).

use egg::Id;

use crate::ir::DType;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;

/// `matmul-nbits`.
pub(super) const MATMUL_NBITS: Applier<7> = Applier::new(
    ["?x", "?q", "?s", "?zp", "?axis", "?block", "?odt"],
    matmul_nbits,
);

/// `matmul-nbits-without-zero-points`.
pub(super) const MATMUL_NBITS_WITHOUT_ZERO_POINTS: Applier<6> = Applier::new(
    ["?x", "?q", "?s", "?axis", "?block", "?odt"],
    matmul_nbits_without_zero_points,
);

/// Whether class `id` is an initializer, or a concatenation of initializers (folded into one
/// when saved): what a weight relayout can be computed from.
pub(super) fn is_weight(g: &OnnxGraph, id: Id) -> bool {
    g[id].nodes.iter().any(|n| match n {
        Onnx::Init(_) => true,
        Onnx::Op(op) if op.op.as_str() == "Concat" => op
            .input_ids()
            .iter()
            .all(|&c| g[c].nodes.iter().any(|n| matches!(n, Onnx::Init(_)))),
        _ => false,
    })
}

/// The static 2-D shape of class `id`.
fn matrix(g: &OnnxGraph, id: Id) -> Option<(i64, i64)> {
    match g[id].data.tensor()?.static_shape()?[..] {
        [r, c] => Some((r, c)),
        _ => None,
    }
}

/// Reads `?x ?q ?s ?zp ?axis ?block ?odt` of `(MatMul ?x (DequantizeLinear ?q ?s ?zp ?axis
/// ?block ?odt))`: see [`fuse`].
fn matmul_nbits(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, q, scales, zp, axis, block, odt]: [Id; 7],
) -> Option<Id> {
    fuse(g, [x, q, scales, zp], [axis, block, odt])
}

/// Reads `?x ?q ?s ?axis ?block ?odt` of `(MatMul ?x (DequantizeLinear ?q ?s ?axis ?block
/// ?odt))`: [`fuse`] with the zero points absent.
fn matmul_nbits_without_zero_points(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, q, scales, axis, block, odt]: [Id; 6],
) -> Option<Id> {
    let zp = g.add(Onnx::Absent);
    fuse(g, [x, q, scales, zp], [axis, block, odt])
}

/// `MatMul(x, DequantizeLinear(q, scales, zp; axis, block_size, output_dtype))` (`zp` may be
/// an absent input) → `com.microsoft::MatMulNBits`. Fires when the weight `q` `[K, N]`
/// (int4/uint4/int8/uint8) is quantized in blocks of a power of two from 16 to 256 along axis 0, `scales` `[⌈K/B⌉, N]` have x's float
/// dtype (f32 or f16), and the zero points are absent with signed values (MatMulNBits' default
/// zero point then matches once the values are offset) or present with unsigned values. The
/// `accuracy_level` is the one the optimizer was given.
fn fuse(g: &mut OnnxGraph, [x, q, scales, zp]: [Id; 4], [axis, block, odt]: [Id; 3]) -> Option<Id> {
    let e = Emit::new(g);
    let axis = e.int_or(axis, 1)?;
    let block = e.int_or(block, 0)?;
    let out_dtype = e.int_or(odt, 0)?;
    let x_dtype = e.tensor(x)?.dtype?;
    let q_dtype = e.tensor(q)?.dtype?;
    let has_zp = !e.is_absent(zp);
    if !matches!(axis, 0 | -2) || !(16..=256).contains(&block) || block.count_ones() != 1 {
        return None;
    }
    if !matches!(x_dtype, DType::F32 | DType::F16)
        || e.tensor(scales)?.dtype? != x_dtype
        || (out_dtype != 0 && DType::from_onnx_code(out_dtype as i32) != Some(x_dtype))
    {
        return None;
    }
    let bits = match (q_dtype, has_zp) {
        (DType::I4, false) | (DType::U4, true) => 4,
        (DType::I8, false) | (DType::U8, true) => 8,
        _ => return None,
    };
    let (k, n) = matrix(g, q)?;
    let blocks = (k + block - 1) / block;
    if matrix(g, scales)? != (blocks, n) || !is_weight(g, q) || !is_weight(g, scales) {
        return None;
    }
    if has_zp
        && (matrix(g, zp)? != (blocks, n)
            || g[zp].data.tensor()?.dtype? != q_dtype
            || !is_weight(g, zp))
    {
        return None;
    }
    if g[x].data.tensor()?.shape.as_ref()?.last()?.known() != Some(k) {
        return None;
    }
    let level = g.analysis.nbits_accuracy_level;
    let mut e = Emit::new(g);
    let relayout = [
        ("bits", AttrValue::Int(bits)),
        ("block_size", AttrValue::Int(block)),
    ];
    let weight = e.op("ai.mobius::NBitsWeight", &[q], &relayout);
    let scales = e.op("ai.mobius::NBitsScales", &[scales], &[]);
    let mut inputs = vec![x, weight, scales];
    if has_zp {
        inputs.push(e.op("ai.mobius::NBitsZeroPoints", &[zp], &relayout));
    }
    let level = match level {
        0 => AttrValue::Unset,
        l => AttrValue::Int(l),
    };
    Some(e.op(
        "com.microsoft::MatMulNBits",
        &inputs,
        &[
            ("K", AttrValue::Int(k)),
            ("N", AttrValue::Int(n)),
            ("accuracy_level", level),
            ("bits", AttrValue::Int(bits)),
            ("block_size", AttrValue::Int(block)),
        ],
    ))
}
