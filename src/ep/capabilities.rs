//! [`EpCapabilities`]: what one execution provider can run, and how to configure it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::cost_params::{CostParams, OpCostCorrection};
use super::dtype_names;
use crate::ir::DType;

/// The capabilities of one ONNX Runtime execution provider (EP).
///
/// The rewrite pipeline reads these flags to decide which fusions to apply and which fused
/// operators to lower again; the package writer reads the provider options and the KV-cache
/// flags for `genai_config.json`. Build one with [`EpCapabilities::new`] (the defaults), then
/// set fields; [`EpCapabilities::validate`] checks the combination.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EpCapabilities {
    /// The EP name (`cuda`, `webgpu`, …): lowercase letters, digits, `-`, `_` and `.`.
    pub name: String,
    /// Model dtypes the EP's runtime executes: a build asking for another is refused before
    /// any work (onnxruntime's CPU provider, for one, has no bf16 MatMul).
    #[serde(serialize_with = "dtype_names::serialize")]
    pub dtypes: BTreeSet<DType>,
    /// The model dtype of a build that names none (one of [`Self::dtypes`]); a checkpoint
    /// stored in another dtype is converted while its weights stream.
    #[serde(serialize_with = "dtype_names::serialize_one")]
    pub default_dtype: DType,
    /// Model dtypes for which attention is fused into `com.microsoft::GroupQueryAttention`.
    #[serde(serialize_with = "dtype_names::serialize")]
    pub gqa_dtypes: BTreeSet<DType>,
    /// Model dtypes for which the Q, K and V projections are packed into one GQA input.
    #[serde(serialize_with = "dtype_names::serialize")]
    pub qkv_pack_dtypes: BTreeSet<DType>,
    /// Whether GQA may apply rotary embeddings itself (false: RoPE is separated again).
    pub supports_fused_rope: bool,
    /// Whether `SkipLayerNormalization` / `SkipSimplifiedLayerNormalization` are fused (and
    /// with them the fused elementwise kernels `BiasGelu` / `FastGelu`, which no separate
    /// capability names).
    pub supports_skip_layer_norm: bool,
    /// Whether mixture-of-experts blocks are built as one `com.microsoft::MoE` operator.
    pub supports_fused_moe: bool,
    /// Whether the gated delta rule's recurrence (a Gated DeltaNet layer's `Scan`) runs as
    /// onnxruntime's `com.microsoft::LinearAttention` kernel (off by default: onnxruntime 1.32
    /// registers it for the CPU provider, measured, and CUDA, per onnxruntime-genai's builder).
    pub supports_linear_attention: bool,
    /// Whether RMS normalization may run on rank-4 inputs (false: reshaped for HTP).
    pub supports_rank4_rmsnorm: bool,
    /// Whether the ONNX `Attention` operator is supported (false: decomposed).
    pub supports_attention: bool,
    /// Whether `com.microsoft::MatMulNBits` is supported for quantized weights.
    pub supports_matmul_nbits: bool,
    /// Whether the `RotaryEmbedding` operator is supported (false: decomposed).
    pub supports_rotary_embedding: bool,
    /// Whether `TensorScatter` is supported (false: lowered to `ScatterND`).
    pub supports_tensor_scatter: bool,
    /// Whether the `Range` operator is supported.
    pub supports_range: bool,
    /// Whether the EP runs `com.microsoft` operators at all (false: every contrib op must be
    /// expanded into standard ONNX; the model imports only the default domain).
    pub supports_contrib_ops: bool,
    /// Whether the KV cache may be stored as FP8.
    pub supports_fp8_kv_cache: bool,
    /// `accuracy_level` written on 4-bit `MatMulNBits` (0 = not written; at most 4).
    pub default_int4_accuracy_level: u8,
    /// Session provider options for onnxruntime-genai (never graph-capture keys).
    pub provider_options: BTreeMap<String, String>,
    /// Whether graph capture (CUDA graphs, WebGPU graph capture) is enabled.
    pub enable_graph_capture: bool,
    /// Whether the past and present KV caches may share one buffer: `genai_config.json` asks
    /// onnxruntime-genai for a shared buffer only when the EP allows it and the decoder's
    /// attention is `GroupQueryAttention` throughout.
    pub supports_past_present_share_buffer: bool,
    /// Whether the shared KV buffer's `max_length` is capped at 4096 tokens.
    pub cap_kv_buffer_max_length: bool,
    /// Roofline parameters for the cost model.
    pub cost: CostParams,
    /// Per-op corrections of the roofline (`[cost.ops."domain::Op"]` in an EP file, e.g.
    /// written by `scripts/calibrate.py`), keyed by op as the cost model names it (`MatMul`,
    /// `com.microsoft::GroupQueryAttention`). None for the built-in EPs.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cost_ops: BTreeMap<String, OpCostCorrection>,
}

impl EpCapabilities {
    /// Capabilities named `name` with every other field at its default: every model dtype
    /// (f32, f16, bf16) runs, f32 by default.
    pub fn new(name: impl Into<String>) -> Self {
        EpCapabilities {
            name: name.into(),
            dtypes: [DType::F32, DType::F16, DType::BF16].into(),
            default_dtype: DType::F32,
            gqa_dtypes: BTreeSet::new(),
            qkv_pack_dtypes: BTreeSet::new(),
            supports_fused_rope: true,
            supports_skip_layer_norm: true,
            supports_fused_moe: true,
            supports_linear_attention: false,
            supports_rank4_rmsnorm: true,
            supports_attention: true,
            supports_matmul_nbits: true,
            supports_rotary_embedding: true,
            supports_tensor_scatter: true,
            supports_range: true,
            supports_contrib_ops: true,
            supports_fp8_kv_cache: false,
            default_int4_accuracy_level: 0,
            provider_options: BTreeMap::new(),
            enable_graph_capture: false,
            supports_past_present_share_buffer: false,
            cap_kv_buffer_max_length: false,
            cost: CostParams::default(),
            cost_ops: BTreeMap::new(),
        }
    }

    /// The model dtype of a build for this EP: `requested` when the EP's runtime executes it,
    /// [`Self::default_dtype`] when none is requested. A dtype outside [`Self::dtypes`] is a
    /// usage error naming the EP's dtypes and its default.
    pub fn model_dtype(&self, requested: Option<DType>) -> crate::Result<DType> {
        match requested {
            None => Ok(self.default_dtype),
            Some(d) if self.dtypes.contains(&d) => Ok(d),
            Some(d) => Err(crate::Error::Usage(format!(
                "execution provider `{}` does not run {} models; its dtypes are {} (default {})",
                self.name,
                d.name(),
                self.dtypes
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                self.default_dtype.name()
            ))),
        }
    }
}
