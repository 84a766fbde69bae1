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

    /// The plausible range of each floating-point parameter: `(field, min, max, unit)`. The
    /// bounds keep every estimate finite and non-zero (a kernel's time is at most about
    /// 1e15 bytes ÷ 1e-3 GB/s, far from overflowing) while admitting any real device.
    pub const FLOAT_RANGES: [(&'static str, f64, f64, &'static str); 4] = [
        ("launch_overhead_us", 1e-3, 1e6, "µs"),
        ("memory_bandwidth_gbps", 1e-3, 1e6, "GB/s"),
        ("peak_tflops_f32", 1e-6, 1e6, "TFLOP/s"),
        ("peak_tflops_f16", 1e-6, 1e6, "TFLOP/s"),
    ];

    /// The largest `prefill_tokens` accepted.
    pub const MAX_PREFILL_TOKENS: u32 = 1 << 20;

    /// The first field outside its plausible range ([`CostParams::FLOAT_RANGES`],
    /// `1..=`[`CostParams::MAX_PREFILL_TOKENS`]), with what is wrong, if any.
    pub(super) fn violation(&self) -> Option<(&'static str, String)> {
        let values = [
            self.launch_overhead_us,
            self.memory_bandwidth_gbps,
            self.peak_tflops_f32,
            self.peak_tflops_f16,
        ];
        for ((field, min, max, unit), v) in Self::FLOAT_RANGES.into_iter().zip(values) {
            if !(min..=max).contains(&v) {
                return Some((
                    field,
                    format!(
                        "must be between {} and {} {unit}, got {}",
                        show(min),
                        show(max),
                        show(v)
                    ),
                ));
            }
        }
        let tokens = self.prefill_tokens;
        (!(1..=Self::MAX_PREFILL_TOKENS).contains(&tokens)).then(|| {
            (
                "prefill_tokens",
                format!(
                    "must be between 1 and {}, got {tokens}",
                    Self::MAX_PREFILL_TOKENS
                ),
            )
        })
    }
}

/// A correction of the roofline for one op type: its kernels are estimated as
/// `launch_overhead_us + overhead_us + scale × max(memory time, compute time)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpCostCorrection {
    /// Fixed time added to every kernel of the op, in µs (0..=1e6).
    #[serde(default)]
    pub overhead_us: f64,
    /// Factor on the op's roofline time (1e-3..=1e3).
    #[serde(default = "one")]
    pub scale: f64,
}

fn one() -> f64 {
    1.0
}

impl OpCostCorrection {
    /// The longest op key accepted.
    pub const MAX_OP_LEN: usize = 128;

    /// The first thing wrong with the correction of `op` (its key or a field), if any:
    /// `(field, what is wrong)`, the field being `overhead_us`, `scale` or empty for the key.
    pub fn violation(&self, op: &str) -> Option<(&'static str, String)> {
        let (domain, name) = op.rsplit_once("::").unwrap_or(("", op));
        let word = |s: &str, extra: char| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == extra)
        };
        if op.len() > Self::MAX_OP_LEN
            || !word(name, '_')
            || !(domain.is_empty() || word(domain, '.'))
        {
            return Some((
                "",
                format!(
                    "`{}` is not an op key (`Op` or `domain::Op`: letters, digits, `_`, a \
                     domain may hold `.`; at most {} characters)",
                    op.escape_debug(),
                    Self::MAX_OP_LEN
                ),
            ));
        }
        if !(0.0..=1e6).contains(&self.overhead_us) {
            return Some((
                "overhead_us",
                format!(
                    "must be between 0 and 1000000 µs, got {}",
                    show(self.overhead_us)
                ),
            ));
        }
        if !(1e-3..=1e3).contains(&self.scale) {
            return Some((
                "scale",
                format!("must be between 0.001 and 1000, got {}", show(self.scale)),
            ));
        }
        None
    }
}

/// `v` plainly for everyday magnitudes, with an exponent for huge or tiny ones (`1e-320`, not
/// three hundred zeros).
fn show(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-3..1e7).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

impl Default for CostParams {
    /// The parameters of the `default` EP ([`CostParams::PORTABLE`]).
    fn default() -> Self {
        CostParams::PORTABLE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(change: impl FnOnce(&mut CostParams)) -> Option<(&'static str, String)> {
        let mut p = CostParams::PORTABLE;
        change(&mut p);
        p.violation()
    }

    #[test]
    fn built_in_parameters_are_in_range() {
        for p in [
            CostParams::PORTABLE,
            CostParams::CPU,
            CostParams::DISCRETE_GPU,
            CostParams::PORTABLE_GPU,
            CostParams::UNIFIED_MEMORY_GPU,
            CostParams::NPU,
        ] {
            assert_eq!(p.violation(), None);
        }
    }

    #[test]
    fn implausible_parameters_name_the_field_and_range() {
        let (field, why) = with(|p| p.memory_bandwidth_gbps = 1e-320).unwrap();
        assert_eq!(field, "memory_bandwidth_gbps");
        assert!(
            why.contains("between 0.001 and 1000000 GB/s, got 1e-320"),
            "{why}"
        );
        let (field, why) = with(|p| p.launch_overhead_us = 1e308).unwrap();
        assert_eq!(field, "launch_overhead_us");
        assert!(why.contains("got 1e308"), "{why}");
        assert_eq!(
            with(|p| p.peak_tflops_f32 = 1e-308).unwrap().0,
            "peak_tflops_f32"
        );
        assert_eq!(
            with(|p| p.peak_tflops_f16 = f64::INFINITY).unwrap().0,
            "peak_tflops_f16"
        );
        assert_eq!(
            with(|p| p.peak_tflops_f16 = f64::NAN).unwrap().0,
            "peak_tflops_f16"
        );
        assert_eq!(
            with(|p| p.prefill_tokens = u32::MAX).unwrap().0,
            "prefill_tokens"
        );
        assert_eq!(with(|p| p.prefill_tokens = 0).unwrap().0, "prefill_tokens");
    }
}
