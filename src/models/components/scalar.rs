//! Scalar constants in the model dtype.

use crate::ir::{DType, GraphBuilder, TensorData};

/// A scalar constant of `dtype` (f32, f16 or bf16) holding `value` rounded to that dtype.
pub fn scalar(b: &mut GraphBuilder, value: f32, dtype: DType) -> String {
    let mut bytes = Vec::new();
    crate::weights::convert::convert_into(&value.to_le_bytes(), DType::F32, dtype, &mut bytes);
    b.constant(TensorData {
        dtype,
        shape: vec![],
        bytes,
    })
}
