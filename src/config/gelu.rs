//! The GELU activations of GELU-MLP families, from transformers' activation names.

/// Which GELU a model's MLP applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gelu {
    /// `x/2 · (1 + erf(x/√2))`: transformers' `gelu`, `gelu_python`.
    Exact,
    /// `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`: `gelu_new`, `gelu_pytorch_tanh`,
    /// `gelu_fast` (the same function written differently).
    Tanh,
}

impl Gelu {
    /// The transformers activation names this accepts, for error messages.
    pub const NAMES: &'static str = "gelu, gelu_python, gelu_new, gelu_pytorch_tanh or gelu_fast";

    /// The GELU named `name` in transformers' `ACT2FN`, if it is one.
    pub fn from_hf_name(name: &str) -> Option<Gelu> {
        match name {
            "gelu" | "gelu_python" => Some(Gelu::Exact),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some(Gelu::Tanh),
            _ => None,
        }
    }

    /// The `approximate` attribute of ONNX `Gelu` for this variant.
    pub fn approximate(self) -> &'static str {
        match self {
            Gelu::Exact => "none",
            Gelu::Tanh => "tanh",
        }
    }
}
