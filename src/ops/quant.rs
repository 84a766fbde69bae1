//! Quantized ops: ONNX `DequantizeLinear` (per-tensor, per-axis and blocked) and onnxruntime's
//! `com.microsoft::MatMulNBits` and `com.microsoft::GatherBlockQuantized`. Every quantized value
//! is dequantized as `(q - zero_point) * scale` in f32 and rounded once to the output dtype, so a
//! NaN or infinite scale gives NaN where `q == zero_point` and ±infinity elsewhere, as in
//! onnxruntime.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use super::cost::{Cost, Reads, Work};
use super::infer::{input_type, shape_dims, Attrs, InputView};
use super::tensor::axis;
use super::types::{SymDim, TensorType};
use super::{OpCall, OpDef, Tensor};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("DequantizeLinear", &["axis", "block_size", "output_dtype"])
        .infer(|c| {
            let out = c
                .int("output_dtype")
                .filter(|&t| t != 0)
                .and_then(|t| DType::from_onnx_code(t as i32))
                .or(c.ty(1).dtype);
            vec![c.ty(0).with_dtype(out)]
        })
        .eval(dequantize_linear),
    OpDef::onnx(
        "QuantizeLinear",
        &[
            "axis",
            "block_size",
            "output_dtype",
            "precision",
            "saturate",
        ],
    )
    .infer(|c| {
        let out = match (c.inputs.get(2), c.int("output_dtype").filter(|&t| t != 0)) {
            (Some(_), _) => c.ty(2).dtype,
            (None, Some(t)) => DType::from_onnx_code(t as i32),
            (None, None) => Some(DType::U8),
        };
        vec![c.ty(0).with_dtype(out)]
    })
    .eval(quantize_linear),
    OpDef::onnx("DynamicQuantizeLinear", &[])
        .infer(|c| {
            let scalar = |d| super::types::TensorType::new(d, vec![]);
            vec![
                c.ty(0).with_dtype(Some(DType::U8)),
                scalar(DType::F32),
                scalar(DType::U8),
            ]
        })
        .eval(dynamic_quantize_linear),
    OpDef::ms(
        "MatMulNBits",
        &["K", "N", "accuracy_level", "bits", "block_size"],
    )
    .infer(|c| vec![matmul_nbits_type(&c.ty(0), c.int("N"))])
    .cost(
        Cost::KERNEL
            .support(|c, dtype, _| {
                c.supports_matmul_nbits && matches!(dtype, Some(DType::F32 | DType::F16))
            })
            .work(Work::Product),
    )
    .eval(matmul_nbits),
    OpDef::ms(
        "GatherBlockQuantized",
        &["bits", "block_size", "gather_axis", "quantize_axis"],
    )
    .infer(|c| vec![gather_block_quantized_type(c.inputs, c.attrs)])
    .cost(
        Cost::KERNEL
            .support(|c, _, _| c.supports_matmul_nbits)
            .reads(Reads::Lookup),
    )
    .eval(gather_block_quantized),
];

/// Input `i` (called `name` in errors), which must be a float tensor (f32, f16 or bf16).
fn float_input<'a>(call: &OpCall<'a>, i: usize, name: &str) -> Result<&'a Tensor> {
    let t = call.input(i)?;
    if !matches!(t.dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(call.error(format!(
            "input `{name}` ({i}) is {}; expected f32, f16 or bf16",
            t.dtype
        )));
    }
    Ok(t)
}

/// Integer attribute `name`, which the op requires.
fn required_int(call: &OpCall<'_>, name: &str) -> Result<i64> {
    match call.attrs().get(name) {
        Some(crate::ir::Attr::Int(v)) => Ok(*v),
        _ => Err(call.error(format!("integer attribute `{name}` is required"))),
    }
}

/// Attribute `block_size` of the contrib ops: a power of two, at least 16.
pub(super) fn contrib_block_size(call: &OpCall<'_>, value: i64) -> Result<usize> {
    if value < 16 || value & (value - 1) != 0 {
        return Err(call.error(format!(
            "attribute block_size is {value}; expected a power of two of at least 16"
        )));
    }
    usize::try_from(value).map_err(|_| call.error(format!("attribute block_size {value}")))
}

/// Value `i` of a bit-packed uint8 buffer of `bits`-bit values (2, 4 or 8), lowest bits first.
pub(super) fn packed_value(bytes: &[i64], i: usize, bits: usize) -> i64 {
    let per_byte = 8 / bits;
    (bytes[i / per_byte] >> ((i % per_byte) * bits)) & ((1 << bits) - 1)
}

/// ONNX `DequantizeLinear` (opset 21+): `y = (x - x_zero_point) * x_scale`, with one scale for
/// the whole tensor (a scalar or one-element `x_scale`), one per slice along `axis` (1-D
/// `x_scale`), or one per block of `block_size` elements along `axis` (`x_scale` of `x`'s
/// shape with `ceil(D/block_size)` on `axis`). `x` is int8, uint8, int4, uint4 or int32;
/// `x_zero_point` has `x`'s type and `x_scale`'s shape; the output has `x_scale`'s type.
fn dequantize_linear(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    if !matches!(
        x.dtype,
        DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::I4 | DType::U4 | DType::I32
    ) {
        return Err(call.error(format!(
            "input `x` (0) is {}; expected int8, uint8, int16, uint16, int4, uint4 or int32",
            x.dtype
        )));
    }
    let q = x.ints().map_err(|e| call.error(e))?;
    let scale = float_input(call, 1, "x_scale")?;
    let scales = scale.floats().map_err(|e| call.error(e))?;
    if let Some(code) = call.attrs().get("output_dtype").and_then(|a| match a {
        crate::ir::Attr::Int(v) if *v != 0 => Some(*v),
        _ => None,
    }) {
        if code != i64::from(scale.dtype.onnx_code()) {
            return Err(call.error(format!(
                "attribute output_dtype is {code}, but `x_scale` is {} (ONNX type {}): the output \
                 type must be the scale's",
                scale.dtype,
                scale.dtype.onnx_code()
            )));
        }
    }
    let zero_points = match call.optional(2) {
        None => None,
        Some(zp) => {
            if zp.dtype != x.dtype {
                return Err(call.error(format!(
                    "input `x_zero_point` (2) is {}; expected {} like `x`",
                    zp.dtype, x.dtype
                )));
            }
            if zp.shape != scale.shape {
                return Err(call.error(format!(
                    "input `x_zero_point` (2) has shape {:?}; expected `x_scale`'s shape {:?}",
                    zp.shape, scale.shape
                )));
            }
            Some(zp.ints().map_err(|e| call.error(e))?)
        }
    };
    let names = ("input `x_scale` (1)", "dequantization");
    let index = scale_index(call, &x.shape, &scale.shape, names)?;
    call.alloc(&x.shape)?;
    let values = q
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let s = index.of(i);
            let zp = zero_points.map_or(0, |z| z[s]);
            (v - zp) as f32 * scales[s]
        })
        .collect();
    Ok(vec![Tensor::float(scale.dtype, x.shape.clone(), values)])
}

/// How the scales of a (de)quantization node index the elements of `x` (shape `x`): one for
/// all (a single scale, no `block_size`), one per index along `axis` (default 1), or one per
/// `block_size` indices along it (the scale then has `x`'s shape with that axis divided).
/// Errors name the scale input as `what` (``input `x_scale` (1)``) and the op's work as `verb`.
fn scale_index(
    call: &OpCall<'_>,
    x: &[usize],
    scale: &[usize],
    (what, verb): (&str, &str),
) -> Result<ScaleIndex> {
    let block_size = call.int("block_size", 0);
    let numel: usize = scale.iter().product();
    let per_tensor = block_size == 0 && numel == 1 && scale.len() <= 1;
    Ok(if per_tensor {
        ScaleIndex::PerTensor
    } else {
        let axis = axis(call.int("axis", 1), x.len()).map_err(|e| call.error(e))?;
        let d = x[axis];
        let inner: usize = x[axis + 1..].iter().product();
        if block_size == 0 {
            if scale != [d] {
                return Err(call.error(format!(
                    "{what} has shape {scale:?}; per-axis {verb} along axis {axis} of `x` \
                     {x:?} needs a scalar or shape [{d}]"
                )));
            }
            ScaleIndex::PerAxis { d, inner }
        } else {
            let block = usize::try_from(block_size).map_err(|_| {
                call.error(format!(
                    "attribute block_size is {block_size}; expected 0 or a positive size"
                ))
            })?;
            let mut expected = x.to_vec();
            expected[axis] = d.div_ceil(block);
            if scale != expected {
                return Err(call.error(format!(
                    "{what} has shape {scale:?}; blocks of {block} along axis {axis} of `x` \
                     {x:?} need shape {expected:?}"
                )));
            }
            ScaleIndex::Blocked {
                d,
                inner,
                block,
                blocks: expected[axis],
            }
        }
    })
}

/// ONNX `QuantizeLinear`: `y = saturate(round(x / y_scale) + y_zero_point)`, rounding halves
/// to even, the scale indexed as [`scale_index`] says; `y`'s type is the zero point's (uint8
/// without one, or `output_dtype`): 4-, 8- or 16-bit integers.
fn quantize_linear(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let xs = x.floats().map_err(|e| call.error(e))?;
    let scale = float_input(call, 1, "y_scale")?;
    let scales = scale.floats().map_err(|e| call.error(e))?;
    let zero_point = call.optional(2);
    let out_code = call.int("output_dtype", 0);
    let dtype = match (zero_point, out_code) {
        (Some(z), _) => z.dtype,
        (None, 0) => DType::U8,
        (None, code) => i32::try_from(code)
            .ok()
            .and_then(DType::from_onnx_code)
            .ok_or_else(|| call.error(format!("unsupported output_dtype {code}")))?,
    };
    let (lo, hi): (i64, i64) = match dtype {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        DType::U16 => (0, 65535),
        DType::I16 => (-32768, 32767),
        DType::U4 => (0, 15),
        DType::I4 => (-8, 7),
        other => {
            return Err(call.error(format!(
                "output type {other} is not supported (uint8, int8, uint16, int16, uint4, int4)"
            )))
        }
    };
    let zps = match zero_point {
        Some(z) if z.shape != scale.shape => {
            return Err(call.error(format!(
                "y_zero_point has shape {:?}; expected y_scale's {:?}",
                z.shape, scale.shape
            )))
        }
        Some(z) => Some(z.ints().map_err(|e| call.error(e))?),
        None => None,
    };
    let names = ("input `y_scale` (1)", "quantization");
    let index = scale_index(call, &x.shape, &scale.shape, names)?;
    call.alloc(&x.shape)?;
    let values = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let s = index.of(i);
            // The quotient in f32, as onnxruntime and ONNX's reference divide.
            let q = f64::from((v / scales[s]).round_ties_even());
            let q = if q.is_nan() { 0.0 } else { q };
            (q as i64)
                .saturating_add(zps.map_or(0, |z| z[s]))
                .clamp(lo, hi)
        })
        .collect();
    Ok(vec![Tensor::int(dtype, x.shape.clone(), values)])
}

/// ONNX `DynamicQuantizeLinear(x)`: uint8 `y`, its f32 scale `(max(0, max x) − min(0, min x))
/// / 255` and uint8 zero point `saturate(round(−min(0, min x) / scale))`, then `y =
/// saturate(round(x / scale) + zero_point)`, halves rounded to even (an all-zero `x`: scale 1,
/// as onnxruntime gives, zero point 0).
fn dynamic_quantize_linear(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let v = x.floats().map_err(|e| call.error(e))?;
    let (lo, hi) = v
        .iter()
        .fold((0f32, 0f32), |(l, h), &p| (l.min(p), h.max(p)));
    let scale = match hi - lo {
        0.0 => 1.0,
        range => range / 255.0,
    };
    let zero_point = ((0.0 - lo) / scale).round_ties_even().clamp(0.0, 255.0);
    let y = v
        .iter()
        .map(|&p| ((p / scale).round_ties_even() + zero_point).clamp(0.0, 255.0) as i64)
        .collect();
    Ok(vec![
        Tensor::int(DType::U8, x.shape.clone(), y),
        Tensor::float(DType::F32, vec![], vec![scale]),
        Tensor::int(DType::U8, vec![], vec![zero_point as i64]),
    ])
}

/// Which scale an element of a (de)quantized `x` uses, by flat index.
enum ScaleIndex {
    /// One scale.
    PerTensor,
    /// One scale per index along an axis of size `d`, `inner` elements after it.
    PerAxis { d: usize, inner: usize },
    /// One scale per `block` indices along an axis of size `d` (`blocks` of them).
    Blocked {
        d: usize,
        inner: usize,
        block: usize,
        blocks: usize,
    },
}

impl ScaleIndex {
    /// The flat index in the scales (and zero points) of element `i`.
    fn of(&self, i: usize) -> usize {
        match *self {
            ScaleIndex::PerTensor => 0,
            ScaleIndex::PerAxis { d, inner } => i / inner % d,
            ScaleIndex::Blocked {
                d,
                inner,
                block,
                blocks,
            } => {
                let (outer, along, rest) = (i / (d * inner), i / inner % d, i % inner);
                (outer * blocks + along / block) * inner + rest
            }
        }
    }
}

/// `com.microsoft::MatMulNBits`: `Y = A · dequantize(B) (+ bias)` where `B` is `[N, K]`
/// quantized in blocks of `block_size` along K to `bits` bits (2, 4 or 8), stored as uint8
/// `[N, ceil(K/block_size), block_size·bits/8]` (values packed lowest bits first, rows past K
/// ignored), with `scales` `[N·k_blocks]` or `[N, k_blocks]` of A's type and optional uint8
/// `zero_points` packed the same way, `[N·z]` or `[N, z]` with `z = ceil(k_blocks·bits/8)`
/// (absent: `2^(bits-1)`). The product is computed exactly (f64 accumulation of the f32
/// dequantized weights) and rounded once to A's type.
///
/// `accuracy_level` is ignored: this is onnxruntime's result at level 0. At level 4
/// onnxruntime's CPU kernel quantizes A to int8 per block and differs by more: measured with
/// onnxruntime 1.32 on a `[2, 3, 80] · [80, 24]` f32 product (standard normal A, bits 4, block
/// 32, uniform random weights and scales), the largest difference from the exact product is
/// 4.8e-3 of the largest output at level 4, against 1.7e-7 at level 0. Float `zero_points` and
/// `g_idx` are not supported (errors).
fn matmul_nbits(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let a = float_input(call, 0, "A")?;
    let (k, n) = (required_int(call, "K")?, required_int(call, "N")?);
    let (k, n) = match (usize::try_from(k), usize::try_from(n)) {
        (Ok(k), Ok(n)) if k > 0 && n > 0 => (k, n),
        _ => {
            return Err(call.error(format!(
                "attributes K = {k} and N = {n}; expected positive sizes"
            )))
        }
    };
    let bits = match call.int("bits", 4) {
        b @ (2 | 4 | 8) => b as usize,
        b => return Err(call.error(format!("attribute bits is {b}; expected 2, 4 or 8"))),
    };
    let block = contrib_block_size(call, required_int(call, "block_size")?)?;
    let k_blocks = k.div_ceil(block);
    let blob = block.checked_mul(bits).ok_or_else(|| {
        call.error(format!(
            "attribute block_size {block} times bits {bits} overflows"
        ))
    })? / 8;
    let b = call.input(1)?;
    let expected = [n, k_blocks, blob];
    if b.dtype != DType::U8 || b.shape != expected {
        return Err(call.error(format!(
            "input `B` (1) is {} {:?}; K = {k}, N = {n}, bits = {bits} and block_size = {block} \
             need uint8 {expected:?} ([N, ceil(K/block_size), block_size*bits/8])",
            b.dtype, b.shape
        )));
    }
    let scales = call.input(2)?;
    if scales.dtype != a.dtype || (scales.shape != [n * k_blocks] && scales.shape != [n, k_blocks])
    {
        return Err(call.error(format!(
            "input `scales` (2) is {} {:?}; expected {} [{n}, {k_blocks}] or [{}] ([N, \
             ceil(K/block_size)], A's type)",
            scales.dtype,
            scales.shape,
            a.dtype,
            n * k_blocks
        )));
    }
    let zp_bytes = (k_blocks * bits).div_ceil(8);
    let zero_points = match call.optional(3) {
        None => None,
        Some(zp) => {
            if zp.dtype != DType::U8 {
                return Err(call.error(format!(
                    "input `zero_points` (3) is {}; the reference interpreter supports packed \
                     uint8 zero points only",
                    zp.dtype
                )));
            }
            if zp.shape != [n * zp_bytes] && zp.shape != [n, zp_bytes] {
                return Err(call.error(format!(
                    "input `zero_points` (3) has shape {:?}; expected [{n}, {zp_bytes}] or \
                     [{}] ([N, ceil(k_blocks*bits/8)])",
                    zp.shape,
                    n * zp_bytes
                )));
            }
            Some(zp.ints().map_err(|e| call.error(e))?)
        }
    };
    if call.optional(4).is_some() {
        return Err(call.error(
            "input `g_idx` (4) is not supported by the reference interpreter (a deprecated \
             reordering of K)",
        ));
    }
    let bias = match call.optional(5) {
        None => None,
        Some(t) => {
            if t.dtype != a.dtype || t.shape != [n] {
                return Err(call.error(format!(
                    "input `bias` (5) is {} {:?}; expected {} [{n}]",
                    t.dtype, t.shape, a.dtype
                )));
            }
            Some(t.floats().map_err(|e| call.error(e))?)
        }
    };
    if a.shape.last() != Some(&k) {
        return Err(call.error(format!(
            "input `A` (0) has shape {:?}; its last dimension must be K = {k}",
            a.shape
        )));
    }
    let (x, q, s) = (
        a.floats().map_err(|e| call.error(e))?,
        b.ints().map_err(|e| call.error(e))?,
        scales.floats().map_err(|e| call.error(e))?,
    );
    // The weights dequantized to [K, N], row-major.
    call.alloc(&[k, n])?;
    let mut w = vec![0f32; k * n];
    for col in 0..n {
        for kb in 0..k_blocks {
            let zp = zero_points.map_or(1 << (bits - 1), |z| {
                packed_value(&z[col * zp_bytes..(col + 1) * zp_bytes], kb, bits)
            });
            let scale = s[col * k_blocks + kb];
            let values = &q[(col * k_blocks + kb) * blob..][..blob];
            for j in 0..block.min(k - kb * block) {
                let row = kb * block + j;
                w[row * n + col] = (packed_value(values, j, bits) - zp) as f32 * scale;
            }
        }
    }
    let mut shape = a.shape.clone();
    *shape.last_mut().expect("A has a last dimension") = n;
    call.alloc(&shape)?;
    let rows = x.len() / k;
    let mut out = Vec::with_capacity(rows * n);
    let mut acc = vec![0f64; n];
    for r in 0..rows {
        acc.fill(0.0);
        for (p, &v) in x[r * k..(r + 1) * k].iter().enumerate() {
            for (sum, &wv) in acc.iter_mut().zip(&w[p * n..(p + 1) * n]) {
                *sum += f64::from(v) * f64::from(wv);
            }
        }
        out.extend(
            acc.iter()
                .enumerate()
                .map(|(c, &v)| (v + bias.map_or(0.0, |b| f64::from(b[c]))) as f32),
        );
    }
    Ok(vec![Tensor::float(a.dtype, shape, out)])
}

/// `com.microsoft::GatherBlockQuantized`: `Gather(data, indices, axis = gather_axis)` of `data`
/// quantized in blocks of `block_size` along `quantize_axis`, dequantized as
/// `(data - zero_points) * scales` into `scales`' type (f32 or f16, as onnxruntime's CPU
/// kernel). `data` is int4 / uint4 (any axes; zero point 0 when absent) or uint8 holding
/// `bits` = 2, 4 or 8-bit values packed along its last axis, which must then be
/// `quantize_axis`, with `gather_axis` 0 (zero point `2^(bits-1)` when absent; `zero_points`
/// packed like `data`). `scales` has `data`'s (unpacked) shape with
/// `ceil(D/block_size)` on `quantize_axis`. Indices may be negative (counted from the end); as
/// in onnxruntime, an index out of range gives a slice of zeros.
fn gather_block_quantized(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let data = call.input(0)?;
    let indices = call.input(1)?;
    let scales = call.input(2)?;
    let bits = call.int("bits", 4);
    let per_byte = match (data.dtype, bits) {
        (DType::I4 | DType::U4, 4) => 1,
        (DType::U8, 2 | 4 | 8) => 8 / bits as usize,
        (DType::I4 | DType::U4 | DType::U8, _) => {
            return Err(call.error(format!(
                "attribute bits is {bits}; {} data needs {}",
                data.dtype,
                if data.dtype == DType::U8 {
                    "2, 4 or 8"
                } else {
                    "4"
                }
            )))
        }
        (other, _) => {
            return Err(call.error(format!(
                "input `data` (0) is {other}; expected int4, uint4 or uint8"
            )))
        }
    };
    if !matches!(indices.dtype, DType::I32 | DType::I64) {
        return Err(call.error(format!(
            "input `indices` (1) is {}; expected int32 or int64",
            indices.dtype
        )));
    }
    if !matches!(scales.dtype, DType::F32 | DType::F16) {
        return Err(call.error(format!(
            "input `scales` (2) is {}; expected f32 or f16",
            scales.dtype
        )));
    }
    let rank = data.shape.len();
    let gather_axis = axis(call.int("gather_axis", 0), rank).map_err(|e| call.error(e))?;
    let quantize_axis = axis(call.int("quantize_axis", 1), rank).map_err(|e| call.error(e))?;
    let block = contrib_block_size(call, call.int("block_size", 128))?;
    if data.dtype == DType::U8 && (gather_axis != 0 || quantize_axis + 1 != rank || rank < 2) {
        return Err(call.error(format!(
            "uint8 data {:?} needs gather_axis 0 and quantize_axis the last axis (found {gather_axis} \
             and {quantize_axis})",
            data.shape
        )));
    }
    // The values' shape: uint8 data packs `per_byte` values per byte along the last axis.
    let mut logical = data.shape.clone();
    logical[quantize_axis] *= per_byte;
    let mut scale_shape = logical.clone();
    scale_shape[quantize_axis] = logical[quantize_axis].div_ceil(block);
    if scales.shape != scale_shape {
        return Err(call.error(format!(
            "input `scales` (2) has shape {:?}; blocks of {block} along axis {quantize_axis} of \
             data values {logical:?} need {scale_shape:?}",
            scales.shape
        )));
    }
    let zero_points = match call.optional(3) {
        None => None,
        Some(zp) => {
            let mut expected = scale_shape.clone();
            expected[quantize_axis] = scale_shape[quantize_axis].div_ceil(per_byte);
            if zp.dtype != data.dtype || zp.shape != expected {
                return Err(call.error(format!(
                    "input `zero_points` (3) is {} {:?}; expected {} {expected:?}",
                    zp.dtype, zp.shape, data.dtype
                )));
            }
            Some(zp.ints().map_err(|e| call.error(e))?)
        }
    };
    let (q, idx, s) = (
        data.ints().map_err(|e| call.error(e))?,
        indices.ints().map_err(|e| call.error(e))?,
        scales.floats().map_err(|e| call.error(e))?,
    );
    let mut shape = logical[..gather_axis].to_vec();
    shape.extend_from_slice(&indices.shape);
    shape.extend_from_slice(&logical[gather_axis + 1..]);
    call.alloc(&shape)?;
    let gather_dim = logical[gather_axis];
    let outer: usize = logical[..gather_axis].iter().product();
    let slice: usize = logical[gather_axis + 1..].iter().product();
    // Element `i` of the values lies at `(i / (qd·qn), i / qn % qd, i % qn)` around the
    // quantized axis; its scale at `(·, · / block, ·)` of the scales.
    let (qd, qn) = (
        logical[quantize_axis],
        logical[quantize_axis + 1..].iter().product::<usize>(),
    );
    let blocks = scale_shape[quantize_axis];
    let bits = bits as usize;
    let default_zp = if data.dtype == DType::U8 {
        1 << (bits - 1)
    } else {
        0
    };
    let value = |i: usize| -> f32 {
        let scale_i = (i / (qd * qn) * blocks + i / qn % qd / block) * qn + i % qn;
        let (v, zp) = if per_byte == 1 {
            (q[i], zero_points.map_or(default_zp, |z| z[scale_i]))
        } else {
            let zp = zero_points.map_or(default_zp, |z| {
                let row_bytes = blocks.div_ceil(per_byte);
                let (row, b) = (scale_i / blocks, scale_i % blocks);
                packed_value(&z[row * row_bytes..][..row_bytes], b, bits)
            });
            (packed_value(q, i, bits), zp)
        };
        (v - zp) as f32 * s[scale_i]
    };
    let mut out = Vec::with_capacity(outer * idx.len() * slice);
    for o in 0..outer {
        for &raw in idx {
            let at = if raw < 0 {
                raw + gather_dim as i64
            } else {
                raw
            };
            match usize::try_from(at).ok().filter(|&at| at < gather_dim) {
                Some(at) => {
                    let base = (o * gather_dim + at) * slice;
                    out.extend((base..base + slice).map(value));
                }
                None => out.extend(std::iter::repeat_n(0.0, slice)),
            }
        }
    }
    Ok(vec![Tensor::float(scales.dtype, shape, out)])
}

/// `MatMulNBits(A [.., K]) → [.., N]` in A's dtype.
fn matmul_nbits_type(a: &TensorType, n: Option<i64>) -> TensorType {
    let shape = match (shape_dims(a), n) {
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
fn gather_block_quantized_type(inputs: &[InputView<'_>], attr: &Attrs<'_>) -> TensorType {
    let data = input_type(inputs, 0);
    let indices = input_type(inputs, 1);
    let scales = input_type(inputs, 2);
    let shape = match (
        shape_dims(&data),
        shape_dims(&indices),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::eval_op;
    use crate::ir::Attr;
    use crate::limits::InterpLimits;
    use crate::ops::CONTRIB_DOMAIN;

    #[test]
    fn packed_values_are_read_lowest_bits_first() {
        let bytes = [0x1b_i64, 0xe4];
        assert_eq!(
            (0..4)
                .map(|i| packed_value(&bytes, i, 2))
                .collect::<Vec<_>>(),
            [3, 2, 1, 0]
        );
        assert_eq!(
            (0..4)
                .map(|i| packed_value(&bytes, i, 4))
                .collect::<Vec<_>>(),
            [0xb, 0x1, 0x4, 0xe]
        );
        assert_eq!(packed_value(&bytes, 1, 8), 0xe4);
    }

    #[test]
    fn matmul_nbits_drops_the_padded_rows_of_the_last_block() {
        // K = 17 in blocks of 16: the second block holds one real row. One output column,
        // zero point 8, scales 0.5 and 2.
        let a = Tensor::float(DType::F32, vec![1, 17], vec![1.0; 17]);
        let mut blob = vec![0x99_i64; 8]; // sixteen 9s: (9 - 8) * 0.5 each
        blob.extend([0xfa, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]); // 10, then padding
        let b = Tensor::int(DType::U8, vec![1, 2, 8], blob);
        let scales = Tensor::float(DType::F32, vec![1, 2], vec![0.5, 2.0]);
        let attrs = [("K", 17), ("N", 1), ("bits", 4), ("block_size", 16)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), Attr::Int(v)))
            .collect();
        let y = eval_op(
            "mm",
            (CONTRIB_DOMAIN, "MatMulNBits"),
            attrs,
            &[Some(&a), Some(&b), Some(&scales)],
            &["y"],
            &InterpLimits::default(),
        )
        .unwrap();
        // 16 * 0.5 + (10 - 8) * 2
        assert_eq!(y[0].floats().unwrap(), &[12.0]);
        assert_eq!(y[0].shape, vec![1, 1]);
    }
}
