//! [`Role`]: what a model is (decoder, encoder, vision encoder), which the model config
//! decides and the optimizer's rule gates read.

/// What the model is, for rule gating (GQA fusion applies to decoders only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A text decoder (causal LM).
    Decoder,
    /// An encoder (feature extraction).
    Encoder,
    /// A vision encoder.
    Vision,
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Role, String> {
        Ok(match s {
            "decoder" => Role::Decoder,
            "encoder" => Role::Encoder,
            "vision" => Role::Vision,
            other => {
                return Err(format!(
                    "unknown role `{other}` (expected decoder, encoder or vision)"
                ))
            }
        })
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Decoder => "decoder",
            Role::Encoder => "encoder",
            Role::Vision => "vision",
        })
    }
}
