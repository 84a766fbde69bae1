//! Rule gates: which capability of the target EP (and which model dtype) enables a rule.

use std::fmt;
use std::str::FromStr;

use crate::ep::EpCapabilities;
use crate::ir::DType;

/// A capability expression of a rule file's `gate` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Always enabled.
    Always,
    /// A boolean capability, possibly negated (`!supports_fused_rope`).
    Flag {
        /// The capability.
        flag: Flag,
        /// Enabled when the flag is false.
        negated: bool,
    },
    /// The model dtype is in `gqa_dtypes`.
    GqaDtype,
    /// The model dtype is in `qkv_pack_dtypes`.
    QkvPackDtype,
}

/// Boolean capabilities a gate can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// `supports_fused_rope`.
    FusedRope,
    /// `supports_skip_layer_norm`.
    SkipLayerNorm,
    /// `supports_rotary_embedding`.
    RotaryEmbedding,
    /// `supports_attention`.
    Attention,
    /// `supports_rank4_rmsnorm`.
    Rank4RmsNorm,
    /// `supports_tensor_scatter`.
    TensorScatter,
    /// `supports_range`.
    Range,
}

const FLAGS: &[(&str, Flag)] = &[
    ("supports_fused_rope", Flag::FusedRope),
    ("supports_skip_layer_norm", Flag::SkipLayerNorm),
    ("supports_rotary_embedding", Flag::RotaryEmbedding),
    ("supports_attention", Flag::Attention),
    ("supports_rank4_rmsnorm", Flag::Rank4RmsNorm),
    ("supports_tensor_scatter", Flag::TensorScatter),
    ("supports_range", Flag::Range),
];

impl Gate {
    /// Whether the gate enables its rule for `caps` building in `dtype`.
    pub fn enabled(&self, caps: &EpCapabilities, dtype: DType) -> bool {
        match self {
            Gate::Always => true,
            Gate::GqaDtype => caps.gqa_dtypes.contains(&dtype),
            Gate::QkvPackDtype => caps.qkv_pack_dtypes.contains(&dtype),
            Gate::Flag { flag, negated } => {
                let value = match flag {
                    Flag::FusedRope => caps.supports_fused_rope,
                    Flag::SkipLayerNorm => caps.supports_skip_layer_norm,
                    Flag::RotaryEmbedding => caps.supports_rotary_embedding,
                    Flag::Attention => caps.supports_attention,
                    Flag::Rank4RmsNorm => caps.supports_rank4_rmsnorm,
                    Flag::TensorScatter => caps.supports_tensor_scatter,
                    Flag::Range => caps.supports_range,
                };
                value != *negated
            }
        }
    }
}

impl FromStr for Gate {
    type Err = String;
    fn from_str(s: &str) -> Result<Gate, String> {
        let (negated, name) = match s.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        match (negated, name) {
            (false, "always") => return Ok(Gate::Always),
            (false, "gqa_dtypes") => return Ok(Gate::GqaDtype),
            (false, "qkv_pack_dtypes") => return Ok(Gate::QkvPackDtype),
            _ => {}
        }
        FLAGS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, flag)| Gate::Flag { flag: *flag, negated })
            .ok_or_else(|| {
                let names: Vec<&str> = FLAGS.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown gate `{s}` (expected always, gqa_dtypes, qkv_pack_dtypes or a capability, optionally negated with !: {})",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gate::Always => f.write_str("always"),
            Gate::GqaDtype => f.write_str("gqa_dtypes"),
            Gate::QkvPackDtype => f.write_str("qkv_pack_dtypes"),
            Gate::Flag { flag, negated } => {
                let name = FLAGS
                    .iter()
                    .find(|(_, fl)| fl == flag)
                    .map_or("?", |(n, _)| n);
                write!(f, "{}{name}", if *negated { "!" } else { "" })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ep::get_ep;

    #[test]
    fn gates_follow_capabilities_and_dtype() {
        let cuda = get_ep("cuda").unwrap();
        let dml = get_ep("dml").unwrap();
        let gqa: Gate = "gqa_dtypes".parse().unwrap();
        assert!(gqa.enabled(&cuda, DType::F16) && !gqa.enabled(&cuda, DType::F32));
        let unfused: Gate = "!supports_fused_rope".parse().unwrap();
        assert!(unfused.enabled(&dml, DType::F16) && !unfused.enabled(&cuda, DType::F16));
        assert_eq!(unfused.to_string(), "!supports_fused_rope");
        assert!("supports_teleportation"
            .parse::<Gate>()
            .unwrap_err()
            .contains("unknown gate"));
    }
}
