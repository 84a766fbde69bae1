//! Ops of ONNX's `ai.onnx.ml` domain that act on plain tensors: `ArrayFeatureExtractor`
//! (elements picked along the last axis) and `Binarizer` (1 above a threshold, else 0).

use super::infer::Infer;
use super::types::TensorType;
use super::{OpCall, OpDef, Tensor, Values};
use crate::Result;

/// The domain of ONNX's classical machine-learning ops.
pub const ML_DOMAIN: &str = "ai.onnx.ml";

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::new(ML_DOMAIN, "ArrayFeatureExtractor", &[])
        .infer(|c: &Infer<'_>| vec![c.ty(0).with_unknown_shape()])
        .eval(array_feature_extractor),
    OpDef::new(ML_DOMAIN, "Binarizer", &["threshold"])
        .infer(|c: &Infer<'_>| -> Vec<TensorType> { vec![c.ty(0)] })
        .eval(binarizer),
];

/// `X[..., indices]` (the indices flattened), shaped `X.shape[..-1] + [count]`, or `[1,
/// count]` for a 1-D `X` (as onnxruntime writes it).
fn array_feature_extractor(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (x, idx) = (call.input(0)?, call.input(1)?);
    let Some(&last) = x.shape.last() else {
        return Err(call.error("X must have at least one dimension"));
    };
    let picks = idx
        .ints()?
        .iter()
        .map(|&i| match usize::try_from(i) {
            Ok(i) if i < last => Ok(i),
            _ => Err(call.error(format!("index {i} is outside X's last axis of {last}"))),
        })
        .collect::<Result<Vec<usize>>>()?;
    let rows: usize = x.shape[..x.shape.len() - 1].iter().product();
    let shape = match x.shape.len() {
        1 => vec![1, picks.len()],
        _ => [&x.shape[..x.shape.len() - 1], &[picks.len()][..]].concat(),
    };
    call.alloc(&shape)?;
    let at: Vec<usize> = (0..rows)
        .flat_map(|r| picks.iter().map(move |&p| r * last + p))
        .collect();
    let values = match &x.values {
        Values::Float(v) => Values::Float(at.iter().map(|&i| v[i]).collect()),
        Values::Int(v) => Values::Int(at.iter().map(|&i| v[i]).collect()),
        Values::Bool(v) => Values::Bool(at.iter().map(|&i| v[i]).collect()),
    };
    Ok(vec![Tensor {
        dtype: x.dtype,
        shape,
        values,
    }])
}

/// 1 where `x > threshold` (default 0), else 0, in `x`'s dtype (NaN gives 0).
fn binarizer(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let threshold = call.float("threshold", 0.0) as f64;
    let out = match &x.values {
        Values::Float(v) => Tensor::float(
            x.dtype,
            x.shape.clone(),
            v.iter()
                .map(|&p| ((p as f64) > threshold) as u8 as f32)
                .collect(),
        ),
        Values::Int(v) => Tensor::int(
            x.dtype,
            x.shape.clone(),
            v.iter().map(|&p| ((p as f64) > threshold) as i64).collect(),
        ),
        Values::Bool(_) => return Err(call.error("takes a numeric input, not bool")),
    };
    Ok(vec![out])
}
