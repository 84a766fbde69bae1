//! Weights that a quantizer already packed into the checkpoint, unpacked at save time:
//! [`TensorSource::Packed4`] (GPTQ and AWQ 4-bit weights → the `DequantizeLinear` layout,
//! without dequantizing) and [`TensorSource::Fp8Blocks`] (block-scaled float8 weights → f32).

use super::convert;
use super::eval::{Evaluator, SourceInfo};
use crate::ir::{DType, PackedFormat, QuantPart, TensorSource};
use crate::{Error, Result};

/// Column order of the 8 nibbles of an AWQ "gemm" word: nibble `j` holds column `8c + AWQ[j]`.
const AWQ_ORDER: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];
/// Column order of the 8 nibbles of a GPTQ `qzeros` word (plain, low nibble first).
const PLAIN_ORDER: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

/// The checkpoint tensors of a packed module and the `[K, N]` weight they hold.
struct Packed {
    k: usize,
    n: usize,
    groups: usize,
    scales: SourceInfo,
}

fn tensor(prefix: &str, suffix: &str) -> TensorSource {
    TensorSource::Checkpoint(format!("{prefix}.{suffix}"))
}

fn bad(prefix: &str, suffix: &str, message: String) -> Error {
    Error::Graph(format!("checkpoint tensor `{prefix}.{suffix}`: {message}"))
}

fn format_name(format: PackedFormat) -> &'static str {
    match format {
        PackedFormat::GptqV1 => "GPTQ (checkpoint_format gptq)",
        PackedFormat::GptqV2 => "GPTQ (checkpoint_format gptq_v2)",
        PackedFormat::AwqGemm => "AWQ gemm",
    }
}

/// Checks the shapes and types of a packed module's tensors (no data read).
fn check_packed(
    ev: &Evaluator<'_>,
    prefix: &str,
    format: PackedFormat,
    group_size: usize,
) -> Result<Packed> {
    let what = format_name(format);
    let qweight = ev.describe(&tensor(prefix, "qweight"))?;
    let [rows, cols] = qweight.shape[..] else {
        return Err(bad(
            prefix,
            "qweight",
            format!(
                "{what} needs a 2-D int32 tensor, found shape {:?}",
                qweight.shape
            ),
        ));
    };
    if qweight.dtype != DType::I32 {
        return Err(bad(
            prefix,
            "qweight",
            format!("{what} needs int32 words, found {}", qweight.dtype),
        ));
    }
    let (k, n) = match format {
        PackedFormat::AwqGemm => (rows, cols * 8),
        PackedFormat::GptqV1 | PackedFormat::GptqV2 => (rows * 8, cols),
    };
    if group_size == 0 || k == 0 || n == 0 {
        return Err(bad(
            prefix,
            "qweight",
            format!("{what}: empty weight [{k}, {n}] or group size {group_size}"),
        ));
    }
    if n % 8 != 0 {
        return Err(bad(
            prefix,
            "qweight",
            format!("{what}: {n} output columns, not a multiple of 8 (qzeros packs 8 per word)"),
        ));
    }
    let groups = k.div_ceil(group_size);
    let scales = ev.describe(&tensor(prefix, "scales"))?;
    if scales.shape != [groups, n] || !convert::can_convert(scales.dtype, DType::F32) {
        return Err(bad(
            prefix,
            "scales",
            format!(
                "found {} {:?}, expected float [{groups}, {n}] (one scale per group of \
                 {group_size} rows of K = {k} and column)",
                scales.dtype, scales.shape
            ),
        ));
    }
    let qzeros = ev.describe(&tensor(prefix, "qzeros"))?;
    if qzeros.shape != [groups, n / 8] || qzeros.dtype != DType::I32 {
        return Err(bad(
            prefix,
            "qzeros",
            format!(
                "found {} {:?}, expected int32 [{groups}, {}] (8 zero points per word)",
                qzeros.dtype,
                qzeros.shape,
                n / 8
            ),
        ));
    }
    if format != PackedFormat::AwqGemm {
        if let Ok(g_idx) = ev.describe(&tensor(prefix, "g_idx")) {
            if g_idx.shape != [k] || !matches!(g_idx.dtype, DType::I32 | DType::I64) {
                return Err(bad(
                    prefix,
                    "g_idx",
                    format!(
                        "found {} {:?}, expected int32 [{k}]",
                        g_idx.dtype, g_idx.shape
                    ),
                ));
            }
        }
    }
    Ok(Packed {
        k,
        n,
        groups,
        scales,
    })
}

/// Type and shape of a [`TensorSource::Packed4`] part.
pub(super) fn describe_packed4(
    ev: &Evaluator<'_>,
    prefix: &str,
    format: PackedFormat,
    group_size: usize,
    part: QuantPart,
) -> Result<SourceInfo> {
    let p = check_packed(ev, prefix, format, group_size)?;
    Ok(match part {
        QuantPart::Values => SourceInfo {
            dtype: DType::U4,
            shape: vec![p.k, p.n],
        },
        QuantPart::ZeroPoints => SourceInfo {
            dtype: DType::U4,
            shape: vec![p.groups, p.n],
        },
        QuantPart::Scales => p.scales,
    })
}

/// Little-endian int32 words of a checkpoint tensor.
fn words(ev: &mut Evaluator<'_>, prefix: &str, suffix: &str) -> Result<Vec<u32>> {
    let (_, _, bytes) = ev.materialize(&tensor(prefix, suffix))?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Evaluates a [`TensorSource::Packed4`] part.
pub(super) fn packed4(
    ev: &mut Evaluator<'_>,
    prefix: &str,
    format: PackedFormat,
    group_size: usize,
    part: QuantPart,
) -> Result<(DType, Vec<usize>, Vec<u8>)> {
    let p = check_packed(ev, prefix, format, group_size)?;
    let order = match format {
        PackedFormat::AwqGemm => &AWQ_ORDER,
        PackedFormat::GptqV1 | PackedFormat::GptqV2 => &PLAIN_ORDER,
    };
    match part {
        QuantPart::Values => {
            if format != PackedFormat::AwqGemm {
                check_g_idx(ev, prefix, p.k, group_size)?;
            }
            let w = words(ev, prefix, "qweight")?;
            let values = match format {
                PackedFormat::AwqGemm => unpack_columns(&w, p.k, p.n, order),
                PackedFormat::GptqV1 | PackedFormat::GptqV2 => unpack_rows(&w, p.k, p.n),
            };
            Ok((DType::U4, vec![p.k, p.n], values))
        }
        QuantPart::ZeroPoints => {
            let w = words(ev, prefix, "qzeros")?;
            let mut zeros = unpack_columns(&w, p.groups, p.n, order);
            if format == PackedFormat::GptqV1 {
                shift_gptq_v1_zeros(&mut zeros, prefix)?;
            }
            Ok((DType::U4, vec![p.groups, p.n], zeros))
        }
        QuantPart::Scales => {
            let (dtype, shape, bytes) = ev.materialize(&tensor(prefix, "scales"))?;
            Ok((dtype, shape, bytes))
        }
    }
}

/// GPTQ "v1" checkpoints store every zero point minus one: the one that dequantizes is the
/// stored one plus one, which must still fit in 4 bits.
fn shift_gptq_v1_zeros(zeros: &mut [u8], prefix: &str) -> Result<()> {
    if let Some(i) = zeros.iter().position(|&z| z == 15) {
        return Err(bad(
            prefix,
            "qzeros",
            format!(
                "stored zero point 15 at index {i} means 16 in checkpoint_format gptq (stored \
                 values are one less), which does not fit in 4 bits"
            ),
        ));
    }
    for z in zeros {
        *z += 1;
    }
    Ok(())
}

/// Checks that a GPTQ `g_idx` (when present) maps row `k` to group `k / group_size`: the
/// order of a checkpoint quantized without `desc_act`.
fn check_g_idx(ev: &mut Evaluator<'_>, prefix: &str, k: usize, group_size: usize) -> Result<()> {
    let source = tensor(prefix, "g_idx");
    if ev.describe(&source).is_err() {
        return Ok(());
    }
    let (dtype, _, bytes) = ev.materialize(&source)?;
    let groups: Vec<i64> = match dtype {
        DType::I64 => bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8-byte chunk")))
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
            .collect(),
    };
    match (0..k).find(|&row| groups[row] != (row / group_size) as i64) {
        None => Ok(()),
        Some(row) => Err(bad(
            prefix,
            "g_idx",
            format!(
                "row {row} is in group {}, expected {} (rows in order, groups of {group_size}: \
                 a checkpoint quantized with desc_act is not supported)",
                groups[row],
                row / group_size
            ),
        )),
    }
}

/// Unpacks `[rows, n / 8]` words that hold 8 columns each (nibble `j`, low first, is column
/// `8c + order[j]`) into `[rows, n]` values, one per byte.
pub fn unpack_columns(words: &[u32], rows: usize, n: usize, order: &[usize; 8]) -> Vec<u8> {
    let mut out = vec![0u8; rows * n];
    for (i, &word) in words.iter().enumerate().take(rows * n / 8) {
        let (row, c) = (i / (n / 8), i % (n / 8));
        for (j, &col) in order.iter().enumerate() {
            out[row * n + 8 * c + col] = ((word >> (4 * j)) & 0xf) as u8;
        }
    }
    out
}

/// Unpacks `[k / 8, n]` words that hold 8 rows each (nibble `j`, low first, is row `8r + j`)
/// into `[k, n]` values, one per byte.
pub fn unpack_rows(words: &[u32], k: usize, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; k * n];
    for (i, &word) in words.iter().enumerate().take(k * n / 8) {
        let (r, col) = (i / n, i % n);
        for j in 0..8 {
            out[(8 * r + j) * n + col] = ((word >> (4 * j)) & 0xf) as u8;
        }
    }
    out
}

/// The f32 value of a float8 e4m3 ("fn": no infinities, `0x7f`/`0xff` are NaN) byte.
pub fn e4m3_to_f32(byte: u8) -> f32 {
    let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
    let exponent = (byte >> 3) & 0xf;
    let mantissa = (byte & 0x7) as f32;
    if exponent == 0xf && byte & 0x7 == 0x7 {
        return f32::NAN;
    }
    if exponent == 0 {
        // Subnormal: 2^-6 · m/8.
        return sign * mantissa * 2f32.powi(-9);
    }
    sign * (1.0 + mantissa / 8.0) * 2f32.powi(exponent as i32 - 7)
}

/// Type and shape of a [`TensorSource::Fp8Blocks`] weight.
pub(super) fn describe_fp8(
    ev: &Evaluator<'_>,
    weight: &str,
    scales: &str,
    block: [usize; 2],
) -> Result<SourceInfo> {
    let (shape, _) = ev.float8(weight)?;
    let [n, k] = shape[..] else {
        return Err(Error::Graph(format!(
            "checkpoint tensor `{weight}`: a block-scaled float8 weight must be 2-D, found \
             shape {shape:?}"
        )));
    };
    let [bn, bk] = block;
    if bn == 0 || bk == 0 {
        return Err(Error::Graph(format!(
            "checkpoint tensor `{weight}`: float8 blocks of {block:?} (expected positive sizes)"
        )));
    }
    let want = [n.div_ceil(bn), k.div_ceil(bk)];
    let info = ev.describe(&TensorSource::Checkpoint(scales.to_string()))?;
    if info.shape != want || !convert::can_convert(info.dtype, DType::F32) {
        return Err(Error::Graph(format!(
            "checkpoint tensor `{scales}`: found {} {:?}, expected float {want:?} (one scale \
             per [{bn}, {bk}] block of `{weight}` [{n}, {k}])",
            info.dtype, info.shape
        )));
    }
    Ok(SourceInfo {
        dtype: DType::F32,
        shape: vec![n, k],
    })
}

/// Evaluates a [`TensorSource::Fp8Blocks`] weight to f32.
pub(super) fn fp8_blocks(
    ev: &mut Evaluator<'_>,
    weight: &str,
    scales: &str,
    block: [usize; 2],
) -> Result<(DType, Vec<usize>, Vec<u8>)> {
    let info = describe_fp8(ev, weight, scales, block)?;
    let (n, k) = (info.shape[0], info.shape[1]);
    let (dtype, _, bytes) = ev.materialize(&TensorSource::Checkpoint(scales.to_string()))?;
    let (s, _) = convert::convert(&bytes, dtype, DType::F32);
    let s: &[f32] = bytemuck::cast_slice(&s);
    let (_, values) = ev.float8(weight)?;
    let out = dequantize_fp8(values, s, n, k, block);
    Ok((DType::F32, vec![n, k], bytemuck::cast_slice(&out).to_vec()))
}

/// `values[n, k] · scales[n / bn, k / bk]` for float8 e4m3 `values` `[n, k]`.
pub fn dequantize_fp8(
    values: &[u8],
    scales: &[f32],
    n: usize,
    k: usize,
    block: [usize; 2],
) -> Vec<f32> {
    let [bn, bk] = block;
    let cols = k.div_ceil(bk);
    let mut out = Vec::with_capacity(n * k);
    for row in 0..n {
        for col in 0..k {
            let scale = scales[(row / bn) * cols + col / bk];
            out.push(e4m3_to_f32(values[row * k + col]) * scale);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packs `[rows, n]` nibbles 8 columns per word in `order` (the quantizers' packing).
    fn pack_columns(values: &[u8], rows: usize, n: usize, order: &[usize; 8]) -> Vec<u32> {
        let mut words = vec![0u32; rows * n / 8];
        for row in 0..rows {
            for c in 0..n / 8 {
                for (j, &col) in order.iter().enumerate() {
                    words[row * n / 8 + c] |= (values[row * n + 8 * c + col] as u32) << (4 * j);
                }
            }
        }
        words
    }

    #[test]
    fn gptq_weights_pack_eight_rows_per_word_low_nibble_first() {
        // One column, 8 rows: word 0x76543210 holds rows 0..8 = 0, 1, …, 7.
        assert_eq!(
            unpack_rows(&[0x7654_3210], 8, 1),
            vec![0, 1, 2, 3, 4, 5, 6, 7]
        );
        // Two columns, 16 rows: words [r][c].
        let words = [0xffff_ffff, 0x0000_0001, 0x1234_5678, 0x8000_0000];
        let out = unpack_rows(&words, 16, 2);
        assert_eq!(out[0], 15); // row 0, column 0
        assert_eq!(out[1], 1); // row 0, column 1
        assert_eq!(out[3], 0); // row 1, column 1
        assert_eq!(out[8 * 2], 8); // row 8, column 0: low nibble of 0x12345678
        assert_eq!(out[15 * 2], 1); // row 15, column 0: high nibble
        assert_eq!(out[15 * 2 + 1], 8); // row 15, column 1
    }

    #[test]
    fn awq_words_interleave_columns() {
        // Nibble j of 0x76543210 is j; AWQ puts it in column order[j].
        let out = unpack_columns(&[0x7654_3210], 1, 8, &AWQ_ORDER);
        assert_eq!(out, vec![0, 4, 1, 5, 2, 6, 3, 7]);
        let plain = unpack_columns(&[0x7654_3210], 1, 8, &PLAIN_ORDER);
        assert_eq!(plain, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        let values: Vec<u8> = (0..48).map(|i| (i * 7 % 16) as u8).collect();
        for order in [&AWQ_ORDER, &PLAIN_ORDER] {
            let words = pack_columns(&values, 3, 16, order);
            assert_eq!(unpack_columns(&words, 3, 16, order), values);
        }
    }

    #[test]
    fn gptq_v1_zero_points_are_stored_minus_one() {
        let mut zeros = vec![7, 0, 14];
        shift_gptq_v1_zeros(&mut zeros, "m").unwrap();
        assert_eq!(zeros, vec![8, 1, 15]);
        let err = shift_gptq_v1_zeros(&mut [3, 15], "m.x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("m.x.qzeros") && err.contains("16"), "{err}");
    }

    #[test]
    fn e4m3_decodes_normals_subnormals_and_nan() {
        assert_eq!(e4m3_to_f32(0x00), 0.0);
        assert_eq!(e4m3_to_f32(0x38), 1.0); // exponent 7, mantissa 0
        assert_eq!(e4m3_to_f32(0xb8), -1.0);
        assert_eq!(e4m3_to_f32(0x7e), 448.0); // the largest finite value
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9)); // the smallest subnormal
        assert_eq!(e4m3_to_f32(0x3c), 1.5);
        assert!(e4m3_to_f32(0x7f).is_nan() && e4m3_to_f32(0xff).is_nan());
    }

    #[test]
    fn fp8_block_scales_index_rows_then_columns() {
        // [3, 3] values all 1.0, blocks [2, 2]: scales [2, 2].
        let values = vec![0x38u8; 9];
        let out = dequantize_fp8(&values, &[1.0, 2.0, 3.0, 4.0], 3, 3, [2, 2]);
        assert_eq!(out, vec![1.0, 1.0, 2.0, 1.0, 1.0, 2.0, 3.0, 3.0, 4.0]);
    }
}
