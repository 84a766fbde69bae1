//! Round-to-nearest block quantization of a `[K, N]` weight along `K`, in the layout of a
//! blocked `DequantizeLinear` (axis 0). The arithmetic is onnxruntime's, step for step (see the
//! [module doc](super)); block rows are quantized in parallel.

use half::{bf16, f16};
use rayon::prelude::*;

use super::QuantSpec;
use crate::ir::DType;
use crate::{Error, Result};

/// A `[K, N]` weight quantized along `K` (axis 0) in blocks of `block_size` rows, each column
/// separately: the `DequantizeLinear` layout (opset 21 blocked quantization, axis 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantized {
    /// Rows of the weight (the reduction dimension of the MatMul).
    pub k: usize,
    /// Columns of the weight (the output features).
    pub n: usize,
    /// `[K, N]` row-major, one value per byte: symmetric → signed two's-complement `i8` bytes
    /// (I4: -8..=7, I8: -128..=127); asymmetric → unsigned (U4: 0..=15, U8: 0..=255).
    pub values: Vec<u8>,
    /// `[ceil(K/B), N]` row-major, little-endian bytes of the weight's float dtype (f32, f16 or
    /// bf16).
    pub scales: Vec<u8>,
    /// `[ceil(K/B), N]`, one unsigned byte each; asymmetric only.
    pub zero_points: Option<Vec<u8>>,
}

/// Quantizes `weights`, the little-endian bytes of a `[k, n]` row-major tensor of `dtype`
/// (F32, F16 or BF16), as `spec` asks.
///
/// Fails (with [`Error::Quantize`], tensor name left for the caller) when the spec is invalid,
/// the dtype is not one of those three, the byte count does not match `[k, n]`, or an element
/// is NaN or infinite (the first in row-major order is named by row and column). onnxruntime
/// does not refuse those, but what it makes of them is no weight: it leaves NaN out of the
/// block's range and then stores it as the lowest code, and an infinity makes the block's
/// scale infinite, which turns every other value of the block into zero.
pub fn quantize(
    weights: &[u8],
    dtype: DType,
    k: usize,
    n: usize,
    spec: &QuantSpec,
) -> Result<Quantized> {
    let expected = k.checked_mul(n).and_then(|e| e.checked_mul(dtype.size()));
    if dtype.is_float() && expected.is_some_and(|len| len != weights.len()) {
        return Err(error(format!(
            "a [{k}, {n}] {dtype} weight takes {} bytes, {} were given",
            expected.unwrap_or(0),
            weights.len()
        )));
    }
    let row = n * dtype.size();
    quantize_with(dtype, k, n, spec, &|first, dst: &mut [u8]| {
        dst.copy_from_slice(&weights[first * row..first * row + dst.len()]);
    })
}

/// [`quantize`] of a weight produced block row by block row: `fill(first, dst)` writes rows
/// `first..` of the `[k, n]` weight (little-endian `dtype` elements, as many whole rows as
/// `dst` holds) — e.g. straight from a transposed checkpoint tensor, so the float weight is
/// never held whole.
pub fn quantize_with(
    dtype: DType,
    k: usize,
    n: usize,
    spec: &QuantSpec,
    fill: &(dyn Fn(usize, &mut [u8]) + Sync),
) -> Result<Quantized> {
    spec.validate()?;
    match dtype {
        DType::F32 => quantize_as::<f32>(fill, k, n, spec),
        DType::F16 => quantize_as::<f16>(fill, k, n, spec),
        DType::BF16 => quantize_as::<bf16>(fill, k, n, spec),
        other => Err(unsupported(other)),
    }
}

/// The outputs of [`quantize_into`], in the layout of [`Quantized`]'s fields.
pub struct QuantizedInto<'a> {
    /// `[k, n]` values, or empty to compute only the scales and zero points (a block's
    /// parameters depend on its range alone, so they are the same either way).
    pub values: &'a mut [u8],
    /// `[ceil(k/B), n]` scales.
    pub scales: &'a mut [u8],
    /// `[ceil(k/B), n]` zero points (written in the symmetric case too: the midpoint).
    pub zero_points: &'a mut [u8],
}

/// Bytes of `scratch` that [`quantize_into`] needs for a weight of `n` columns of `dtype`.
pub fn quantize_scratch_len(dtype: DType, n: usize, spec: &QuantSpec) -> usize {
    let rows = spec.block_size;
    // One block row of input, then (aligned) its f32 copy and four f32 per column.
    rows * n * dtype.size() + 4 + (rows + 4) * n * 4
}

/// [`quantize_with`] on the calling thread, without allocating: into `out`, with the working
/// memory taken from `scratch` (at least [`quantize_scratch_len`] bytes, any content) — for a
/// caller that quantizes many small tiles in parallel itself and lends each its memory. Block
/// rows are quantized one after the other, bit for bit as [`quantize_with`] does.
///
/// Fails as [`quantize_with`] does. Panics if `out`'s parts or `scratch` are smaller than
/// their documented sizes.
pub fn quantize_into(
    dtype: DType,
    k: usize,
    n: usize,
    spec: &QuantSpec,
    fill: &dyn Fn(usize, &mut [u8]),
    out: QuantizedInto<'_>,
    scratch: &mut [u8],
) -> Result<()> {
    spec.validate()?;
    match dtype {
        DType::F32 => quantize_into_as::<f32>(fill, k, n, spec, out, scratch),
        DType::F16 => quantize_into_as::<f16>(fill, k, n, spec, out, scratch),
        DType::BF16 => quantize_into_as::<bf16>(fill, k, n, spec, out, scratch),
        other => Err(unsupported(other)),
    }
}

fn unsupported(dtype: DType) -> Error {
    error(format!(
        "its dtype is {dtype}; only f32, f16 and bf16 weights can be quantized"
    ))
}

fn error(message: String) -> Error {
    Error::Quantize {
        tensor: None,
        message,
    }
}

/// A float dtype a weight may have: how an element is read, and how a block's f32 scale is
/// stored and used.
pub(super) trait Weight {
    /// Bytes per element.
    const SIZE: usize;
    /// The dtype, for messages.
    const DTYPE: DType;
    /// Reads one little-endian element (exactly widened to f32).
    fn load(bytes: &[u8]) -> f32;
    /// Reads `dst.len()` little-endian elements (exactly widened to f32).
    fn load_into(bytes: &[u8], dst: &mut [f32]) {
        for (d, c) in dst.iter_mut().zip(bytes.chunks_exact(Self::SIZE)) {
            *d = Self::load(c);
        }
    }
    /// Writes the scale in this dtype (rounded to nearest, ties to even).
    fn store_scale(scale: f32, out: &mut [u8]);
    /// The scale the values are divided by. onnxruntime's f16 kernel reads back the f16 scale
    /// it stored; its Python quantizer widens bf16 weights to f32, quantizes them with the f32
    /// scale, and only then rounds the scales to bf16.
    fn working_scale(scale: f32) -> f32;
}

impl Weight for f32 {
    const SIZE: usize = 4;
    const DTYPE: DType = DType::F32;
    fn load(bytes: &[u8]) -> f32 {
        f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    }
    fn store_scale(scale: f32, out: &mut [u8]) {
        out.copy_from_slice(&scale.to_le_bytes());
    }
    fn working_scale(scale: f32) -> f32 {
        scale
    }
}

impl Weight for f16 {
    const SIZE: usize = 2;
    const DTYPE: DType = DType::F16;
    fn load(bytes: &[u8]) -> f32 {
        f16::from_le_bytes([bytes[0], bytes[1]]).to_f32()
    }
    fn load_into(bytes: &[u8], dst: &mut [f32]) {
        // The slice conversion uses the CPU's f16 instructions where it has them.
        match bytemuck::try_cast_slice::<u8, f16>(bytes) {
            Ok(halves) if cfg!(target_endian = "little") => {
                half::slice::HalfFloatSliceExt::convert_to_f32_slice(halves, dst)
            }
            _ => {
                for (d, c) in dst.iter_mut().zip(bytes.chunks_exact(2)) {
                    *d = Self::load(c);
                }
            }
        }
    }
    fn store_scale(scale: f32, out: &mut [u8]) {
        out.copy_from_slice(&f16::from_f32(scale).to_le_bytes());
    }
    fn working_scale(scale: f32) -> f32 {
        f16::from_f32(scale).to_f32()
    }
}

impl Weight for bf16 {
    const SIZE: usize = 2;
    const DTYPE: DType = DType::BF16;
    fn load(bytes: &[u8]) -> f32 {
        bf16::from_le_bytes([bytes[0], bytes[1]]).to_f32()
    }
    fn store_scale(scale: f32, out: &mut [u8]) {
        out.copy_from_slice(&bf16::from_f32(scale).to_le_bytes());
    }
    fn working_scale(scale: f32) -> f32 {
        scale
    }
}

fn quantize_as<T: Weight>(
    fill: &(dyn Fn(usize, &mut [u8]) + Sync),
    k: usize,
    n: usize,
    spec: &QuantSpec,
) -> Result<Quantized> {
    let numel = k
        .checked_mul(n)
        .filter(|e| e.checked_mul(T::SIZE).is_some())
        .ok_or_else(|| error(format!("its shape [{k}, {n}] of {} is too large", T::DTYPE)))?;
    let k_blocks = spec.blocks(k);
    let mut values = vec![0u8; numel];
    let mut scales = vec![0u8; k_blocks * n * T::SIZE];
    let mut zero_points = vec![0u8; k_blocks * n];
    if numel > 0 {
        let rows = spec.block_size;
        let first_bad = values
            .par_chunks_mut(rows * n)
            .zip(scales.par_chunks_mut(n * T::SIZE))
            .zip(zero_points.par_chunks_mut(n))
            .enumerate()
            .map(|(block, ((values, scales), zero_points))| {
                let block_rows = values.len() / n;
                let mut input = vec![0u8; block_rows * n * T::SIZE];
                let mut work = vec![0f32; (block_rows + 4) * n];
                let out = BlockRow {
                    values,
                    scales,
                    zero_points,
                };
                quantize_block::<T>(fill, block, n, spec, &mut input, &mut work, out)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .flatten()
            .next();
        if let Some(bad) = first_bad {
            return Err(non_finite(bad, k, n));
        }
    }
    Ok(Quantized {
        k,
        n,
        values,
        scales,
        zero_points: (!spec.symmetric).then_some(zero_points),
    })
}

fn quantize_into_as<T: Weight>(
    fill: &dyn Fn(usize, &mut [u8]),
    k: usize,
    n: usize,
    spec: &QuantSpec,
    out: QuantizedInto<'_>,
    scratch: &mut [u8],
) -> Result<()> {
    let rows = spec.block_size;
    let (input, rest) = scratch.split_at_mut(rows * n * T::SIZE);
    let (_, work, _) = bytemuck::pod_align_to_mut::<u8, f32>(rest);
    for block in 0..spec.blocks(k) {
        let block_rows = rows.min(k - block * rows);
        let values = match out.values.is_empty() {
            true => &mut [][..],
            false => &mut out.values[block * rows * n..(block * rows + block_rows) * n],
        };
        let block_out = BlockRow {
            values,
            scales: &mut out.scales[block * n * T::SIZE..(block + 1) * n * T::SIZE],
            zero_points: &mut out.zero_points[block * n..(block + 1) * n],
        };
        let input = &mut input[..block_rows * n * T::SIZE];
        let work = &mut work[..(block_rows + 4) * n];
        if let Some(bad) = quantize_block::<T>(fill, block, n, spec, input, work, block_out) {
            return Err(non_finite(bad, k, n));
        }
    }
    Ok(())
}

/// The error for the non-finite element `(row, column, value)` of a `[k, n]` weight.
fn non_finite((row, column, value): (usize, usize, f32), k: usize, n: usize) -> Error {
    error(format!(
        "element ({row}, {column}) of the [{k}, {n}] weight is {value}, not a finite number"
    ))
}

/// Fills block row `block` into `input` (its rows of `n` elements) and quantizes it into
/// `out` with `work` (`(rows + 4) · n` floats, any content) as working memory; returns its
/// first non-finite element (row and column in the weight, value).
fn quantize_block<T: Weight>(
    fill: &dyn Fn(usize, &mut [u8]),
    block: usize,
    n: usize,
    spec: &QuantSpec,
    input: &mut [u8],
    work: &mut [f32],
    out: BlockRow<'_>,
) -> Option<(usize, usize, f32)> {
    let first = block * spec.block_size;
    fill(first, input);
    quantize_block_row::<T>(input, n, spec, work, out).map(|(row, column)| {
        let value = T::load(&input[(row * n + column) * T::SIZE..]);
        (first + row, column, value)
    })
}

/// The outputs of one block row: `values [rows, n]`, `scales [n]` (bytes), `zero_points [n]`.
struct BlockRow<'a> {
    values: &'a mut [u8],
    scales: &'a mut [u8],
    zero_points: &'a mut [u8],
}

/// Quantizes one block row (`input` is `[rows, n]` elements, `rows <= block_size`; the codes
/// are left out when `out.values` is empty) with `work` (`(rows + 4) · n` floats) as working
/// memory; returns the first non-finite element (row within the block, column), leaving the
/// outputs partial.
fn quantize_block_row<T: Weight>(
    input: &[u8],
    n: usize,
    spec: &QuantSpec,
    work: &mut [f32],
    out: BlockRow<'_>,
) -> Option<(usize, usize)> {
    let rows = input.len() / (n * T::SIZE);
    let (weights, rest) = work.split_at_mut(rows * n);
    let (min, rest) = rest.split_at_mut(n);
    let (max, rest) = rest.split_at_mut(n);
    let (reciprocal, offset) = rest.split_at_mut(n);
    T::load_into(input, weights);
    // Range of each column, compared exactly as onnxruntime does (so -0.0 vs 0.0 and the
    // order of equal values come out the same).
    min.fill(f32::MAX);
    max.fill(f32::MIN);
    let mut finite = true;
    for values in weights.chunks_exact(n) {
        for ((&v, lo), hi) in values.iter().zip(min.iter_mut()).zip(max.iter_mut()) {
            finite &= v.is_finite();
            *lo = if v < *lo { v } else { *lo };
            *hi = if v > *hi { v } else { *hi };
        }
    }
    if !finite {
        let at = weights
            .iter()
            .position(|v| !v.is_finite())
            .expect("one is not finite");
        return Some((at / n, at % n));
    }
    let top = f32::from(spec.top_code());
    for column in 0..n {
        let (scale, zero_point) = block_parameters(min[column], max[column], spec);
        T::store_scale(
            scale,
            &mut out.scales[column * T::SIZE..(column + 1) * T::SIZE],
        );
        let working = T::working_scale(scale);
        reciprocal[column] = if working != 0.0 { 1.0 / working } else { 0.0 };
        offset[column] = f32::from(zero_point);
        out.zero_points[column] = zero_point;
    }
    let signed_shift = if spec.symmetric { spec.midpoint() } else { 0 };
    // (No codes are written when `out.values` is empty: the zip stops at once.)
    for (codes, values) in out.values.chunks_exact_mut(n).zip(weights.chunks_exact(n)) {
        for (((code, &w), &r), &o) in codes
            .iter_mut()
            .zip(values)
            .zip(reciprocal.iter())
            .zip(offset.iter())
        {
            *code = round_and_clamp(w * r + o, top).wrapping_sub(signed_shift);
        }
    }
    None
}

/// Scale and zero point of a block whose values range over `[min, max]` (as compared in
/// [`quantize_block_row`]): symmetric or asymmetric as `spec` says.
pub(super) fn block_parameters(min: f32, max: f32, spec: &QuantSpec) -> (f32, u8) {
    if spec.symmetric {
        let extreme = if max.abs() > min.abs() { max } else { min };
        (-extreme / f32::from(spec.midpoint()), spec.midpoint())
    } else {
        asymmetric_parameters(min, max, f32::from(spec.top_code()))
    }
}

/// `clamp(roundf(v), 0, top)` as onnxruntime computes a code (halves rounded away from zero),
/// with NaN (0 × ∞ when a denormal scale's reciprocal overflows) giving 0 as its float-to-int
/// conversion does on x86. Clamping first gives the same code (rounding is monotonic and 0 and
/// `top` are integers) and leaves `c` in `[0, top]`, where `c − trunc(c)` is exact: no libm call.
pub(super) fn round_and_clamp(v: f32, top: f32) -> u8 {
    let c = v.clamp(0.0, top);
    let whole = c as u8; // NaN → 0
    whole + u8::from(c - f32::from(whole) >= 0.5)
}

/// Scale and zero point of an asymmetric block with range `[min, max]`.
fn asymmetric_parameters(min: f32, max: f32, top: f32) -> (f32, u8) {
    let low = if 0.0 < min { 0.0 } else { min };
    let high = if max < 0.0 { 0.0 } else { max };
    let scale = (high - low) / top;
    let zero_point = if scale != 0.0 { 0.0 - low / scale } else { low };
    let zero_point = if zero_point < 0.0 {
        0
    } else if zero_point > top {
        top as u8
    } else {
        zero_point.round() as u8
    };
    (scale, zero_point)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec(bits: u8, block_size: usize, symmetric: bool) -> QuantSpec {
        QuantSpec::new(bits, block_size, symmetric)
    }

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn message(err: Error) -> String {
        match err {
            Error::Quantize { tensor, message } => {
                assert_eq!(tensor, None);
                message
            }
            other => panic!("expected Error::Quantize, got {other:?}"),
        }
    }

    #[test]
    fn shapes_follow_k_blocks() {
        let w = f32_bytes(&(0..80 * 3).map(|i| i as f32 - 100.0).collect::<Vec<_>>());
        let q = quantize(&w, DType::F32, 80, 3, &spec(4, 32, false)).unwrap();
        assert_eq!(
            (q.k, q.n, q.values.len(), q.scales.len()),
            (80, 3, 240, 3 * 3 * 4)
        );
        assert_eq!(q.zero_points.as_ref().map(Vec::len), Some(9));
        let h: Vec<u8> = (0..17 * 2)
            .flat_map(|i| f16::from_f32(i as f32).to_le_bytes())
            .collect();
        let q = quantize(&h, DType::F16, 17, 2, &spec(8, 16, true)).unwrap();
        assert_eq!(
            (q.values.len(), q.scales.len(), q.zero_points),
            (34, 2 * 2 * 2, None)
        );
        let q = quantize(&[], DType::BF16, 0, 5, &spec(4, 16, true)).unwrap();
        assert!(q.values.is_empty() && q.scales.is_empty());
    }

    #[test]
    fn symmetric_maps_the_largest_magnitude_to_the_lowest_code() {
        // Largest magnitude negative: scale positive; positive: scale negative.
        let w = f32_bytes(&[-8.0, 4.0, 2.5, 7.0, -1.0, -3.0]);
        let q = quantize(&w, DType::F32, 3, 2, &spec(4, 16, true)).unwrap();
        let scales: Vec<f32> = q.scales.chunks(4).map(<f32 as Weight>::load).collect();
        assert_eq!(scales, vec![1.0, -0.875]);
        let values: Vec<i8> = q.values.iter().map(|&v| v as i8).collect();
        // 2.5 / 1 + 8 = 10.5 rounds to 11 → 3; 7 / -0.875 = -8.
        assert_eq!(values, vec![-8, -5, 3, -8, -1, 3]);
    }

    #[test]
    fn non_finite_elements_are_named() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut w = vec![1.0f32; 40 * 3];
            w[37 * 3 + 2] = bad;
            w[38 * 3] = bad;
            let err = quantize(&f32_bytes(&w), DType::F32, 40, 3, &spec(4, 16, true)).unwrap_err();
            let text = message(err);
            assert!(text.contains("element (37, 2)"), "{text}");
            assert!(text.contains("not a finite number"), "{text}");
        }
        let w: Vec<u8> = [1.0f32, f32::NAN]
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect();
        let text = message(quantize(&w, DType::BF16, 1, 2, &spec(8, 16, false)).unwrap_err());
        assert!(
            text.contains("element (0, 1)") && text.contains("NaN"),
            "{text}"
        );
    }

    #[test]
    fn bad_dtype_size_and_spec_are_errors() {
        let text = message(quantize(&[0; 8], DType::I64, 1, 1, &spec(4, 32, true)).unwrap_err());
        assert!(
            text.contains("i64") && text.contains("f32, f16 and bf16"),
            "{text}"
        );
        let text = message(quantize(&[0; 10], DType::F16, 2, 3, &spec(4, 32, true)).unwrap_err());
        assert!(
            text.contains("[2, 3] f16 weight takes 12 bytes, 10 were given"),
            "{text}"
        );
        let text =
            message(quantize(&[], DType::F32, usize::MAX, 2, &spec(4, 32, true)).unwrap_err());
        assert!(text.contains("too large"), "{text}");
        let err = quantize(&[0; 4], DType::F32, 1, 1, &spec(4, 24, true)).unwrap_err();
        assert!(matches!(err, Error::Usage(_)), "{err}");
    }

    /// Dequantizes element `i` of `q` (stored scales read back in f32).
    fn dequantize<T: Weight>(q: &Quantized, spec: &QuantSpec, i: usize) -> (f32, f32) {
        let (row, column) = (i / q.n, i % q.n);
        let meta = (row / spec.block_size) * q.n + column;
        let scale = T::load(&q.scales[meta * T::SIZE..]);
        let value = match &q.zero_points {
            Some(zp) => f32::from(q.values[i]) - f32::from(zp[meta]),
            None => f32::from(q.values[i] as i8),
        };
        (value * scale, scale)
    }

    /// Every element comes back within half a step of its block's scale, except in the
    /// symmetric case the values beyond the top code (opposite in sign to the block's extreme,
    /// and within half a step of its magnitude), which clamp and come back within one step.
    /// `scale_rounding` is the relative error of the scale the values were divided by (f16
    /// rounds it): codes up to `top` away from the zero point drift by that much of a step.
    fn check_round_trip<T: Weight>(
        w: &[f32],
        bytes: &[u8],
        k: usize,
        spec: &QuantSpec,
        scale_rounding: f32,
    ) {
        let n = w.len() / k;
        let q = quantize(bytes, T::DTYPE, k, n, spec).unwrap();
        for (i, &x) in w.iter().enumerate() {
            let (back, scale) = dequantize::<T>(&q, spec, i);
            let step = scale.abs();
            let clamped = spec.symmetric && x / scale > f32::from(spec.midpoint()) - 0.5;
            let bound = if clamped { step } else { step / 2.0 };
            let drift = step * f32::from(spec.top_code()) * scale_rounding;
            // Values are divided as `w · (1/s)` (onnxruntime's order): the reciprocal's rounding
            // moves a code near a tie by up to `top` ulps of a step.
            let reciprocal = step * f32::from(spec.top_code()) * 2.0 * f32::EPSILON;
            let tolerance = bound + drift + reciprocal.max(step * 1e-5) + f32::MIN_POSITIVE;
            assert!(
                (back - x).abs() <= tolerance,
                "element {i}: {x} came back as {back} (scale {scale}, spec {spec:?})"
            );
        }
    }

    proptest! {
        #[test]
        fn quantize_into_matches_quantize_with_stale_memory(
            w in prop::collection::vec(-4.0f32..4.0, 1..=150),
            bits in prop::sample::select(vec![4u8, 8]),
            block_size in prop::sample::select(vec![16usize, 32]),
            symmetric in any::<bool>(),
            dtype in prop::sample::select(vec![DType::F32, DType::F16, DType::BF16]),
            n in 1usize..6,
        ) {
            let spec = QuantSpec::new(bits, block_size, symmetric);
            let k = w.len().div_ceil(n);
            let values: Vec<f32> = (0..k * n).map(|i| w[i % w.len()] * (1 + i % 3) as f32).collect();
            let bytes = crate::weights::convert::convert(&f32_bytes(&values), DType::F32, dtype).0;
            let want = quantize(&bytes, dtype, k, n, &spec).unwrap();
            let row = n * dtype.size();
            let fill = |first: usize, dst: &mut [u8]| {
                dst.copy_from_slice(&bytes[first * row..first * row + dst.len()]);
            };
            let blocks = spec.blocks(k);
            for with_values in [true, false] {
                // Every buffer starts with garbage, as memory lent by a sink may.
                let mut got = vec![0xa5u8; if with_values { k * n } else { 0 }];
                let mut scales = vec![0x5au8; blocks * n * dtype.size()];
                let mut zero_points = vec![0xeeu8; blocks * n];
                let mut scratch = vec![0x7fu8; quantize_scratch_len(dtype, n, &spec) + 3];
                let out = QuantizedInto {
                    values: &mut got,
                    scales: &mut scales,
                    zero_points: &mut zero_points,
                };
                // An odd start: the scratch's floats are aligned inside it.
                quantize_into(dtype, k, n, &spec, &fill, out, &mut scratch[3..]).unwrap();
                if with_values {
                    prop_assert_eq!(&got, &want.values);
                }
                prop_assert_eq!(&scales, &want.scales);
                if let Some(zp) = &want.zero_points {
                    prop_assert_eq!(&zero_points, zp);
                }
            }
        }

        #[test]
        fn dequantized_values_stay_within_half_a_step(
            columns in prop::collection::vec(
                (prop::collection::vec(-1.0f32..1.0, 40), -20i32..20),
                1..6,
            ),
            bits in prop::sample::select(vec![4u8, 8]),
            block_size in prop::sample::select(vec![16usize, 32]),
            symmetric in any::<bool>(),
        ) {
            let spec = QuantSpec { bits, block_size, symmetric };
            let (k, n) = (40, columns.len());
            // Row-major [k, n], each column with its own magnitude.
            let w: Vec<f32> = (0..k * n)
                .map(|i| columns[i % n].0[i / n] * 2f32.powi(columns[i % n].1))
                .collect();
            check_round_trip::<f32>(&w, &f32_bytes(&w), k, &spec, 0.0);
            // f16 magnitudes from 2^-4 to 2^8, so that scales stay normal f16 numbers.
            let halves: Vec<f16> = (0..k * n)
                .map(|i| f16::from_f32(columns[i % n].0[i / n] * 2f32.powi(columns[i % n].1.clamp(-4, 8))))
                .collect();
            let w16: Vec<f32> = halves.iter().map(|h| h.to_f32()).collect();
            let bytes: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
            check_round_trip::<f16>(&w16, &bytes, k, &spec, 2f32.powi(-11));
        }
    }
}
