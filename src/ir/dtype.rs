//! Element types of tensors, with their ONNX and safetensors spellings.

use std::fmt;

/// The element type of a tensor value or initializer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 half precision.
    F16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    BF16,
    /// IEEE 754 double precision.
    F64,
    /// Signed 64-bit integer.
    I64,
    /// Signed 32-bit integer.
    I32,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer. Held in an `i64` with the same bits (two's complement
    /// wrapping); the ops whose result depends on the sign (comparisons, division, right
    /// shifts, conversions) read it as unsigned.
    U64,
    /// Boolean (one byte per element).
    Bool,
    /// Signed 4-bit integer (-8..=7). In memory mobius keeps one value per byte (as an `i8`);
    /// only the ONNX files pack two values per byte (low nibble first).
    I4,
    /// Unsigned 4-bit integer (0..=15), one value per byte in memory (see [`DType::I4`]).
    U4,
    /// 8-bit float e4m3fn (ONNX `FLOAT8E4M3FN`: 4 exponent bits, 3 mantissa bits, no
    /// infinities, ±448 at most, NaN `0x7f`/`0xff`), one byte per value; see [`f8e4m3`].
    F8E4M3FN,
}

impl DType {
    /// The `TensorProto.DataType` number ONNX uses for this type.
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::BF16 => 16,
            DType::U4 => 21,
            DType::I4 => 22,
            DType::F8E4M3FN => 17,
        }
    }

    /// The type for an ONNX `TensorProto.DataType` number, if mobius handles it.
    pub fn from_onnx_code(code: i32) -> Option<DType> {
        Some(match code {
            1 => DType::F32,
            2 => DType::U8,
            3 => DType::I8,
            4 => DType::U16,
            5 => DType::I16,
            6 => DType::I32,
            12 => DType::U32,
            13 => DType::U64,
            7 => DType::I64,
            9 => DType::Bool,
            10 => DType::F16,
            11 => DType::F64,
            16 => DType::BF16,
            21 => DType::U4,
            22 => DType::I4,
            17 => DType::F8E4M3FN,
            _ => return None,
        })
    }

    /// The type for a safetensors header dtype string (`"F32"`, `"BF16"`, …).
    pub fn from_safetensors(name: &str) -> Option<DType> {
        Some(match name {
            "F32" => DType::F32,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "F64" => DType::F64,
            "I64" => DType::I64,
            "I32" => DType::I32,
            "I8" => DType::I8,
            "U8" => DType::U8,
            "I16" => DType::I16,
            "U16" => DType::U16,
            "U32" => DType::U32,
            "U64" => DType::U64,
            "BOOL" => DType::Bool,
            _ => return None,
        })
    }

    /// Bytes per element in memory (4-bit types take one byte each there; see
    /// [`DType::stored_bytes`] for their size in a file).
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool | DType::I4 | DType::U4 | DType::F8E4M3FN => 1,
        }
    }

    /// Whether values are packed two per byte in ONNX files (`I4`, `U4`).
    pub fn is_4bit(self) -> bool {
        matches!(self, DType::I4 | DType::U4)
    }

    /// Bytes that `numel` elements take in an ONNX file (raw data or external data): 4-bit
    /// types pack two per byte, the last byte half used when `numel` is odd.
    pub fn stored_bytes(self, numel: usize) -> usize {
        if self.is_4bit() {
            numel.div_ceil(2)
        } else {
            numel * self.size()
        }
    }

    /// Bytes of a tensor of this type and shape `shape`, or `None` when they do not fit in
    /// `usize` (or the dimensions overflow, see [`crate::limits::numel`]).
    pub fn bytes_for(self, shape: &[usize]) -> Option<usize> {
        crate::limits::numel(shape)?.checked_mul(self.size())
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F32 | DType::F16 | DType::BF16 | DType::F64 | DType::F8E4M3FN
        )
    }

    /// Parses a user-facing dtype name (`f32`, `float32`, `f16`, `float16`, `bf16`, `bfloat16`).
    pub fn parse_model_dtype(name: &str) -> Option<DType> {
        Some(match name {
            "f32" | "float32" | "float" => DType::F32,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            _ => return None,
        })
    }

    /// The short user-facing name (`f32`, `f16`, `bf16`, `i64`, …).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::F8E4M3FN => "f8e4m3fn",
        }
    }
}

/// Unpacks `numel` 4-bit values (two per byte, low nibble first) into one byte each:
/// sign-extended (`i8` bytes) when `signed`, else `0..=15`.
pub fn unpack_4bit(packed: &[u8], numel: usize, signed: bool) -> Vec<u8> {
    (0..numel)
        .map(|i| {
            let nibble = (packed[i / 2] >> (4 * (i % 2))) & 0x0f;
            if signed && nibble >= 8 {
                nibble | 0xf0
            } else {
                nibble
            }
        })
        .collect()
}

/// Packs one-byte 4-bit values (either signedness: only the low nibble of each byte is kept)
/// two per byte, low nibble first; an odd count leaves the last high nibble zero.
pub fn pack_4bit(values: &[u8]) -> Vec<u8> {
    values
        .chunks(2)
        .map(|pair| (pair[0] & 0x0f) | (pair.get(1).map_or(0, |v| v & 0x0f) << 4))
        .collect()
}

/// Conversions between f32 and float8 e4m3fn bytes ([`DType::F8E4M3FN`]), with the ONNX
/// `Cast` semantics of opset 19 and later.
pub mod f8e4m3 {
    /// The largest finite magnitude, `0x7e`.
    pub const MAX: f32 = 448.0;

    /// The value of an e4m3fn byte (`0x7f`/`0xff` are NaN; there are no infinities).
    pub fn to_f32(byte: u8) -> f32 {
        let magnitude = match (byte >> 3) & 0x0f {
            _ if byte & 0x7f == 0x7f => f32::NAN,
            0 => f32::from(byte & 7) * 2f32.powi(-9),
            e => (8.0 + f32::from(byte & 7)) * 2f32.powi(i32::from(e) - 10),
        };
        if byte & 0x80 != 0 {
            -magnitude
        } else {
            magnitude
        }
    }

    /// The e4m3fn byte of `x`, rounded to nearest, ties to even. Out of range (beyond 464,
    /// the midpoint between 448 and the next power's first step): ±448 when `saturate` (the
    /// attribute's default), NaN otherwise; ±inf likewise; NaN stays NaN (sign kept).
    pub fn from_f32(x: f32, saturate: bool) -> u8 {
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        let overflow = sign | if saturate { 0x7e } else { 0x7f };
        if x.is_nan() {
            return sign | 0x7f;
        }
        if x.is_infinite() {
            return overflow;
        }
        let a = f64::from(x.abs());
        if a < 2f64.powi(-6) {
            // Subnormals step by 2^-9; 8 steps is the smallest normal, byte 0x08.
            return sign | (a * 512.0).round_ties_even() as u8;
        }
        // a is a normal f32 here: its exponent is exact.
        let mut exponent = ((x.abs().to_bits() >> 23) & 0xff) as i32 - 127;
        let mut steps = (a * 2f64.powi(3 - exponent)).round_ties_even() as i32;
        if steps == 16 {
            exponent += 1;
            steps = 8;
        }
        let field = exponent + 7;
        if field > 15 || (field == 15 && steps == 15) {
            return overflow;
        }
        sign | ((field as u8) << 3) | (steps - 8) as u8
    }

    /// `x` rounded to the nearest e4m3fn value (see [`from_f32`]).
    pub fn round(x: f32, saturate: bool) -> f32 {
        to_f32(from_f32(x, saturate))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_bit_values_round_trip_through_packing() {
        let signed: Vec<u8> = [-8i8, 7, -1, 0, 3].iter().map(|&v| v as u8).collect();
        let packed = pack_4bit(&signed);
        assert_eq!(packed, vec![0x78, 0x0f, 0x03]);
        assert_eq!(unpack_4bit(&packed, 5, true), signed);
        let unsigned = vec![15u8, 0, 9];
        assert_eq!(unpack_4bit(&pack_4bit(&unsigned), 3, false), unsigned);
        assert_eq!(DType::I4.stored_bytes(5), 3);
        assert_eq!(DType::F16.stored_bytes(5), 10);
    }

    #[test]
    fn float8_bytes_round_trip_and_round_to_nearest_even() {
        for b in 0..=255u8 {
            let v = f8e4m3::to_f32(b);
            if v.is_nan() {
                assert_eq!(b & 0x7f, 0x7f);
            } else if v != 0.0 {
                assert_eq!(f8e4m3::from_f32(v, false), b, "{b:#x}");
            }
        }
        assert_eq!(f8e4m3::to_f32(0x7e), 448.0);
        assert_eq!(f8e4m3::to_f32(0x01), 2f32.powi(-9));
        assert_eq!(f8e4m3::round(1.0625, true), 1.0); // tie, to even
        assert_eq!(f8e4m3::round(1.1875, true), 1.25); // tie, to even
        assert_eq!(f8e4m3::round(2f32.powi(-10), true), 0.0); // half the smallest step
        assert_eq!(f8e4m3::round(3.0 * 2f32.powi(-10), true), 2f32.powi(-8));
        assert_eq!(f8e4m3::round(463.9, false), 448.0);
        assert_eq!(f8e4m3::round(464.0, false), 448.0); // tie, to even
        assert!(f8e4m3::round(464.5, false).is_nan());
        assert_eq!(f8e4m3::round(-1e30, true), -448.0);
        assert_eq!(f8e4m3::round(f32::INFINITY, true), 448.0);
        assert!(f8e4m3::round(f32::NEG_INFINITY, false).is_nan());
        assert!(f8e4m3::round(f32::NAN, true).is_nan());
    }

    #[test]
    fn byte_counts_never_overflow() {
        assert_eq!(DType::F32.bytes_for(&[2, 3]), Some(24));
        assert_eq!(DType::Bool.bytes_for(&[]), Some(1));
        assert_eq!(DType::F16.bytes_for(&[0, 7]), Some(0));
        assert_eq!(DType::I64.bytes_for(&[1 << 62]), None);
        assert_eq!(DType::F32.bytes_for(&[0, usize::MAX, 2]), None);
    }
}
