//! Small graph pieces the recurrent mixers (Mamba, Mamba2, Gated DeltaNet) share: a split on
//! the last axis, SiLU, and the casts around the parts they compute in f32.

use crate::ir::{Attr, DType, GraphBuilder};

/// `x` split on its last axis by `sizes` into `n` parts.
pub(super) fn split(b: &mut GraphBuilder, x: &str, sizes: &str, n: usize) -> Vec<String> {
    let parts: Vec<String> = (0..n).map(|_| b.fresh_name("Split")).collect();
    b.node(
        "",
        "Split",
        &[x, sizes],
        vec![("axis", Attr::Int(-1))],
        parts.clone(),
    );
    parts
}

/// `x · sigmoid(x)`.
pub(super) fn silu(b: &mut GraphBuilder, x: &str) -> String {
    let s = b.op("Sigmoid", &[x], vec![]);
    b.op("Mul", &[x, &s], vec![])
}

/// `t` cast from `dtype` to f32 (itself when `dtype` is f32).
pub(super) fn to_f32(b: &mut GraphBuilder, t: &str, dtype: DType) -> String {
    match dtype {
        DType::F32 => t.to_string(),
        _ => b.op(
            "Cast",
            &[t],
            vec![("to", Attr::Int(DType::F32.onnx_code() as i64))],
        ),
    }
}

/// `t` cast from f32 to `dtype` (itself when `dtype` is f32).
pub(super) fn from_f32(b: &mut GraphBuilder, t: &str, dtype: DType) -> String {
    match dtype {
        DType::F32 => t.to_string(),
        _ => b.op(
            "Cast",
            &[t],
            vec![("to", Attr::Int(dtype.onnx_code() as i64))],
        ),
    }
}
