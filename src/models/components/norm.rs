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
