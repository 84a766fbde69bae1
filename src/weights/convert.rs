//! Element-type conversion between f32, f16 and bf16, in chunks, with f16 overflow clamping.

use half::{bf16, f16};

use super::sink::Store;
use crate::ir::DType;

/// Largest finite f16 value.
const F16_MAX: f32 = 65504.0;

/// Elements converted per streamed chunk (one write of a few MiB).
pub const CHUNK_ELEMS: usize = 1 << 20;

/// Whether mobius can convert tensors from `from` to `to`.
pub fn can_convert(from: DType, to: DType) -> bool {
    from == to
        || widens_4bit(from, to)
        || (from.is_float() && to.is_float() && from != DType::F64 && to != DType::F64)
}

/// 4-bit values into 8-bit integers of the same signedness: the same bytes (mobius holds
/// 4-bit values one per byte, sign-extended).
fn widens_4bit(from: DType, to: DType) -> bool {
    matches!((from, to), (DType::I4, DType::I8) | (DType::U4, DType::U8))
}

/// Elements handled per inner step, with stack buffers (fits in L1 together with its output).
const STEP: usize = 2048;
/// f16 values per step of the stack buffer used when the output is not 2-byte aligned.
const HALVES: usize = 256;

/// Converts little-endian `src` elements of type `from` into `to`, appending to `out`.
///
/// Values outside the f16 range are clamped to ±65504 when converting to f16; the number of
/// clamped values is returned. Works in fixed steps on stack buffers: no allocation besides
/// `out` growing.
pub fn convert_into(src: &[u8], from: DType, to: DType, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.resize(start + converted_len(src.len(), from, to), 0);
    convert_slice(src, from, to, &mut out[start..])
}

/// Bytes that `len` bytes of `from` elements take as `to` elements.
pub fn converted_len(len: usize, from: DType, to: DType) -> usize {
    len / from.size() * to.size()
}

/// Converts `src` (elements of `from`) into `dst`, which holds exactly as many elements of
/// `to`; returns the number of values clamped to the f16 range (see [`convert_into`]).
pub fn convert_slice(src: &[u8], from: DType, to: DType, dst: &mut [u8]) -> usize {
    let mut f32s = [0f32; STEP];
    convert_through(src, from, to, dst, &mut f32s)
}

/// [`convert_slice`] through the caller's f32 scratch (any non-zero length), so that callers
/// converting many short pieces do not set up a stack buffer each time.
pub(super) fn convert_through(
    src: &[u8],
    from: DType,
    to: DType,
    dst: &mut [u8],
    f32s: &mut [f32],
) -> usize {
    debug_assert_eq!(dst.len(), converted_len(src.len(), from, to));
    if from == to || widens_4bit(from, to) {
        dst.copy_from_slice(src);
        return 0;
    }
    match (from, to) {
        (DType::BF16, DType::F32) => {
            bf16_to_f32(src, dst);
            return 0;
        }
        (DType::BF16 | DType::F32, DType::F16) => {
            if let Some(clamped) = to_f16_simd(src, from, dst) {
                return clamped;
            }
        }
        _ => {}
    }
    through_f32(src, from, to, dst, f32s)
}

/// The values of `src` (elements of `from`) converted to `to` exactly as [`convert_slice`]
/// converts them (clamped to the f16 range for f16), each written widened to f32 into `dst`
/// (as many values): what a quantizer reads a weight as, without the `to` bytes in between
/// (one pass over `src`, no buffer). Returns the number of values clamped.
///
/// Panics if `dst` does not hold one value per element of `src` or either type is not f32,
/// f16 or bf16.
pub fn widen_converted(src: &[u8], from: DType, to: DType, dst: &mut [f32]) -> usize {
    let floats = |t| matches!(t, DType::F32 | DType::F16 | DType::BF16);
    assert!(
        floats(from) && floats(to),
        "widen_converted: {from} to {to}"
    );
    assert_eq!(
        src.len() / from.size(),
        dst.len(),
        "widen_converted: lengths"
    );
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c") {
        type Kernel = unsafe fn(&[u8], &mut [f32]) -> usize;
        let kernel: Option<Kernel> = match (from, to) {
            (DType::BF16, DType::BF16 | DType::F32) => Some(x86::widen_bf16),
            (DType::F16, DType::F16 | DType::F32) => Some(x86::widen_f16),
            (DType::BF16, DType::F16) => Some(x86::widen_bf16_as_f16),
            (DType::F32, DType::F16) => Some(x86::widen_f32_as_f16),
            _ => None,
        };
        if let Some(kernel) = kernel {
            let whole = dst.len() / 8 * 8;
            let (head, rest) = src.split_at(whole * from.size());
            // SAFETY: the CPU has AVX2 and F16C (checked just above), all the kernels require;
            // `head` holds `whole` elements of `from`, a multiple of 8, and `dst[..whole]` as
            // many values, as they require.
            let clamped = unsafe { kernel(head, &mut dst[..whole]) };
            return clamped + widen_converted_scalar(rest, from, to, &mut dst[whole..]);
        }
    }
    widen_converted_scalar(src, from, to, dst)
}

/// [`widen_converted`] without SIMD: through [`convert_through`] and back to f32, a few
/// values at a time on the stack.
fn widen_converted_scalar(src: &[u8], from: DType, to: DType, dst: &mut [f32]) -> usize {
    const AT_ONCE: usize = 64;
    let (mut bytes, mut f32s) = ([0u8; 4 * AT_ONCE], [0f32; AT_ONCE]);
    let mut clamped = 0;
    for (piece, out) in src
        .chunks(AT_ONCE * from.size())
        .zip(dst.chunks_mut(AT_ONCE))
    {
        let converted = &mut bytes[..out.len() * to.size()];
        clamped += convert_through(piece, from, to, converted, &mut f32s);
        to_f32(converted, to, out);
    }
    clamped
}

/// [`convert_through`] by way of f32 for every pair of float types: each step of `f32s.len()`
/// values widened to f32, then narrowed (clamped to the f16 range for f16).
fn through_f32(src: &[u8], from: DType, to: DType, dst: &mut [u8], f32s: &mut [f32]) -> usize {
    let step = f32s.len();
    let mut clamped = 0;
    for (piece, out) in src
        .chunks(step * from.size())
        .zip(dst.chunks_mut(step * to.size()))
    {
        let n = piece.len() / from.size();
        to_f32(piece, from, &mut f32s[..n]);
        clamped += from_f32(&mut f32s[..n], to, out);
    }
    clamped
}

/// bf16 to f32 straight from bytes to bytes: the bf16 bits are the high half of the f32's
/// (exact), a loop the compiler vectorizes.
fn bf16_to_f32(src: &[u8], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(2)) {
        d.copy_from_slice(&((u32::from(u16::from_le_bytes([s[0], s[1]]))) << 16).to_le_bytes());
    }
}

/// bf16 or f32 (`from`) to f16 with the clamping of [`from_f32`], bit for bit, 8 values at a
/// time with AVX2 and F16C (the instruction `half` converts with on such CPUs), the few values
/// past the last 8 through [`from_f32`]. `None` when the CPU lacks either feature (or is not
/// x86-64): the caller converts through f32 then.
fn to_f16_simd(src: &[u8], from: DType, dst: &mut [u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c") {
        let size = from.size();
        let whole = src.len() / size / 8 * 8;
        // SAFETY: the CPU has AVX2 and F16C (checked just above), all the function requires;
        // it reads `whole` values of `src` and writes `whole` f16 values into `dst`, both in
        // bounds (`whole` ≤ the values of `src`, and `dst` holds as many as `src`).
        let mut clamped = unsafe {
            match from {
                DType::BF16 => x86::bf16_to_f16(&src[..whole * 2], &mut dst[..whole * 2]),
                _ => x86::f32_to_f16(&src[..whole * 4], &mut dst[..whole * 2]),
            }
        };
        let rest = &src[whole * size..];
        let mut f32s = [0f32; 8];
        let f32s = &mut f32s[..rest.len() / size];
        to_f32(rest, from, f32s);
        clamped += from_f32(f32s, DType::F16, &mut dst[whole * 2..]);
        return Some(clamped);
    }
    let _ = (src, from, dst);
    None
}

/// The AVX2 + F16C conversions of [`to_f16_simd`].
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::F16_MAX;

    /// Clamps the finite values of `v` beyond ±[`F16_MAX`] to it (sign kept), as
    /// [`from_f32`](super::from_f32) does, and rounds them to f16 to nearest even, as
    /// `half::f16::from_f32` does with F16C; returns the 8 f16 values and how many were clamped.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn clamp_round(v: __m256) -> (__m128i, u32) {
        let sign = _mm256_set1_ps(-0.0);
        let abs = _mm256_andnot_ps(sign, v);
        // Ordered comparisons: false for NaN, which is neither finite nor clamped.
        let big = _mm256_cmp_ps::<_CMP_GT_OQ>(abs, _mm256_set1_ps(F16_MAX));
        let finite = _mm256_cmp_ps::<_CMP_LT_OQ>(abs, _mm256_set1_ps(f32::INFINITY));
        let over = _mm256_and_ps(big, finite);
        let limit = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(F16_MAX));
        let v = _mm256_blendv_ps(v, limit, over);
        let halves = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
        (halves, (_mm256_movemask_ps(over) as u32).count_ones())
    }

    /// Converts the little-endian bf16 values of `src` (a multiple of 8 of them) into f16
    /// values in `dst` (as many); returns the number clamped.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C; `dst` must be as long as `src`, a multiple of 16 bytes.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn bf16_to_f16(src: &[u8], dst: &mut [u8]) -> usize {
        debug_assert!(src.len() % 16 == 0 && dst.len() == src.len());
        let mut clamped = 0;
        for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(16)) {
            // SAFETY: `s` and `d` are 16 bytes each; unaligned loads and stores.
            unsafe {
                let bits = _mm_loadu_si128(s.as_ptr().cast());
                let wide = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits));
                let (halves, n) = clamp_round(_mm256_castsi256_ps(wide));
                _mm_storeu_si128(d.as_mut_ptr().cast(), halves);
                clamped += n as usize;
            }
        }
        clamped
    }

    /// bf16 values of `src` (8 per 16 bytes) widened to f32 into `dst`: exact (a shift).
    ///
    /// # Safety
    /// The CPU must have AVX2; `dst` must hold a multiple of 8 values, `src` as many.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn widen_bf16(src: &[u8], dst: &mut [f32]) -> usize {
        assert!(dst.len() % 8 == 0 && src.len() == 2 * dst.len());
        for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(8)) {
            // SAFETY: `s` is 16 bytes and `d` 8 floats; unaligned loads and stores.
            unsafe {
                let bits = _mm_loadu_si128(s.as_ptr().cast());
                let wide = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits));
                _mm256_storeu_ps(d.as_mut_ptr(), _mm256_castsi256_ps(wide));
            }
        }
        0
    }

    /// f16 values of `src` widened to f32 into `dst`: exact.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C; `dst` must hold a multiple of 8 values, `src` as many.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn widen_f16(src: &[u8], dst: &mut [f32]) -> usize {
        assert!(dst.len() % 8 == 0 && src.len() == 2 * dst.len());
        for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(8)) {
            // SAFETY: `s` is 16 bytes and `d` 8 floats; unaligned loads and stores.
            unsafe {
                let halves = _mm_loadu_si128(s.as_ptr().cast());
                _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(halves));
            }
        }
        0
    }

    /// bf16 values of `src` converted to f16 as [`bf16_to_f16`] converts them, widened back
    /// to f32 into `dst`; returns the number clamped.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C; `dst` must hold a multiple of 8 values, `src` as many.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn widen_bf16_as_f16(src: &[u8], dst: &mut [f32]) -> usize {
        assert!(dst.len() % 8 == 0 && src.len() == 2 * dst.len());
        let mut clamped = 0;
        for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(8)) {
            // SAFETY: `s` is 16 bytes and `d` 8 floats; unaligned loads and stores.
            unsafe {
                let bits = _mm_loadu_si128(s.as_ptr().cast());
                let wide = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits));
                let (halves, n) = clamp_round(_mm256_castsi256_ps(wide));
                _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(halves));
                clamped += n as usize;
            }
        }
        clamped
    }

    /// f32 values of `src` converted to f16 as [`f32_to_f16`] converts them, widened back to
    /// f32 into `dst`; returns the number clamped.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C; `dst` must hold a multiple of 8 values, `src` as many.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn widen_f32_as_f16(src: &[u8], dst: &mut [f32]) -> usize {
        assert!(dst.len() % 8 == 0 && src.len() == 4 * dst.len());
        let mut clamped = 0;
        for (s, d) in src.chunks_exact(32).zip(dst.chunks_exact_mut(8)) {
            // SAFETY: `s` is 32 bytes and `d` 8 floats; unaligned loads and stores.
            unsafe {
                let (halves, n) = clamp_round(_mm256_loadu_ps(s.as_ptr().cast()));
                _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(halves));
                clamped += n as usize;
            }
        }
        clamped
    }

    /// Converts the little-endian f32 values of `src` (a multiple of 8 of them) into f16
    /// values in `dst` (half as many bytes); returns the number clamped.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C; `src` must be a multiple of 32 bytes and `dst` half
    /// as long.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn f32_to_f16(src: &[u8], dst: &mut [u8]) -> usize {
        debug_assert!(src.len() % 32 == 0 && 2 * dst.len() == src.len());
        let mut clamped = 0;
        for (s, d) in src.chunks_exact(32).zip(dst.chunks_exact_mut(16)) {
            // SAFETY: `s` is 32 bytes and `d` 16; unaligned loads and stores.
            unsafe {
                let (halves, n) = clamp_round(_mm256_loadu_ps(s.as_ptr().cast()));
                _mm_storeu_si128(d.as_mut_ptr().cast(), halves);
                clamped += n as usize;
            }
        }
        clamped
    }
}

fn to_f32(src: &[u8], from: DType, dst: &mut [f32]) {
    match from {
        DType::F32 => {
            for (d, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        DType::F16 => {
            for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        DType::BF16 => {
            for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            }
        }
        other => unreachable!("to_f32 called for {other}: callers check can_convert"),
    }
}

/// Writes `src` converted to `to` into `out` (exactly that many bytes); clamps to the f16
/// range in place first when `to` is f16.
fn from_f32(src: &mut [f32], to: DType, out: &mut [u8]) -> usize {
    let mut clamped = 0;
    match to {
        DType::F32 => {
            for (v, o) in src.iter().zip(out.chunks_exact_mut(4)) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        DType::F16 => {
            // Branch-free, so that it vectorizes.
            for v in src.iter_mut() {
                let over = v.is_finite() & (v.abs() > F16_MAX);
                clamped += usize::from(over);
                *v = if over { v.clamp(-F16_MAX, F16_MAX) } else { *v };
            }
            // Straight into `out` where its bytes can be f16 values in little-endian order.
            let direct = if cfg!(target_endian = "little") {
                bytemuck::try_cast_slice_mut::<u8, f16>(out).ok()
            } else {
                None
            };
            match direct {
                Some(halves) => half::slice::HalfFloatSliceExt::convert_from_f32_slice(halves, src),
                None => {
                    let mut halves = [f16::ZERO; HALVES];
                    for (src, out) in src.chunks(HALVES).zip(out.chunks_mut(2 * HALVES)) {
                        let halves = &mut halves[..src.len()];
                        half::slice::HalfFloatSliceExt::convert_from_f32_slice(halves, src);
                        for (h, o) in halves.iter().zip(out.chunks_exact_mut(2)) {
                            o.copy_from_slice(&h.to_bits().to_le_bytes());
                        }
                    }
                }
            }
        }
        DType::BF16 => {
            for (v, o) in src.iter().zip(out.chunks_exact_mut(2)) {
                o.copy_from_slice(&bf16::from_f32(*v).to_bits().to_le_bytes());
            }
        }
        other => unreachable!("from_f32 called for {other}: callers check can_convert"),
    }
    clamped
}

/// Converts a whole tensor's bytes, returning the new bytes and the number of clamped values.
pub fn convert(src: &[u8], from: DType, to: DType) -> (Vec<u8>, usize) {
    let mut out = vec![0u8; converted_len(src.len(), from, to)];
    let clamped = convert_parallel(src, from, to, &mut out);
    (out, clamped)
}

/// Elements per task of [`convert_parallel`].
const PAR_ELEMS: usize = 1 << 16;

/// [`convert_slice`] spread over rayon's threads in pieces of [`PAR_ELEMS`] elements.
pub fn convert_parallel(src: &[u8], from: DType, to: DType, dst: &mut [u8]) -> usize {
    convert_parallel_to(src, from, to, dst, Store::Cached)
}

/// Elements a streamed conversion converts at a time into a buffer on the stack before
/// storing them.
const STREAMED_ELEMS: usize = 2048;

/// [`convert_parallel`] storing as `store` says: streamed, each piece is converted into a
/// small buffer (in L1) and stored from there around the caches.
pub fn convert_parallel_to(
    src: &[u8],
    from: DType,
    to: DType,
    dst: &mut [u8],
    store: Store,
) -> usize {
    use rayon::prelude::*;
    debug_assert_eq!(dst.len(), converted_len(src.len(), from, to));
    src.par_chunks(PAR_ELEMS * from.size())
        .zip(dst.par_chunks_mut(PAR_ELEMS * to.size()))
        .map(|(s, d)| match store {
            Store::Cached => convert_slice(s, from, to, d),
            Store::Streamed => {
                let (mut buffer, mut f32s) = ([0u8; 4 * STREAMED_ELEMS], [0f32; STREAMED_ELEMS]);
                let mut clamped = 0;
                let pieces = s.chunks(STREAMED_ELEMS * from.size());
                for (s, d) in pieces.zip(d.chunks_mut(STREAMED_ELEMS * to.size())) {
                    let converted = &mut buffer[..d.len()];
                    clamped += convert_through(s, from, to, converted, &mut f32s);
                    store.copy(d, converted);
                }
                Store::fence();
                clamped
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    /// `widen_converted` against `convert_slice` then widening, bit for bit, with the count.
    fn check_widened(src: &[u8], from: DType, to: DType) {
        let (converted, clamped) = convert(src, from, to);
        let mut expected = vec![0f32; src.len() / from.size()];
        to_f32(&converted, to, &mut expected);
        // Lengths that leave every remainder of 8 to the scalar tail.
        for cut in 0..9.min(expected.len() + 1) {
            let n = expected.len() - cut;
            let mut got = vec![f32::NAN; n];
            let counted = widen_converted(&src[..n * from.size()], from, to, &mut got);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(
                bits(&got) == bits(&expected[..n]),
                "{from} to {to}, {n} values"
            );
            if cut == 0 {
                assert_eq!(counted, clamped, "{from} to {to}: clamped");
            }
        }
    }

    #[test]
    fn widen_converted_equals_converting_then_widening() {
        // Every bf16 and every f16 pattern (NaN, infinities, subnormals, ±0 included).
        let every: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        for (from, to) in [
            (DType::BF16, DType::F16),
            (DType::BF16, DType::BF16),
            (DType::BF16, DType::F32),
            (DType::F16, DType::F16),
            (DType::F16, DType::F32),
            (DType::F16, DType::BF16),
        ] {
            check_widened(&every, from, to);
        }
        // f32 around the f16 limits, rounding ties, and a spread of magnitudes.
        let mut f32s = vec![
            65504.0f32,
            65519.99,
            65520.0,
            -65520.0,
            1e30,
            -1e-30,
            2.0f32.powi(-25),
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            1.0 + 2.0f32.powi(-11),
        ];
        let mut state = 0x9e37_79b9u32;
        f32s.extend((0..4000).map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            f32::from_bits(state)
        }));
        let bytes: Vec<u8> = f32s.iter().flat_map(|v| v.to_le_bytes()).collect();
        for to in [DType::F16, DType::BF16, DType::F32] {
            check_widened(&bytes, DType::F32, to);
        }
    }

    #[test]
    fn streamed_conversions_store_what_cached_ones_do() {
        // Lengths across the streamed buffer and the parallel pieces, at aligned and
        // unaligned places.
        let n = PAR_ELEMS + 3 * STREAMED_ELEMS + 5;
        let src: Vec<u8> = (0..n)
            .flat_map(|i| bf16::from_f32((i as f32 - 3e4) * 3.7).to_le_bytes())
            .collect();
        for to in [DType::F16, DType::F32] {
            let (want, want_clamped) = convert(&src, DType::BF16, to);
            assert_eq!(want_clamped > 0, to == DType::F16);
            for shift in [0, 1, 6] {
                let mut buffer = vec![0u8; want.len() + 16];
                let dst = &mut buffer[shift..shift + want.len()];
                let clamped = convert_parallel_to(&src, DType::BF16, to, dst, Store::Streamed);
                assert!(dst[..] == want[..], "bf16 to {to}, shifted {shift}");
                assert_eq!(clamped, want_clamped);
            }
        }
    }

    #[test]
    fn bf16_to_f16_clamps_and_counts() {
        let src: Vec<u8> = [1.5f32, 70000.0, -1e30, f32::INFINITY]
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes())
            .collect();
        let (out, clamped) = convert(&src, DType::BF16, DType::F16);
        let vals: Vec<f32> = out
            .chunks_exact(2)
            .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect();
        assert_eq!(vals[0], 1.5);
        assert_eq!(vals[1], 65504.0);
        assert_eq!(vals[2], -65504.0);
        assert!(vals[3].is_infinite(), "infinity stays infinite");
        assert_eq!(clamped, 2);
    }

    #[test]
    fn f32_round_trips_through_identity_and_bf16() {
        let src = f32_bytes(&[1.0, -2.25, 3.0e-3]);
        assert_eq!(convert(&src, DType::F32, DType::F32).0, src);
        let (b, _) = convert(&src, DType::F32, DType::BF16);
        let (back, _) = convert(&b, DType::BF16, DType::F32);
        let back: &[f32] = bytemuck::cast_slice(&back);
        assert_eq!(back[0], 1.0);
        assert_eq!(back[1], -2.25);
        assert!((back[2] - 3.0e-3).abs() < 2e-5);
    }

    #[test]
    fn chunked_conversion_matches_scalar_reference_on_every_bf16_pattern() {
        let src: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        let (out, clamped) = convert(&src, DType::BF16, DType::F16);
        let mut want_clamped = 0;
        for (bits, got) in (0..=u16::MAX).zip(out.chunks_exact(2)) {
            let v = bf16::from_bits(bits).to_f32();
            want_clamped += usize::from(v.is_finite() && v.abs() > F16_MAX);
            let want = f16::from_f32(if v.is_finite() {
                v.clamp(-F16_MAX, F16_MAX)
            } else {
                v
            });
            let got = f16::from_bits(u16::from_le_bytes([got[0], got[1]]));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "bf16 bits {bits:#06x}: got {got}, want {want}"
            );
        }
        assert_eq!(clamped, want_clamped);
    }

    /// [`convert_slice`] against [`through_f32`], the conversion through f32 that the SIMD
    /// and direct kernels replace: the same bytes and the same count of clamped values,
    /// NaN payloads included, at every length from 0 to 40 values and at an odd address.
    fn matches_through_f32(src: &[u8], from: DType, to: DType) {
        let mut want = vec![0u8; converted_len(src.len(), from, to)];
        let want_clamped = through_f32(src, from, to, &mut want, &mut [0f32; 64]);
        let mut got = vec![0u8; want.len()];
        let clamped = convert_slice(src, from, to, &mut got);
        assert!(got == want, "{from} -> {to}: bytes differ");
        assert_eq!(clamped, want_clamped, "{from} -> {to}: clamped count");
        let size = from.size();
        for n in 0..=40.min(src.len() / size) {
            let mut shifted = vec![0u8; n * size + 1];
            shifted[1..].copy_from_slice(&src[..n * size]);
            let mut out = vec![0u8; converted_len(n * size, from, to) + 1];
            let c = convert_slice(&shifted[1..], from, to, &mut out[1..]);
            let w = &want[..converted_len(n * size, from, to)];
            assert!(
                &out[1..] == w,
                "{from} -> {to}: {n} values at an odd address"
            );
            let c_want = through_f32(
                &src[..n * size],
                from,
                to,
                &mut vec![0; w.len()],
                &mut [0f32; 8],
            );
            assert_eq!(c, c_want, "{from} -> {to}: {n} values clamped");
        }
    }

    #[test]
    fn fast_kernels_match_the_conversion_through_f32_on_every_bf16_pattern() {
        let bf16s: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        matches_through_f32(&bf16s, DType::BF16, DType::F16);
        matches_through_f32(&bf16s, DType::BF16, DType::F32);
        // Every bf16 pattern widened to f32 with low bits that round up, down, to even, to
        // an f16 subnormal or past the clamping bound (65504 < x < 65520 rounds to 65504).
        let f32s: Vec<u8> = (0..=u16::MAX)
            .flat_map(|b| {
                [0u32, 1, 0x0FFF, 0x1000, 0x1001, 0x7FFF, 0x8000, 0xFFFF]
                    .map(|low| ((u32::from(b) << 16) | low).to_le_bytes())
            })
            .flatten()
            .collect();
        matches_through_f32(&f32s, DType::F32, DType::F16);
        let edges: Vec<u8> = [
            65504.0f32, 65505.0, 65519.99, 65520.0, -65520.0, 6.0e-8, -3.0e-8,
        ]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
        matches_through_f32(&edges, DType::F32, DType::F16);
    }

    /// Every f32 bit pattern through the f32 -> f16 kernel (4 G values; `scripts/slow_tests.sh`
    /// runs it, in release).
    #[test]
    #[ignore = "slow: every f32 pattern (4 G values); run by scripts/slow_tests.sh"]
    fn f32_to_f16_kernel_matches_on_every_f32_pattern() {
        use rayon::prelude::*;
        (0..1u64 << 16).into_par_iter().for_each(|high| {
            let src: Vec<u8> = (0..1u64 << 16)
                .flat_map(|low| (((high << 16) | low) as u32).to_le_bytes())
                .collect();
            let mut want = vec![0u8; src.len() / 2];
            let want_clamped =
                through_f32(&src, DType::F32, DType::F16, &mut want, &mut [0f32; 64]);
            let mut got = vec![0u8; want.len()];
            let clamped = convert_slice(&src, DType::F32, DType::F16, &mut got);
            assert!(
                got == want && clamped == want_clamped,
                "high bits {high:#06x}"
            );
        });
    }

    #[test]
    fn f64_is_not_convertible() {
        assert!(!can_convert(DType::F64, DType::F16));
        assert!(can_convert(DType::I64, DType::I64));
        assert!(!can_convert(DType::I64, DType::F32));
    }
}
