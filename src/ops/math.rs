//! Elementwise math no decoder build emits but ONNX defines: the inverse and hyperbolic
//! trigonometric functions, rounding, `Sign`, the activation functions with parameters (`Elu`,
//! `Selu`, `Celu`, `LeakyRelu`, `HardSigmoid`, `HardSwish`, `ThresholdedRelu`, `Softplus`,
//! `Softsign`, `Mish`, `Swish`, `Shrink`, `PRelu`), `Clip`, `Sum`, `Mean`, `IsInf`, `Mod` and the
//! bitwise ops. Float results are computed in f64
//! and rounded to the input's dtype; integer results wrap to their dtype, as onnxruntime's
//! kernels do. No rule rewrites these ops: the e-graph carries them as they are.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use super::elementwise::{
    binary_type, boolean_type, broadcast, first_type, fold, same_dtype_inputs, same_dtype_pair,
    unary_float, unary_numeric, wrap_int, zip,
};
use super::infer::{broadcast_type, Infer};
use super::types::TensorType;
use super::{OpCall, OpDef, Tensor, Values};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("Acos", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::acos)),
    OpDef::onnx("Acosh", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::acosh)),
    OpDef::onnx("Asin", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::asin)),
    OpDef::onnx("Asinh", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::asinh)),
    OpDef::onnx("Atan", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::atan)),
    OpDef::onnx("Atanh", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::atanh)),
    OpDef::onnx("Cosh", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::cosh)),
    OpDef::onnx("Sinh", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::sinh)),
    OpDef::onnx("Tan", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::tan)),
    OpDef::onnx("Ceil", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::ceil)),
    // Halves round to the even neighbour, as the spec (and numpy) say.
    OpDef::onnx("Round", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::round_ties_even)),
    OpDef::onnx("Sign", &[]).infer(first_type).eval(|c| {
        unary_numeric(
            c,
            |x| match x {
                _ if x > 0.0 => 1.0,
                _ if x < 0.0 => -1.0,
                _ => x * 0.0,
            },
            i64::signum,
        )
    }),
    OpDef::onnx("Softsign", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, |x| x / (1.0 + x.abs()))),
    OpDef::onnx("Softplus", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, softplus)),
    OpDef::onnx("Mish", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, |x| x * softplus(x).tanh())),
    OpDef::onnx("HardSwish", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0))),
    OpDef::onnx("Elu", &["alpha"]).infer(first_type).eval(|c| {
        let alpha = c.float("alpha", 1.0) as f64;
        unary_float(c, move |x| if x < 0.0 { alpha * x.exp_m1() } else { x })
    }),
    OpDef::onnx("Celu", &["alpha"]).infer(first_type).eval(|c| {
        let alpha = c.float("alpha", 1.0) as f64;
        // `max(0, x) + min(0, α(e^{x/α} − 1))`, NaN kept (f64::max would drop it).
        unary_float(c, move |x| match x > 0.0 {
            true => x,
            false => alpha * (x / alpha).exp_m1(),
        })
    }),
    OpDef::onnx("Selu", &["alpha", "gamma"])
        .infer(first_type)
        .eval(|c| {
            let alpha = c.float("alpha", 1.673_263_2) as f64;
            let gamma = c.float("gamma", 1.050_701) as f64;
            unary_float(c, move |x| match x > 0.0 {
                true => gamma * x,
                false => gamma * alpha * x.exp_m1(),
            })
        }),
    OpDef::onnx("LeakyRelu", &["alpha"])
        .infer(first_type)
        .eval(|c| {
            let alpha = c.float("alpha", 0.01) as f64;
            unary_float(c, move |x| if x < 0.0 { alpha * x } else { x })
        }),
    OpDef::onnx("ThresholdedRelu", &["alpha"])
        .infer(first_type)
        .eval(|c| {
            let alpha = c.float("alpha", 1.0) as f64;
            unary_float(c, move |x| if x > alpha { x } else { 0.0 })
        }),
    OpDef::onnx("HardSigmoid", &["alpha", "beta"])
        .infer(first_type)
        .eval(|c| {
            let alpha = c.float("alpha", 0.2) as f64;
            let beta = c.float("beta", 0.5) as f64;
            unary_float(c, move |x| (alpha * x + beta).clamp(0.0, 1.0))
        }),
    OpDef::onnx("Swish", &["alpha"])
        .infer(first_type)
        .eval(|c| {
            let alpha = c.float("alpha", 1.0) as f64;
            unary_float(c, move |x| x / (1.0 + (-alpha * x).exp()))
        }),
    OpDef::onnx("Shrink", &["bias", "lambd"])
        .infer(first_type)
        .eval(|c| {
            let (bias, lambd) = (c.float("bias", 0.0) as f64, c.float("lambd", 0.5) as f64);
            unary_float(c, move |x| match x {
                _ if x < -lambd => x + bias,
                _ if x > lambd => x - bias,
                _ => 0.0,
            })
        }),
    OpDef::onnx("PRelu", &[]).infer(binary_type).eval(prelu),
    OpDef::onnx("Clip", &[]).infer(first_type).eval(clip),
    OpDef::onnx("Dropout", &["seed"])
        .infer(|c| vec![c.ty(0), c.ty(0).with_dtype(Some(DType::Bool))])
        .eval(dropout),
    OpDef::onnx("Sum", &[])
        .infer(variadic_type)
        .eval(|c| sum(c, false)),
    OpDef::onnx("Mean", &[])
        .infer(variadic_type)
        .eval(|c| sum(c, true)),
    OpDef::onnx("IsInf", &["detect_negative", "detect_positive"])
        .infer(boolean_type)
        .eval(is_inf),
    OpDef::onnx("Mod", &["fmod"])
        .infer(binary_type)
        .eval(modulo),
    OpDef::onnx("BitwiseAnd", &[])
        .infer(binary_type)
        .eval(|c| bitwise(c, |p, q| p & q)),
    OpDef::onnx("BitwiseOr", &[])
        .infer(binary_type)
        .eval(|c| bitwise(c, |p, q| p | q)),
    OpDef::onnx("BitwiseXor", &[])
        .infer(binary_type)
        .eval(|c| bitwise(c, |p, q| p ^ q)),
    OpDef::onnx("BitwiseNot", &[])
        .infer(first_type)
        .eval(|c| unary_numeric(c, |x| x, |x| !x)),
    OpDef::onnx("BitShift", &["direction"])
        .infer(binary_type)
        .eval(bit_shift),
];

/// The broadcast of all the inputs.
fn variadic_type(c: &Infer<'_>) -> Vec<TensorType> {
    vec![(1..c.inputs.len()).fold(c.ty(0), |acc, i| broadcast_type(&acc, &c.ty(i)))]
}

/// `PRelu(x, slope)`: `x` where it is not negative, else `slope · x` (the slope broadcast to x).
fn prelu(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (x, slope) = same_dtype_pair(call)?;
    let (shape, index) = broadcast(call, &[x, slope])?;
    let out = match (&x.values, &slope.values) {
        (Values::Float(p), Values::Float(q)) => Tensor::float(
            x.dtype,
            shape,
            zip(p, q, &index, |p, q| if p < 0.0 { p * q } else { p }),
        ),
        (Values::Int(p), Values::Int(q)) => {
            let v = zip(p, q, &index, |p, q| {
                wrap_int(x.dtype, if p < 0 { p.wrapping_mul(q) } else { p })
            });
            Tensor::int(x.dtype, shape, v)
        }
        _ => return Err(call.error(format!("unsupported dtype {}", x.dtype))),
    };
    Ok(vec![out])
}

/// `Clip(x, min, max)` (opset 11+: the bounds are optional scalar inputs): `min(max(x, lo),
/// hi)`, NaN kept; a missing bound is the dtype's lowest (greatest) finite value, as the spec
/// says, so an infinity is clipped to it even without bounds.
fn clip(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let bound = |i: usize| -> Result<Option<&Tensor>> {
        match call.optional(i) {
            Some(b) if b.numel() != 1 => Err(call.error(format!(
                "bound {i} must hold one value, found shape {:?}",
                b.shape
            ))),
            Some(b) if b.dtype != x.dtype => Err(call.error(format!(
                "bound {i} is {}, not the input's {}",
                b.dtype, x.dtype
            ))),
            other => Ok(other),
        }
    };
    let (lo, hi) = (bound(1)?, bound(2)?);
    let out = match &x.values {
        Values::Float(v) => {
            let finite = match x.dtype {
                DType::F16 => 65504.0,
                DType::BF16 => 3.389_531_4e38,
                _ => f32::MAX,
            };
            let lo = lo
                .map(|t| t.floats().map(|f| f[0]))
                .transpose()?
                .unwrap_or(-finite);
            let hi = hi
                .map(|t| t.floats().map(|f| f[0]))
                .transpose()?
                .unwrap_or(finite);
            // max then min: with lo > hi every element is hi, as numpy and onnxruntime give.
            let one = |p: f32| {
                let p = if p < lo { lo } else { p };
                if p > hi {
                    hi
                } else {
                    p
                }
            };
            Tensor::float(
                x.dtype,
                x.shape.clone(),
                v.iter().map(|&p| one(p)).collect(),
            )
        }
        Values::Int(v) => {
            let lo = lo.map(|t| t.ints().map(|f| f[0])).transpose()?;
            let hi = hi.map(|t| t.ints().map(|f| f[0])).transpose()?;
            let one = |p: i64| p.max(lo.unwrap_or(i64::MIN)).min(hi.unwrap_or(i64::MAX));
            Tensor::int(
                x.dtype,
                x.shape.clone(),
                v.iter().map(|&p| one(p)).collect(),
            )
        }
        Values::Bool(_) => return Err(call.error("unsupported dtype bool")),
    };
    Ok(vec![out])
}

/// `Dropout(x, ratio?, training_mode?)` at inference: `x` unchanged and an all-true mask.
/// Training mode with a non-zero ratio draws random numbers whose stream no other runtime
/// shares: a clear error rather than a result nothing can check.
fn dropout(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let training = match call.optional(2) {
        Some(t) => t
            .bools()
            .map_err(|e| call.error(e))?
            .first()
            .copied()
            .unwrap_or(false),
        None => false,
    };
    let ratio = call
        .optional(1)
        .map(|r| r.as_f64())
        .and_then(|r| r.first().copied());
    if training && ratio != Some(0.0) {
        return Err(call.error(
            "training-mode Dropout draws random numbers: the interpreter runs it only at \
             inference or with ratio 0",
        ));
    }
    let mask = Tensor::bool(x.shape.clone(), vec![true; x.numel()]);
    Ok(vec![x.clone(), mask])
}

/// `Sum` of 1..N inputs of one dtype, broadcast, added in input order (in f32, as onnxruntime
/// does); `Mean` divides that sum by N.
fn sum(call: &OpCall<'_>, mean: bool) -> Result<Vec<Tensor>> {
    let (inputs, first) = same_dtype_inputs(call)?;
    let (shape, index) = broadcast(call, &inputs)?;
    let n = inputs.len();
    let out = match &first.values {
        Values::Float(_) => {
            let values = inputs
                .iter()
                .map(|t| t.floats())
                .collect::<Result<Vec<_>>>()?;
            let mut v = fold(&values, &index, |a, b| a + b);
            if mean {
                v.iter_mut().for_each(|p| *p /= n as f32);
            }
            Tensor::float(first.dtype, shape, v)
        }
        Values::Int(_) => {
            let values = inputs
                .iter()
                .map(|t| t.ints())
                .collect::<Result<Vec<_>>>()?;
            let v = fold(&values, &index, |a, b| {
                wrap_int(first.dtype, a.wrapping_add(b))
            });
            let v = match mean {
                true => v.into_iter().map(|p| p / n as i64).collect(),
                false => v,
            };
            Tensor::int(first.dtype, shape, v)
        }
        Values::Bool(_) => return Err(call.error("unsupported dtype bool")),
    };
    Ok(vec![out])
}

/// `ln(1 + eˣ)` without overflow for large x.
fn softplus(x: f64) -> f64 {
    match x > 0.0 {
        true => x + (-x).exp().ln_1p(),
        false => x.exp().ln_1p(),
    }
}

/// `IsInf(x)`: true at +inf (unless `detect_positive` is 0) and at -inf (unless
/// `detect_negative` is 0); false at NaN and every finite value.
fn is_inf(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    if !x.dtype.is_float() {
        return Err(call.error(format!("input must be a float tensor, got {}", x.dtype)));
    }
    let (neg, pos) = (
        call.int("detect_negative", 1) != 0,
        call.int("detect_positive", 1) != 0,
    );
    let values = x
        .as_f64()
        .iter()
        .map(|&p| (pos && p == f64::INFINITY) || (neg && p == f64::NEG_INFINITY))
        .collect();
    Ok(vec![Tensor::bool(x.shape.clone(), values)])
}

/// `Mod(a, b)`: with `fmod` 0 the remainder takes the divisor's sign, as in Python (numpy's
/// `mod`); with `fmod` 1 it takes the dividend's, as C's `fmod`. An integer remainder by zero
/// is an error, as integer division is; a float one is NaN.
fn modulo(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (a, b) = same_dtype_pair(call)?;
    let fmod = call.int("fmod", 0) != 0;
    let (shape, index) = broadcast(call, &[a, b])?;
    let out = match (&a.values, &b.values) {
        (Values::Float(x), Values::Float(y)) => {
            let v = zip(x, y, &index, |p, q| {
                float_mod(p as f64, q as f64, fmod) as f32
            });
            Tensor::float(a.dtype, shape, v)
        }
        (Values::Int(x), Values::Int(y)) => {
            let v = zip(x, y, &index, |p: i64, q: i64| match (q, fmod) {
                (0, _) => Err(call.error("integer remainder by zero")),
                _ if a.dtype == DType::U64 => Ok(((p as u64) % (q as u64)) as i64),
                (_, true) => Ok(p.wrapping_rem(q)),
                (_, false) => {
                    let r = p.wrapping_rem(q);
                    Ok(if r != 0 && (r < 0) != (q < 0) {
                        r + q
                    } else {
                        r
                    })
                }
            })
            .into_iter()
            .map(|r| r.map(|r| wrap_int(a.dtype, r)))
            .collect::<Result<_>>()?;
            Tensor::int(a.dtype, shape, v)
        }
        _ => return Err(call.error(format!("unsupported dtype {}", a.dtype))),
    };
    Ok(vec![out])
}

/// The float remainder of `p / q`: C's `fmod`, or with `fmod` false numpy's `mod` (the sign of
/// `q`: a non-zero remainder of the other sign moves by `q`; a zero one takes `q`'s sign).
fn float_mod(p: f64, q: f64, fmod: bool) -> f64 {
    let r = p % q;
    match fmod {
        true => r,
        false if r != 0.0 && (r < 0.0) != (q < 0.0) => r + q,
        false => r.abs().copysign(q),
    }
}

/// A bitwise binary op on two integer tensors of one dtype (two's complement bits, wrapped
/// back to the dtype).
fn bitwise(call: &OpCall<'_>, f: fn(i64, i64) -> i64) -> Result<Vec<Tensor>> {
    let (a, b) = same_dtype_pair(call)?;
    let (shape, index) = broadcast(call, &[a, b])?;
    match (&a.values, &b.values) {
        (Values::Int(x), Values::Int(y)) => {
            let v = zip(x, y, &index, |p, q| wrap_int(a.dtype, f(p, q)));
            Ok(vec![Tensor::int(a.dtype, shape, v)])
        }
        _ => Err(call.error(format!("unsupported dtype {}", a.dtype))),
    }
}

/// `BitShift(x, y)` on integers, `direction` "LEFT" or "RIGHT": bits shifted out are lost
/// (a signed left shift works on the two's complement bits), a right shift of a signed value
/// copies its sign bit (a u64's is a value bit: shifted as unsigned); a shift by a negative
/// amount or by the type's width or more gives 0, or -1 for a negative value shifted right.
fn bit_shift(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (a, b) = same_dtype_pair(call)?;
    let left = match call.string("direction") {
        Some("LEFT") => true,
        Some("RIGHT") => false,
        other => {
            return Err(call.error(format!(
                "direction must be \"LEFT\" or \"RIGHT\", got {other:?}"
            )))
        }
    };
    let bits = match a.dtype {
        DType::U8 | DType::I8 => 8,
        DType::U16 | DType::I16 => 16,
        DType::I32 | DType::U32 => 32,
        DType::I64 | DType::U64 => 64,
        other => return Err(call.error(format!("unsupported dtype {other}"))),
    };
    let (shape, index) = broadcast(call, &[a, b])?;
    match (&a.values, &b.values) {
        (Values::Int(x), Values::Int(y)) => {
            let unsigned = a.dtype == DType::U64;
            let v = zip(x, y, &index, |p: i64, q: i64| match (q, left) {
                // A u64 shift amount past i64 reads as negative: out of range either way.
                (q, false) if !(0..bits).contains(&q) => -((p < 0 && !unsigned) as i64),
                (q, true) if !(0..bits).contains(&q) => 0,
                (q, true) => wrap_int(a.dtype, p.wrapping_shl(q as u32)),
                (q, false) if unsigned => ((p as u64) >> q) as i64,
                (q, false) => p >> q,
            });
            Ok(vec![Tensor::int(a.dtype, shape, v)])
        }
        _ => Err(call.error(format!("unsupported dtype {}", a.dtype))),
    }
}
