//! Feed-forward blocks: gated `down(act(gate(x)) · up(x))`, ungated `down(act(up(x)))` and
//! squared ReLU `down(relu(up(x))²)`.

use super::{linear, Activation};
use crate::config::Gelu;
use crate::ir::{Attr, DType, GraphBuilder};

/// The activation a gated MLP applies to its gate projection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateActivation {
    /// SiLU written as `g · Sigmoid(g)` (SwiGLU).
    Silu,
    /// Opset-20 `Gelu` of this form, its `approximate` attribute always written (Gemma's
    /// GeGLU).
    Gelu(Gelu),
}

/// Gated MLP `down(act(gate(x)) · up(x))` over the `{prefix}.{gate,up,down}_proj` linears
/// (with biases when `bias`); `sizes` is `(hidden, intermediate)`.
pub fn gated_mlp(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    (hidden, intermediate): (usize, usize),
    bias: bool,
    act: GateActivation,
    dtype: DType,
) -> String {
    let proj = |b: &mut GraphBuilder, x: &str, name: &str, inp: usize, out: usize| {
        linear(b, x, &format!("{prefix}.{name}"), inp, out, bias, dtype)
    };
    let gate = proj(b, x, "gate_proj", hidden, intermediate);
    let gate = match act {
        GateActivation::Silu => {
            let sig = b.op("Sigmoid", &[&gate], vec![]);
            b.op("Mul", &[&gate, &sig], vec![])
        }
        GateActivation::Gelu(form) => b.op(
            "Gelu",
            &[&gate],
            vec![("approximate", Attr::String(form.approximate().into()))],
        ),
    };
    let up = proj(b, x, "up_proj", hidden, intermediate);
    let prod = b.op("Mul", &[&gate, &up], vec![]);
    proj(b, &prod, "down_proj", intermediate, hidden)
}

/// `{prefix}.{down}(act({prefix}.{up}(x)))` with the config's hidden and intermediate sizes
/// and MLP biases: the ungated MLP of GPT-2-like families (the names are the checkpoint's).
pub fn ungated_mlp(
    b: &mut GraphBuilder,
    cfg: &crate::config::ArchConfig,
    x: &str,
    (prefix, up, down): (&str, &str, &str),
    act: Activation,
    dtype: DType,
) -> String {
    let (h, inner, bias) = (cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias);
    let hidden = linear(b, x, &format!("{prefix}.{up}"), h, inner, bias, dtype);
    let hidden = act.apply(b, &hidden);
    linear(
        b,
        &hidden,
        &format!("{prefix}.{down}"),
        inner,
        h,
        bias,
        dtype,
    )
}

/// `{prefix}.{down}(relu({prefix}.{up}(x))²)` with the config's hidden and intermediate sizes
/// and MLP biases: the ungated squared-ReLU MLP (`relu2`) of Nemotron and Persimmon (the names
/// are the checkpoint's).
pub fn squared_relu_mlp(
    b: &mut GraphBuilder,
    cfg: &crate::config::ArchConfig,
    x: &str,
    (prefix, up, down): (&str, &str, &str),
    dtype: DType,
) -> String {
    let (h, inner, bias) = (cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias);
    let up = linear(b, x, &format!("{prefix}.{up}"), h, inner, bias, dtype);
    let relu = b.op("Relu", &[&up], vec![]);
    let squared = b.op("Mul", &[&relu, &relu], vec![]);
    linear(
        b,
        &squared,
        &format!("{prefix}.{down}"),
        inner,
        h,
        bias,
        dtype,
    )
}
