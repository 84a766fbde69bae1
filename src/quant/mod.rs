//! Block quantization of `[K, N]` MatMul weights to 4 or 8 bits, byte for byte what
//! onnxruntime's own quantizer (`onnxruntime.quantization.matmul_nbits_quantizer`, default RTN,
//! C++ `quantize_matmul_{4,8}bits`) writes.
//!
//! [`quantize`] (round to nearest, [`rtn`]) gives the weight in the layout of a blocked
//! `DequantizeLinear` (opset 21, axis 0): `values [K, N]`, `scales [ceil(K/B), N]` and, when
//! asymmetric, `zero_points [ceil(K/B), N]`. The [`nbits`] functions lay those out again for
//! `com.microsoft::MatMulNBits` (column-major packed blocks); that relayout is exact, so the two
//! forms compute the same product.
//!
//! The arithmetic, all in f32 (f16 and bf16 weights are widened exactly first), per block of
//! `B` rows of one column (`2^(bits-1)` is the midpoint `m`, `2^bits - 1` the top code `t`):
//! - symmetric: `a` = the block's min or max, whichever has the larger magnitude (min on a
//!   tie); `scale = -a / m` (negative when `a` is positive); `q = clamp(round(w / scale + m),
//!   0, t) - m`, so `a` itself maps to `-m`;
//! - asymmetric: `lo = min(min, 0)`, `hi = max(max, 0)`, `scale = (hi - lo) / t`, `zp =
//!   clamp(round(-lo / scale), 0, t)` (computed with the f32 scale); `q = clamp(round(w /
//!   scale + zp), 0, t)`;
//! - `w / scale` is `w * (1 / scale)` (`0` when the scale is 0), `round` rounds halves away
//!   from zero *after* adding the zero point, and for f16 weights the scale is rounded to f16
//!   before its reciprocal is taken (bf16 weights use the f32 scale; only the stored scale is
//!   rounded to bf16, as onnxruntime's Python quantizer does).
//!
//! onnxruntime's QDQ quantizer (`quantize_qdq_matmul_4bits`) rounds `w / scale` before adding
//! the zero point instead, so at exact (or f32-near) halves it differs from its own
//! MatMulNBits quantizer by one step (and where `1 / scale` overflows, for a subnormal f32
//! scale, it stores the lowest value instead of a clamped one); everything else, scales and
//! zero points included, is the same in both. mobius follows the MatMulNBits quantizer, which
//! is onnxruntime's default and its only 8-bit one.

pub mod columns;
pub mod from_nbits;
pub mod nbits;
pub mod rtn;

pub use nbits::{
    nbits_shapes, nbits_weight, nbits_weight_into, nbits_zero_points, nbits_zero_points_into,
    NBitsShapes,
};
pub use rtn::{
    quantize, quantize_into, quantize_scratch_len, quantize_with, Quantized, QuantizedInto,
};

use crate::ir::QuantParams;
use crate::{Error, Result};

/// What the user asked for (`--quant int4|int8`, `--quant-block-size`,
/// `--quant-asymmetric`): the IR's [`QuantParams`], under the kernel's name.
pub use crate::ir::QuantParams as QuantSpec;

impl QuantParams {
    /// Checks the request; the error names the flag at fault.
    pub fn validate(&self) -> Result<()> {
        if self.bits != 4 && self.bits != 8 {
            return Err(Error::Usage(format!(
                "--quant: {} bits are not supported; use int4 or int8",
                self.bits
            )));
        }
        if !self.block_size.is_power_of_two() || !(16..=256).contains(&self.block_size) {
            return Err(Error::Usage(format!(
                "--quant-block-size {}: expected a power of two from 16 to 256 (16, 32, 64, 128 \
                 or 256)",
                self.block_size
            )));
        }
        Ok(())
    }

    /// The midpoint `2^(bits-1)`: the code of zero in the symmetric case, and MatMulNBits'
    /// zero point when it is given none.
    pub(crate) fn midpoint(&self) -> u8 {
        1 << (self.bits - 1)
    }

    /// The largest code, `2^bits - 1`.
    pub(crate) fn top_code(&self) -> u8 {
        ((1u16 << self.bits) - 1) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    fn spec(bits: u8, block_size: usize) -> QuantSpec {
        QuantSpec {
            bits,
            block_size,
            symmetric: true,
        }
    }

    #[test]
    fn validate_accepts_the_supported_requests() {
        for bits in [4, 8] {
            for block_size in [16, 32, 64, 128, 256] {
                spec(bits, block_size).validate().unwrap();
            }
        }
    }

    #[test]
    fn validate_names_the_flag_at_fault() {
        for bits in [0, 2, 3, 16] {
            let err = spec(bits, 32).validate().unwrap_err();
            assert!(matches!(err, Error::Usage(_)), "{err}");
            assert!(err.to_string().starts_with("--quant:"), "{err}");
            assert!(err.to_string().contains(&format!("{bits} bits")), "{err}");
        }
        for block_size in [0, 1, 8, 24, 48, 512, 1000] {
            let err = spec(4, block_size).validate().unwrap_err();
            assert!(matches!(err, Error::Usage(_)), "{err}");
            assert!(
                err.to_string()
                    .starts_with(&format!("--quant-block-size {block_size}:")),
                "{err}"
            );
        }
    }

    #[test]
    fn derived_quantities() {
        let s = spec(4, 32);
        assert_eq!(s.blocks(0), 0);
        assert_eq!(s.blocks(32), 1);
        assert_eq!(s.blocks(80), 3);
        assert_eq!((s.midpoint(), s.top_code()), (8, 15));
        assert_eq!((spec(8, 16).midpoint(), spec(8, 16).top_code()), (128, 255));
        assert_eq!(s.value_dtype(), DType::I4);
        let asym = QuantSpec {
            symmetric: false,
            ..s
        };
        assert_eq!(asym.value_dtype(), DType::U4);
        assert_eq!(spec(8, 16).value_dtype(), DType::I8);
        let asym8 = QuantSpec {
            symmetric: false,
            ..spec(8, 16)
        };
        assert_eq!(asym8.value_dtype(), DType::U8);
    }
}
