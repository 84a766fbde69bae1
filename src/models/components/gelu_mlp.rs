//! GELU-gated feed-forward block (Gemma).

use super::linear;
use crate::config::GeluApproximation;
use crate::ir::{Attr, DType, GraphBuilder};

/// `down(Gelu(gate(x)) · up(x))` without biases, `Gelu` being the opset-20 op with
/// `approximate` = `"tanh"` or `"none"`.
pub fn gelu_mlp(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    hidden: usize,
    intermediate: usize,
    gelu: GeluApproximation,
    dtype: DType,
) -> String {
    let gate = linear(
        b,
        x,
        &format!("{prefix}.gate_proj"),
        hidden,
        intermediate,
        false,
        dtype,
    );
    let approximate = match gelu {
        GeluApproximation::Tanh => "tanh",
        GeluApproximation::Exact => "none",
    };
    let act = b.op(
        "Gelu",
        &[&gate],
        vec![("approximate", Attr::String(approximate.into()))],
    );
    let up = linear(
        b,
        x,
        &format!("{prefix}.up_proj"),
        hidden,
        intermediate,
        false,
        dtype,
    );
    let prod = b.op("Mul", &[&act, &up], vec![]);
    linear(
        b,
        &prod,
        &format!("{prefix}.down_proj"),
        intermediate,
        hidden,
        false,
        dtype,
    )
}
