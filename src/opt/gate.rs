//! Rule gates: which capability of the target EP (and which model dtype) enables a rule.

use std::fmt;
use std::str::FromStr;

use crate::ep::EpCapabilities;
use crate::ir::DType;
use crate::role::Role;

/// A rule file's `gate` line: one or more conditions joined by `&`, all of which must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate(pub Vec<GateAtom>);

impl Gate {
    /// Whether every condition holds for `caps` building a `role` model in `dtype`.
    pub fn enabled(&self, caps: &EpCapabilities, dtype: DType, role: Role) -> bool {
        self.0.iter().all(|a| a.enabled(caps, dtype, role))
    }
}

impl FromStr for Gate {
    type Err = String;
    fn from_str(s: &str) -> Result<Gate, String> {
        s.split('&')
            .map(|a| a.trim().parse())
            .collect::<Result<Vec<_>, _>>()
            .map(Gate)
    }
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|a| a.to_string()).collect();
        f.write_str(&parts.join(" & "))
    }
}

/// One condition of a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateAtom {
    /// Always enabled.
    Always,
    /// A boolean capability, possibly negated (`!supports_fused_rope`).
    Flag {
        /// The capability.
        flag: Flag,
        /// Enabled when the flag is false.
        negated: bool,
    },
    /// The model is a decoder and its dtype is in `gqa_dtypes` (spec §3: GQA fusion is for
    /// decoders only).
    GqaDtype,
    /// The model is a decoder and its dtype is in `qkv_pack_dtypes`.
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
    /// `supports_contrib_ops`.
    ContribOps,
    /// `supports_matmul_nbits`.
    MatMulNBits,
    /// `supports_fused_moe`.
    FusedMoe,
}

const FLAGS: &[(&str, Flag)] = &[
    ("supports_fused_rope", Flag::FusedRope),
    ("supports_skip_layer_norm", Flag::SkipLayerNorm),
    ("supports_rotary_embedding", Flag::RotaryEmbedding),
    ("supports_attention", Flag::Attention),
    ("supports_rank4_rmsnorm", Flag::Rank4RmsNorm),
    ("supports_tensor_scatter", Flag::TensorScatter),
    ("supports_range", Flag::Range),
    ("supports_contrib_ops", Flag::ContribOps),
    ("supports_matmul_nbits", Flag::MatMulNBits),
    ("supports_fused_moe", Flag::FusedMoe),
];

impl GateAtom {
    /// Whether the condition holds for `caps` building a `role` model in `dtype`.
    pub fn enabled(&self, caps: &EpCapabilities, dtype: DType, role: Role) -> bool {
        let decoder = role == Role::Decoder;
        match self {
            GateAtom::Always => true,
            GateAtom::GqaDtype => decoder && caps.gqa_dtypes.contains(&dtype),
            GateAtom::QkvPackDtype => decoder && caps.qkv_pack_dtypes.contains(&dtype),
            GateAtom::Flag { flag, negated } => {
                let value = match flag {
                    Flag::FusedRope => caps.supports_fused_rope,
                    Flag::SkipLayerNorm => caps.supports_skip_layer_norm,
                    Flag::RotaryEmbedding => caps.supports_rotary_embedding,
                    Flag::Attention => caps.supports_attention,
                    Flag::Rank4RmsNorm => caps.supports_rank4_rmsnorm,
                    Flag::TensorScatter => caps.supports_tensor_scatter,
                    Flag::Range => caps.supports_range,
                    Flag::ContribOps => caps.supports_contrib_ops,
                    Flag::MatMulNBits => caps.supports_matmul_nbits,
                    Flag::FusedMoe => caps.supports_fused_moe,
                };
                value != *negated
            }
        }
    }
}

impl FromStr for GateAtom {
    type Err = String;
    fn from_str(s: &str) -> Result<GateAtom, String> {
        let (negated, name) = match s.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        match (negated, name) {
            (false, "always") => return Ok(GateAtom::Always),
            (false, "gqa_dtypes") => return Ok(GateAtom::GqaDtype),
            (false, "qkv_pack_dtypes") => return Ok(GateAtom::QkvPackDtype),
            _ => {}
        }
        FLAGS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, flag)| GateAtom::Flag { flag: *flag, negated })
            .ok_or_else(|| {
                let names: Vec<&str> = FLAGS.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown gate `{s}` (expected always, gqa_dtypes, qkv_pack_dtypes or a capability, optionally negated with !: {})",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for GateAtom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateAtom::Always => f.write_str("always"),
            GateAtom::GqaDtype => f.write_str("gqa_dtypes"),
            GateAtom::QkvPackDtype => f.write_str("qkv_pack_dtypes"),
            GateAtom::Flag { flag, negated } => {
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
        let dec = Role::Decoder;
        let gqa: Gate = "gqa_dtypes".parse().unwrap();
        assert!(gqa.enabled(&cuda, DType::F16, dec) && !gqa.enabled(&cuda, DType::F32, dec));
        let unfused: Gate = "!supports_fused_rope".parse().unwrap();
        assert!(unfused.enabled(&dml, DType::F16, dec) && !unfused.enabled(&cuda, DType::F16, dec));
        assert_eq!(unfused.to_string(), "!supports_fused_rope");
        // GQA fusion and QKV packing are decoder rules; capabilities gate every role.
        for role in [Role::Encoder, Role::Vision] {
            for dtype_gate in ["gqa_dtypes", "qkv_pack_dtypes"] {
                let gate: Gate = dtype_gate.parse().unwrap();
                assert!(
                    !gate.enabled(&cuda, DType::F16, role),
                    "{dtype_gate} {role}"
                );
            }
            assert!(unfused.enabled(&dml, DType::F16, role));
        }
        assert!("supports_teleportation"
            .parse::<Gate>()
            .unwrap_err()
            .contains("unknown gate"));
    }
}
