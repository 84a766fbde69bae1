//! TEMPORARY local stand-in (not committed): replaced by the kernel branch.
#![allow(missing_docs)]
use crate::ir::DType;
use crate::Result;
pub struct QuantSpec {
    pub bits: u8,
    pub block_size: usize,
    pub symmetric: bool,
}
pub struct Quantized {
    pub k: usize,
    pub n: usize,
    pub values: Vec<u8>,
    pub scales: Vec<u8>,
    pub zero_points: Option<Vec<u8>>,
}
pub fn quantize(
    weights: &[u8],
    dtype: DType,
    k: usize,
    n: usize,
    spec: &QuantSpec,
) -> Result<Quantized> {
    let (f, _) = crate::weights::convert::convert(weights, dtype, DType::F32);
    let w: &[f32] = bytemuck::cast_slice(&f);
    let kb = k.div_ceil(spec.block_size);
    let qmax = ((1u32 << spec.bits) - 1) as f32;
    let mut values = vec![0u8; k * n];
    let mut scales = vec![0f32; kb * n];
    let mut zps = vec![0u8; kb * n];
    for b in 0..kb {
        for c in 0..n {
            let rows = b * spec.block_size..((b + 1) * spec.block_size).min(k);
            if spec.symmetric {
                let mut m = 0f32;
                for r in rows.clone() {
                    let v = w[r * n + c];
                    if v.abs() > m.abs() {
                        m = v;
                    }
                }
                let half = (1u32 << (spec.bits - 1)) as f32;
                let s = m / -half;
                scales[b * n + c] = s;
                let inv = if s != 0.0 { 1.0 / s } else { 0.0 };
                for r in rows {
                    values[r * n + c] =
                        ((w[r * n + c] * inv).round().clamp(-half, half - 1.0) as i32) as i8 as u8;
                }
            } else {
                let mut lo = 0f32;
                let mut hi = 0f32;
                for r in rows.clone() {
                    lo = lo.min(w[r * n + c]);
                    hi = hi.max(w[r * n + c]);
                }
                let s = (hi - lo) / qmax;
                scales[b * n + c] = s;
                let inv = if s != 0.0 { 1.0 / s } else { 0.0 };
                let zp = (-lo * inv).round().clamp(0.0, qmax);
                zps[b * n + c] = zp as u8;
                for r in rows {
                    values[r * n + c] = (w[r * n + c] * inv + zp).round().clamp(0.0, qmax) as u8;
                }
            }
        }
    }
    let (scales, _) =
        crate::weights::convert::convert(bytemuck::cast_slice(&scales), DType::F32, dtype);
    Ok(Quantized {
        k,
        n,
        values,
        scales,
        zero_points: (!spec.symmetric).then_some(zps),
    })
}
pub mod nbits {
    use super::QuantSpec;
    pub fn nbits_weight(values: &[u8], k: usize, n: usize, spec: &QuantSpec) -> Vec<u8> {
        let kb = k.div_ceil(spec.block_size);
        let bits = spec.bits as usize;
        let blob = spec.block_size * bits / 8;
        let off: u8 = if spec.symmetric {
            1 << (spec.bits - 1)
        } else {
            0
        };
        let zp: u8 = off;
        let mut out = vec![0u8; n * kb * blob];
        for c in 0..n {
            for r in 0..kb * spec.block_size {
                let v = if r < k {
                    values[r * n + c].wrapping_add(off)
                } else {
                    zp
                } & if bits == 4 { 15 } else { 255 };
                let idx = c * kb * blob + (r / spec.block_size) * blob;
                let within = r % spec.block_size;
                if bits == 8 {
                    out[idx + within] = v;
                } else {
                    out[idx + within / 2] |= v << (4 * (within % 2));
                }
            }
        }
        out
    }
    pub fn nbits_zero_points(zp: &[u8], k: usize, n: usize, spec: &QuantSpec) -> Vec<u8> {
        let kb = k.div_ceil(spec.block_size);
        let bits = spec.bits as usize;
        let per = (kb * bits).div_ceil(8);
        let mut out = vec![0u8; n * per];
        for c in 0..n {
            for b in 0..kb {
                let v = zp[b * n + c];
                if bits == 8 {
                    out[c * per + b] = v;
                } else {
                    out[c * per + b / 2] |= (v & 15) << (4 * (b % 2));
                }
            }
        }
        out
    }
}
pub mod pass;
pub mod prequantized;
