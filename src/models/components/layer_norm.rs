//! LayerNorm with weight and bias.

use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};

/// `LayerNormalization(x, {prefix}.weight, {prefix}.bias; axis=-1, epsilon)` over the last
/// axis (`[width]` weight and bias from the checkpoint).
pub fn layer_norm(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    width: usize,
    eps: f32,
    dtype: DType,
) -> String {
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
    b.op(
        "LayerNormalization",
        &[x, &w, &bias],
        vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(eps))],
    )
}
