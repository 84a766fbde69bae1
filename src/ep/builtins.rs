//! The ten built-in execution providers, with the values of the reference implementation.
//!
//! Model dtypes: `default` and `onnx-standard` (portable graphs) take f32, f16 and bf16 and
//! build f32 unless asked, as onnxruntime's CPU provider runs them; `cpu` runs f32 and f16 (its
//! provider has no bf16 MatMul), f32 by default; the GPU EPs build f16 by default (cuda and
//! trt-rtx also bf16, mlx bf16, dml and webgpu f32 and f16); openvino and qnn take f32 and f16
//! and build f32 (both lower precision themselves).

use std::collections::{BTreeMap, BTreeSet};

use super::capabilities::EpCapabilities;
use super::cost_params::CostParams;
use crate::ir::DType::{self, BF16, F16, F32};

/// The built-in EPs in registration order: `default`, `openvino`, `cpu`, `cuda`, `dml`,
/// `webgpu`, `mlx`, `trt-rtx`, `qnn`, `onnx-standard`.
///
/// These are the values the registry starts with; [`super::get_ep`] returns the current
/// (possibly overwritten) entry.
pub fn builtin_eps() -> Vec<EpCapabilities> {
    vec![
        EpCapabilities::new("default"),
        openvino(),
        cpu(),
        cuda(),
        dml(),
        webgpu(),
        mlx(),
        trt_rtx(),
        qnn(),
        onnx_standard(),
    ]
}

fn dtypes(list: &[DType]) -> BTreeSet<DType> {
    list.iter().copied().collect()
}

fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn openvino() -> EpCapabilities {
    EpCapabilities {
        dtypes: dtypes(&[F32, F16]),
        supports_skip_layer_norm: false,
        provider_options: options(&[("device_type", "NPU")]),
        supports_contrib_ops: false,
        cost: CostParams::NPU,
        ..EpCapabilities::new("openvino")
    }
}

fn cpu() -> EpCapabilities {
    EpCapabilities {
        dtypes: dtypes(&[F32, F16]),
        gqa_dtypes: dtypes(&[F32]),
        qkv_pack_dtypes: dtypes(&[F32]),
        default_int4_accuracy_level: 4,
        supports_past_present_share_buffer: true,
        supports_linear_attention: true,
        cost: CostParams::CPU,
        ..EpCapabilities::new("cpu")
    }
}

fn cuda() -> EpCapabilities {
    EpCapabilities {
        default_dtype: F16,
        gqa_dtypes: dtypes(&[F16, BF16]),
        qkv_pack_dtypes: dtypes(&[F32, F16, BF16]),
        provider_options: options(&[("enable_skip_layer_norm_strict_mode", "1")]),
        supports_past_present_share_buffer: true,
        supports_fp8_kv_cache: true,
        supports_linear_attention: true,
        cost: CostParams::DISCRETE_GPU,
        ..EpCapabilities::new("cuda")
    }
}

fn dml() -> EpCapabilities {
    EpCapabilities {
        dtypes: dtypes(&[F32, F16]),
        default_dtype: F16,
        gqa_dtypes: dtypes(&[F16]),
        supports_fused_rope: false,
        supports_past_present_share_buffer: true,
        cost: CostParams::PORTABLE_GPU,
        ..EpCapabilities::new("dml")
    }
}

fn webgpu() -> EpCapabilities {
    EpCapabilities {
        dtypes: dtypes(&[F32, F16]),
        default_dtype: F16,
        gqa_dtypes: dtypes(&[F32, F16]),
        qkv_pack_dtypes: dtypes(&[F32, F16]),
        default_int4_accuracy_level: 4,
        enable_graph_capture: true,
        supports_past_present_share_buffer: true,
        cap_kv_buffer_max_length: true,
        cost: CostParams::PORTABLE_GPU,
        ..EpCapabilities::new("webgpu")
    }
}

fn mlx() -> EpCapabilities {
    EpCapabilities {
        default_dtype: F16,
        gqa_dtypes: dtypes(&[F32, F16, BF16]),
        supports_past_present_share_buffer: true,
        cost: CostParams::UNIFIED_MEMORY_GPU,
        ..EpCapabilities::new("mlx")
    }
}

fn trt_rtx() -> EpCapabilities {
    EpCapabilities {
        default_dtype: F16,
        gqa_dtypes: dtypes(&[F16, BF16]),
        qkv_pack_dtypes: dtypes(&[F32, F16, BF16]),
        supports_skip_layer_norm: false,
        enable_graph_capture: true,
        supports_past_present_share_buffer: true,
        cost: CostParams::DISCRETE_GPU,
        ..EpCapabilities::new("trt-rtx")
    }
}

fn qnn() -> EpCapabilities {
    EpCapabilities {
        dtypes: dtypes(&[F32, F16]),
        supports_fused_rope: false,
        supports_skip_layer_norm: false,
        provider_options: options(&[
            ("backend_path", "QnnHtp.dll"),
            ("htp_performance_mode", "burst"),
            ("htp_graph_finalization_optimization_mode", "3"),
            ("enable_htp_shared_memory_allocator", "1"),
        ]),
        supports_rank4_rmsnorm: false,
        supports_attention: false,
        supports_matmul_nbits: false,
        supports_rotary_embedding: false,
        supports_tensor_scatter: false,
        supports_range: false,
        supports_contrib_ops: false,
        cost: CostParams::NPU,
        ..EpCapabilities::new("qnn")
    }
}

fn onnx_standard() -> EpCapabilities {
    EpCapabilities {
        supports_fused_rope: false,
        supports_skip_layer_norm: false,
        supports_contrib_ops: false,
        ..EpCapabilities::new("onnx-standard")
    }
}
