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
    /// Whether every condition holds for `caps` building a `role` model in `dtype` that will
    /// run under the KV-cache contract `kv_cache`.
    pub fn enabled(
        &self,
        caps: &EpCapabilities,
        dtype: DType,
        role: Role,
        kv_cache: KvCache,
    ) -> bool {
        self.0
            .iter()
            .all(|a| a.enabled(caps, dtype, role, kv_cache))
    }
}

/// How the optimized model will be run with its KV cache (`mobius optimize --kv-cache`): what
/// the caller promises about the inputs, which some rewrites need to be exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvCache {
    /// No promise: every rewrite keeps the graph's outputs for every input it accepts.
    #[default]
    AsIs,
    /// onnxruntime-genai's contract: padding on the right, each row's valid keys contiguous
    /// from cache index 0, `position_ids` each row's valid length so far plus the token's
    /// offset, the attention mask 0/1 over past + new tokens, at least one valid token per
    /// row, cache entries at and beyond a row's length never read. Enables the rules gated
    /// `genai_kv_cache` (the export's attention mask → GroupQueryAttention).
    Genai,
    /// The static cache of `mobius build --features static-cache`: fixed caches written at
    /// `write_indices`, which GroupQueryAttention cannot express, so the attention stays
    /// opset-24 Attention (the build says so once). No rewrite relies on more than
    /// [`KvCache::AsIs`]'s promise.
    Static,
}

impl FromStr for KvCache {
    type Err = String;
    fn from_str(s: &str) -> Result<KvCache, String> {
        match s {
            "as-is" => Ok(KvCache::AsIs),
            "genai" => Ok(KvCache::Genai),
            other => Err(format!(
                "unknown KV-cache contract `{other}` (expected as-is or genai)"
            )),
        }
    }
}

impl fmt::Display for KvCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KvCache::AsIs => "as-is",
            KvCache::Genai => "genai",
            KvCache::Static => "static",
        })
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
    /// The model is a decoder and its dtype is in `gqa_dtypes` (GQA fusion is for
    /// decoders only).
    GqaDtype,
    /// The model is a decoder and its dtype is in `qkv_pack_dtypes`.
    QkvPackDtype,
    /// The model is declared to run under onnxruntime-genai's KV-cache contract
    /// ([`KvCache::Genai`]).
    GenaiKvCache,
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
    /// `supports_linear_attention`.
    LinearAttention,
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
    ("supports_linear_attention", Flag::LinearAttention),
];

impl GateAtom {
    /// Whether the condition holds for `caps` building a `role` model in `dtype` run under
    /// `kv_cache`.
    pub fn enabled(
        &self,
        caps: &EpCapabilities,
        dtype: DType,
        role: Role,
        kv_cache: KvCache,
    ) -> bool {
        let decoder = role == Role::Decoder;
        match self {
            GateAtom::Always => true,
            GateAtom::GenaiKvCache => decoder && kv_cache == KvCache::Genai,
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
                    Flag::LinearAttention => caps.supports_linear_attention,
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
            (false, "genai_kv_cache") => return Ok(GateAtom::GenaiKvCache),
            _ => {}
        }
        FLAGS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, flag)| GateAtom::Flag { flag: *flag, negated })
            .ok_or_else(|| {
                let names: Vec<&str> = FLAGS.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown gate `{s}` (expected always, gqa_dtypes, qkv_pack_dtypes, genai_kv_cache or a capability, optionally negated with !: {})",
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
            GateAtom::GenaiKvCache => f.write_str("genai_kv_cache"),
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
        let as_is = KvCache::AsIs;
        let gqa: Gate = "gqa_dtypes".parse().unwrap();
        assert!(
            gqa.enabled(&cuda, DType::F16, dec, as_is)
                && !gqa.enabled(&cuda, DType::F32, dec, as_is)
        );
        let unfused: Gate = "!supports_fused_rope".parse().unwrap();
        assert!(
            unfused.enabled(&dml, DType::F16, dec, as_is)
                && !unfused.enabled(&cuda, DType::F16, dec, as_is)
        );
        assert_eq!(unfused.to_string(), "!supports_fused_rope");
        // GQA fusion and QKV packing are decoder rules; capabilities gate every role.
        for role in [Role::Encoder, Role::Vision] {
            for dtype_gate in ["gqa_dtypes", "qkv_pack_dtypes"] {
                let gate: Gate = dtype_gate.parse().unwrap();
                assert!(
                    !gate.enabled(&cuda, DType::F16, role, as_is),
                    "{dtype_gate} {role}"
                );
            }
            assert!(unfused.enabled(&dml, DType::F16, role, as_is));
        }
        // The genai contract is declared, never assumed, and only for decoders.
        let genai: Gate = "genai_kv_cache & gqa_dtypes".parse().unwrap();
        assert_eq!(genai.to_string(), "genai_kv_cache & gqa_dtypes");
        assert!(genai.enabled(&cuda, DType::F16, dec, KvCache::Genai));
        assert!(!genai.enabled(&cuda, DType::F16, dec, as_is));
        assert!(!genai.enabled(&cuda, DType::F16, Role::Encoder, KvCache::Genai));
        assert_eq!("genai".parse::<KvCache>(), Ok(KvCache::Genai));
        assert_eq!(KvCache::default(), as_is);
        assert!("hf"
            .parse::<KvCache>()
            .unwrap_err()
            .contains("as-is or genai"));
        assert!("supports_teleportation"
            .parse::<Gate>()
            .unwrap_err()
            .contains("unknown gate"));
    }
}
