//! Elementwise ops: arithmetic, `Max` / `Min`, math functions, comparisons, logic, `Where`,
//! casts and the GELU family, all with numpy broadcasting. Float results are computed in f32
//! (transcendental functions in f64) and rounded to the output dtype; integer results wrap to
//! their dtype's width, as onnxruntime's C++ kernels do.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use std::cmp::Ordering;
use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI};

use super::cost::Cost;
use super::infer::{broadcast_type, Infer};
use super::tensor::{broadcast_index, broadcast_shape};
use super::types::TensorType;
use super::{OpCall, OpDef, Tensor, Values};
use crate::ir::{f8e4m3, DType};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("Add", &[])
        .infer(binary_type)
        .eval(|c| arith(c, Arith::Add)),
    OpDef::onnx("Sub", &[])
        .infer(binary_type)
        .eval(|c| arith(c, Arith::Sub)),
    OpDef::onnx("Mul", &[])
        .infer(binary_type)
        .eval(|c| arith(c, Arith::Mul)),
    OpDef::onnx("Div", &[])
        .infer(binary_type)
        .eval(|c| arith(c, Arith::Div)),
    OpDef::onnx("Pow", &[]).infer(binary_type).eval(pow),
    OpDef::onnx("Max", &[])
        .infer(extremum_type)
        .eval(|c| extremum(c, Ordering::Greater)),
    OpDef::onnx("Min", &[])
        .infer(extremum_type)
        .eval(|c| extremum(c, Ordering::Less)),
    OpDef::onnx("Neg", &[])
        .infer(first_type)
        .eval(|c| unary_numeric(c, |x| -x, |x| x.wrapping_neg())),
    OpDef::onnx("Abs", &[])
        .infer(first_type)
        .eval(|c| unary_numeric(c, f32::abs, i64::wrapping_abs)),
    // `x < 0 ? 0 : x` keeps NaN and -0.0, as onnxruntime does.
    OpDef::onnx("Relu", &[])
        .infer(first_type)
        .eval(|c| unary_numeric(c, |x| if x < 0.0 { 0.0 } else { x }, |x| x.max(0))),
    OpDef::onnx("Sqrt", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::sqrt)),
    OpDef::onnx("Reciprocal", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::recip)),
    OpDef::onnx("Exp", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::exp)),
    OpDef::onnx("Log", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::ln)),
    OpDef::onnx("Floor", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::floor)),
    OpDef::onnx("Erf", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, erf)),
    OpDef::onnx("Tanh", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::tanh)),
    OpDef::onnx("Cos", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::cos)),
    OpDef::onnx("Sin", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, f64::sin)),
    OpDef::onnx("Sigmoid", &[])
        .infer(first_type)
        .eval(|c| unary_float(c, |x| 1.0 / (1.0 + (-x).exp()))),
    OpDef::onnx("Gelu", &["approximate"])
        .infer(first_type)
        .eval(gelu)
        .since(20),
    OpDef::onnx("Equal", &[])
        .infer(boolean_binary_type)
        .eval(|c| compare(c, Cmp::Equal)),
    OpDef::onnx("Less", &[])
        .infer(boolean_binary_type)
        .eval(|c| compare(c, Cmp::Less)),
    OpDef::onnx("Greater", &[])
        .infer(boolean_binary_type)
        .eval(|c| compare(c, Cmp::Greater)),
    OpDef::onnx("LessOrEqual", &[])
        .opaque()
        .lacks(NO_RULE_SCHEMA)
        .infer(boolean_binary_type)
        .eval(|c| compare(c, Cmp::LessOrEqual)),
    OpDef::onnx("GreaterOrEqual", &[])
        .opaque()
        .lacks(NO_RULE_SCHEMA)
        .infer(boolean_binary_type)
        .eval(|c| compare(c, Cmp::GreaterOrEqual)),
    OpDef::onnx("And", &[])
        .infer(boolean_binary_type)
        .eval(|c| logic(c, |p, q| p && q)),
    OpDef::onnx("Or", &[])
        .opaque()
        .lacks(NO_RULE_SCHEMA)
        .infer(boolean_binary_type)
        .eval(|c| logic(c, |p, q| p || q)),
    OpDef::onnx("Xor", &[])
        .opaque()
        .lacks(NO_RULE_SCHEMA)
        .infer(boolean_binary_type)
        .eval(|c| logic(c, |p, q| p != q)),
    OpDef::onnx("Not", &[]).infer(boolean_type).eval(not),
    OpDef::onnx("IsNaN", &[]).infer(boolean_type).eval(is_nan),
    OpDef::onnx("Where", &[]).infer(where_type).eval(where_op),
    OpDef::onnx("Cast", &["round_mode", "saturate", "to"])
        .infer(|c| {
            let to = c.int("to").and_then(|t| DType::from_onnx_code(t as i32));
            vec![c.ty(0).with_dtype(to)]
        })
        .eval(cast_op),
    OpDef::onnx("CastLike", &["round_mode", "saturate"])
        .infer(|c| vec![c.ty(0).with_dtype(c.ty(1).dtype)])
        .eval(|c| {
            c.input(1)
                .and_then(|like| Ok(vec![cast(c.input(0)?, like.dtype)]))
        }),
    OpDef::onnx("Identity", &[])
        .infer(first_type)
        .eval(|c| c.input(0).map(|x| vec![x.clone()])),
    // The optional-type ops on what the interpreter holds, tensors: a tensor is an optional
    // with an element, an absent input one without.
    OpDef::onnx("OptionalHasElement", &[])
        .infer(|_| vec![TensorType::new(DType::Bool, vec![])])
        .eval(|c| Ok(vec![Tensor::bool(vec![], vec![c.optional(0).is_some()])])),
    OpDef::onnx("OptionalGetElement", &[])
        .infer(first_type)
        .eval(|c| c.input(0).map(|x| vec![x.clone()])),
    OpDef::onnx("SwiGLU", &["alpha"])
        .infer(first_type)
        .eval(swiglu)
        .since(28),
    // The fused elementwise kernels come with the Skip*Normalization ones.
    OpDef::ms("FastGelu", &[])
        .infer(first_type)
        .cost(Cost::KERNEL.support(|c, _, _| c.supports_skip_layer_norm))
        .eval(|c| biased_gelu(c, gelu_tanh, false)),
    OpDef::ms("BiasGelu", &[])
        .infer(binary_type)
        .cost(Cost::KERNEL.support(|c, _, _| c.supports_skip_layer_norm))
        .eval(|c| biased_gelu(c, gelu_erf, true)),
];

/// Why a standard op without attributes leaves its schema undeclared.
const NO_RULE_SCHEMA: &str =
    "schema: no rule rewrites or introduces it, so the e-graph keeps a node's own attributes";

/// The type of an op whose output has its first input's type.
pub(super) fn first_type(c: &Infer<'_>) -> Vec<TensorType> {
    vec![c.ty(0)]
}

/// A boolean of the first input's shape.
pub(super) fn boolean_type(c: &Infer<'_>) -> Vec<TensorType> {
    vec![c.ty(0).with_dtype(Some(DType::Bool))]
}

/// The broadcast of the first two inputs, in the first one's dtype.
pub(super) fn binary_type(c: &Infer<'_>) -> Vec<TensorType> {
    vec![broadcast_type(&c.ty(0), &c.ty(1)).with_dtype(c.ty(0).dtype)]
}

/// The broadcast of the first two inputs, boolean.
fn boolean_binary_type(c: &Infer<'_>) -> Vec<TensorType> {
    vec![broadcast_type(&c.ty(0), &c.ty(1)).with_dtype(Some(DType::Bool))]
}

/// The broadcast of all the inputs.
fn extremum_type(c: &Infer<'_>) -> Vec<TensorType> {
    vec![(1..c.inputs.len()).fold(c.ty(0), |acc, i| broadcast_type(&acc, &c.ty(i)))]
}

/// The broadcast of the condition and both branches, in the branches' dtype.
fn where_type(c: &Infer<'_>) -> Vec<TensorType> {
    vec![broadcast_type(&broadcast_type(&c.ty(0), &c.ty(1)), &c.ty(2)).with_dtype(c.ty(1).dtype)]
}

/// `v` wrapped to the width of integer dtype `dtype` (two's complement, like a C++ cast).
pub(crate) fn wrap_int(dtype: DType, v: i64) -> i64 {
    match dtype {
        DType::I32 => v as i32 as i64,
        DType::U32 => v as u32 as i64,
        DType::I16 => v as i16 as i64,
        DType::U16 => v as u16 as i64,
        DType::I8 => v as i8 as i64,
        DType::U8 => v as u8 as i64,
        _ => v,
    }
}

/// `v` of integer dtype `dtype` as a key whose signed order is the values' order: a
/// [`DType::U64`]'s bits with the sign bit flipped, any other integer itself.
pub(crate) fn int_order_key(dtype: DType, v: i64) -> i64 {
    match dtype {
        DType::U64 => v ^ i64::MIN,
        _ => v,
    }
}

/// A float converted to integer dtype `to` the way onnxruntime's `static_cast` does on x86-64:
/// truncation toward zero; NaN and out-of-range values give the "integer indefinite" value
/// (the minimum of i64 or i32); u32 goes through i64 and 8- and 16-bit targets through i32,
/// keeping the low bits; u64 takes 2^63..2^64 as its own values and the rest through i64.
fn float_to_int(x: f64, to: DType) -> i64 {
    let t = x.trunc();
    if to == DType::U64 && (2f64.powi(63)..2f64.powi(64)).contains(&t) {
        // Past i64: the unsigned value's bits.
        return t as u64 as i64;
    }
    if to == DType::I64 || to == DType::U64 || to == DType::U32 {
        // Comparisons with NaN are false, so NaN lands on the indefinite value too.
        let limit = 2f64.powi(63);
        let v = if (-limit..limit).contains(&t) {
            t as i64
        } else {
            i64::MIN
        };
        wrap_int(to, v)
    } else {
        let limit = 2f64.powi(31);
        let v = if (-limit..limit).contains(&t) {
            t as i64
        } else {
            i32::MIN as i64
        };
        wrap_int(to, v)
    }
}

/// The broadcast shape of `tensors` (checked against the run's budget) and, per tensor, the
/// element each output element reads.
pub(super) fn broadcast(
    call: &OpCall<'_>,
    tensors: &[&Tensor],
) -> Result<(Vec<usize>, Vec<Vec<usize>>)> {
    let shapes: Vec<&[usize]> = tensors.iter().map(|t| t.shape.as_slice()).collect();
    let shape = broadcast_shape(&shapes)?;
    call.alloc(&shape)?;
    let index = tensors
        .iter()
        .map(|t| broadcast_index(&t.shape, &shape))
        .collect();
    Ok((shape, index))
}

/// `f` applied to the broadcast pairs of `a` and `b` (`index` as returned by [`broadcast`]).
pub(super) fn zip<A: Copy, B: Copy, R>(
    a: &[A],
    b: &[B],
    index: &[Vec<usize>],
    f: impl Fn(A, B) -> R,
) -> Vec<R> {
    index[0]
        .iter()
        .zip(&index[1])
        .map(|(&i, &j)| f(a[i], b[j]))
        .collect()
}

/// Inputs 0 and 1, which must have the same dtype.
pub(super) fn same_dtype_pair<'a>(call: &OpCall<'a>) -> Result<(&'a Tensor, &'a Tensor)> {
    let (a, b) = (call.input(0)?, call.input(1)?);
    if a.dtype != b.dtype {
        return Err(call.error(format!("input dtypes differ: {} and {}", a.dtype, b.dtype)));
    }
    Ok((a, b))
}

/// The four arithmetic operators.
#[derive(Clone, Copy)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

/// `SwiGLU(A, B)` (opset 28): `Swish_alpha(A) · B`, `A` and `B` of one shape (no
/// broadcasting), computed in f64 and rounded to their dtype.
fn swiglu(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (a, b) = same_dtype_pair(call)?;
    if a.shape != b.shape {
        return Err(call.error(format!(
            "A {:?} and B {:?} must have one shape (SwiGLU does not broadcast)",
            a.shape, b.shape
        )));
    }
    let alpha = call.float("alpha", 1.0) as f64;
    let (x, y) = (a.as_f64(), b.as_f64());
    let values = x
        .iter()
        .zip(&y)
        .map(|(&p, &q)| (p / (1.0 + (-alpha * p).exp()) * q) as f32)
        .collect();
    Ok(vec![Tensor::float(a.dtype, a.shape.clone(), values)])
}

/// `Add`, `Sub`, `Mul`, `Div`. Integer division truncates toward zero; division by zero is an
/// error, as in onnxruntime.
fn arith(call: &OpCall<'_>, op: Arith) -> Result<Vec<Tensor>> {
    let (a, b) = same_dtype_pair(call)?;
    let (shape, index) = broadcast(call, &[a, b])?;
    let out = match (&a.values, &b.values) {
        (Values::Float(x), Values::Float(y)) => {
            let f: fn(f32, f32) -> f32 = match op {
                Arith::Add => |p, q| p + q,
                Arith::Sub => |p, q| p - q,
                Arith::Mul => |p, q| p * q,
                Arith::Div => |p, q| p / q,
            };
            Tensor::float(a.dtype, shape, zip(x, y, &index, f))
        }
        (Values::Int(x), Values::Int(y)) => {
            let values = zip(x, y, &index, |p: i64, q: i64| match op {
                Arith::Add => Ok(p.wrapping_add(q)),
                Arith::Sub => Ok(p.wrapping_sub(q)),
                Arith::Mul => Ok(p.wrapping_mul(q)),
                Arith::Div if q == 0 => Err(call.error("integer division by zero")),
                Arith::Div if a.dtype == DType::U64 => Ok(((p as u64) / (q as u64)) as i64),
                Arith::Div => Ok(p.wrapping_div(q)),
            })
            .into_iter()
            .map(|v| v.map(|v| wrap_int(a.dtype, v)))
            .collect::<Result<_>>()?;
            Tensor::int(a.dtype, shape, values)
        }
        _ => return Err(call.error(format!("unsupported dtype {}", a.dtype))),
    };
    Ok(vec![out])
}

/// `Max` / `Min` (opset 13+): per element of the broadcast shape of 1..N inputs of one
/// numeric dtype, the first input's value replaced by each later one that compares `better`. As in
/// onnxruntime, a NaN in any input makes that element NaN, whatever its position; infinities
/// compare as usual. (Which zero wins a tie of -0.0 and 0.0 depends on onnxruntime's tiling;
/// here the earlier input's.)
fn extremum(call: &OpCall<'_>, better: Ordering) -> Result<Vec<Tensor>> {
    let (inputs, first) = same_dtype_inputs(call)?;
    let (shape, index) = broadcast(call, &inputs)?;
    let out = match &first.values {
        Values::Float(_) => {
            let values = inputs
                .iter()
                .map(|t| t.floats())
                .collect::<Result<Vec<_>>>()?;
            let pick = |acc: f32, p: f32| {
                if p.is_nan() || p.partial_cmp(&acc) == Some(better) {
                    p
                } else {
                    acc
                }
            };
            Tensor::float(first.dtype, shape, fold(&values, &index, pick))
        }
        Values::Int(_) => {
            let values = inputs
                .iter()
                .map(|t| t.ints())
                .collect::<Result<Vec<_>>>()?;
            let key = |v: i64| int_order_key(first.dtype, v);
            let pick = |acc: i64, p: i64| {
                if key(p).cmp(&key(acc)) == better {
                    p
                } else {
                    acc
                }
            };
            Tensor::int(first.dtype, shape, fold(&values, &index, pick))
        }
        Values::Bool(_) => return Err(call.error("unsupported dtype bool")),
    };
    Ok(vec![out])
}

/// The 1..N inputs of a variadic op, which must share one dtype, and the first of them.
pub(super) fn same_dtype_inputs<'a>(call: &OpCall<'a>) -> Result<(Vec<&'a Tensor>, &'a Tensor)> {
    let inputs = (0..call.inputs.len())
        .map(|i| call.input(i))
        .collect::<Result<Vec<_>>>()?;
    let first = *inputs
        .first()
        .ok_or_else(|| call.error("needs at least one input"))?;
    if let Some(other) = inputs.iter().find(|t| t.dtype != first.dtype) {
        return Err(call.error(format!(
            "input dtypes differ: {} and {}",
            first.dtype, other.dtype
        )));
    }
    Ok((inputs, first))
}

/// Per output element (`index` as returned by [`broadcast`]), `f` folded over the elements the
/// inputs `values` broadcast to it, from the first input on.
pub(super) fn fold<T: Copy>(
    values: &[&[T]],
    index: &[Vec<usize>],
    f: impl Fn(T, T) -> T,
) -> Vec<T> {
    (0..index[0].len())
        .map(|o| {
            let start = values[0][index[0][o]];
            values[1..]
                .iter()
                .zip(&index[1..])
                .fold(start, |acc, (v, ix)| f(acc, v[ix[o]]))
        })
        .collect()
}

/// `Pow`: the output has the base's dtype; the exponent may be any numeric dtype. Computed in
/// f64 (as `std::pow` promotes); integer results are truncated like a C++ cast.
fn pow(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (base, exponent) = (call.input(0)?, call.input(1)?);
    let (shape, index) = broadcast(call, &[base, exponent])?;
    let e = exponent.as_f64();
    let out = match &base.values {
        Values::Float(x) => Tensor::float(
            base.dtype,
            shape,
            zip(x, &e, &index, |p, q| (p as f64).powf(q) as f32),
        ),
        Values::Int(x) => Tensor::int(
            base.dtype,
            shape,
            zip(x, &e, &index, |p, q| {
                float_to_int((p as f64).powf(q), base.dtype)
            }),
        ),
        Values::Bool(_) => return Err(call.error("unsupported dtype bool")),
    };
    Ok(vec![out])
}

/// A unary op on float or integer input 0 (`f` for floats, `g` for integers, whose result is
/// wrapped to the dtype).
pub(super) fn unary_numeric(
    call: &OpCall<'_>,
    f: fn(f32) -> f32,
    g: fn(i64) -> i64,
) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let shape = x.shape.clone();
    let out = match &x.values {
        Values::Float(v) => Tensor::float(x.dtype, shape, v.iter().map(|&p| f(p)).collect()),
        Values::Int(v) => Tensor::int(
            x.dtype,
            shape,
            v.iter().map(|&p| wrap_int(x.dtype, g(p))).collect(),
        ),
        Values::Bool(_) => return Err(call.error("unsupported dtype bool")),
    };
    Ok(vec![out])
}

/// A unary op on float input 0, computed in f64.
pub(super) fn unary_float(call: &OpCall<'_>, f: impl Fn(f64) -> f64) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let v = x.floats().map_err(|e| call.error(e))?;
    let values = v.iter().map(|&p| f(p as f64) as f32).collect();
    Ok(vec![Tensor::float(x.dtype, x.shape.clone(), values)])
}

/// The error function, accurate to about 1e-15: `erf(x) = 2/sqrt(pi) * exp(-x^2) *
/// sum_n (2x^2)^n x / (1*3*...*(2n+1))`, a series of positive terms (no cancellation); beyond
/// |x| = 6, erf is ±1 to double precision.
fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    if ax >= 6.0 {
        return 1f64.copysign(x);
    }
    let x2 = ax * ax;
    let (mut term, mut sum) = (ax, ax);
    // The ratio of successive terms is 2x^2/(2n+1) <= 72/(2n+1): under 200 terms reach 1e-17.
    for n in 1..200 {
        term *= 2.0 * x2 / (2 * n + 1) as f64;
        sum += term;
        if term <= sum * 1e-17 {
            break;
        }
    }
    (FRAC_2_SQRT_PI * (-x2).exp() * sum).min(1.0).copysign(x)
}

/// Exact GELU: `x/2 * (1 + erf(x/sqrt(2)))`.
fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x * FRAC_1_SQRT_2))
}

/// Tanh-approximated GELU: `x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`.
fn gelu_tanh(x: f64) -> f64 {
    let sqrt_2_over_pi = FRAC_2_SQRT_PI * FRAC_1_SQRT_2;
    0.5 * x * (1.0 + (sqrt_2_over_pi * (x + 0.044715 * x * x * x)).tanh())
}

/// `Gelu` (opset 20): `approximate` is `"none"` (default) or `"tanh"`.
fn gelu(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    match call.string("approximate").unwrap_or("none") {
        "none" => unary_float(call, gelu_erf),
        "tanh" => unary_float(call, gelu_tanh),
        other => Err(call.error(format!("unknown approximate mode `{other}`"))),
    }
}

/// com.microsoft `FastGelu` (optional bias) and `BiasGelu` (required bias): `f` of `x + bias`,
/// the sum taken in f32 and broadcast.
fn biased_gelu(call: &OpCall<'_>, f: fn(f64) -> f64, bias_required: bool) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let v = x.floats().map_err(|e| call.error(e))?;
    let bias = if bias_required {
        Some(call.input(1)?)
    } else {
        call.optional(1)
    };
    let (shape, sums) = match bias {
        Some(b) => {
            let (shape, index) = broadcast(call, &[x, b])?;
            let w = b.floats().map_err(|e| call.error(e))?;
            (shape, zip(v, w, &index, |p, q| p + q))
        }
        None => (x.shape.clone(), v.to_vec()),
    };
    let values = sums.into_iter().map(|p| f(p as f64) as f32).collect();
    Ok(vec![Tensor::float(x.dtype, shape, values)])
}

/// The comparison operators.
#[derive(Clone, Copy, PartialEq)]
enum Cmp {
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
}

impl Cmp {
    /// `p op q` (false whenever NaN is involved).
    fn apply<T: PartialOrd>(self, p: T, q: T) -> bool {
        match self {
            Cmp::Equal => p == q,
            Cmp::Less => p < q,
            Cmp::Greater => p > q,
            Cmp::LessOrEqual => p <= q,
            Cmp::GreaterOrEqual => p >= q,
        }
    }
}

/// `Equal` (any dtype), `Less`, `Greater`, `LessOrEqual`, `GreaterOrEqual` (numeric dtypes):
/// a bool tensor.
fn compare(call: &OpCall<'_>, op: Cmp) -> Result<Vec<Tensor>> {
    let (a, b) = same_dtype_pair(call)?;
    let (shape, index) = broadcast(call, &[a, b])?;
    let values = match (&a.values, &b.values) {
        (Values::Float(x), Values::Float(y)) => zip(x, y, &index, |p, q| op.apply(p, q)),
        (Values::Int(x), Values::Int(y)) => zip(x, y, &index, |p, q| {
            op.apply(int_order_key(a.dtype, p), int_order_key(a.dtype, q))
        }),
        (Values::Bool(x), Values::Bool(y)) if op == Cmp::Equal => zip(x, y, &index, |p, q| p == q),
        _ => return Err(call.error(format!("unsupported dtype {}", a.dtype))),
    };
    Ok(vec![Tensor::bool(shape, values)])
}

/// `And`, `Or`, `Xor` on bool tensors.
fn logic(call: &OpCall<'_>, f: fn(bool, bool) -> bool) -> Result<Vec<Tensor>> {
    let (a, b) = (call.input(0)?, call.input(1)?);
    let (x, y) = (
        a.bools().map_err(|e| call.error(e))?,
        b.bools().map_err(|e| call.error(e))?,
    );
    let (shape, index) = broadcast(call, &[a, b])?;
    Ok(vec![Tensor::bool(shape, zip(x, y, &index, f))])
}

/// `Not` on a bool tensor.
fn not(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let v = x.bools().map_err(|e| call.error(e))?;
    Ok(vec![Tensor::bool(
        x.shape.clone(),
        v.iter().map(|&p| !p).collect(),
    )])
}

/// `IsNaN(x)` of a float tensor.
fn is_nan(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    if !x.dtype.is_float() {
        return Err(call.error(format!("input must be a float tensor, got {}", x.dtype)));
    }
    Ok(vec![Tensor::bool(
        x.shape.clone(),
        x.as_f64().iter().map(|p| p.is_nan()).collect(),
    )])
}

/// `Where(condition, X, Y)` with three-way broadcasting; the output has X's dtype.
fn where_op(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let cond = call.input(0)?;
    let c = cond.bools().map_err(|e| call.error(e))?;
    let (x, y) = (call.input(1)?, call.input(2)?);
    if x.dtype != y.dtype {
        return Err(call.error(format!("input dtypes differ: {} and {}", x.dtype, y.dtype)));
    }
    let (shape, index) = broadcast(call, &[cond, x, y])?;
    fn pick<T: Copy>(c: &[bool], x: &[T], y: &[T], index: &[Vec<usize>]) -> Vec<T> {
        (0..index[0].len())
            .map(|i| {
                if c[index[0][i]] {
                    x[index[1][i]]
                } else {
                    y[index[2][i]]
                }
            })
            .collect()
    }
    let values = match (&x.values, &y.values) {
        (Values::Float(p), Values::Float(q)) => Values::Float(pick(c, p, q, &index)),
        (Values::Int(p), Values::Int(q)) => Values::Int(pick(c, p, q, &index)),
        (Values::Bool(p), Values::Bool(q)) => Values::Bool(pick(c, p, q, &index)),
        _ => return Err(call.error("X and Y hold different kinds of values")),
    };
    Ok(vec![Tensor {
        dtype: x.dtype,
        shape,
        values,
    }])
}

/// `Cast` to the dtype given by the `to` attribute.
fn cast_op(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let code = call.int("to", 0);
    let to = i32::try_from(code)
        .ok()
        .and_then(DType::from_onnx_code)
        .ok_or_else(|| call.error(format!("unsupported target type {code}")))?;
    // `saturate` (opset 19+) only concerns float8 targets: 0 turns what lies beyond the
    // largest finite value (and ±inf) into NaN instead of ±448.
    if to == DType::F8E4M3FN && call.int("saturate", 1) == 0 {
        let v = x
            .as_f64()
            .iter()
            .map(|&p| f8e4m3::round(p as f32, false))
            .collect();
        return Ok(vec![Tensor::float(to, x.shape.clone(), v)]);
    }
    Ok(vec![cast(x, to)])
}

/// `x` converted to `to`: floats are rounded to a float target, truncated (x86 `static_cast`
/// semantics, see [`float_to_int`]) to an integer target and compared with zero for bool;
/// integers wrap to a narrower integer target.
pub(crate) fn cast(x: &Tensor, to: DType) -> Tensor {
    let shape = x.shape.clone();
    match &x.values {
        Values::Float(v) if to.is_float() => Tensor::float(to, shape, v.clone()),
        Values::Float(v) if to == DType::Bool => {
            Tensor::bool(shape, v.iter().map(|&p| p != 0.0).collect())
        }
        Values::Float(v) => Tensor::int(
            to,
            shape,
            v.iter().map(|&p| float_to_int(p as f64, to)).collect(),
        ),
        Values::Int(v) if to.is_float() && x.dtype == DType::U64 => {
            Tensor::float(to, shape, v.iter().map(|&p| p as u64 as f32).collect())
        }
        Values::Int(v) if to.is_float() => {
            Tensor::float(to, shape, v.iter().map(|&p| p as f32).collect())
        }
        Values::Int(v) if to == DType::Bool => {
            Tensor::bool(shape, v.iter().map(|&p| p != 0).collect())
        }
        Values::Int(v) => Tensor::int(to, shape, v.iter().map(|&p| wrap_int(to, p)).collect()),
        Values::Bool(v) if to.is_float() => {
            Tensor::float(to, shape, v.iter().map(|&p| p as u8 as f32).collect())
        }
        Values::Bool(v) if to == DType::Bool => Tensor::bool(shape, v.clone()),
        Values::Bool(v) => Tensor::int(to, shape, v.iter().map(|&p| p as i64).collect()),
    }
}
