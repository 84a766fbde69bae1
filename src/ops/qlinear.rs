//! Integer and quantized linear ops: `ConvInteger` (opset 10: 8-bit input and weight less their
//! zero points, convolved exactly into int32), `QLinearConv` (opset 10) and `QLinearMatMul`
//! (opset 10; 21 adds f16 scales), which requantize the exact integer sums: `y = saturate(
//! round_half_even(sum · x_scale · w_scale / y_scale) + y_zero_point)` into the zero point's
//! 8-bit type. The multiplier is computed in the scales' precision (f32, or f16 rounding each
//! step, as ONNX's reference computes it), the product in f64. Zero points and scales are
//! scalars, or one per output channel for the weight of a convolution, one per row of A and
//! per column of B for the matrix product. The sums come from `Conv`'s and `MatMul`'s
//! evaluators ([`super::conv`], [`super::matmul`]).
//!
//! [`OPS`] registers the ops with their attribute schemas, type inference and cost facts
//! beside their evaluators.

use half::f16;

use super::conv::{conv_sums, CONV_ATTRS};
use super::{OpCall, OpDef, Tensor, Values};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("ConvInteger", CONV_ATTRS)
        .infer(|c| vec![c.ty(0).with_unknown_shape().with_dtype(Some(DType::I32))])
        .since(10)
        .eval(conv_integer),
    OpDef::onnx("QLinearConv", CONV_ATTRS)
        .infer(|c| vec![c.ty(0).with_unknown_shape().with_dtype(c.ty(7).dtype)])
        .since(10)
        .eval(qlinear_conv),
    OpDef::onnx("QLinearMatMul", &[])
        .infer(|c| vec![c.ty(0).with_unknown_shape().with_dtype(c.ty(7).dtype)])
        .since(10)
        .eval(qlinear_matmul),
];

/// Input `i` (an 8-bit integer tensor) less its zero point (input `zp`: absent, a scalar, or
/// one value per index of axis `axis` when `per_axis`), as an i64 tensor.
fn centred(call: &OpCall<'_>, i: usize, zp: usize, axis: Option<usize>) -> Result<Tensor> {
    let x = call.input(i)?;
    if !matches!(x.dtype, DType::U8 | DType::I8) {
        return Err(call.error(format!("input {i} must be uint8 or int8, got {}", x.dtype)));
    }
    let v = x.ints().map_err(|e| call.error(e))?;
    let z = match call.optional(zp) {
        None => vec![0],
        Some(z) if z.dtype != x.dtype => {
            return Err(call.error(format!(
                "input {zp} (a zero point) must be {} like input {i}, got {}",
                x.dtype, z.dtype
            )))
        }
        Some(z) => z.ints().map_err(|e| call.error(e))?.to_vec(),
    };
    let (extent, inner) = match axis {
        Some(a) if a < x.shape.len() => (x.shape[a], x.shape[a + 1..].iter().product()),
        _ => (1, 1),
    };
    if z.len() != 1 && z.len() != extent {
        return Err(call.error(format!(
            "input {zp} (a zero point) holds {} values; expected 1 or {extent}",
            z.len()
        )));
    }
    let values = v
        .iter()
        .enumerate()
        .map(|(k, &e)| {
            e - z[if z.len() == 1 {
                0
            } else {
                (k / inner) % extent
            }]
        })
        .collect();
    Ok(Tensor::int(DType::I64, x.shape.clone(), values))
}

/// The requantization multipliers `scale(a)·scale(b)/scale(y)` of inputs `a`, `b` and `y`
/// (`b` may hold `count` values, one per output channel or column; `a` one per row, `rows`),
/// in the scales' precision, as `[row][column]`.
fn multipliers(
    call: &OpCall<'_>,
    (a, b, y): (usize, usize, usize),
    rows: usize,
    count: usize,
) -> Result<Vec<Vec<f64>>> {
    let scale = |i: usize, n: usize| -> Result<(Vec<f32>, DType)> {
        let t = call.input(i)?;
        let v = t.floats().map_err(|e| call.error(e))?.to_vec();
        match v.len() {
            1 => Ok((vec![v[0]; n], t.dtype)),
            m if m == n => Ok((v, t.dtype)),
            m => Err(call.error(format!(
                "input {i} (a scale) holds {m} values; expected 1 or {n}"
            ))),
        }
    };
    let (sa, dtype) = scale(a, rows)?;
    let (sb, _) = scale(b, count)?;
    let (sy, _) = scale(y, 1)?;
    let half = |v: f32| match dtype {
        DType::F16 => f16::from_f32(v).to_f32(),
        _ => v,
    };
    Ok(sa
        .iter()
        .map(|&p| {
            sb.iter()
                .map(|&q| f64::from(half(half(p * q) / sy[0])))
                .collect()
        })
        .collect())
}

/// The output's dtype, zero point and saturation bounds: input `zp`'s (a uint8 or int8
/// scalar).
fn requantize(call: &OpCall<'_>, zp: usize) -> Result<(DType, i64, f64, f64)> {
    let z = call.input(zp)?;
    let (lo, hi) = match z.dtype {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        other => return Err(call.error(format!("y_zero_point must be uint8 or int8, got {other}"))),
    };
    match z.ints().map_err(|e| call.error(e))? {
        [v] => Ok((z.dtype, *v, lo, hi)),
        v => Err(call.error(format!("y_zero_point must hold one value, got {}", v.len()))),
    }
}

/// `ConvInteger(x, w, x_zero_point?, w_zero_point?)`.
fn conv_integer(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = centred(call, 0, 2, None)?;
    let w = centred(call, 1, 3, Some(0))?;
    let (shape, sums) = conv_sums(call, &x, &w, None)?;
    let out = sums.into_iter().map(|v| v as i64 as i32 as i64).collect();
    Ok(vec![Tensor::int(DType::I32, shape, out)])
}

/// `QLinearConv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
/// B?)`.
fn qlinear_conv(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = centred(call, 0, 2, None)?;
    let w = centred(call, 3, 5, Some(0))?;
    let bias = match call.optional(8) {
        Some(b) if b.dtype != DType::I32 => {
            return Err(call.error(format!("B must be int32, got {}", b.dtype)))
        }
        b => b.map(Tensor::as_f64),
    };
    let (shape, sums) = conv_sums(call, &x, &w, bias)?;
    let channels = shape[1];
    let scale = multipliers(call, (1, 4, 6), 1, channels)?;
    let (dtype, zp, lo, hi) = requantize(call, 7)?;
    let area: usize = shape[2..].iter().product();
    let out = sums
        .iter()
        .enumerate()
        .map(|(k, &s)| {
            let m = scale[0][(k / area.max(1)) % channels];
            ((s * m).round_ties_even() + zp as f64).clamp(lo, hi) as i64
        })
        .collect();
    Ok(vec![Tensor::int(dtype, shape, out)])
}

/// `QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
/// y_zero_point)`.
fn qlinear_matmul(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (a, b) = (call.input(0)?, call.input(3)?);
    let row_axis = a.shape.len().checked_sub(2);
    let a = centred(call, 0, 2, row_axis)?;
    let col_axis = (b.shape.len() >= 2).then(|| b.shape.len() - 1);
    let b = centred(call, 3, 5, col_axis)?;
    let product = OpCall {
        node: call.node,
        inputs: vec![Some(&a), Some(&b)],
        limits: call.limits,
        scope: None,
    };
    let sums = super::matmul::matmul(&product)?.remove(0);
    let Values::Int(sums_v) = &sums.values else {
        return Err(call.error("the integer product is not integral"));
    };
    let rows = row_axis.map_or(1, |r| a.shape[r]);
    let cols = col_axis.map_or(1, |c| b.shape[c]);
    let scale = multipliers(call, (1, 4, 6), rows, cols)?;
    let (dtype, zp, lo, hi) = requantize(call, 7)?;
    let (m, n) = (
        if a.shape.len() > 1 { rows } else { 1 },
        if b.shape.len() > 1 { cols } else { 1 },
    );
    let out = sums_v
        .iter()
        .enumerate()
        .map(|(k, &s)| {
            let (i, j) = ((k / n) % m, k % n);
            ((s as f64 * scale[i][j]).round_ties_even() + zp as f64).clamp(lo, hi) as i64
        })
        .collect();
    Ok(vec![Tensor::int(dtype, sums.shape.clone(), out)])
}
