//! One column of a `[K, N]` weight quantized straight into its parts of MatMulNBits' inputs
//! (`B`, `scales`, `zero_points`: all column-major), bit for bit what [`super::quantize`]
//! followed by the [`super::nbits`] relayout gives for that column. The column comes widened
//! to f32 (`crate::weights::convert::widen_converted` converts and widens a stored one in one
//! pass).
//!
//! A Hugging Face Linear weight is stored `[N, K]`, so a column of `W [K, N]` is one stored
//! row: contiguous, already in MatMulNBits' order. Each block of the column is reduced to its
//! range, which gives its scale and zero point ([`super::rtn`]'s arithmetic), and only the
//! parts asked for are written: the values pass computes the codes and packs them (and may keep
//! the block's parameters too), the scales and zero-point passes stop at the parameters.
//!
//! The per-element work (the block's range, the codes and their packing) has an AVX2 path,
//! chosen at run time, and a portable one; both give
//! the same bits. Two details keep them equal: the vector range is the same
//! `v < lo ? v : lo` comparison per lane, its lanes folded in any order (the range of a block
//! with a NaN or an infinity is not used), and since only `±0` compare equal with different
//! bits, a range ending at zero takes the sign of the block's first zero, as the sequential
//! scan does; and the codes are computed as the scalar code does, a product, then a sum (no fused
//! multiply-add), clamped, then rounded half away from zero from the exact fractional part.

use half::{bf16, f16};

use super::rtn::{block_parameters, round_and_clamp, Weight};
use super::QuantSpec;
use crate::ir::{DType, QuantPart};

/// Whether [`quantize_widened`] takes weights quantized as `dtype` (f32, f16 or bf16).
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// Bytes of one column's `part` of MatMulNBits' inputs for `K = k` and weights of `dtype`:
/// `⌈K/B⌉ · B·bits/8` values, `⌈K/B⌉` scales of `dtype`, `⌈⌈K/B⌉·bits/8⌉` zero points.
pub fn column_bytes(k: usize, dtype: DType, spec: &QuantSpec, part: QuantPart) -> usize {
    let blocks = spec.blocks(k);
    let bits = usize::from(spec.bits);
    match part {
        QuantPart::Values => blocks * spec.block_size * bits / 8,
        QuantPart::Scales => blocks * dtype.size(),
        QuantPart::ZeroPoints => (blocks * bits).div_ceil(8),
    }
}

/// How the per-element work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Plain Rust, any CPU.
    Portable,
    /// AVX2: checked at run time.
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Path {
    /// The fastest path this CPU runs.
    fn detect() -> Path {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                return Path::Avx2;
            }
        }
        Path::Portable
    }
}

/// Where a column's parts go: each one asked for is written whole ([`column_bytes`] long).
#[derive(Debug, Default)]
pub struct ColumnParts<'a> {
    /// MatMulNBits' `B` bytes of the column.
    pub values: Option<&'a mut [u8]>,
    /// Its scales, in the weight's dtype.
    pub scales: Option<&'a mut [u8]>,
    /// Its zero points (the midpoint when the quantization is symmetric).
    pub zero_points: Option<&'a mut [u8]>,
}

impl<'a> ColumnParts<'a> {
    /// Only `part`, into `out`.
    pub fn one(part: QuantPart, out: &'a mut [u8]) -> ColumnParts<'a> {
        let mut parts = ColumnParts::default();
        *match part {
            QuantPart::Values => &mut parts.values,
            QuantPart::Scales => &mut parts.scales,
            QuantPart::ZeroPoints => &mut parts.zero_points,
        } = Some(out);
        parts
    }
}

/// Quantizes one column of a `[K, N]` weight, given widened (`values`: its `K` elements as
/// f32, each exactly a value of `dtype`, as `crate::weights::convert::widen_converted` gives a
/// stored column converted to `dtype`), as `spec` says, into the parts `parts` asks for (each
/// [`column_bytes`] long, every byte written; zero points are the midpoint when `spec` is
/// symmetric).
///
/// Returns `Err(i)` when element `i` is the column's first NaN or infinity (the parts are then
/// partial). Panics if `dtype` is not [supported](supports) or a part's slice is not its size.
pub fn quantize_widened(
    values: &[f32],
    dtype: DType,
    spec: &QuantSpec,
    parts: ColumnParts<'_>,
) -> Result<(), usize> {
    quantize_widened_on(Path::detect(), values, dtype, spec, parts)
}

/// [`quantize_widened`] on `path`.
fn quantize_widened_on(
    path: Path,
    values: &[f32],
    dtype: DType,
    spec: &QuantSpec,
    parts: ColumnParts<'_>,
) -> Result<(), usize> {
    match dtype {
        DType::F32 => quantize_values::<f32>(path, values, spec, parts),
        DType::F16 => quantize_values::<f16>(path, values, spec, parts),
        DType::BF16 => quantize_values::<bf16>(path, values, spec, parts),
        other => panic!("quantize_widened: {other} weights are not supported"),
    }
}

/// The column `work` (widened `T` values) quantized into `parts`.
fn quantize_values<T: Weight>(
    path: Path,
    work: &[f32],
    spec: &QuantSpec,
    mut parts: ColumnParts<'_>,
) -> Result<(), usize> {
    let k = work.len();
    for (part, out) in [
        (QuantPart::Values, &parts.values),
        (QuantPart::Scales, &parts.scales),
        (QuantPart::ZeroPoints, &parts.zero_points),
    ] {
        if let Some(out) = out {
            assert_eq!(
                out.len(),
                column_bytes(k, T::DTYPE, spec, part),
                "quantize_widened: {part:?} size"
            );
        }
    }
    let (rows, bits) = (spec.block_size, spec.bits);
    let blob = rows * usize::from(bits) / 8;
    let top = f32::from(spec.top_code());
    for (block, w) in work.chunks(rows).enumerate() {
        let (min, max) = range_on(path, w)
            .ok_or_else(|| block * rows + w.iter().position(|v| !v.is_finite()).unwrap_or(0))?;
        let (scale, zero_point) = block_parameters(min, max, spec);
        if let Some(out) = parts.scales.as_deref_mut() {
            T::store_scale(scale, &mut out[block * T::SIZE..(block + 1) * T::SIZE]);
        }
        if let Some(out) = parts.zero_points.as_deref_mut() {
            if bits == 8 {
                out[block] = zero_point;
            } else {
                // Two blocks a byte, the even one low; an odd count leaves the midpoint high.
                let byte = &mut out[block / 2];
                *byte = match block % 2 {
                    0 => (zero_point & 0x0f) | (spec.midpoint() << 4),
                    _ => (*byte & 0x0f) | (zero_point << 4),
                };
            }
        }
        if let Some(out) = parts.values.as_deref_mut() {
            let working = T::working_scale(scale);
            let reciprocal = if working != 0.0 { 1.0 / working } else { 0.0 };
            let blob = &mut out[block * blob..(block + 1) * blob];
            codes_on(path, w, reciprocal, f32::from(zero_point), top, bits, blob);
        }
    }
    if let Some(out) = parts.values {
        if bits == 4 && k % 2 == 1 {
            // onnxruntime's stale nibble (see `nbits_weight`): the last row's byte repeats row
            // K-2's code (the high nibble of its own byte) unless row K-1 starts a 2B-row unit.
            let last = k - 1;
            if last % (2 * rows) != 0 {
                out[last / 2] |= out[(last - 1) / 2] & 0xf0;
            }
        }
    }
    Ok(())
}

/// The block's `(min, max)` as the sequential scan finds them, or `None` when an element is
/// NaN or infinite.
fn range_on(path: Path, w: &[f32]) -> Option<(f32, f32)> {
    let (mut min, mut max, finite) = match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Path::Avx2` is only chosen where the CPU has AVX2.
        Path::Avx2 => unsafe { avx2::range(w) },
        Path::Portable => range_scalar(w, f32::MAX, f32::MIN),
    };
    if !finite {
        return None;
    }
    // Only ±0 compare equal with different bits: the scan keeps the first zero it meets.
    let first_zero = || w.iter().copied().find(|&v| v == 0.0);
    if min == 0.0 {
        min = first_zero().unwrap_or(min);
    }
    if max == 0.0 {
        max = first_zero().unwrap_or(max);
    }
    Some((min, max))
}

/// Range of `w` continuing from `(lo, hi)`, compared as onnxruntime does, and whether every
/// element is finite.
fn range_scalar(w: &[f32], mut lo: f32, mut hi: f32) -> (f32, f32, bool) {
    let mut finite = true;
    for &v in w {
        finite &= v.is_finite();
        lo = if v < lo { v } else { lo };
        hi = if v > hi { v } else { hi };
    }
    (lo, hi, finite)
}

/// Codes of the block `w` (`clamp(round(w · reciprocal + offset), 0, top)`) packed into
/// `blob` (`bits` each, low bits first; rows past the block's end are zero).
fn codes_on(
    path: Path,
    w: &[f32],
    reciprocal: f32,
    offset: f32,
    top: f32,
    bits: u8,
    blob: &mut [u8],
) {
    let done = match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Path::Avx2` is only chosen where the CPU has AVX2.
        Path::Avx2 => unsafe { avx2::codes(w, reciprocal, offset, top, bits, blob) },
        Path::Portable => 0,
    };
    let code = |v: f32| round_and_clamp(v * reciprocal + offset, top);
    let rest = &w[done..];
    if bits == 8 {
        let blob = &mut blob[done..];
        for (b, &v) in blob.iter_mut().zip(rest) {
            *b = code(v);
        }
        blob[rest.len()..].fill(0);
    } else {
        let blob = &mut blob[done / 2..];
        let mut pairs = rest.chunks_exact(2);
        for (b, pair) in blob.iter_mut().zip(&mut pairs) {
            *b = code(pair[0]) | (code(pair[1]) << 4);
        }
        let full = rest.len() / 2;
        let tail = pairs.remainder();
        blob[full..].fill(0);
        if let [v] = tail {
            blob[full] = code(*v);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The AVX2 kernels. Every function needs that feature.

    use std::arch::x86_64::*;

    use super::range_scalar;

    /// `(min, max, all finite)` of `w`, each lane compared as the scalar scan compares.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn range(w: &[f32]) -> (f32, f32, bool) {
        let mut lo = _mm256_set1_ps(f32::MAX);
        let mut hi = _mm256_set1_ps(f32::MIN);
        let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let infinity = _mm256_set1_ps(f32::INFINITY);
        let mut finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
        let mut chunks = w.chunks_exact(8);
        for c in &mut chunks {
            let v = _mm256_loadu_ps(c.as_ptr());
            // `v < lo ? v : lo` and `v > hi ? v : hi`, as MINPS/MAXPS define them.
            lo = _mm256_min_ps(v, lo);
            hi = _mm256_max_ps(v, hi);
            let below = _mm256_cmp_ps::<_CMP_LT_OQ>(_mm256_and_ps(v, magnitude), infinity);
            finite = _mm256_and_ps(finite, below);
        }
        // Lanes folded with shuffles: with every element finite (else the range is not used)
        // the order changes nothing but which of ±0 is kept, which the caller settles.
        let all_finite = _mm256_movemask_ps(finite) == 0xff;
        let (l, h) = (fold_min(lo), fold_max(hi));
        let (l, h, tail_finite) = range_scalar(chunks.remainder(), l, h);
        (l, h, all_finite && tail_finite)
    }

    /// The least of the 8 lanes of `v` (any order of `MINPS`).
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn fold_min(v: __m256) -> f32 {
        let four = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let two = _mm_min_ps(four, _mm_movehl_ps(four, four));
        _mm_cvtss_f32(_mm_min_ss(two, _mm_shuffle_ps::<0b01>(two, two)))
    }

    /// The greatest of the 8 lanes of `v` (any order of `MAXPS`).
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn fold_max(v: __m256) -> f32 {
        let four = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let two = _mm_max_ps(four, _mm_movehl_ps(four, four));
        _mm_cvtss_f32(_mm_max_ss(two, _mm_shuffle_ps::<0b01>(two, two)))
    }

    /// Eight codes `clamp(round(w · r + o), 0, top)` as i32 lanes.
    #[target_feature(enable = "avx2")]
    unsafe fn codes8(w: *const f32, r: __m256, o: __m256, top: __m256) -> __m256i {
        let v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(w), r), o);
        // MAXPS gives its second operand for NaN: NaN becomes 0, as the scalar cast does.
        let c = _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), top);
        let whole = _mm256_round_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(c);
        let up = _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_sub_ps(c, whole), _mm256_set1_ps(0.5));
        // The mask is -1 where the fraction is at least a half.
        _mm256_sub_epi32(_mm256_cvttps_epi32(whole), _mm256_castps_si256(up))
    }

    /// Codes of `w`, 16 at a time, packed into `blob` (`bits` 4 or 8 each, low bits first);
    /// returns how many values were done (the caller does the rest).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn codes(
        w: &[f32],
        reciprocal: f32,
        offset: f32,
        top: f32,
        bits: u8,
        blob: &mut [u8],
    ) -> usize {
        let (r, o, t) = (
            _mm256_set1_ps(reciprocal),
            _mm256_set1_ps(offset),
            _mm256_set1_ps(top),
        );
        let pairs = _mm_set1_epi16(0x1001);
        let per_byte = if bits == 8 { 1 } else { 2 };
        let mut i = 0;
        while i + 16 <= w.len() && (i + 16) / per_byte <= blob.len() {
            let a = codes8(w.as_ptr().add(i), r, o, t);
            let b = codes8(w.as_ptr().add(i + 8), r, o, t);
            // [a0..a3 b0..b3 | a4..a7 b4..b7] as i16, then in order.
            let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(a, b));
            let bytes = _mm_packus_epi16(
                _mm256_castsi256_si128(words),
                _mm256_extracti128_si256::<1>(words),
            );
            if bits == 8 {
                _mm_storeu_si128(blob.as_mut_ptr().add(i).cast(), bytes);
            } else {
                // Each pair of codes (even, odd) becomes even + 16 · odd.
                let packed = _mm_packus_epi16(_mm_maddubs_epi16(bytes, pairs), _mm_setzero_si128());
                _mm_storel_epi64(blob.as_mut_ptr().add(i / 2).cast(), packed);
            }
            i += 16;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{nbits_weight, nbits_zero_points, quantize};

    /// Every path this CPU runs.
    fn paths() -> Vec<Path> {
        let mut paths = vec![Path::Portable];
        if Path::detect() != Path::Portable {
            paths.push(Path::detect());
        }
        paths
    }

    fn to_bytes(values: &[f32], dtype: DType) -> Vec<u8> {
        crate::weights::convert::convert(
            &values
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>(),
            DType::F32,
            dtype,
        )
        .0
    }

    /// `[K, N]` row-major bytes → column `c` as bytes.
    fn column(bytes: &[u8], dtype: DType, k: usize, n: usize, c: usize) -> Vec<u8> {
        let s = dtype.size();
        (0..k)
            .flat_map(|r| bytes[(r * n + c) * s..(r * n + c + 1) * s].to_vec())
            .collect()
    }

    /// Checks every column of the `[k, n]` weight `values`, on every path, against the
    /// existing row-major quantizer and MatMulNBits relayout.
    fn check(values: &[f32], k: usize, n: usize, dtype: DType, spec: &QuantSpec) {
        let bytes = to_bytes(values, dtype);
        let q = quantize(&bytes, dtype, k, n, spec).unwrap();
        let weight = nbits_weight(&q.values, k, n, spec);
        let scale_bytes = dtype.size();
        let blocks = spec.blocks(k);
        // Scales [blocks, N] → per column.
        let zero_points = match &q.zero_points {
            Some(zp) => nbits_zero_points(zp, k, n, spec),
            None => nbits_zero_points(&vec![spec.midpoint(); blocks * n], k, n, spec),
        };
        for path in paths() {
            for c in 0..n {
                let col = column(&bytes, dtype, k, n, c);
                let mut widened = vec![0f32; k];
                to_f32(&col, dtype, &mut widened);
                let mut wanted = Vec::new();
                for part in [QuantPart::Values, QuantPart::Scales, QuantPart::ZeroPoints] {
                    let len = column_bytes(k, dtype, spec, part);
                    let want: Vec<u8> = match part {
                        QuantPart::Values => weight[c * len..(c + 1) * len].to_vec(),
                        QuantPart::Scales => (0..blocks)
                            .flat_map(|b| {
                                let at = (b * n + c) * scale_bytes;
                                q.scales[at..at + scale_bytes].to_vec()
                            })
                            .collect(),
                        QuantPart::ZeroPoints => zero_points[c * len..(c + 1) * len].to_vec(),
                    };
                    let mut out = vec![0x5au8; len];
                    let parts = ColumnParts::one(part, &mut out);
                    quantize_widened_on(path, &widened, dtype, spec, parts).unwrap();
                    assert_eq!(
                        out, want,
                        "{path:?} {dtype} {spec:?} [{k}, {n}] column {c} {part:?}"
                    );
                    wanted.push(want);
                }
                // All three parts at once.
                let mut outs = wanted
                    .iter()
                    .map(|w| vec![0x3cu8; w.len()])
                    .collect::<Vec<_>>();
                let [values, scales, zero_points] = &mut outs[..] else {
                    unreachable!("three parts")
                };
                let parts = ColumnParts {
                    values: Some(values),
                    scales: Some(scales),
                    zero_points: Some(zero_points),
                };
                quantize_widened_on(path, &widened, dtype, spec, parts).unwrap();
                assert_eq!(
                    outs, wanted,
                    "{path:?} {dtype} [{k}, {n}] column {c}, all parts"
                );
            }
        }
    }

    /// Little-endian `dtype` elements as f32.
    fn to_f32(bytes: &[u8], dtype: DType, out: &mut [f32]) {
        for (o, c) in out.iter_mut().zip(bytes.chunks_exact(dtype.size())) {
            *o = match dtype {
                DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                DType::F16 => f16::from_le_bytes([c[0], c[1]]).to_f32(),
                _ => bf16::from_le_bytes([c[0], c[1]]).to_f32(),
            };
        }
    }

    /// A xorshift stream of f32 in `[-scale, scale)`.
    fn random(count: usize, seed: u32, scale: f32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761) | 1;
        (0..count)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state as f32 / u32::MAX as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    fn specs() -> Vec<QuantSpec> {
        let mut specs = Vec::new();
        for bits in [4, 8] {
            for block_size in [16, 32, 128] {
                for symmetric in [true, false] {
                    specs.push(QuantSpec::new(bits, block_size, symmetric));
                }
            }
        }
        specs
    }

    const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    #[test]
    fn random_columns_match_the_row_major_quantizer_on_every_path() {
        for (i, &(k, n)) in [
            (64, 5),
            (77, 3),
            (33, 4),
            (257, 2),
            (5, 3),
            (1, 2),
            (130, 3),
        ]
        .iter()
        .enumerate()
        {
            for (s, spec) in specs().iter().enumerate() {
                for dtype in DTYPES {
                    let values = random(k * n, (i * 31 + s) as u32 + 1, [1.0, 0.01, 300.0][i % 3]);
                    check(&values, k, n, dtype, spec);
                }
            }
        }
    }

    #[test]
    fn edge_values_match_the_row_major_quantizer_on_every_path() {
        let tiny = f32::from_bits(1); // the smallest f32 subnormal
        let half_tiny = f16::from_bits(1).to_f32(); // the smallest f16 subnormal
        let edges = [
            0.0,
            -0.0,
            tiny,
            -tiny,
            half_tiny,
            -3.0 * half_tiny,
            f32::MIN_POSITIVE,
            1e-40,
            -1e-39,
            65504.0,
            -65504.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            7.5,
            -8.0,
        ];
        let k = 96;
        // Columns: all +0, all -0, zeros of both signs in either order, all equal, constant
        // negatives, only subnormals, ties of magnitude, and mixes of every edge value.
        let columns: Vec<Vec<f32>> = vec![
            vec![0.0; k],
            vec![-0.0; k],
            (0..k)
                .map(|i| if i % 3 == 0 { -0.0 } else { 0.0 })
                .collect(),
            (0..k)
                .map(|i| if i % 5 == 4 { -0.0 } else { 0.0 })
                .collect(),
            (0..k).map(|i| if i % 2 == 0 { 0.0 } else { 2.5 }).collect(),
            (0..k)
                .map(|i| if i % 7 == 3 { -0.0 } else { -2.5 })
                .collect(),
            vec![0.75; k],
            vec![-3.25; k],
            (0..k).map(|i| tiny * (i % 5) as f32).collect(),
            (0..k).map(|i| -half_tiny * (i % 3) as f32).collect(),
            (0..k)
                .map(|i| if i % 2 == 0 { 4.0 } else { -4.0 })
                .collect(),
            (0..k).map(|i| edges[(i * 7) % edges.len()]).collect(),
            (0..k).map(|i| edges[(i * 5 + 3) % edges.len()]).collect(),
        ];
        let n = columns.len();
        let values: Vec<f32> = (0..k * n).map(|i| columns[i % n][i / n]).collect();
        for spec in specs() {
            for dtype in DTYPES {
                for k in [k, 95, 17] {
                    let values: Vec<f32> = values[..k * n].to_vec();
                    check(&values, k, n, dtype, &spec);
                }
            }
        }
    }

    #[test]
    fn non_finite_elements_are_found_on_every_path() {
        let k = 70;
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for at in [0, 9, 40, 69] {
                let mut values = random(k, at as u32 + 3, 1.0);
                values[at] = bad;
                if at < 60 {
                    values[at + 10] = bad;
                }
                for dtype in DTYPES {
                    let mut widened = vec![0f32; k];
                    to_f32(&to_bytes(&values, dtype), dtype, &mut widened);
                    let spec = QuantSpec::new(4, 16, false);
                    for path in paths() {
                        for part in [QuantPart::Values, QuantPart::Scales, QuantPart::ZeroPoints] {
                            let mut out = vec![0; column_bytes(k, dtype, &spec, part)];
                            let parts = ColumnParts::one(part, &mut out);
                            let got = quantize_widened_on(path, &widened, dtype, &spec, parts);
                            assert_eq!(got, Err(at), "{path:?} {dtype} {bad} at {at}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_range_ending_at_zero_keeps_the_sign_of_the_first_zero() {
        // Lane 0 meets +0 (element 8) and lane 1 meets -0 (element 1, the first zero): a lane
        // order reduction alone would give +0.
        for first in [-0.0f32, 0.0] {
            let mut w = vec![2.0f32; 24];
            w[0] = 1.0;
            w[1] = first;
            w[8] = -first;
            let negated: Vec<f32> = w.iter().map(|v| -v).collect();
            for path in paths() {
                let (min, _) = range_on(path, &w).unwrap();
                let (_, max) = range_on(path, &negated).unwrap();
                assert_eq!(min.to_bits(), first.to_bits(), "{path:?} min");
                assert_eq!(max.to_bits(), (-first).to_bits(), "{path:?} max");
            }
        }
    }

    #[test]
    fn the_vector_kernels_equal_the_portable_ones_on_awkward_lengths() {
        for path in paths() {
            for len in 0..70 {
                let mut w = random(len, len as u32 + 11, 2.0);
                if len > 4 {
                    w[len / 2] = -0.0;
                    w[len - 1] = 0.0;
                }
                let range = |p| range_on(p, &w);
                assert_eq!(
                    range(path).map(|(a, b)| (a.to_bits(), b.to_bits())),
                    range(Path::Portable).map(|(a, b)| (a.to_bits(), b.to_bits())),
                    "{path:?} range of {len}"
                );
                for bits in [4u8, 8] {
                    let size = len.div_ceil(16) * 16 * usize::from(bits) / 8;
                    let (mut a, mut b) = (vec![0xeeu8; size], vec![0x11u8; size]);
                    // A reciprocal that makes exact halves and values past both ends.
                    let top = f32::from(((1u16 << bits) - 1) as u8);
                    codes_on(path, &w, top / 2.0, top / 2.0, top, bits, &mut a);
                    codes_on(Path::Portable, &w, top / 2.0, top / 2.0, top, bits, &mut b);
                    assert_eq!(a, b, "{path:?} codes of {len}, {bits} bits");
                    // An infinite reciprocal: NaN for zeros, ±∞ elsewhere.
                    codes_on(path, &w, f32::INFINITY, 0.0, top, bits, &mut a);
                    codes_on(Path::Portable, &w, f32::INFINITY, 0.0, top, bits, &mut b);
                    assert_eq!(a, b, "{path:?} infinite reciprocal, {len}, {bits} bits");
                }
            }
        }
    }
}
