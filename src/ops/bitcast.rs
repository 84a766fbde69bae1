//! `BitCast` (opset 26): each element's bits read as dtype `to` of the same width (f32 ↔ i32,
//! f16 ↔ i16, u8 ↔ i8 ↔ bool, …). The interpreter holds f64 values as f32 (see
//! [`super::tensor`]), so an f64 input's low mantissa bits and an f64 result outside f32's
//! range are those of the value it holds.
//!
//! [`OPS`] registers the op with its attribute schema, type inference and cost facts beside
//! its evaluator.

use half::{bf16, f16};

use super::{OpCall, OpDef, Tensor, Values};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[OpDef::onnx("BitCast", &["to"])
    .infer(|c| {
        let to = c.int("to").and_then(|t| DType::from_onnx_code(t as i32));
        vec![c.ty(0).with_dtype(to)]
    })
    .since(26)
    .eval(bitcast)];

/// The bits of each element of `x` (its width's low bits of a u64).
fn bits(x: &Tensor) -> Vec<u64> {
    match &x.values {
        Values::Float(v) => v
            .iter()
            .map(|&f| match x.dtype {
                DType::F16 => u64::from(f16::from_f32(f).to_bits()),
                DType::BF16 => u64::from(bf16::from_f32(f).to_bits()),
                DType::F64 => f64::from(f).to_bits(),
                _ => u64::from(f.to_bits()),
            })
            .collect(),
        Values::Int(v) => {
            let mask = match x.dtype.size() {
                8 => u64::MAX,
                n => (1u64 << (8 * n)) - 1,
            };
            v.iter().map(|&i| i as u64 & mask).collect()
        }
        Values::Bool(v) => v.iter().map(|&b| u64::from(b)).collect(),
    }
}

/// `BitCast(X)`.
fn bitcast(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let code = call.int("to", 0);
    let to = i32::try_from(code)
        .ok()
        .and_then(DType::from_onnx_code)
        .filter(|t| !t.is_4bit() && *t != DType::F8E4M3FN)
        .ok_or_else(|| call.error(format!("`to` = {code} is not a dtype BitCast runs")))?;
    if x.dtype.is_4bit() || x.dtype == DType::F8E4M3FN || x.dtype.size() != to.size() {
        return Err(call.error(format!(
            "{} and {to} are not of the same width: BitCast reinterprets bits of one width",
            x.dtype
        )));
    }
    let raw = bits(x);
    let shape = x.shape.clone();
    Ok(vec![match to {
        DType::Bool => Tensor::bool(shape, raw.iter().map(|&b| b != 0).collect()),
        DType::F32 => Tensor::float(
            to,
            shape,
            raw.iter().map(|&b| f32::from_bits(b as u32)).collect(),
        ),
        DType::F16 => Tensor::float(
            to,
            shape,
            raw.iter()
                .map(|&b| f16::from_bits(b as u16).to_f32())
                .collect(),
        ),
        DType::BF16 => Tensor::float(
            to,
            shape,
            raw.iter()
                .map(|&b| bf16::from_bits(b as u16).to_f32())
                .collect(),
        ),
        DType::F64 => Tensor::float(
            to,
            shape,
            raw.iter().map(|&b| f64::from_bits(b) as f32).collect(),
        ),
        _ => Tensor::int(
            to,
            shape,
            raw.iter()
                .map(|&b| super::elementwise::wrap_int(to, b as i64))
                .collect(),
        ),
    }])
}
