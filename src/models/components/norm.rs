//! Normalisation layers.

use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};

/// `RMSNormalization(x, {weight}; axis=-1, epsilon)` with the HF weight `weight` (`[width]`).
pub fn rms_norm(
    b: &mut GraphBuilder,
    x: &str,
    weight: &str,
    width: usize,
    eps: f32,
    dtype: DType,
) -> String {
    let w = b.initializer(Initializer {
        name: weight.to_string(),
        dtype,
        shape: vec![width],
        source: Some(TensorSource::Checkpoint(weight.to_string())),
    });
    b.op(
        "RMSNormalization",
        &[x, &w],
        vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(eps))],
    )
}

/// `LayerNormalization(x, {prefix}.weight, {prefix}.bias; axis=-1, epsilon)` over the last
/// axis (`width` channels), its output named `out`.
pub fn layer_norm_into(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    width: usize,
    eps: f32,
    dtype: DType,
    out: &str,
) {
    let mut param = |suffix: &str| {
        let name = format!("{prefix}.{suffix}");
        b.initializer(Initializer {
            name: name.clone(),
            dtype,
            shape: vec![width],
            source: Some(TensorSource::Checkpoint(name)),
        })
    };
    let (w, bias) = (param("weight"), param("bias"));
    b.op_into(
        "LayerNormalization",
        &[x, &w, &bias],
        vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(eps))],
        out,
    );
}

/// [`layer_norm_into`] a fresh value, which it returns.
pub fn layer_norm(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    width: usize,
    eps: f32,
    dtype: DType,
) -> String {
    let out = b.fresh_name("LayerNormalization");
    layer_norm_into(b, x, prefix, width, eps, dtype, &out);
    out
}
