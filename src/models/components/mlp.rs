//! Feed-forward blocks.

use super::linear;
use crate::ir::{DType, GraphBuilder};

/// SiLU-gated MLP: `down(silu(gate(x)) · up(x))`, SiLU written as `g · Sigmoid(g)`.
pub fn swiglu_mlp(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    hidden: usize,
    intermediate: usize,
    bias: bool,
    dtype: DType,
) -> String {
    let gate = linear(
        b,
        x,
        &format!("{prefix}.gate_proj"),
        hidden,
        intermediate,
        bias,
        dtype,
    );
    let sig = b.op("Sigmoid", &[&gate], vec![]);
    let silu = b.op("Mul", &[&gate, &sig], vec![]);
    let up = linear(
        b,
        x,
        &format!("{prefix}.up_proj"),
        hidden,
        intermediate,
        bias,
        dtype,
    );
    let prod = b.op("Mul", &[&silu, &up], vec![]);
    linear(
        b,
        &prod,
        &format!("{prefix}.down_proj"),
        intermediate,
        hidden,
        bias,
        dtype,
    )
}
