//! [`CostParams`]: roofline parameters the cost model uses to compare graph variants.

use serde::Serialize;

/// Roofline parameters of an execution provider's typical device.
///
/// A kernel is estimated as `launch_overhead_us` plus the larger of its memory time (bytes
/// moved ÷ bandwidth) and its compute time (FLOPs ÷ peak throughput for its dtype). The
/// values are order-of-magnitude figures for a device class, not a benchmark of one device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CostParams {
    /// Fixed cost of launching one kernel, in microseconds.
    pub launch_overhead_us: f64,
    /// Sustained memory bandwidth, in GB/s.
    pub memory_bandwidth_gbps: f64,
    /// Peak f32 throughput, in TFLOP/s.
    pub peak_tflops_f32: f64,
    /// Peak f16/bf16 throughput, in TFLOP/s.
    pub peak_tflops_f16: f64,
    /// Prompt length (tokens) of the prefill step the cost model weighs against decoding.
    pub prefill_tokens: u32,
}

impl CostParams {
    /// A portable device with no particular strengths (`default`, `onnx-standard`).
    pub const PORTABLE: CostParams = CostParams {
        launch_overhead_us: 5.0,
        memory_bandwidth_gbps: 100.0,
        peak_tflops_f32: 2.0,
        peak_tflops_f16: 2.0,
        prefill_tokens: 512,
    };

    /// A desktop CPU (`cpu`): cheap launches, modest bandwidth, f16 no faster than f32.
    pub const CPU: CostParams = CostParams {
        launch_overhead_us: 1.0,
        memory_bandwidth_gbps: 60.0,
        peak_tflops_f32: 1.0,
        peak_tflops_f16: 1.0,
        prefill_tokens: 128,
    };

    /// A discrete data-center or RTX GPU (`cuda`, `trt-rtx`).
    pub const DISCRETE_GPU: CostParams = CostParams {
        launch_overhead_us: 5.0,
        memory_bandwidth_gbps: 1000.0,
        peak_tflops_f32: 40.0,
        peak_tflops_f16: 160.0,
        prefill_tokens: 512,
    };

    /// A GPU behind a portable API (`dml`, `webgpu`): costlier launches, less throughput.
    pub const PORTABLE_GPU: CostParams = CostParams {
        launch_overhead_us: 15.0,
        memory_bandwidth_gbps: 300.0,
        peak_tflops_f32: 10.0,
        peak_tflops_f16: 20.0,
        prefill_tokens: 512,
    };

    /// An Apple-silicon GPU with unified memory (`mlx`).
    pub const UNIFIED_MEMORY_GPU: CostParams = CostParams {
        launch_overhead_us: 8.0,
        memory_bandwidth_gbps: 400.0,
        peak_tflops_f32: 10.0,
        peak_tflops_f16: 20.0,
        prefill_tokens: 512,
    };

    /// A neural processing unit (`openvino` on NPU, `qnn` on HTP): fast f16, slow f32.
    pub const NPU: CostParams = CostParams {
        launch_overhead_us: 20.0,
        memory_bandwidth_gbps: 60.0,
        peak_tflops_f32: 0.5,
        peak_tflops_f16: 10.0,
        prefill_tokens: 256,
    };

    /// The first field that is not a positive finite number, with what is wrong, if any.
    pub(super) fn violation(&self) -> Option<(&'static str, String)> {
        let floats = [
            ("launch_overhead_us", self.launch_overhead_us),
            ("memory_bandwidth_gbps", self.memory_bandwidth_gbps),
            ("peak_tflops_f32", self.peak_tflops_f32),
            ("peak_tflops_f16", self.peak_tflops_f16),
        ];
        if let Some((field, v)) = floats.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            return Some((field, format!("must be a positive finite number, got {v}")));
        }
        (self.prefill_tokens == 0).then(|| ("prefill_tokens", "must be positive, got 0".into()))
    }
}

impl Default for CostParams {
    /// The parameters of the `default` EP ([`CostParams::PORTABLE`]).
    fn default() -> Self {
        CostParams::PORTABLE
    }
}
