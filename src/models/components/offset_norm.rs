//! Gemma's RMSNorm, which scales by `1 + weight` instead of `weight`.

use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};

/// `RMSNormalization(x, 1 + {weight}; axis=-1, epsilon)`. The gamma `1 + w` is an initializer
/// computed in f32 when the model is saved (as transformers computes it) and named
/// `{weight}_plus_one`; being a plain initializer, the norm still fuses with a residual Add
/// into `SkipSimplifiedLayerNormalization`.
pub fn offset_rms_norm(
    b: &mut GraphBuilder,
    x: &str,
    weight: &str,
    width: usize,
    eps: f32,
    dtype: DType,
) -> String {
    let gamma = b.initializer(Initializer {
        name: format!("{weight}_plus_one"),
        dtype,
        shape: vec![width],
        source: Some(TensorSource::AddScalar {
            source: Box::new(TensorSource::Checkpoint(weight.to_string())),
            value: 1.0,
        }),
    });
    b.op(
        "RMSNormalization",
        &[x, &gamma],
        vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(eps))],
    )
}
