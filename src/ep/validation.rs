//! The rules an [`EpCapabilities`] must satisfy before it can be registered.

use std::collections::BTreeSet;

use super::capabilities::EpCapabilities;
use crate::error::{Error, Result};
use crate::ir::DType;

pub use crate::limits::MAX_EP_NAME_LEN;

/// Provider-option keys that control graph capture; `enable_graph_capture` sets them instead.
const GRAPH_CAPTURE_KEYS: [&str; 3] = ["enable_cuda_graph", "enableGraphCapture", "validationMode"];

/// One broken rule: the fields involved (dotted key paths, as in an EP file) and why.
#[derive(Debug)]
pub(super) struct Violation {
    /// The fields at fault, most specific first.
    pub(super) fields: Vec<String>,
    /// What is wrong; names the fields.
    pub(super) message: String,
}

impl Violation {
    fn new(fields: &[&str], message: String) -> Self {
        Violation {
            fields: fields.iter().map(|f| f.to_string()).collect(),
            message,
        }
    }
}

impl EpCapabilities {
    /// Checks the capability rules.
    ///
    /// * `supports_fused_rope = false` needs empty `qkv_pack_dtypes` (RoPE separation would
    ///   immediately undo the packing);
    /// * `cap_kv_buffer_max_length` needs `supports_past_present_share_buffer`;
    /// * `name` is non-empty, at most [`MAX_EP_NAME_LEN`] characters, and made of `a-z`,
    ///   `0-9`, `-`, `_`, `.`;
    /// * `provider_options` holds no graph-capture key (`enable_cuda_graph`,
    ///   `enableGraphCapture`, `validationMode`): use `enable_graph_capture`;
    /// * `dtypes`, `gqa_dtypes` and `qkv_pack_dtypes` hold only f32, f16 and bf16;
    /// * `default_dtype` is one of `dtypes` (so `dtypes` is never empty);
    /// * `default_int4_accuracy_level` is at most 4, and every `cost` parameter lies in its plausible range ([`super::CostParams`]).
    ///
    /// Fails with [`Error::InvalidEp`] naming the field(s) at fault.
    pub fn validate(&self) -> Result<()> {
        match self.violation() {
            None => Ok(()),
            Some(v) => Err(Error::InvalidEp {
                name: self.name.clone(),
                message: v.message,
            }),
        }
    }

    /// The first broken rule, if any.
    pub(super) fn violation(&self) -> Option<Violation> {
        let valid_char = |c: char| matches!(c, 'a'..='z' | '0'..='9' | '-' | '_' | '.');
        let length = self.name.chars().count();
        if length > MAX_EP_NAME_LEN {
            let start: String = self.name.chars().take(16).collect();
            return Some(Violation::new(
                &["name"],
                format!(
                    "`name` \"{start}…\" is {length} characters long; at most \
                     {MAX_EP_NAME_LEN} are allowed"
                ),
            ));
        }
        if self.name.is_empty() || !self.name.chars().all(valid_char) {
            return Some(Violation::new(
                &["name"],
                format!(
                    "`name` {:?} must be non-empty and use only a-z, 0-9, '-', '_' and '.'",
                    self.name
                ),
            ));
        }
        for (field, set) in [
            ("dtypes", &self.dtypes),
            ("gqa_dtypes", &self.gqa_dtypes),
            ("qkv_pack_dtypes", &self.qkv_pack_dtypes),
        ] {
            if let Some(v) = dtype_violation(field, set) {
                return Some(v);
            }
        }
        if !self.dtypes.contains(&self.default_dtype) {
            let names: Vec<&str> = self.dtypes.iter().map(|d| d.name()).collect();
            return Some(Violation::new(
                &["default_dtype", "dtypes"],
                format!(
                    "`default_dtype` {} is not one of `dtypes` [{}]",
                    self.default_dtype.name(),
                    names.join(", ")
                ),
            ));
        }
        if !self.supports_fused_rope && !self.qkv_pack_dtypes.is_empty() {
            return Some(Violation::new(
                &["qkv_pack_dtypes", "supports_fused_rope"],
                "`supports_fused_rope = false` requires empty `qkv_pack_dtypes` (separating \
                 RoPE would undo the QKV packing)"
                    .into(),
            ));
        }
        if self.cap_kv_buffer_max_length && !self.supports_past_present_share_buffer {
            return Some(Violation::new(
                &[
                    "cap_kv_buffer_max_length",
                    "supports_past_present_share_buffer",
                ],
                "`cap_kv_buffer_max_length = true` requires \
                 `supports_past_present_share_buffer = true`"
                    .into(),
            ));
        }
        if let Some(key) = GRAPH_CAPTURE_KEYS
            .iter()
            .find(|k| self.provider_options.contains_key(**k))
        {
            return Some(Violation::new(
                &[&format!("provider_options.{key}"), "provider_options"],
                format!(
                    "`provider_options` must not contain the graph-capture key `{key}`; \
                     set `enable_graph_capture` instead"
                ),
            ));
        }
        self.range_violation()
    }

    /// The numeric-range rules (accuracy level, cost parameters).
    fn range_violation(&self) -> Option<Violation> {
        if self.default_int4_accuracy_level > 4 {
            return Some(Violation::new(
                &["default_int4_accuracy_level"],
                format!(
                    "`default_int4_accuracy_level` must be 0..=4, got {}",
                    self.default_int4_accuracy_level
                ),
            ));
        }
        if let Some(v) = self.cost.violation().map(|(field, why)| {
            let path = format!("cost.{field}");
            Violation::new(&[&path, "cost"], format!("`{path}` {why}"))
        }) {
            return Some(v);
        }
        self.cost_ops.iter().find_map(|(op, c)| {
            c.violation(op).map(|(field, why)| {
                let path = if field.is_empty() {
                    "cost.ops".to_string()
                } else {
                    format!("cost.ops.\"{}\".{field}", op.escape_debug())
                };
                let key = format!("cost.ops.{op}.{field}");
                Violation::new(&[&key, "cost.ops", "cost"], format!("`{path}`: {why}"))
            })
        })
    }
}

/// A violation when `set` (the field `field`) holds a dtype other than f32, f16 or bf16.
fn dtype_violation(field: &str, set: &BTreeSet<DType>) -> Option<Violation> {
    let bad: Vec<&str> = set
        .iter()
        .filter(|d| !matches!(d, DType::F32 | DType::F16 | DType::BF16))
        .map(|d| d.name())
        .collect();
    (!bad.is_empty()).then(|| {
        Violation::new(
            &[field],
            format!(
                "`{field}` may hold only f32, f16 and bf16, not {}",
                bad.join(", ")
            ),
        )
    })
}
