//! The activation of an ungated MLP, as transformers' `ACT2FN` names it.

use super::gelu;
use crate::config::{Fields, Gelu};
use crate::error::Result;
use crate::ir::GraphBuilder;

/// An ungated MLP's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// Opset-20 `Gelu` of this form.
    Gelu(Gelu),
    /// `Relu`.
    Relu,
    /// SiLU written as `x · Sigmoid(x)`.
    Silu,
}

impl Activation {
    /// The names transformers' `ACT2FN` gives these activations, for error messages.
    pub const NAMES: &'static str =
        "gelu, gelu_python, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu or swish";

    /// The activation `ACT2FN[name]` computes, if it is one of these.
    pub fn from_hf_name(name: &str) -> Option<Activation> {
        match name {
            "relu" => Some(Activation::Relu),
            "silu" | "swish" => Some(Activation::Silu),
            _ => Gelu::from_hf_name(name).map(Activation::Gelu),
        }
    }

    /// The activation config field `field` names (`default` where it is absent); an
    /// error naming the field for a name this enum does not have.
    pub fn read(name: Option<&str>, default: &str, field: &str, f: &Fields<'_>) -> Result<Self> {
        let name = name.unwrap_or(default);
        Activation::from_hf_name(name).ok_or_else(|| {
            f.err(
                field,
                &format!("`{name}` is not supported (expected {})", Activation::NAMES),
            )
        })
    }

    /// The activation of `x`.
    pub fn apply(self, b: &mut GraphBuilder, x: &str) -> String {
        match self {
            Activation::Gelu(form) => gelu(b, x, form),
            Activation::Relu => b.op("Relu", &[x], vec![]),
            Activation::Silu => {
                let sig = b.op("Sigmoid", &[x], vec![]);
                b.op("Mul", &[x, &sig], vec![])
            }
        }
    }
}
