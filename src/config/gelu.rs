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

    /// The GELU config field `field` names (`default` where it is absent); an error naming the
    /// field for a name that is not a GELU.
    pub fn read(
        name: Option<&str>,
        default: &str,
        field: &str,
        f: &super::Fields<'_>,
    ) -> crate::Result<Gelu> {
        let name = name.unwrap_or(default);
        Gelu::from_hf_name(name).ok_or_else(|| {
            f.err(
                field,
                &format!("`{name}` is not supported (expected {})", Gelu::NAMES),
            )
        })
    }

    /// The `approximate` attribute of ONNX `Gelu` for this variant.
    pub fn approximate(self) -> &'static str {
        match self {
            Gelu::Exact => "none",
            Gelu::Tanh => "tanh",
        }
    }
}
