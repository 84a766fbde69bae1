//! The `com.microsoft::MatMulNBits` layout of a quantized weight, from the `DequantizeLinear`
//! layout [`super::quantize`] gives: each column's blocks in turn, values packed low bits
//! first, byte for byte what onnxruntime's `quantize_matmul_{4,8}bits` writes.
//!
//! The relayout is exact: MatMulNBits computes `(code - zero_point) * scale` with the same
//! codes, scales and zero points (symmetric values are stored offset by `2^(bits-1)`, the zero
//! point MatMulNBits assumes when it is given none).

use rayon::prelude::*;

use super::QuantSpec;

/// The shapes of MatMulNBits' `B`, `scales` and `zero_points` inputs for a `[K, N]` weight,
/// as onnxruntime's quantizer declares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NBitsShapes {
    /// `B`: `[N, ceil(K/B), B * bits / 8]` (u8).
    pub weight: [usize; 3],
    /// `scales`: `[N, ceil(K/B)]` (the weight's float dtype).
    pub scales: [usize; 2],
    /// `zero_points`: `[N, ceil(ceil(K/B) * bits / 8)]` (u8), asymmetric only.
    pub zero_points: [usize; 2],
}

/// The MatMulNBits input shapes for a `[k, n]` weight quantized as `spec` says.
pub fn nbits_shapes(k: usize, n: usize, spec: &QuantSpec) -> NBitsShapes {
    let k_blocks = spec.blocks(k);
    let bits = usize::from(spec.bits);
    NBitsShapes {
        weight: [n, k_blocks, spec.block_size * bits / 8],
        scales: [n, k_blocks],
        zero_points: [n, (k_blocks * bits).div_ceil(8)],
    }
}

/// MatMulNBits' `B` (`[N, ceil(K/B), B*bits/8]` u8) from the `[k, n]` one-byte-per-value
/// `values` of [`super::Quantized`]: column `n`'s blocks, values packed low bits first;
/// symmetric values are stored offset by `2^(bits-1)`; rows past `K` are zero, as onnxruntime
/// leaves them, but for one quirk copied for bit identity: with 4 bits and an odd `K`, the
/// unused high nibble of the last row's byte holds row `K-2`'s code unless row `K-1` starts
/// one of onnxruntime's `2B`-row work units (its kernel reuses a two-value buffer there).
///
/// Panics if `values` does not hold `k * n` bytes (the output of [`super::quantize`] always
/// does).
pub fn nbits_weight(values: &[u8], k: usize, n: usize, spec: &QuantSpec) -> Vec<u8> {
    let [_, k_blocks, blob] = nbits_shapes(k, n, spec).weight;
    let mut out = vec![0u8; n * k_blocks * blob];
    nbits_weight_into(values, k, n, spec, &mut out);
    out
}

/// [`nbits_weight`] into `out`, which holds exactly its `N · ⌈K/B⌉ · B·bits/8` bytes (whatever
/// they hold before: every byte is written).
///
/// Panics if `values` does not hold `k * n` bytes or `out` is not that size.
pub fn nbits_weight_into(values: &[u8], k: usize, n: usize, spec: &QuantSpec, out: &mut [u8]) {
    assert_eq!(
        Some(values.len()),
        k.checked_mul(n),
        "nbits_weight: values must be [{k}, {n}]"
    );
    let [_, k_blocks, blob] = nbits_shapes(k, n, spec).weight;
    let column_bytes = k_blocks * blob;
    assert_eq!(out.len(), n * column_bytes, "nbits_weight: output size");
    if column_bytes == 0 {
        return;
    }
    let shift = if spec.symmetric { spec.midpoint() } else { 0 };
    // Tiles of columns: each row's values for the tile are contiguous in `values`, and each
    // column's bytes are written in order (the read is a transpose; a tile keeps it in cache).
    const TILE: usize = 64;
    out.par_chunks_mut(column_bytes * TILE)
        .enumerate()
        .for_each(|(tile, bytes)| {
            // Rows past K stay zero.
            bytes.fill(0);
            let first = tile * TILE;
            let width = bytes.len() / column_bytes;
            let row_codes = |row: usize| &values[row * n + first..row * n + first + width];
            if spec.bits == 8 {
                for row in 0..k {
                    for (column, &v) in bytes.chunks_exact_mut(column_bytes).zip(row_codes(row)) {
                        column[row] = v.wrapping_add(shift);
                    }
                }
            } else {
                // Two rows make one byte: the even row in the low nibble.
                for pair in 0..k / 2 {
                    let (low, high) = (row_codes(2 * pair), row_codes(2 * pair + 1));
                    for ((column, &a), &b) in
                        bytes.chunks_exact_mut(column_bytes).zip(low).zip(high)
                    {
                        column[pair] =
                            (a.wrapping_add(shift) & 0x0f) | (b.wrapping_add(shift) << 4);
                    }
                }
                if k % 2 == 1 {
                    for (column, &a) in bytes.chunks_exact_mut(column_bytes).zip(row_codes(k - 1)) {
                        column[k / 2] = a.wrapping_add(shift) & 0x0f;
                    }
                }
            }
            let last = k - 1;
            if spec.bits == 4 && k % 2 == 1 && last % (2 * spec.block_size) != 0 {
                let codes = &values[(last - 1) * n + first..(last - 1) * n + first + width];
                for (column, &v) in codes.iter().enumerate() {
                    bytes[column * column_bytes + last / 2] |= (v.wrapping_add(shift) & 0x0f) << 4;
                }
            }
        });
}

/// MatMulNBits' `zero_points` (`[N, ceil(ceil(K/B) * bits/8)]` u8) from the `[ceil(K/B), n]`
/// one-byte zero points of [`super::Quantized`]; with 4 bits two blocks share a byte (low
/// nibble first) and an odd block count leaves the last high nibble at `8`, as onnxruntime
/// does.
///
/// Panics if `zero_points` does not hold `ceil(K/B) * n` bytes.
pub fn nbits_zero_points(zero_points: &[u8], k: usize, n: usize, spec: &QuantSpec) -> Vec<u8> {
    let [_, row_bytes] = nbits_shapes(k, n, spec).zero_points;
    let mut out = vec![0u8; n * row_bytes];
    nbits_zero_points_into(zero_points, k, n, spec, &mut out);
    out
}

/// [`nbits_zero_points`] into `out`, which holds exactly its `N · ⌈⌈K/B⌉·bits/8⌉` bytes
/// (every byte is written).
///
/// Panics if `zero_points` does not hold `ceil(K/B) * n` bytes or `out` is not that size.
pub fn nbits_zero_points_into(
    zero_points: &[u8],
    k: usize,
    n: usize,
    spec: &QuantSpec,
    out: &mut [u8],
) {
    let k_blocks = spec.blocks(k);
    assert_eq!(
        Some(zero_points.len()),
        k_blocks.checked_mul(n),
        "nbits_zero_points: zero points must be [{k_blocks}, {n}]"
    );
    let [_, row_bytes] = nbits_shapes(k, n, spec).zero_points;
    assert_eq!(out.len(), n * row_bytes, "nbits_zero_points: output size");
    if row_bytes == 0 {
        return;
    }
    out.par_chunks_mut(row_bytes)
        .enumerate()
        .for_each(|(column, bytes)| {
            let zero_point = |block: usize| zero_points[block * n + column];
            if spec.bits == 8 {
                for (block, byte) in bytes.iter_mut().enumerate() {
                    *byte = zero_point(block);
                }
                return;
            }
            for (pair, byte) in bytes.iter_mut().enumerate() {
                let low = zero_point(2 * pair);
                let high = if 2 * pair + 1 < k_blocks {
                    zero_point(2 * pair + 1)
                } else {
                    spec.midpoint()
                };
                *byte = (low & 0x0f) | (high << 4);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(bits: u8, block_size: usize, symmetric: bool) -> QuantSpec {
        QuantSpec::new(bits, block_size, symmetric)
    }

    #[test]
    fn shapes_match_onnxruntime_quantizer() {
        let s = nbits_shapes(80, 7, &spec(4, 32, false));
        assert_eq!(s.weight, [7, 3, 16]);
        assert_eq!(s.scales, [7, 3]);
        assert_eq!(s.zero_points, [7, 2]);
        let s = nbits_shapes(256, 5, &spec(8, 128, false));
        assert_eq!(
            (s.weight, s.scales, s.zero_points),
            ([5, 2, 128], [5, 2], [5, 2])
        );
    }

    #[test]
    fn weight_packs_each_column_low_nibble_first() {
        // [4, 2] symmetric int4: column 0 = -8, 7, 0, -1; column 1 = 1, 2, 3, 4.
        let values: Vec<u8> = [-8i8, 1, 7, 2, 0, 3, -1, 4]
            .iter()
            .map(|&v| v as u8)
            .collect();
        let packed = nbits_weight(&values, 4, 2, &spec(4, 16, true));
        assert_eq!(packed.len(), 2 * 8);
        assert_eq!(&packed[..8], &[0xf0, 0x78, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&packed[8..], &[0xa9, 0xcb, 0, 0, 0, 0, 0, 0]);
        let unsigned = nbits_weight(&[200, 3, 17, 255], 2, 2, &spec(8, 16, false));
        assert_eq!(&unsigned[..3], &[200, 17, 0]);
        assert_eq!(&unsigned[16..19], &[3, 255, 0]);
    }

    #[test]
    fn odd_k_repeats_onnxruntime_stale_nibble() {
        let s = spec(4, 16, false);
        // K = 3: row 2 is not the start of a 32-row unit, so row 1's code fills the gap.
        assert_eq!(nbits_weight(&[1, 2, 3], 3, 1, &s)[..2], [0x21, 0x23]);
        // K = 33: row 32 starts a unit, so the gap stays zero.
        let values: Vec<u8> = (0..33).map(|i| i % 15 + 1).collect();
        let packed = nbits_weight(&values, 33, 1, &s);
        assert_eq!(packed[16], 0x03);
    }

    #[test]
    fn zero_points_pack_two_blocks_per_byte() {
        // Three blocks (K = 40, B = 16), two columns.
        let zp = [1, 2, 3, 4, 5, 6];
        let s = spec(4, 16, false);
        assert_eq!(
            nbits_zero_points(&zp, 40, 2, &s),
            vec![0x31, 0x85, 0x42, 0x86]
        );
        let s8 = spec(8, 16, false);
        assert_eq!(nbits_zero_points(&zp, 40, 2, &s8), vec![1, 3, 5, 2, 4, 6]);
    }

    #[test]
    fn empty_weights_give_empty_layouts() {
        let s = spec(4, 32, false);
        assert!(nbits_weight(&[], 0, 4, &s).is_empty());
        assert!(nbits_zero_points(&[], 0, 4, &s).is_empty());
    }
}
