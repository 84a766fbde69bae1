//! Element-type conversion between f32, f16 and bf16, in chunks, with f16 overflow clamping.

use half::{bf16, f16};

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
    use rayon::prelude::*;
    debug_assert_eq!(dst.len(), converted_len(src.len(), from, to));
    src.par_chunks(PAR_ELEMS * from.size())
        .zip(dst.par_chunks_mut(PAR_ELEMS * to.size()))
        .map(|(s, d)| convert_slice(s, from, to, d))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
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

    #[test]
    fn f64_is_not_convertible() {
        assert!(!can_convert(DType::F64, DType::F16));
        assert!(can_convert(DType::I64, DType::I64));
        assert!(!can_convert(DType::I64, DType::F32));
    }
}
