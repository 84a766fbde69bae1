//! The schema of an EP file: every [`EpCapabilities`] field, optional, plus `base`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use toml::Spanned;

use super::capabilities::EpCapabilities;
use super::cost_params::{CostParams, OpCostCorrection};
use super::dtype_names;
use crate::ir::DType;

/// An EP file as written: `name` is required, every other key overrides the starting values.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EpFileSpec {
    pub(super) name: String,
    /// A registered EP whose values (cost included) this file starts from.
    pub(super) base: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "dtype_names::deserialize_opt")]
    dtypes: Option<BTreeSet<DType>>,
    #[serde(default, deserialize_with = "dtype_names::deserialize_one_opt")]
    default_dtype: Option<DType>,
    #[serde(default, deserialize_with = "dtype_names::deserialize_opt")]
    gqa_dtypes: Option<BTreeSet<DType>>,
    #[serde(default, deserialize_with = "dtype_names::deserialize_opt")]
    qkv_pack_dtypes: Option<BTreeSet<DType>>,
    supports_fused_rope: Option<bool>,
    supports_skip_layer_norm: Option<bool>,
    supports_fused_moe: Option<bool>,
    supports_linear_attention: Option<bool>,
    supports_rank4_rmsnorm: Option<bool>,
    supports_attention: Option<bool>,
    supports_matmul_nbits: Option<bool>,
    supports_rotary_embedding: Option<bool>,
    supports_tensor_scatter: Option<bool>,
    supports_range: Option<bool>,
    supports_contrib_ops: Option<bool>,
    supports_fp8_kv_cache: Option<bool>,
    default_int4_accuracy_level: Option<u8>,
    provider_options: Option<BTreeMap<String, String>>,
    enable_graph_capture: Option<bool>,
    supports_past_present_share_buffer: Option<bool>,
    cap_kv_buffer_max_length: Option<bool>,
    cost: Option<CostSpec>,
    /// `mobius-onnx` capability keys that change nothing in a mobius build, accepted so its
    /// EP files load ([`EpFileSpec::without_effect`] names those a file sets).
    supports_packed_multi_head_attention: Option<bool>,
    max_buffer_size: Option<u64>,
    requires_graph_capture_rewrite: Option<bool>,
}

/// The `mobius-onnx` capability keys mobius accepts in EP files but has no use for:
/// `PackedMultiHeadAttention` is never built, no buffer is split by size, and no graph is
/// rewritten for graph capture (`enable_graph_capture` sets the provider options).
pub(super) const KEYS_WITHOUT_EFFECT: [&str; 3] = [
    "supports_packed_multi_head_attention",
    "max_buffer_size",
    "requires_graph_capture_rewrite",
];

/// The `[cost]` table: each key overrides one [`CostParams`] field.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CostSpec {
    launch_overhead_us: Option<f64>,
    memory_bandwidth_gbps: Option<f64>,
    peak_tflops_f32: Option<f64>,
    peak_tflops_f16: Option<f64>,
    prefill_tokens: Option<u32>,
    /// Per-op corrections (`[cost.ops."domain::Op"]`); replaces the starting ones whole.
    ops: Option<BTreeMap<String, OpCostCorrection>>,
}

/// Replaces `slot` with `value` when the file sets it.
fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

impl EpFileSpec {
    /// The keys of [`KEYS_WITHOUT_EFFECT`] this file sets.
    pub(super) fn without_effect(&self) -> Vec<&'static str> {
        let set = [
            self.supports_packed_multi_head_attention.is_some(),
            self.max_buffer_size.is_some(),
            self.requires_graph_capture_rewrite.is_some(),
        ];
        KEYS_WITHOUT_EFFECT
            .into_iter()
            .zip(set)
            .filter_map(|(key, set)| set.then_some(key))
            .collect()
    }

    /// `start` (renamed to this file's `name`) with every key the file sets applied.
    pub(super) fn apply(self, start: EpCapabilities) -> EpCapabilities {
        let mut c = EpCapabilities {
            name: self.name,
            ..start
        };
        set(&mut c.dtypes, self.dtypes);
        set(&mut c.default_dtype, self.default_dtype);
        set(&mut c.gqa_dtypes, self.gqa_dtypes);
        set(&mut c.qkv_pack_dtypes, self.qkv_pack_dtypes);
        set(&mut c.supports_fused_rope, self.supports_fused_rope);
        set(
            &mut c.supports_skip_layer_norm,
            self.supports_skip_layer_norm,
        );
        set(&mut c.supports_fused_moe, self.supports_fused_moe);
        set(
            &mut c.supports_linear_attention,
            self.supports_linear_attention,
        );
        set(&mut c.supports_rank4_rmsnorm, self.supports_rank4_rmsnorm);
        set(&mut c.supports_attention, self.supports_attention);
        set(&mut c.supports_matmul_nbits, self.supports_matmul_nbits);
        set(
            &mut c.supports_rotary_embedding,
            self.supports_rotary_embedding,
        );
        set(&mut c.supports_tensor_scatter, self.supports_tensor_scatter);
        set(&mut c.supports_range, self.supports_range);
        set(&mut c.supports_contrib_ops, self.supports_contrib_ops);
        set(&mut c.supports_fp8_kv_cache, self.supports_fp8_kv_cache);
        set(
            &mut c.default_int4_accuracy_level,
            self.default_int4_accuracy_level,
        );
        set(&mut c.provider_options, self.provider_options);
        set(&mut c.enable_graph_capture, self.enable_graph_capture);
        set(
            &mut c.supports_past_present_share_buffer,
            self.supports_past_present_share_buffer,
        );
        set(
            &mut c.cap_kv_buffer_max_length,
            self.cap_kv_buffer_max_length,
        );
        if let Some(mut cost) = self.cost {
            if let Some(ops) = cost.ops.take() {
                c.cost_ops = ops;
            }
            cost.apply(&mut c.cost);
        }
        c
    }
}

impl CostSpec {
    fn apply(self, p: &mut CostParams) {
        set(&mut p.launch_overhead_us, self.launch_overhead_us);
        set(&mut p.memory_bandwidth_gbps, self.memory_bandwidth_gbps);
        set(&mut p.peak_tflops_f32, self.peak_tflops_f32);
        set(&mut p.peak_tflops_f16, self.peak_tflops_f16);
        set(&mut p.prefill_tokens, self.prefill_tokens);
    }
}
