//! `Linear`: `x @ Wᵀ (+ b)` with the weight stored pre-transposed as `<name>.weight_t`.

use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};

/// Declares `{prefix}.weight_t` (`[in, out]`, the lazily transposed HF `[out, in]` weight)
/// and, with `bias`, `{prefix}.bias`; emits `MatMul` (+ `Add`). Returns the output value.
pub fn linear(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    in_features: usize,
    out_features: usize,
    bias: bool,
    dtype: DType,
) -> String {
    let w = b.initializer(Initializer {
        name: format!("{prefix}.weight_t"),
        dtype,
        shape: vec![in_features, out_features],
        source: Some(TensorSource::Transpose(Box::new(TensorSource::Checkpoint(
            format!("{prefix}.weight"),
        )))),
    });
    let y = b.op("MatMul", &[x, &w], vec![]);
    if !bias {
        return y;
    }
    let bias = b.initializer(Initializer {
        name: format!("{prefix}.bias"),
        dtype,
        shape: vec![out_features],
        source: Some(TensorSource::Checkpoint(format!("{prefix}.bias"))),
    });
    b.op("Add", &[&y, &bias], vec![])
}
