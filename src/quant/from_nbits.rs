//! The inverse of [`super::nbits`]: a weight stored in the `com.microsoft::MatMulNBits` layout
//! (by onnxruntime's quantizer, onnxruntime-genai's builder or mobius) read back into the
//! `DequantizeLinear` layout (blocks along axis 0, one value per byte), so that a model which
//! calls MatMulNBits can run as standard ONNX.
//!
//! Exact: the codes, scales and zero points are the same numbers; symmetric values (no zero
//! points) come back as `code - 2^(bits-1)`, which MatMulNBits' default zero point subtracts.
//! The rows of `B`'s last block past K (and the unused nibble of the last zero-point byte) are
//! padding and are dropped; [`super::nbits`] writes them again the way onnxruntime does.

use rayon::prelude::*;

use super::nbits::nbits_shapes;
use super::QuantSpec;

/// The `[k, n]` one-byte-per-value codes of MatMulNBits' `B` (`[n, ⌈k/B⌉, B·bits/8]` u8, low
/// bits first): unsigned codes, or with `spec.symmetric` the signed values `code - 2^(bits-1)`
/// (two's complement bytes, as the IR holds I4/I8).
///
/// Panics if `b` does not hold the `B` of a `[k, n]` weight (callers check the shape first).
pub fn values_from_nbits(b: &[u8], k: usize, n: usize, spec: &QuantSpec) -> Vec<u8> {
    let [_, k_blocks, blob] = nbits_shapes(k, n, spec).weight;
    let column_bytes = k_blocks * blob;
    assert_eq!(
        Some(b.len()),
        n.checked_mul(column_bytes),
        "values_from_nbits: B must be [{n}, {k_blocks}, {blob}]"
    );
    let shift = if spec.symmetric { spec.midpoint() } else { 0 };
    let mut out = vec![0u8; k * n];
    out.par_chunks_mut(n.max(1))
        .enumerate()
        .for_each(|(row, values)| {
            for (column, value) in values.iter_mut().enumerate() {
                let column = &b[column * column_bytes..(column + 1) * column_bytes];
                let code = match spec.bits {
                    8 => column[row],
                    _ => (column[row / 2] >> (4 * (row % 2))) & 0x0f,
                };
                *value = code.wrapping_sub(shift);
            }
        });
    out
}

/// The `[⌈k/B⌉, n]` one-byte zero points of MatMulNBits' packed `zero_points`
/// (`[n, ⌈⌈k/B⌉·bits/8⌉]` u8, or the same bytes flat).
///
/// Panics if `zero_points` does not hold that many bytes.
pub fn zero_points_from_nbits(zero_points: &[u8], k: usize, n: usize, spec: &QuantSpec) -> Vec<u8> {
    let k_blocks = spec.blocks(k);
    let [_, row_bytes] = nbits_shapes(k, n, spec).zero_points;
    assert_eq!(
        Some(zero_points.len()),
        n.checked_mul(row_bytes),
        "zero_points_from_nbits: zero points must be [{n}, {row_bytes}]"
    );
    let mut out = vec![0u8; k_blocks * n];
    for column in 0..n {
        let bytes = &zero_points[column * row_bytes..(column + 1) * row_bytes];
        for block in 0..k_blocks {
            out[block * n + column] = match spec.bits {
                8 => bytes[block],
                _ => (bytes[block / 2] >> (4 * (block % 2))) & 0x0f,
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::nbits::{nbits_weight, nbits_zero_points};
    use super::*;

    fn spec(bits: u8, block_size: usize, symmetric: bool) -> QuantSpec {
        QuantSpec::new(bits, block_size, symmetric)
    }

    /// Pseudo-random bytes below `limit` (shifted down by `offset`, two's complement).
    fn codes(len: usize, limit: u32, offset: u8, seed: u32) -> Vec<u8> {
        (0..len as u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) >> 7) % limit)
            .map(|c| (c as u8).wrapping_sub(offset))
            .collect()
    }

    #[test]
    fn unpacking_inverts_packing() {
        for (bits, symmetric) in [(4, true), (4, false), (8, true), (8, false)] {
            for (k, n, block) in [(1, 1, 16), (33, 3, 16), (80, 5, 32), (64, 2, 16)] {
                let s = spec(bits, block, symmetric);
                let limit = 1u32 << bits;
                let offset = if symmetric { s.midpoint() } else { 0 };
                let values = codes(k * n, limit, offset, k as u32);
                let packed = nbits_weight(&values, k, n, &s);
                assert_eq!(
                    values_from_nbits(&packed, k, n, &s),
                    values,
                    "{bits} {k} {n}"
                );
                let blocks = s.blocks(k);
                let zp = codes(blocks * n, limit, 0, n as u32);
                let packed = nbits_zero_points(&zp, k, n, &s);
                assert_eq!(zero_points_from_nbits(&packed, k, n, &s), zp);
            }
        }
    }

    #[test]
    fn symmetric_codes_come_back_as_signed_values() {
        // One column, 4 bits: codes 0x0..0xf → -8..7 (bytes of i8).
        let s = spec(4, 16, true);
        let b: Vec<u8> = (0..8u8).map(|i| (2 * i) | ((2 * i + 1) << 4)).collect();
        let values = values_from_nbits(&b, 16, 1, &s);
        let want: Vec<u8> = (-8i8..8).map(|v| v as u8).collect();
        assert_eq!(values, want);
    }
}
