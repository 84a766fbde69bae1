//! mobius' own weight-relayout ops (domain `ai.mobius`): rules rewrite a weight into the layout
//! a fused kernel takes (MoE expert stacks, MatMulNBits blocks, QMoE packed values) with these
//! ops, and the optimizer folds each into an initializer when the graph is saved
//! (`opt::lower`), so no saved graph holds one and the interpreter does not evaluate them.

use super::cost::Cost;
use super::infer::{shape_dims, Attrs, Infer};
use super::types::{SymDim, TensorType};
use super::OpDef;
use crate::ir::DType;

/// Why these ops have no evaluator.
const FOLDED: &str = "evaluator: folded into an initializer when the graph is saved (opt::lower)";

/// The attributes of the MatMulNBits layouts' inverses.
const FROM_NBITS: &[&str] = &["K", "bits", "block_size", "signed"];

/// The attributes of the QMoE packed-value layouts.
const QMOE: &[&str] = &["K", "N", "bits", "block_size", "experts"];

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    relayout("FromNBitsScales", FROM_NBITS, from_nbits),
    relayout("FromNBitsWeight", FROM_NBITS, from_nbits),
    relayout("FromNBitsZeroPoints", FROM_NBITS, from_nbits),
    relayout("MoEDownStack", &["experts"], moe),
    relayout("MoEFc1", &["experts"], moe),
    relayout("MoEFc2", &["experts"], moe),
    relayout("MoEGateStack", &["experts"], moe),
    relayout("MoEUpStack", &["experts"], moe),
    relayout("NBitsScales", &[], nbits),
    relayout("NBitsWeight", &["bits", "block_size"], nbits),
    relayout("NBitsZeroPoints", &["bits", "block_size"], nbits),
    relayout("QMoEDownValues", QMOE, qmoe),
    relayout("QMoEFc1Weight", QMOE, qmoe),
    relayout("QMoEFc2Weight", QMOE, qmoe),
    relayout("QMoEGateValues", QMOE, qmoe),
    relayout("QMoEUpValues", QMOE, qmoe),
];

/// A relayout op: folded into an initializer whenever its input is one.
const fn relayout(
    op: &'static str,
    attrs: &'static [&'static str],
    infer: super::infer::InferFn,
) -> OpDef {
    OpDef::mobius(op, attrs)
        .infer(infer)
        .cost(Cost::KERNEL.folds_on_initializers())
        .lacks(FOLDED)
}

/// [`moe_layout`] of a call.
fn moe(c: &Infer<'_>) -> Vec<TensorType> {
    vec![moe_layout(c.op, &c.ty(0), c.int("experts"))]
}

/// [`qmoe_weight_layout`] of a call.
fn qmoe(c: &Infer<'_>) -> Vec<TensorType> {
    vec![qmoe_weight_layout(
        c.op,
        &c.ty(0),
        c.int("experts"),
        c.int("bits"),
    )]
}

/// [`nbits_layout`] of a call.
fn nbits(c: &Infer<'_>) -> Vec<TensorType> {
    vec![nbits_layout(
        c.op,
        &c.ty(0),
        c.int("bits"),
        c.int("block_size"),
    )]
}

/// [`from_nbits_layout`] of a call.
fn from_nbits(c: &Infer<'_>) -> Vec<TensorType> {
    vec![from_nbits_layout(c.op, &c.ty(0), c.attrs)]
}

/// The type of a MoE expert-weight relayout of `experts` experts: `MoEFc1` `[H, 2·E·I]` →
/// `[E, 2·I, H]`, `MoEFc2` `[E·I, H]` → `[E, H, I]`, `MoEGateStack` / `MoEUpStack`
/// `[E, 2·I, H]` → `[H, E·I]`, `MoEDownStack` `[E, H, I]` → `[E·I, H]` (unknown unless the
/// shapes fit).
fn moe_layout(op: &str, t: &TensorType, experts: Option<i64>) -> TensorType {
    let sizes: Option<Vec<i64>> = shape_dims(t).and_then(|d| d.iter().map(SymDim::known).collect());
    let (Some(sizes), Some(e)) = (sizes, experts.filter(|&e| e > 0)) else {
        return TensorType::default();
    };
    let known = |v: &[i64]| v.iter().map(|&d| SymDim::Known(d)).collect::<Vec<_>>();
    let shape = match (op, sizes.as_slice()) {
        ("ai.mobius::MoEFc1", &[r, c]) if c % (2 * e) == 0 => known(&[e, c / e, r]),
        ("ai.mobius::MoEFc2", &[r, c]) if r % e == 0 => known(&[e, c, r / e]),
        ("ai.mobius::MoEGateStack" | "ai.mobius::MoEUpStack", &[n, r, h])
            if n == e && r % 2 == 0 =>
        {
            known(&[h, e * r / 2])
        }
        ("ai.mobius::MoEDownStack", &[n, h, i]) if n == e => known(&[e * i, h]),
        _ => return TensorType::default(),
    };
    TensorType {
        dtype: t.dtype,
        shape: Some(shape),
    }
}

/// The type of QMoE's packed expert values from a stack of `experts` experts' values
/// (DequantizeLinear layout): `QMoEFc1Weight` `[H, 2·E·I]` → u8 `[E, 2·I, H·bits/8]`,
/// `QMoEFc2Weight` `[E·I, H]` → u8 `[E, H, I·bits/8]`, and back: `QMoEGateValues` /
/// `QMoEUpValues` u8 `[E, 2·I, H·bits/8]` → `[H, E·I]`, `QMoEDownValues` u8 `[E, H,
/// I·bits/8]` → `[E·I, H]` (I4 or I8; unknown unless the shapes fit).
fn qmoe_weight_layout(
    op: &str,
    t: &TensorType,
    experts: Option<i64>,
    bits: Option<i64>,
) -> TensorType {
    let sizes: Option<Vec<i64>> = shape_dims(t).and_then(|d| d.iter().map(SymDim::known).collect());
    let (Some(sizes), Some(e), Some(bits @ (4 | 8))) = (sizes, experts.filter(|&e| e > 0), bits)
    else {
        return TensorType::default();
    };
    let shape = match (op, sizes.as_slice()) {
        ("ai.mobius::QMoEFc1Weight", &[h, c]) if c % e == 0 && h * bits % 8 == 0 => {
            [e, c / e, h * bits / 8]
        }
        ("ai.mobius::QMoEFc2Weight", &[r, h]) if r % e == 0 && (r / e) * bits % 8 == 0 => {
            [e, h, r / e * bits / 8]
        }
        ("ai.mobius::QMoEGateValues" | "ai.mobius::QMoEUpValues", &[n, rows, packed])
            if n == e && rows % 2 == 0 =>
        {
            [packed * 8 / bits, e * rows / 2, 0]
        }
        ("ai.mobius::QMoEDownValues", &[n, h, packed]) if n == e => [e * packed * 8 / bits, h, 0],
        _ => return TensorType::default(),
    };
    let (dtype, rank) = match op {
        "ai.mobius::QMoEFc1Weight" | "ai.mobius::QMoEFc2Weight" => (DType::U8, 3),
        _ if bits == 4 => (DType::I4, 2),
        _ => (DType::I8, 2),
    };
    TensorType {
        dtype: Some(dtype),
        shape: Some(shape[..rank].iter().map(|&d| SymDim::Known(d)).collect()),
    }
}

/// The MatMulNBits layouts of a `[K, N]` block-quantized weight's parts (from the
/// DequantizeLinear layout, blocks along K): `NBitsWeight` values `[K, N]` → u8 `[N, k_blocks,
/// block·bits/8]`; `NBitsScales` `[k_blocks, N]` → `[N, k_blocks]`; `NBitsZeroPoints`
/// `[k_blocks, N]` → u8 `[N, ⌈k_blocks·bits/8⌉]`.
fn nbits_layout(op: &str, t: &TensorType, bits: Option<i64>, block: Option<i64>) -> TensorType {
    let [rows, cols] = shape_dims(t).unwrap_or(&[]) else {
        return TensorType::default();
    };
    let (Some(r), Some(n)) = (rows.known(), cols.known()) else {
        return TensorType::default();
    };
    let known = |v: i64| SymDim::Known(v);
    match (op, bits, block) {
        ("ai.mobius::NBitsScales", _, _) => TensorType {
            dtype: t.dtype,
            shape: Some(vec![known(n), known(r)]),
        },
        ("ai.mobius::NBitsWeight", Some(bits @ (4 | 8)), Some(block)) if block > 0 => TensorType {
            dtype: Some(DType::U8),
            shape: Some(vec![
                known(n),
                known((r + block - 1) / block),
                known(block * bits / 8),
            ]),
        },
        ("ai.mobius::NBitsZeroPoints", Some(bits @ (4 | 8)), Some(_)) => TensorType {
            dtype: Some(DType::U8),
            shape: Some(vec![known(n), known((r * bits + 7) / 8)]),
        },
        _ => TensorType::default(),
    }
}

/// The `DequantizeLinear` layouts (blocks along K) of MatMulNBits' inputs, the inverse of
/// [`nbits_layout`]: `FromNBitsWeight` u8 `[N, k_blocks, blob]` → `[K, N]` (I4/U4/I8/U8 by
/// `bits` and `signed`); `FromNBitsScales` `[N, k_blocks]` (or flat) → `[k_blocks, N]`;
/// `FromNBitsZeroPoints` packed u8 `[N, bytes]` (or flat) → U4/U8 `[k_blocks, N]`.
fn from_nbits_layout(op: &str, t: &TensorType, attr: &Attrs<'_>) -> TensorType {
    let (Some(k), Some(bits @ (4 | 8)), Some(block)) =
        (attr.int("K"), attr.int("bits"), attr.int("block_size"))
    else {
        return TensorType::default();
    };
    if k <= 0 || block <= 0 {
        return TensorType::default();
    }
    let blocks = (k + block - 1) / block;
    let width = match op {
        "ai.mobius::FromNBitsScales" => blocks,
        _ => (blocks * bits + 7) / 8,
    };
    let n = match shape_dims(t).unwrap_or(&[]) {
        [n, ..] if op == "ai.mobius::FromNBitsWeight" => n.known(),
        [n, _] => n.known(),
        [len] => len.known().filter(|l| l % width == 0).map(|l| l / width),
        _ => None,
    };
    let Some(n) = n else {
        return TensorType::default();
    };
    let code = |signed: bool| match (bits, signed) {
        (4, true) => DType::I4,
        (4, false) => DType::U4,
        (_, true) => DType::I8,
        (_, false) => DType::U8,
    };
    let (dtype, rows) = match op {
        "ai.mobius::FromNBitsWeight" => (Some(code(attr.int("signed") == Some(1))), k),
        "ai.mobius::FromNBitsScales" => (t.dtype, blocks),
        _ => (Some(code(false)), blocks),
    };
    TensorType {
        dtype,
        shape: Some(vec![SymDim::Known(rows), SymDim::Known(n)]),
    }
}
