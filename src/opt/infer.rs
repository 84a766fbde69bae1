//! Output types (dtype + symbolic shape) of the ops mobius emits or rewrites into, from their
//! input types, constant inputs and attributes. Ops without a rule here get unknown types, and
//! rules that need a shape do not fire on them.

use super::lang::{AttrValue, Literal};
use super::types::{SymDim, TensorType};
use crate::ir::DType;

/// What inference sees of one input.
#[derive(Debug, Clone, Copy)]
pub struct InputView<'a> {
    /// Its type (`None` for an absent optional input).
    pub ty: Option<&'a TensorType>,
    /// Its constant value, when known.
    pub konst: Option<&'a Literal>,
    /// Its symbolic value, when a small shape tensor that is not constant (see
    /// [`super::sym_value`]).
    pub value: Option<&'a [SymDim]>,
}

impl InputView<'_> {
    /// The elements of a small rank ≤ 1 integer input: its constant value or its symbolic one.
    pub fn elements(&self) -> Option<Vec<SymDim>> {
        match self.konst {
            Some(k) => literal_elements(k),
            None => self.value.map(<[SymDim]>::to_vec),
        }
    }
}

/// The set attributes of the op being inferred or folded, by name.
#[derive(Debug, Clone, Default)]
pub struct Attrs<'a> {
    pairs: Vec<(&'a str, &'a AttrValue)>,
}

impl<'a> Attrs<'a> {
    /// Attributes from `(name, value)` pairs; `unset` values are skipped.
    pub fn new(pairs: impl IntoIterator<Item = (&'a str, &'a AttrValue)>) -> Attrs<'a> {
        Attrs {
            pairs: pairs
                .into_iter()
                .filter(|(_, v)| **v != AttrValue::Unset)
                .collect(),
        }
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&'a AttrValue> {
        self.pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// The integer value of `name`, if set and an integer.
    pub fn int(&self, name: &str) -> Option<i64> {
        self.get(name).and_then(AttrValue::int)
    }
}

/// The output types of `op` (`outputs` of them).
pub fn infer(
    op: &str,
    inputs: &[InputView<'_>],
    attr: &Attrs<'_>,
    outputs: usize,
) -> Vec<TensorType> {
    let ty = |i: usize| input_type(inputs, i);
    let int = |name: &str| attr.int(name);
    let mut result = match op {
        "Identity"
        | "Sigmoid"
        | "Tanh"
        | "Relu"
        | "Neg"
        | "Abs"
        | "Sqrt"
        | "Reciprocal"
        | "Exp"
        | "Log"
        | "Erf"
        | "Cos"
        | "Sin"
        | "Softmax"
        | "CumSum"
        | "Gelu"
        | "RMSNormalization"
        | "LayerNormalization"
        | "RotaryEmbedding"
        | "com.microsoft::RotaryEmbedding"
        | "com.microsoft::FastGelu"
        | "ScatterND"
        | "TensorScatter" => vec![ty(0)],
        "Not" | "IsNaN" => vec![ty(0).with_dtype(Some(DType::Bool))],
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "com.microsoft::BiasGelu" => {
            vec![broadcast(&ty(0), &ty(1)).with_dtype(ty(0).dtype)]
        }
        "Max" | "Min" => {
            let all = (1..inputs.len()).fold(ty(0), |acc, i| broadcast(&acc, &ty(i)));
            vec![all]
        }
        "And" | "Or" | "Xor" | "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" => {
            vec![broadcast(&ty(0), &ty(1)).with_dtype(Some(DType::Bool))]
        }
        "Where" => vec![broadcast(&broadcast(&ty(0), &ty(1)), &ty(2)).with_dtype(ty(1).dtype)],
        "Cast" => vec![ty(0).with_dtype(int("to").and_then(|c| DType::from_onnx_code(c as i32)))],
        "CastLike" => vec![ty(0).with_dtype(ty(1).dtype)],
        "MatMul" => vec![matmul(&ty(0), &ty(1))],
        "Gemm" => vec![gemm(&ty(0), &ty(1), int("transA"), int("transB"))],
        "Split" => split(inputs, attr, outputs),
        "Gather" => vec![gather(&ty(0), &ty(1), int("axis").unwrap_or(0))],
        "Shape" => vec![shape_of(&ty(0), int("start"), int("end"))],
        "Unsqueeze" => vec![unsqueeze(&ty(0), inputs.get(1).and_then(|v| v.konst))],
        "Squeeze" => vec![squeeze(&ty(0), inputs.get(1).filter(|v| v.ty.is_some()))],
        "Constant" => vec![
            constant_value(attr).map_or_else(TensorType::default, |c| TensorType {
                dtype: Some(c.dtype),
                shape: Some(c.shape.iter().map(|&d| SymDim::Known(d as i64)).collect()),
            }),
        ],
        "Concat" => vec![concat(inputs, int("axis").unwrap_or(0))],
        "Flatten" => vec![flatten(&ty(0), int("axis").unwrap_or(1))],
        "Transpose" => vec![transpose(
            &ty(0),
            attr.get("perm").and_then(AttrValue::ints),
        )],
        "Expand" => vec![from_shape_input(op, &ty(0), inputs.get(1).copied())],
        "ConstantOfShape" => {
            // The dtype of the `value` tensor attribute (f32 zero when unset).
            let dtype = match attr.get("value") {
                Some(AttrValue::Tensor(value)) => value.dtype,
                _ => DType::F32,
            };
            vec![from_shape_input(op, &ty(0), inputs.first().copied()).with_dtype(Some(dtype))]
        }
        "Reshape" => vec![reshape(&ty(0), inputs.get(1).copied(), int("allowzero"))],
        "Range" => vec![TensorType {
            dtype: ty(0).dtype,
            shape: Some(vec![range_len(inputs)]),
        }],
        "Slice" => vec![slice(inputs)],
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" => vec![reduce(inputs, attr)],
        "TopK" => top_k(inputs, int("axis").unwrap_or(-1)),
        "Attention" => attention(inputs, attr),
        "com.microsoft::GroupQueryAttention" => group_query_attention(inputs, attr),
        "com.microsoft::SkipSimplifiedLayerNormalization"
        | "com.microsoft::SkipLayerNormalization" => skip_norm(&ty(0)),
        "DequantizeLinear" => {
            let out = int("output_dtype")
                .filter(|&c| c != 0)
                .and_then(|c| DType::from_onnx_code(c as i32))
                .or(ty(1).dtype);
            vec![ty(0).with_dtype(out)]
        }
        "com.microsoft::MatMulNBits" => vec![matmul_nbits(&ty(0), int("N"))],
        "com.microsoft::MoE" | "com.microsoft::QMoE" => vec![ty(0)],
        "ai.mobius::QMoEFc1Weight"
        | "ai.mobius::QMoEFc2Weight"
        | "ai.mobius::QMoEGateValues"
        | "ai.mobius::QMoEUpValues"
        | "ai.mobius::QMoEDownValues" => {
            vec![qmoe_weight_layout(op, &ty(0), int("experts"), int("bits"))]
        }
        "ai.mobius::MoEFc1"
        | "ai.mobius::MoEFc2"
        | "ai.mobius::MoEGateStack"
        | "ai.mobius::MoEUpStack"
        | "ai.mobius::MoEDownStack" => vec![moe_layout(op, &ty(0), int("experts"))],
        "com.microsoft::GatherBlockQuantized" => vec![gather_block_quantized(inputs, attr)],
        "ai.mobius::NBitsWeight" | "ai.mobius::NBitsScales" | "ai.mobius::NBitsZeroPoints" => {
            vec![nbits_layout(op, &ty(0), int("bits"), int("block_size"))]
        }
        "ai.mobius::FromNBitsWeight"
        | "ai.mobius::FromNBitsScales"
        | "ai.mobius::FromNBitsZeroPoints" => vec![from_nbits_layout(op, &ty(0), attr)],
        _ => Vec::new(),
    };
    result.resize(outputs, TensorType::default());
    result
}

/// The type of input `i` (unknown when absent or not inferred).
fn input_type(inputs: &[InputView<'_>], i: usize) -> TensorType {
    inputs
        .get(i)
        .and_then(|v| v.ty)
        .cloned()
        .unwrap_or_default()
}

fn dims(t: &TensorType) -> Option<&[SymDim]> {
    t.shape.as_deref()
}

/// Numpy broadcasting of two shapes.
fn broadcast(a: &TensorType, b: &TensorType) -> TensorType {
    let shape = match (dims(a), dims(b)) {
        (Some(x), Some(y)) => {
            let n = x.len().max(y.len());
            let at = |d: &[SymDim], i: usize| {
                let off = n - d.len();
                if i < off {
                    SymDim::Known(1)
                } else {
                    d[i - off].clone()
                }
            };
            Some(
                (0..n)
                    .map(|i| match (at(x, i), at(y, i)) {
                        (SymDim::Known(1), d) | (d, SymDim::Known(1)) => d,
                        (p, q) if p == q => p,
                        (SymDim::Unknown, d) | (d, SymDim::Unknown) => d,
                        _ => SymDim::Unknown,
                    })
                    .collect(),
            )
        }
        _ => None,
    };
    TensorType {
        dtype: a.dtype,
        shape,
    }
}

fn matmul(a: &TensorType, b: &TensorType) -> TensorType {
    let shape = match (dims(a), dims(b)) {
        (Some(x), Some(y)) if x.len() >= 2 && y.len() >= 2 => {
            let batch = broadcast(
                &TensorType {
                    dtype: None,
                    shape: Some(x[..x.len() - 2].to_vec()),
                },
                &TensorType {
                    dtype: None,
                    shape: Some(y[..y.len() - 2].to_vec()),
                },
            );
            let mut s = batch.shape.unwrap_or_default();
            s.push(x[x.len() - 2].clone());
            s.push(y[y.len() - 1].clone());
            Some(s)
        }
        _ => None,
    };
    TensorType {
        dtype: a.dtype,
        shape,
    }
}

/// Gemm: `A [M, K]` (or `[K, M]` with `transA`) times `B [K, N]` (or `[N, K]` with `transB`)
/// gives `[M, N]` in A's dtype.
fn gemm(a: &TensorType, b: &TensorType, trans_a: Option<i64>, trans_b: Option<i64>) -> TensorType {
    let shape = match (dims(a), dims(b)) {
        (Some([a0, a1]), Some([b0, b1])) => {
            let m = if trans_a == Some(1) { a1 } else { a0 };
            let n = if trans_b == Some(1) { b0 } else { b1 };
            Some(vec![m.clone(), n.clone()])
        }
        _ => None,
    };
    TensorType {
        dtype: a.dtype,
        shape,
    }
}

/// Split along `axis` into constant sizes (the second input, or the `split` attribute before
/// opset 13), or into `outputs` equal
/// parts (the last one smaller when the dim does not divide; a symbolic dim only when the
/// parts are exact).
fn split(inputs: &[InputView<'_>], attr: &Attrs<'_>, outputs: usize) -> Vec<TensorType> {
    let x = input_type(inputs, 0);
    let unknown_axis = |d: &[SymDim], a: usize| {
        let mut s = d.to_vec();
        s[a] = SymDim::Unknown;
        s
    };
    let Some((d, a)) =
        dims(&x).and_then(|d| Some((d, axis(attr.int("axis").unwrap_or(0), d.len())?)))
    else {
        return vec![x.with_dtype(x.dtype); outputs];
    };
    // The sizes: the second input (opset ≥ 13) or the `split` attribute (before).
    let listed = match (inputs.get(1).filter(|v| v.ty.is_some()), attr.get("split")) {
        (Some(v), _) => Some(v.konst.and_then(literal_ints)),
        (None, Some(AttrValue::Ints(s))) => Some(Some(s.clone())),
        _ => None,
    };
    let sizes: Option<Vec<SymDim>> = match listed {
        Some(sizes) => sizes
            .filter(|s| s.len() == outputs)
            .map(|s| s.into_iter().map(SymDim::Known).collect()),
        None if outputs == 0 => None,
        None => match &d[a] {
            SymDim::Known(n) => {
                let n = *n;
                let part = (n + outputs as i64 - 1) / outputs as i64;
                Some(
                    (0..outputs as i64)
                        .map(|i| SymDim::Known(n.saturating_sub(i * part).clamp(0, part)))
                        .collect(),
                )
            }
            dim => match dim.div_exact(&SymDim::Known(outputs as i64)) {
                SymDim::Unknown => None,
                part => Some(vec![part; outputs]),
            },
        },
    };
    (0..outputs)
        .map(|i| {
            let mut s = unknown_axis(d, a);
            if let Some(sizes) = &sizes {
                s[a] = sizes[i].clone();
            }
            TensorType {
                dtype: x.dtype,
                shape: Some(s),
            }
        })
        .collect()
}

/// `MatMulNBits(A [.., K]) → [.., N]` in A's dtype.
fn matmul_nbits(a: &TensorType, n: Option<i64>) -> TensorType {
    let shape = match (dims(a), n) {
        (Some(x), Some(n)) if !x.is_empty() => {
            let mut s = x.to_vec();
            *s.last_mut().expect("non-empty") = SymDim::Known(n);
            Some(s)
        }
        _ => None,
    };
    TensorType {
        dtype: a.dtype,
        shape,
    }
}

/// `GatherBlockQuantized(data [V, D'], indices)`, gathering rows (gather_axis 0) of a table
/// quantized along its last axis: `indices.shape + [D]`, in the scales' dtype, where `D` is
/// `D'` (int4 / uint4 data) or `2·D'` (uint8 data packing two 4-bit values per byte).
fn gather_block_quantized(inputs: &[InputView<'_>], attr: &Attrs<'_>) -> TensorType {
    let data = input_type(inputs, 0);
    let indices = input_type(inputs, 1);
    let scales = input_type(inputs, 2);
    let shape = match (
        dims(&data),
        dims(&indices),
        attr.int("gather_axis").unwrap_or(0),
    ) {
        (Some([_, width]), Some(idx), 0) => {
            let width = match (data.dtype, width, attr.int("bits").unwrap_or(4)) {
                (Some(DType::U8), SymDim::Known(w), 4) => SymDim::Known(w * 2),
                (Some(DType::U8), _, 4) => SymDim::Unknown,
                _ => width.clone(),
            };
            let mut s = idx.to_vec();
            s.push(width);
            Some(s)
        }
        _ => None,
    };
    TensorType {
        dtype: scales.dtype,
        shape,
    }
}

/// The type of a MoE expert-weight relayout of `experts` experts: `MoEFc1` `[H, 2·E·I]` →
/// `[E, 2·I, H]`, `MoEFc2` `[E·I, H]` → `[E, H, I]`, `MoEGateStack` / `MoEUpStack`
/// `[E, 2·I, H]` → `[H, E·I]`, `MoEDownStack` `[E, H, I]` → `[E·I, H]` (unknown unless the
/// shapes fit).
fn moe_layout(op: &str, t: &TensorType, experts: Option<i64>) -> TensorType {
    let sizes: Option<Vec<i64>> = dims(t).and_then(|d| d.iter().map(SymDim::known).collect());
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
    let sizes: Option<Vec<i64>> = dims(t).and_then(|d| d.iter().map(SymDim::known).collect());
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
    let [rows, cols] = dims(t).unwrap_or(&[]) else {
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
    let n = match dims(t).unwrap_or(&[]) {
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

fn axis(a: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if a < 0 { a + r } else { a };
    (0..r).contains(&a).then_some(a as usize)
}

fn gather(data: &TensorType, idx: &TensorType, ax: i64) -> TensorType {
    let shape = match (dims(data), dims(idx)) {
        (Some(d), Some(i)) => axis(ax, d.len()).map(|a| {
            let mut s = d[..a].to_vec();
            s.extend_from_slice(i);
            s.extend_from_slice(&d[a + 1..]);
            s
        }),
        _ => None,
    };
    TensorType {
        dtype: data.dtype,
        shape,
    }
}

fn shape_of(t: &TensorType, start: Option<i64>, end: Option<i64>) -> TensorType {
    let len = t.rank().map(|r| {
        let clamp = |v: i64| {
            let v = if v < 0 { v + r as i64 } else { v };
            v.clamp(0, r as i64)
        };
        let s = clamp(start.unwrap_or(0));
        let e = clamp(end.unwrap_or(r as i64));
        (e - s).max(0)
    });
    TensorType {
        dtype: Some(DType::I64),
        shape: Some(vec![len.map_or(SymDim::Unknown, SymDim::Known)]),
    }
}

/// Largest tensor given a symbolic value (shape tensors have one element per axis; see
/// [`super::sym_value`]).
pub const MAX_VALUE_LEN: usize = 16;

/// The elements of a small constant of rank ≤ 1 (int64, int32 or bool) as known dims.
pub fn literal_elements(lit: &Literal) -> Option<Vec<SymDim>> {
    if lit.shape.len() > 1 || lit.shape.iter().product::<usize>() > MAX_VALUE_LEN {
        return None;
    }
    let ints = match lit.dtype {
        DType::Bool => lit.bytes.iter().map(|&b| i64::from(b != 0)).collect(),
        _ => literal_ints(lit)?,
    };
    Some(ints.into_iter().map(SymDim::Known).collect())
}

/// Integer values of a small constant (i64 or i32).
pub fn literal_ints(lit: &Literal) -> Option<Vec<i64>> {
    match lit.dtype {
        DType::I64 => Some(
            lit.bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        ),
        DType::I32 => Some(
            lit.bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
        ),
        _ => None,
    }
}

fn unsqueeze(t: &TensorType, axes: Option<&Literal>) -> TensorType {
    let shape = match (dims(t), axes.and_then(literal_ints)) {
        (Some(d), Some(axes)) => {
            let rank = d.len() + axes.len();
            let mut positions: Vec<usize> = axes.iter().filter_map(|&a| axis(a, rank)).collect();
            positions.sort_unstable();
            let mut rest = d.iter();
            (positions.len() == axes.len()).then(|| {
                (0..rank)
                    .map(|i| {
                        if positions.contains(&i) {
                            SymDim::Known(1)
                        } else {
                            rest.next().cloned().unwrap_or(SymDim::Unknown)
                        }
                    })
                    .collect()
            })
        }
        _ => None,
    };
    TensorType {
        dtype: t.dtype,
        shape,
    }
}

/// The value of a `Constant` node: its `value` tensor, or a `value_float(s)` / `value_int(s)`
/// scalar or list (strings are not folded).
pub fn constant_value(attr: &Attrs<'_>) -> Option<Literal> {
    use crate::ir::TensorData;
    let tensor = |data: TensorData| Literal::from(&data);
    Some(match attr.get("value") {
        Some(AttrValue::Tensor(t)) => (**t).clone(),
        Some(_) => return None,
        None => match (
            attr.get("value_float"),
            attr.get("value_floats"),
            attr.get("value_int"),
            attr.get("value_ints"),
        ) {
            (Some(AttrValue::Float(b)), None, None, None) => {
                tensor(TensorData::from_f32(Vec::new(), &[f32::from_bits(*b)]))
            }
            (None, Some(AttrValue::Floats(v)), None, None) => {
                let values: Vec<f32> = v.iter().map(|b| f32::from_bits(*b)).collect();
                tensor(TensorData::from_f32(vec![values.len()], &values))
            }
            (None, None, Some(AttrValue::Int(v)), None) => {
                tensor(TensorData::from_i64(Vec::new(), &[*v]))
            }
            (None, None, None, Some(AttrValue::Ints(v))) => {
                tensor(TensorData::from_i64(vec![v.len()], v))
            }
            _ => return None,
        },
    })
}

/// Squeeze: the listed axes go; without axes, every dim of size 1 goes (only decidable when
/// every dim is known).
fn squeeze(t: &TensorType, axes: Option<&InputView<'_>>) -> TensorType {
    let shape = dims(t).and_then(|d| match axes {
        Some(axes) => {
            let drop: Vec<usize> = literal_ints(axes.konst?)?
                .iter()
                .map(|&a| axis(a, d.len()))
                .collect::<Option<_>>()?;
            Some(
                d.iter()
                    .enumerate()
                    .filter(|(i, _)| !drop.contains(i))
                    .map(|(_, s)| s.clone())
                    .collect(),
            )
        }
        None => {
            let known: Option<Vec<i64>> = d.iter().map(SymDim::known).collect();
            Some(
                known?
                    .into_iter()
                    .filter(|&k| k != 1)
                    .map(SymDim::Known)
                    .collect(),
            )
        }
    });
    TensorType {
        dtype: t.dtype,
        shape,
    }
}

/// A reduction over constant `axes` (the second input since opset 18, an attribute before):
/// those dims become 1 (`keepdims` 1, the default) or disappear. No axes reduce every dim,
/// unless `noop_with_empty_axes` makes the op an identity.
/// TopK's values (the input's dtype) and int64 indices: the input shape with `k` (the
/// constant input 1) along `axis`.
fn top_k(inputs: &[InputView<'_>], axis_attr: i64) -> Vec<TensorType> {
    let t = input_type(inputs, 0);
    let k = inputs
        .get(1)
        .and_then(|v| v.konst)
        .and_then(literal_ints)
        .and_then(|k| (k.len() == 1).then(|| k[0]));
    let shape = dims(&t).map(|d| {
        let at = axis(axis_attr, d.len());
        d.iter()
            .enumerate()
            .map(|(i, dim)| match (Some(i) == at, k) {
                (false, _) => dim.clone(),
                (true, Some(k)) => SymDim::Known(k),
                (true, None) => SymDim::Unknown,
            })
            .collect()
    });
    let values = TensorType {
        dtype: t.dtype,
        shape,
    };
    let indices = values.with_dtype(Some(DType::I64));
    vec![values, indices]
}

fn reduce(inputs: &[InputView<'_>], attr: &Attrs<'_>) -> TensorType {
    let t = input_type(inputs, 0);
    let axes = match (inputs.get(1), attr.get("axes")) {
        (Some(v), None) => v.konst.and_then(literal_ints),
        (None, Some(AttrValue::Ints(a))) => Some(a.clone()),
        (None, None) => Some(Vec::new()),
        _ => None,
    };
    let keep = attr.int("keepdims").unwrap_or(1) != 0;
    let shape = match (dims(&t), axes) {
        (Some(d), Some(axes)) if axes.is_empty() && attr.int("noop_with_empty_axes") == Some(1) => {
            Some(d.to_vec())
        }
        (Some(d), Some(axes)) => {
            let positions: Option<Vec<usize>> = match axes.is_empty() {
                true => Some((0..d.len()).collect()),
                false => axes.iter().map(|&a| axis(a, d.len())).collect(),
            };
            positions.map(|p| {
                d.iter()
                    .enumerate()
                    .filter_map(|(i, dim)| match (p.contains(&i), keep) {
                        (false, _) => Some(dim.clone()),
                        (true, true) => Some(SymDim::Known(1)),
                        (true, false) => None,
                    })
                    .collect()
            })
        }
        _ => None,
    };
    TensorType {
        dtype: t.dtype,
        shape,
    }
}

fn concat(inputs: &[InputView<'_>], ax: i64) -> TensorType {
    let types: Vec<TensorType> = (0..inputs.len()).map(|i| input_type(inputs, i)).collect();
    let dtype = types.first().and_then(|t| t.dtype);
    let all: Option<Vec<&[SymDim]>> = types.iter().map(dims).collect();
    let shape = all.and_then(|all| {
        let first = all.first()?;
        let a = axis(ax, first.len())?;
        // The other dims are equal at run time; inputs that name one differently (an export's
        // inputs renamed independently) leave it unknown rather than guessed from one input, so
        // that no other computation of the value is typed with another name.
        let mut s: Vec<SymDim> = first
            .iter()
            .enumerate()
            .map(
                |(i, d)| match all.iter().all(|o| o.get(i).is_none_or(|x| x.compatible(d))) {
                    true => all
                        .iter()
                        .fold(d.clone(), |acc, o| acc.join(o.get(i).unwrap_or(&acc))),
                    false => SymDim::Unknown,
                },
            )
            .collect();
        s[a] = all
            .iter()
            .skip(1)
            .fold(first[a].clone(), |acc, d| match (&acc, d.get(a)) {
                (SymDim::Known(x), Some(SymDim::Known(y))) => SymDim::Known(x + y),
                (acc, Some(d)) => acc.add(d),
                _ => SymDim::Unknown,
            });
        Some(s)
    });
    TensorType { dtype, shape }
}

/// Flatten: `[d0 … d(axis−1), d(axis) … dn]` → `[d0·…·d(axis−1), d(axis)·…·dn]`.
fn flatten(t: &TensorType, ax: i64) -> TensorType {
    let shape = dims(t).and_then(|d| {
        let r = d.len() as i64;
        let a = if ax < 0 { ax + r } else { ax };
        let a = usize::try_from(a).ok().filter(|&a| a <= d.len())?;
        let product = |f: &[SymDim]| f.iter().fold(SymDim::Known(1), |acc, x| acc.mul(x));
        Some(vec![product(&d[..a]), product(&d[a..])])
    });
    TensorType {
        dtype: t.dtype,
        shape,
    }
}

fn transpose(t: &TensorType, perm: Option<&[i64]>) -> TensorType {
    let shape = dims(t).map(|d| match perm {
        Some(p) if p.len() == d.len() => p
            .iter()
            .map(|&i| d.get(i as usize).cloned().unwrap_or(SymDim::Unknown))
            .collect(),
        _ => d.iter().rev().cloned().collect(),
    });
    TensorType {
        dtype: t.dtype,
        shape,
    }
}

/// The dims a shape tensor's element stands for: a number ≥ 0 or a never-negative symbolic
/// dim (taken as positive, as exporters declare them), else unknown.
fn target_dim(d: &SymDim) -> SymDim {
    match d {
        SymDim::Known(v) if *v >= 0 => d.clone(),
        SymDim::Sym(_) if d.is_nonnegative() => d.clone(),
        _ => SymDim::Unknown,
    }
}

/// Expand / Reshape / ConstantOfShape: the output shape comes from a shape tensor, constant or
/// symbolic (see [`super::sym_value`]); else only the rank, from the shape tensor's length.
fn from_shape_input(op: &str, data: &TensorType, shape: Option<InputView<'_>>) -> TensorType {
    let rank = shape
        .and_then(|s| s.ty)
        .and_then(|t| t.static_shape())
        .and_then(|s| s.first().copied());
    let values: Option<Vec<SymDim>> = shape
        .and_then(|s| s.elements())
        .map(|v| v.iter().map(target_dim).collect());
    // ConstantOfShape's dtype comes from its attribute (set by the caller).
    let dtype = data.dtype;
    let out = match (values, rank) {
        (Some(v), _) if op == "ConstantOfShape" => Some(v),
        (Some(v), _) if op == "Expand" => Some(
            broadcast(
                data,
                &TensorType {
                    dtype: None,
                    shape: Some(v),
                },
            )
            .shape
            .unwrap_or_default(),
        ),
        (_, Some(r)) if r >= 0 => Some(vec![SymDim::Unknown; r as usize]),
        _ => None,
    };
    TensorType { dtype, shape: out }
}

/// Reshape: the target shape (constant or symbolic) gives its dims, the input's dim for each 0
/// (unless `allowzero`), and for a single −1 the input's size divided by the other dims, equal
/// factors cancelled first (`[batch, seq, 64]` → `[batch, seq, -1, 16]` gives 4); otherwise
/// only the rank (from the shape input's length).
fn reshape(data: &TensorType, shape: Option<InputView<'_>>, allowzero: Option<i64>) -> TensorType {
    let Some(target) = shape.and_then(|s| s.elements()) else {
        return from_shape_input("Reshape", data, shape);
    };
    let input = dims(data);
    let copy_zero = allowzero.unwrap_or(0) == 0;
    let mut out: Vec<SymDim> = target
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            SymDim::Known(0) if copy_zero => input
                .and_then(|d| d.get(i).cloned())
                .unwrap_or(SymDim::Unknown),
            v => target_dim(v),
        })
        .collect();
    let minus: Vec<usize> = (0..target.len())
        .filter(|&i| target[i] == SymDim::Known(-1))
        .collect();
    if let ([minus], Some(input)) = (minus.as_slice(), input) {
        let others: Vec<SymDim> = (0..out.len())
            .filter(|i| i != minus)
            .map(|i| out[i].clone())
            .collect();
        out[*minus] = quotient(input, &others);
    }
    TensorType {
        dtype: data.dtype,
        shape: Some(out),
    }
}

/// The product of `num` divided by the product of `den`, equal factors cancelled first, when
/// the division is exact (unknown otherwise).
fn quotient(num: &[SymDim], den: &[SymDim]) -> SymDim {
    let mut num: Vec<SymDim> = num.to_vec();
    let mut rest = Vec::new();
    for d in den {
        match num.iter().position(|n| n == d && *n != SymDim::Unknown) {
            Some(i) => {
                num.swap_remove(i);
            }
            None => rest.push(d.clone()),
        }
    }
    let product = |f: &[SymDim]| f.iter().fold(SymDim::Known(1), |acc, d| acc.mul(d));
    product(&num).div_exact(&product(&rest))
}

/// Range's length when its start, limit and delta are read: `max(⌈(limit − start) / delta⌉,
/// 0)` for numbers, `limit − start` for a delta of 1 when that is never negative.
fn range_len(inputs: &[InputView<'_>]) -> SymDim {
    let scalar = |i: usize| match inputs.get(i).and_then(InputView::elements).as_deref() {
        Some([d]) => d.clone(),
        _ => SymDim::Unknown,
    };
    match (scalar(0), scalar(1), scalar(2)) {
        (SymDim::Known(s), SymDim::Known(l), SymDim::Known(d)) if d != 0 => l
            .checked_sub(s)
            .and_then(|span| {
                let (q, r) = (span / d, span % d);
                q.checked_add(i64::from(r != 0 && (r < 0) == (d < 0)))
            })
            .map_or(SymDim::Unknown, |n| SymDim::Known(n.max(0))),
        (s, l, SymDim::Known(1)) => {
            let span = l.sub(&s);
            match span.is_nonnegative() {
                true => span,
                false => SymDim::Unknown,
            }
        }
        _ => SymDim::Unknown,
    }
}

/// At least this large, a Slice end is past the end of any dim (exporters write `i64::MAX`).
const SLICE_TO_END: i64 = 1 << 62;

/// Slice: the input's rank and dtype; a sliced dim is computed when the starts/ends (constant
/// or symbolic) and steps are read with a step of 1: from numbers on a known dim, or as the
/// whole dim when it starts at 0 and ends at the dim itself or past any end; unknown otherwise.
fn slice(inputs: &[InputView<'_>]) -> TensorType {
    let data = input_type(inputs, 0);
    let konst = |i: usize| inputs.get(i).and_then(|v| v.konst).and_then(literal_ints);
    let bound = |i: usize| inputs.get(i).and_then(InputView::elements);
    let shape = dims(&data).map(|d| {
        let (starts, ends) = (bound(1), bound(2));
        // How many axes are sliced: the length of `starts`, from its value or its static type.
        let count = match (&starts, inputs.get(1).and_then(|v| v.ty)) {
            (Some(s), _) => s.len(),
            (None, Some(t)) => match t.static_shape().as_deref() {
                Some([n]) if *n >= 0 => *n as usize,
                _ => return vec![SymDim::Unknown; d.len()],
            },
            (None, None) => return vec![SymDim::Unknown; d.len()],
        };
        let axes = match inputs.get(3).and_then(|v| v.ty) {
            None => Some((0..count as i64).collect()),
            Some(_) => konst(3),
        };
        let steps = match inputs.get(4).and_then(|v| v.ty) {
            None => Some(vec![1; count]),
            Some(_) => konst(4),
        };
        let mut out = d.to_vec();
        let Some(axes) = axes else {
            return vec![SymDim::Unknown; d.len()];
        };
        for (i, &a) in axes.iter().enumerate() {
            let Some(a) = axis(a, d.len()) else {
                return vec![SymDim::Unknown; d.len()];
            };
            let at = |v: &Option<Vec<SymDim>>| v.as_ref().and_then(|v| v.get(i).cloned());
            let step_one = steps.as_ref().and_then(|st| st.get(i)) == Some(&1);
            out[a] = match (at(&starts), at(&ends), &d[a]) {
                (Some(SymDim::Known(s)), Some(SymDim::Known(e)), SymDim::Known(n)) if step_one => {
                    let clamp = |v: i64| if v < 0 { v + n } else { v }.clamp(0, *n);
                    SymDim::Known((clamp(e) - clamp(s)).max(0))
                }
                (Some(SymDim::Known(0)), Some(e), n) if step_one => match e {
                    SymDim::Known(e) if e >= SLICE_TO_END => n.clone(),
                    e if e == *n => n.clone(),
                    _ => SymDim::Unknown,
                },
                _ => SymDim::Unknown,
            };
        }
        out
    });
    TensorType {
        dtype: data.dtype,
        shape,
    }
}

/// Opset-23/24 Attention: `Y`, `present_key`, `present_value` (3-D or 4-D inputs).
fn attention(inputs: &[InputView<'_>], attr: &Attrs<'_>) -> Vec<TensorType> {
    let ty = |i: usize| input_type(inputs, i);
    let (q, k, v, past_k, past_v) = (ty(0), ty(1), ty(2), ty(4), ty(5));
    let int = |name: &str| attr.int(name);
    let (Some(qd), Some(kd), Some(vd)) = (dims(&q), dims(&k), dims(&v)) else {
        return vec![q.clone(), past_k, past_v];
    };
    let present = |new: &[SymDim], past: &TensorType, heads: Option<i64>| -> TensorType {
        let shape = if new.len() == 4 {
            let mut s = new.to_vec();
            if let Some(p) = dims(past).filter(|p| p.len() == 4) {
                s[2] = p[2].add(&new[2]);
            }
            Some(s)
        } else if new.len() == 3 {
            let head_dim = match (&new[2], heads) {
                (SymDim::Known(w), Some(h)) if h > 0 => SymDim::Known(w / h),
                _ => SymDim::Unknown,
            };
            let total = match dims(past).filter(|p| p.len() == 4) {
                Some(p) => p[2].add(&new[1]),
                None => new[1].clone(),
            };
            Some(vec![
                new[0].clone(),
                heads.map_or(SymDim::Unknown, SymDim::Known),
                total,
                head_dim,
            ])
        } else {
            None
        };
        TensorType {
            dtype: q.dtype,
            shape,
        }
    };
    let kv_heads = int("kv_num_heads");
    let q_heads = int("q_num_heads");
    let y = if qd.len() == 3 && vd.len() == 3 {
        let width = match (&vd[2], kv_heads, q_heads) {
            (SymDim::Known(w), Some(kv), Some(qh)) if kv > 0 => SymDim::Known(w / kv * qh),
            _ => SymDim::Unknown,
        };
        TensorType::new(
            q.dtype.unwrap_or(DType::F32),
            vec![qd[0].clone(), qd[1].clone(), width],
        )
    } else if qd.len() == 4 && vd.len() == 4 {
        TensorType::new(
            q.dtype.unwrap_or(DType::F32),
            vec![qd[0].clone(), qd[1].clone(), qd[2].clone(), vd[3].clone()],
        )
    } else {
        TensorType::default()
    };
    vec![
        y,
        present(kd, &past_k, kv_heads),
        present(vd, &past_v, kv_heads),
    ]
}

/// com.microsoft GroupQueryAttention: `output`, `present_key`, `present_value` (packed or not).
fn group_query_attention(inputs: &[InputView<'_>], attr: &Attrs<'_>) -> Vec<TensorType> {
    let ty = |i: usize| input_type(inputs, i);
    let int = |name: &str| attr.int(name);
    let (q, past_k, past_v) = (ty(0), ty(3), ty(4));
    let (heads, kv) = (int("num_heads"), int("kv_num_heads"));
    let head_dim = dims(&past_k)
        .and_then(|p| p.get(3).cloned())
        .unwrap_or(SymDim::Unknown);
    let y = match (dims(&q), &head_dim, heads) {
        (Some(d), SymDim::Known(hd), Some(h)) if d.len() == 3 => TensorType::new(
            q.dtype.unwrap_or(DType::F32),
            vec![d[0].clone(), d[1].clone(), SymDim::Known(hd * h)],
        ),
        _ => q.clone(),
    };
    let present = |past: &TensorType| TensorType {
        dtype: past.dtype,
        shape: match (dims(past), dims(&q)) {
            (Some(p), Some(d)) if p.len() == 4 && d.len() == 3 => Some(vec![
                p[0].clone(),
                kv.map_or(p[1].clone(), SymDim::Known),
                p[2].add(&d[1]),
                p[3].clone(),
            ]),
            _ => None,
        },
    };
    vec![y, present(&past_k), present(&past_v)]
}

/// Skip*LayerNormalization: `output`, `mean`, `inv_std_var`, `input_skip_bias_sum`.
fn skip_norm(x: &TensorType) -> Vec<TensorType> {
    let stats = TensorType {
        dtype: Some(DType::F32),
        shape: dims(x).map(|d| {
            let mut s = d.to_vec();
            if let Some(last) = s.last_mut() {
                *last = SymDim::Known(1);
            }
            s
        }),
    };
    vec![x.clone(), stats.clone(), stats, x.clone()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::TensorData;

    fn tensor(dims: &[i64]) -> TensorType {
        TensorType {
            dtype: Some(DType::I64),
            shape: Some(dims.iter().map(|&d| SymDim::Known(d)).collect()),
        }
    }

    #[test]
    fn slice_with_runtime_starts_and_default_axes_keeps_only_the_rank() {
        let (x, bounds) = (tensor(&[4, 8]), tensor(&[2]));
        let view = |ty| InputView {
            ty: Some(ty),
            konst: None,
            value: None,
        };
        let out = infer(
            "Slice",
            &[view(&x), view(&bounds), view(&bounds)],
            &Attrs::default(),
            1,
        );
        assert_eq!(out[0].shape, Some(vec![SymDim::Unknown; 2]));
    }

    #[test]
    fn top_k_puts_k_on_its_axis_with_int64_indices() {
        let x = TensorType {
            dtype: Some(DType::F16),
            shape: Some(vec![SymDim::Sym("b".into()), SymDim::Known(8)]),
        };
        let k = Literal::from(&TensorData::from_i64(vec![1], &[2]));
        let k_ty = tensor(&[1]);
        let inputs = [
            InputView {
                ty: Some(&x),
                konst: None,
                value: None,
            },
            InputView {
                ty: Some(&k_ty),
                konst: Some(&k),
                value: None,
            },
        ];
        let out = infer("TopK", &inputs, &Attrs::default(), 2);
        let shape = Some(vec![SymDim::Sym("b".into()), SymDim::Known(2)]);
        assert_eq!((out[0].dtype, &out[0].shape), (Some(DType::F16), &shape));
        assert_eq!((out[1].dtype, &out[1].shape), (Some(DType::I64), &shape));
        let runtime_k = [
            inputs[0],
            InputView {
                konst: None,
                ..inputs[1]
            },
        ];
        let out = infer("TopK", &runtime_k, &Attrs::default(), 2);
        let unknown = Some(vec![SymDim::Sym("b".into()), SymDim::Unknown]);
        assert_eq!(out[0].shape, unknown);
    }

    #[test]
    fn squeeze_drops_listed_axes_or_known_ones_and_keeps_the_dtype() {
        let x = TensorType {
            dtype: Some(DType::I64),
            shape: Some(vec![SymDim::Known(1), SymDim::Sym("n".into())]),
        };
        let axes = Literal::from(&TensorData::from_i64(vec![1], &[0]));
        let listed = [
            InputView {
                ty: Some(&x),
                konst: None,
                value: None,
            },
            InputView {
                ty: Some(&tensor(&[1])),
                konst: Some(&axes),
                value: None,
            },
        ];
        let out = infer("Squeeze", &listed, &Attrs::default(), 1);
        assert_eq!(out[0].dtype, Some(DType::I64));
        assert_eq!(out[0].shape, Some(vec![SymDim::Sym("n".into())]));
        // Without axes, a symbolic dim may be 1: only the dtype is known.
        let out = infer("Squeeze", &listed[..1], &Attrs::default(), 1);
        assert_eq!(
            (out[0].dtype, out[0].shape.clone()),
            (Some(DType::I64), None)
        );
        // Axes computed at run time: only the dtype.
        let runtime = [
            listed[0],
            InputView {
                ty: Some(&tensor(&[1])),
                konst: None,
                value: None,
            },
        ];
        let out = infer("Squeeze", &runtime, &Attrs::default(), 1);
        assert_eq!(
            (out[0].dtype, out[0].shape.clone()),
            (Some(DType::I64), None)
        );
    }

    #[test]
    fn constant_nodes_have_the_type_and_value_of_their_attribute() {
        let cases = [
            ("value_int", AttrValue::Int(7), DType::I64, vec![]),
            (
                "value_ints",
                AttrValue::Ints(vec![1, 2]),
                DType::I64,
                vec![SymDim::Known(2)],
            ),
            (
                "value_float",
                AttrValue::Float(1.5f32.to_bits()),
                DType::F32,
                vec![],
            ),
        ];
        for (name, value, dtype, shape) in cases {
            let attrs = Attrs::new([(name, &value)]);
            let out = infer("Constant", &[], &attrs, 1);
            assert_eq!(out[0].dtype, Some(dtype), "{name}");
            assert_eq!(out[0].shape, Some(shape), "{name}");
            let folded = crate::opt::fold::fold("Constant", &[], &attrs).expect(name);
            assert_eq!(folded.dtype, dtype, "{name}");
        }
        let tensor_value = AttrValue::Tensor(Box::new(Literal::from(&TensorData::from_i64(
            vec![3],
            &[4, 5, 6],
        ))));
        let attrs = Attrs::new([("value", &tensor_value)]);
        assert_eq!(
            crate::opt::fold::fold("Constant", &[], &attrs).and_then(|l| literal_ints(&l)),
            Some(vec![4, 5, 6])
        );
        let string = AttrValue::Str("s".into());
        let attrs = Attrs::new([("value_string", &string)]);
        assert_eq!(infer("Constant", &[], &attrs, 1)[0].dtype, None);
    }

    #[test]
    fn max_and_min_broadcast_all_their_inputs() {
        let (a, b, c) = (tensor(&[3, 1, 1]), tensor(&[4, 1]), tensor(&[5]));
        let view = |ty| InputView {
            ty: Some(ty),
            konst: None,
            value: None,
        };
        for op in ["Max", "Min"] {
            let out = infer(op, &[view(&a), view(&b), view(&c)], &Attrs::default(), 1);
            assert_eq!(out[0], tensor(&[3, 4, 5]), "{op}");
            let out = infer(op, &[view(&b)], &Attrs::default(), 1);
            assert_eq!(out[0], b, "{op}");
        }
    }

    #[test]
    fn constant_of_shape_takes_the_dtype_of_its_value() {
        let shape = tensor(&[2]);
        let dims = Literal::from(&TensorData::from_i64(vec![2], &[3, 5]));
        let view = [InputView {
            ty: Some(&shape),
            konst: Some(&dims),
            value: None,
        }];
        let one = AttrValue::Tensor(Box::new(Literal::from(&TensorData::from_i64(
            vec![1],
            &[1],
        ))));
        let out = infer("ConstantOfShape", &view, &Attrs::new([("value", &one)]), 1);
        assert_eq!(out[0], tensor(&[3, 5]));
        let out = infer("ConstantOfShape", &view, &Attrs::default(), 1);
        assert_eq!(out[0].dtype, Some(DType::F32));
    }

    #[test]
    fn slice_with_constant_bounds_computes_the_sliced_dims() {
        let (x, bounds) = (tensor(&[4, 8]), tensor(&[2]));
        let starts = Literal::from(&TensorData::from_i64(vec![2], &[1, 2]));
        let ends = Literal::from(&TensorData::from_i64(vec![2], &[3, 5]));
        let out = infer(
            "Slice",
            &[
                InputView {
                    ty: Some(&x),
                    konst: None,
                    value: None,
                },
                InputView {
                    ty: Some(&bounds),
                    konst: Some(&starts),
                    value: None,
                },
                InputView {
                    ty: Some(&bounds),
                    konst: Some(&ends),
                    value: None,
                },
            ],
            &Attrs::default(),
            1,
        );
        assert_eq!(out[0].shape, Some(vec![SymDim::Known(2), SymDim::Known(3)]));
    }

    fn sym(s: &str) -> SymDim {
        SymDim::expr(s)
    }

    fn typed(dtype: DType, shape: Vec<SymDim>) -> TensorType {
        TensorType::new(dtype, shape)
    }

    fn valued<'a>(t: &'a TensorType, value: &'a [SymDim]) -> InputView<'a> {
        InputView {
            ty: Some(t),
            konst: None,
            value: Some(value),
        }
    }

    fn plain(t: &TensorType) -> InputView<'_> {
        InputView {
            ty: Some(t),
            konst: None,
            value: None,
        }
    }

    #[test]
    fn reshape_to_a_symbolic_target_copies_zeros_and_cancels_factors_for_minus_one() {
        let x = typed(
            DType::F32,
            vec![sym("batch"), sym("past + seq"), SymDim::Known(64)],
        );
        let t4 = tensor(&[4]);
        let run = |target: &[SymDim], allowzero: i64| {
            let az = AttrValue::Int(allowzero);
            let out = infer(
                "Reshape",
                &[plain(&x), valued(&t4, target)],
                &Attrs::new([("allowzero", &az)]),
                1,
            );
            out[0].shape.clone().unwrap()
        };
        let (k, u) = (SymDim::Known, SymDim::Unknown);
        assert_eq!(
            run(&[sym("batch"), sym("seq + past"), k(-1), k(16)], 0),
            [sym("batch"), sym("past + seq"), k(4), k(16)]
        );
        assert_eq!(
            run(&[k(0), k(0), k(4), k(-1)], 0),
            [sym("batch"), sym("past + seq"), k(4), k(16)]
        );
        // Heads merged: [batch, past + seq, 64] → [-1, past + seq, 16] leaves 4·batch.
        assert_eq!(
            run(&[k(-1), sym("past + seq"), k(16), k(1)], 0)[0],
            sym("4*batch")
        );
        // A factor that does not cancel, an unknown or a possibly negative element.
        assert_eq!(run(&[sym("batch"), sym("seq"), k(-1), k(16)], 0)[2], u);
        assert_eq!(run(&[u.clone(), sym("past + seq"), k(-1), k(16)], 0)[2], u);
        assert_eq!(run(&[sym("seq + -1"), k(1), k(1), k(1)], 0)[0], u);
        // allowzero keeps 0 as a dim (and then -1 is not computed).
        assert_eq!(run(&[k(0), k(0), k(4), k(-1)], 1), [k(0), k(0), k(4), u]);
    }

    #[test]
    fn expand_and_constant_of_shape_take_symbolic_shapes() {
        let x = typed(
            DType::F32,
            vec![SymDim::Known(1), SymDim::Known(1), sym("seq")],
        );
        let t3 = tensor(&[3]);
        let target = [sym("batch"), SymDim::Known(4), SymDim::Known(1)];
        let out = infer(
            "Expand",
            &[plain(&x), valued(&t3, &target)],
            &Attrs::default(),
            1,
        );
        assert_eq!(
            out[0].shape,
            Some(vec![sym("batch"), SymDim::Known(4), sym("seq")])
        );
        let fill = AttrValue::Tensor(Box::new(Literal::from(&TensorData::from_i64(
            vec![1],
            &[0],
        ))));
        let out = infer(
            "ConstantOfShape",
            &[valued(&t3, &target)],
            &Attrs::new([("value", &fill)]),
            1,
        );
        assert_eq!(out[0], typed(DType::I64, target.to_vec()));
    }

    #[test]
    fn range_and_slice_lengths_from_symbolic_bounds() {
        let scalar = tensor(&[]);
        let (zero, seq, one) = ([SymDim::Known(0)], [sym("seq")], [SymDim::Known(1)]);
        let (past, three) = ([sym("past")], [SymDim::Known(3)]);
        let range = |start: &[SymDim], limit: &[SymDim], delta: &[SymDim]| {
            infer(
                "Range",
                &[
                    valued(&scalar, start),
                    valued(&scalar, limit),
                    valued(&scalar, delta),
                ],
                &Attrs::default(),
                1,
            )[0]
            .shape
            .clone()
            .unwrap()[0]
                .clone()
        };
        assert_eq!(range(&zero, &seq, &one), sym("seq"));
        assert_eq!(range(&past, &[sym("past + seq")], &one), sym("seq"));
        // seq − past may be negative; a step other than 1 on symbols is not computed.
        assert_eq!(range(&past, &seq, &one), SymDim::Unknown);
        assert_eq!(range(&zero, &seq, &three), SymDim::Unknown);
        let ten = [SymDim::Known(10)];
        assert_eq!(range(&one, &ten, &three), SymDim::Known(3));
        assert_eq!(range(&ten, &one, &[SymDim::Known(-4)]), SymDim::Known(3));
        assert_eq!(range(&ten, &one, &one), SymDim::Known(0));

        let x = typed(DType::F32, vec![sym("batch"), sym("seq")]);
        let t1 = tensor(&[1]);
        let slice = |start: &[SymDim], end: &[SymDim]| {
            infer(
                "Slice",
                &[plain(&x), valued(&t1, start), valued(&t1, end)],
                &Attrs::default(),
                1,
            )[0]
            .shape
            .clone()
            .unwrap()[0]
                .clone()
        };
        assert_eq!(slice(&zero, &[SymDim::Known(i64::MAX)]), sym("batch"));
        assert_eq!(slice(&zero, &[sym("batch")]), sym("batch"));
        assert_eq!(slice(&zero, &[sym("seq")]), SymDim::Unknown);
        assert_eq!(slice(&one, &[SymDim::Known(i64::MAX)]), SymDim::Unknown);
    }

    #[test]
    fn flatten_gemm_and_split_shapes() {
        let x = typed(
            DType::F32,
            vec![sym("batch"), sym("seq"), SymDim::Known(64)],
        );
        let two = AttrValue::Int(2);
        let out = infer("Flatten", &[plain(&x)], &Attrs::new([("axis", &two)]), 1);
        assert_eq!(
            out[0].shape,
            Some(vec![sym("batch*seq"), SymDim::Known(64)])
        );
        let a = typed(DType::F32, vec![sym("n"), SymDim::Known(64)]);
        let b = typed(DType::F32, vec![SymDim::Known(192), SymDim::Known(64)]);
        let one = AttrValue::Int(1);
        let out = infer(
            "Gemm",
            &[plain(&a), plain(&b)],
            &Attrs::new([("transB", &one)]),
            1,
        );
        assert_eq!(out[0].shape, Some(vec![sym("n"), SymDim::Known(192)]));
        let wide = typed(DType::F32, vec![sym("n"), SymDim::Known(10), sym("3*h")]);
        let out = infer("Split", &[plain(&wide)], &Attrs::new([("axis", &one)]), 3);
        let widths: Vec<SymDim> = out
            .iter()
            .map(|t| t.shape.clone().unwrap()[1].clone())
            .collect();
        assert_eq!(
            widths,
            [SymDim::Known(4), SymDim::Known(4), SymDim::Known(2)]
        );
        let last = AttrValue::Int(-1);
        let out = infer("Split", &[plain(&wide)], &Attrs::new([("axis", &last)]), 3);
        assert_eq!(out[2].shape.clone().unwrap()[2], sym("h"));
        let sizes = AttrValue::Ints(vec![7, 3]);
        let out = infer(
            "Split",
            &[plain(&wide)],
            &Attrs::new([("axis", &one), ("split", &sizes)]),
            2,
        );
        assert_eq!(out[1].shape.clone().unwrap()[1], SymDim::Known(3));
    }
}
