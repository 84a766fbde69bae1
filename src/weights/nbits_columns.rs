//! MatMulNBits' inputs of a weight read in place, quantized by tiles of columns straight into
//! the sink.
//!
//! The weight `W [K, N]` is a stored tensor (checkpoint or external data) of that shape, the
//! transpose of one stored `[N, K]` (how Hugging Face stores a Linear layer: column `n` of `W`
//! is the stored row `n`), or a concatenation of such along either axis (experts' weights
//! stacked side by side or one above the other): a [`Matrix`]. MatMulNBits' `B`, `scales` and
//! `zero_points` are all column-major (`[N, …]`), so each is written as tiles of columns. When
//! every stored part is such a transpose, a column is a stored row (or rows, one per part
//! stacked): each column is converted from them and quantized on its own, already in
//! MatMulNBits' order ([`quant::columns`], vectorised), and only the part written is computed
//! (the scales and zero points stop at each block's range). Otherwise each tile is quantized
//! from its columns of the stored tensors ([`quant::quantize_into`]) and laid out for
//! MatMulNBits. Either way it goes into the sink's own buffer. By columns, converting and
//! widening are one step ([`convert::widen_converted`]), and the values pass keeps the scales
//! and zero points it computes (at most [`KEPT`] bytes: every layer's, not a large LM head's)
//! for those parts, which the data file holds right after the values; otherwise each input
//! reads the weight again: block quantization is deterministic, so the scales and zero points
//! are bit for bit those the values were computed with (their pass skips the values). The
//! tiles' working memory is lent by the sink ([`Sink::lend`]: one of the writer's blocks where
//! it writes through blocks, a buffer of just that size where it writes through a map), so
//! quantizing takes no memory besides the writer's, its own scratch (tens of KiB by columns, at
//! most [`SCRATCH`] by tiles) and what it keeps.

use std::ops::Range;

use rayon::prelude::*;

use super::convert;
use super::eval::{Evaluator, KeptParameters};
use super::matrix::Matrix;
use super::quantized::describe_source;
use super::sink::{Sink, Store};
use super::transpose::transpose_rows_into;
use crate::ir::{DType, QuantParams, QuantPart, TensorSource};
use crate::quant;
use crate::quant::columns::ColumnParts;
use crate::{Error, Result};

/// Columns per tile: the quantizer reads a tile block row by block row, each a transpose of
/// `TILE` stored rows.
const TILE: usize = 64;
/// The most working memory the tiles in flight take, lent by the sink: fewer tiles run at
/// once when one takes more than its share.
const SCRATCH: usize = 4 << 20;
/// By columns, the most stored bytes of the weight one write of the sink reads: the pages of
/// those bytes are unmapped once it is written ([`Evaluator::unmap_passed`]), so at most this
/// much of a large weight (an LM head) is mapped at a time.
const READ_PER_WRITE: usize = 8 << 20;
/// The most bytes of scales and zero points a values pass keeps for the parts written next
/// (every layer's weights of a model of a few billion parameters; not a large LM head's).
const KEPT: usize = 256 << 10;

/// `count` places for pieces of `len` bytes: `buf`'s, in order, or none where nothing is kept.
fn pieces(buf: Option<&mut [u8]>, len: usize, count: usize) -> Vec<Option<&mut [u8]>> {
    match buf {
        Some(buf) if len > 0 => buf.chunks_mut(len).map(Some).collect(),
        _ => (0..count).map(|_| None).collect(),
    }
}

/// The first element of columns `cols` (in row-major order) of the `[K, N]` `weight` that is
/// not a finite number once converted to `dtype`, described as the quantizer's error does but
/// at its place in the whole weight.
fn non_finite(weight: &Matrix<'_>, cols: &Range<usize>, dtype: DType) -> Option<String> {
    let k = weight.rows();
    let mut tile = vec![0u8; k * cols.len() * dtype.size()];
    weight.fill(0, cols.clone(), dtype, &mut tile, Store::Cached);
    let mut wide = vec![0u8; k * cols.len() * 4];
    convert::convert_slice(&tile, dtype, DType::F32, &mut wide);
    let values: Vec<f32> = wide
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let at = values.iter().position(|v| !v.is_finite())?;
    let (row, column) = (at / cols.len(), cols.start + at % cols.len());
    Some(format!(
        "element ({row}, {column}) of the [{k}, {}] weight is {}, not a finite number",
        weight.cols(),
        values[at]
    ))
}

/// What a MatMulNBits input of a block-quantized weight is made of: the float weight, the
/// dtype and parameters it is quantized with, and the part.
struct NBitsInput<'s> {
    weight: &'s TensorSource,
    dtype: DType,
    spec: QuantParams,
    part: QuantPart,
}

/// `src` as a MatMulNBits input of a [`TensorSource::Quantize`]d weight, written as `target`:
/// the `NBits` values or zero points of its `Quantize` values or zero points (u8), or the
/// transpose of its scales (in their own dtype). `None` for anything else.
fn nbits_input(src: &TensorSource, target: DType) -> Option<NBitsInput<'_>> {
    let (quantize, wanted) = match src {
        TensorSource::NBits { source, spec, part } if target == DType::U8 => {
            (&**source, Some((*spec, *part)))
        }
        TensorSource::Transpose(source) => (&**source, None),
        _ => return None,
    };
    let TensorSource::Quantize {
        source: weight,
        dtype,
        spec,
        part,
    } = quantize
    else {
        return None;
    };
    let fits = match wanted {
        Some((nbits, nbits_part)) => {
            nbits_part == *part
                && *part != QuantPart::Scales
                && (nbits.bits, nbits.block_size) == (spec.bits, spec.block_size)
        }
        None => *part == QuantPart::Scales && target == *dtype,
    };
    fits.then_some(NBitsInput {
        weight,
        dtype: *dtype,
        spec: *spec,
        part: *part,
    })
}

impl Evaluator<'_> {
    /// Streams `src` into `sink` as `target` when it is a MatMulNBits input of a weight read in
    /// place (see the [module doc](self)); `false` when it is not (the caller evaluates it
    /// otherwise).
    pub(super) fn stream_nbits_columns(
        &mut self,
        src: &TensorSource,
        target: DType,
        sink: &mut dyn Sink,
    ) -> Result<bool> {
        let Some(input) = nbits_input(src, target) else {
            return Ok(false);
        };
        if let Some(bytes) = self.take_kept(&input) {
            sink.write(&bytes)?;
            return Ok(true);
        }
        self.map_files(input.weight)?;
        let this = &*self;
        let Some(weight) = this.stored_matrix(input.weight)? else {
            return Ok(false);
        };
        let (dtype, spec, part) = (input.dtype, input.spec, input.part);
        if !dtype.is_float() || !convert::can_convert(weight.dtype(), dtype) {
            // The general path names what does not fit.
            return Ok(false);
        }
        if part == QuantPart::ZeroPoints && spec.symmetric {
            return Ok(false);
        }
        spec.validate()?;
        let (k, n) = (weight.rows(), weight.cols());
        let shapes = quant::nbits_shapes(k, 1, &spec);
        let blocks = shapes.scales[1];
        let column_bytes = match part {
            QuantPart::Values => shapes.weight[1] * shapes.weight[2],
            QuantPart::Scales => blocks * dtype.size(),
            QuantPart::ZeroPoints => shapes.zero_points[1],
        };
        if column_bytes == 0 {
            return Ok(true);
        }
        let named = |e: Error, cols: &Range<usize>| match e {
            Error::Quantize {
                tensor: None,
                message,
            } => Error::Quantize {
                tensor: Some(describe_source(input.weight)),
                message: non_finite(&weight, cols, dtype).unwrap_or(message),
            },
            other => other,
        };
        // A weight stored by columns (Hugging Face's `[N, K]`) is quantized column by column
        // from the stored rows, in MatMulNBits' order already: no transpose either way.
        let by_columns = weight.columns_stored()
            && quant::columns::supports(dtype)
            && quant::columns::supports(weight.dtype());
        // One tile's quantization: its values (when they are written), scales, zero points
        // and the quantizer's working memory; by columns, one column converted and widened
        // (and room to align it).
        let values_len = if part == QuantPart::Values && !by_columns {
            k * TILE
        } else {
            0
        };
        let tile_len = if by_columns {
            k * 4 + 4
        } else {
            values_len
                + blocks * TILE * (dtype.size() + 1)
                + quant::quantize_scratch_len(dtype, TILE, &spec)
        };
        let from = weight.dtype();
        // The values pass by columns keeps the scales and zero points it computes, when they
        // are small enough, for the parts written next.
        let kept_len = |part| match part {
            QuantPart::ZeroPoints if spec.symmetric => 0,
            _ => quant::columns::column_bytes(k, dtype, &spec, part),
        };
        let (scale_len, zero_point_len) =
            (kept_len(QuantPart::Scales), kept_len(QuantPart::ZeroPoints));
        let keep =
            by_columns && part == QuantPart::Values && n * (scale_len + zero_point_len) <= KEPT;
        let mut kept_scales = vec![0u8; if keep { n * scale_len } else { 0 }];
        let mut kept_zero_points = vec![0u8; if keep { n * zero_point_len } else { 0 }];
        let column_tile = |cols: Range<usize>,
                           out: &mut [u8],
                           scratch: &mut [u8],
                           kept: [Option<&mut [u8]>; 2]|
         -> Result<()> {
            let (_, work, _) = bytemuck::pod_align_to_mut::<u8, f32>(scratch);
            let work = &mut work[..k];
            let [scales, zero_points] = kept;
            let scales = pieces(scales, scale_len, cols.len());
            let zero_points = pieces(zero_points, zero_point_len, cols.len());
            let columns = cols.clone().zip(out.chunks_exact_mut(column_bytes));
            for ((col, out), (scales, zero_points)) in
                columns.zip(scales.into_iter().zip(zero_points))
            {
                weight.column_pieces(col, &mut |row, piece| {
                    let len = piece.len() / from.size();
                    convert::widen_converted(piece, from, dtype, &mut work[row..row + len]);
                });
                let mut parts = ColumnParts::one(part, out);
                parts.scales = parts.scales.or(scales);
                parts.zero_points = parts.zero_points.or(zero_points);
                quant::columns::quantize_widened(work, dtype, &spec, parts).map_err(|_| {
                    let message = "an element is not a finite number".to_string();
                    named(
                        Error::Quantize {
                            tensor: None,
                            message,
                        },
                        &cols,
                    )
                })?;
            }
            Ok(())
        };
        let tile = |cols: Range<usize>,
                    out: &mut [u8],
                    scratch: &mut [u8],
                    kept: [Option<&mut [u8]>; 2]|
         -> Result<()> {
            if by_columns {
                return column_tile(cols, out, scratch, kept);
            }
            let width = cols.len();
            let (values, rest) = scratch.split_at_mut(values_len / TILE * width);
            let (scales, rest) = rest.split_at_mut(blocks * width * dtype.size());
            let (zero_points, work) = rest.split_at_mut(blocks * width);
            let fill = |first: usize, dst: &mut [u8]| {
                weight.fill(first, cols.clone(), dtype, dst, Store::Cached);
            };
            let into = quant::QuantizedInto {
                values: &mut *values,
                scales: &mut *scales,
                zero_points: &mut *zero_points,
            };
            quant::quantize_into(dtype, k, width, &spec, &fill, into, work)
                .map_err(|e| named(e, &cols))?;
            match part {
                QuantPart::Values => quant::nbits_weight_into(values, k, width, &spec, out),
                QuantPart::Scales => {
                    transpose_rows_into(scales, blocks, width, dtype, dtype, 0, out);
                }
                QuantPart::ZeroPoints => {
                    quant::nbits_zero_points_into(zero_points, k, width, &spec, out)
                }
            }
            Ok(())
        };
        // The columns of each write go to as many groups as there are threads (as fit in
        // SCRATCH), each quantizing its tiles one after the other in its part of memory lent
        // by the sink.
        let threads = rayon::current_num_threads().min(SCRATCH / tile_len).max(1);
        let mut scratch = sink.lend(threads * tile_len)?;
        let mut first = 0;
        let mut written = Ok(());
        while first < n && written.is_ok() {
            let mut count = sink.room() / column_bytes;
            if by_columns {
                count = count.min(READ_PER_WRITE / (k * from.size()).max(1));
            }
            let count = count.clamp(1, n - first);
            let group = count.div_ceil(threads);
            let groups = count.div_ceil(group);
            let (scales, zero_points) = (
                keep.then(|| &mut kept_scales[first * scale_len..(first + count) * scale_len]),
                keep.then(|| {
                    &mut kept_zero_points[first * zero_point_len..(first + count) * zero_point_len]
                }),
            );
            let mut kept: Vec<_> = pieces(scales, group * scale_len, groups)
                .into_iter()
                .zip(pieces(zero_points, group * zero_point_len, groups))
                .collect();
            let mut failure = None;
            written = sink
                .write_with(count * column_bytes, &mut |dst| {
                    failure = dst
                        .par_chunks_mut(group * column_bytes)
                        .zip(scratch.par_chunks_mut(tile_len))
                        .zip(kept.par_iter_mut())
                        .enumerate()
                        .find_map_first(|(g, ((out, scratch), (scales, zero_points)))| {
                            let start = first + g * group;
                            let tiles = out.len().div_ceil(TILE * column_bytes);
                            let scales = pieces(scales.as_deref_mut(), TILE * scale_len, tiles);
                            let zero_points =
                                pieces(zero_points.as_deref_mut(), TILE * zero_point_len, tiles);
                            out.chunks_mut(TILE * column_bytes)
                                .zip(scales.into_iter().zip(zero_points))
                                .enumerate()
                                .find_map(|(t, (out, (scales, zero_points)))| {
                                    let from = start + t * TILE;
                                    let cols = from..from + out.len() / column_bytes;
                                    tile(cols, out, scratch, [scales, zero_points]).err()
                                })
                        });
                    0
                })
                .and_then(|_| failure.take().map_or(Ok(()), Err));
            if by_columns {
                // Those columns' stored rows are read: let go of their pages.
                weight.column_runs(first..first + count, &mut |run| this.unmap_passed(run));
            }
            first += count;
        }
        sink.give_back(scratch);
        written?;
        if keep {
            self.kept_parameters = Some(KeptParameters {
                weight: input.weight.clone(),
                dtype,
                spec,
                scales: Some(kept_scales),
                zero_points: (!spec.symmetric).then_some(kept_zero_points),
            });
        }
        Ok(true)
    }

    /// The bytes of `input`, a weight's scales or zero points, when its values pass kept them
    /// (taken: each part is written once). A values request forgets what was kept.
    fn take_kept(&mut self, input: &NBitsInput<'_>) -> Option<Vec<u8>> {
        if input.part == QuantPart::Values {
            self.kept_parameters = None;
            return None;
        }
        let kept = self.kept_parameters.as_mut().filter(|kept| {
            kept.weight == *input.weight && kept.dtype == input.dtype && kept.spec == input.spec
        })?;
        match input.part {
            QuantPart::Scales => kept.scales.take(),
            _ => kept.zero_points.take(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::sink::Uneven;
    use super::*;
    use crate::ir::TensorData;
    use half::{bf16, f16};

    /// `count` values of varied magnitude, with zeros of both signs, ties in magnitude and an
    /// all-zero stretch (a block with scale 0).
    fn values(count: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761) | 1;
        (0..count)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                match (i % 97, state % 11) {
                    (0..=40, _) if i % 3 == 0 && (i / 97) % 4 == 1 => 0.0,
                    (_, 0) => -0.0,
                    (_, 1) => 0.5,
                    (_, 2) => -0.5,
                    _ => (state as f32 / u32::MAX as f32 - 0.5) * (1 + i % 7) as f32,
                }
            })
            .collect()
    }

    fn stored(values: &[f32], dtype: DType, shape: Vec<usize>) -> TensorSource {
        let bytes: Vec<u8> = match dtype {
            DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DType::F16 => values
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect(),
            _ => values
                .iter()
                .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
                .collect(),
        };
        TensorSource::Inline(TensorData {
            dtype,
            shape,
            bytes,
        })
    }

    /// The three MatMulNBits inputs of `weight` quantized as `dtype`/`spec`, with their dtype.
    fn inputs(
        weight: &TensorSource,
        dtype: DType,
        spec: QuantParams,
    ) -> Vec<(TensorSource, DType)> {
        let quantize = |part| {
            Box::new(TensorSource::Quantize {
                source: Box::new(weight.clone()),
                dtype,
                spec,
                part,
            })
        };
        let mut out = vec![
            (
                TensorSource::NBits {
                    source: quantize(QuantPart::Values),
                    spec,
                    part: QuantPart::Values,
                },
                DType::U8,
            ),
            (TensorSource::Transpose(quantize(QuantPart::Scales)), dtype),
        ];
        if !spec.symmetric {
            out.push((
                TensorSource::NBits {
                    source: quantize(QuantPart::ZeroPoints),
                    spec,
                    part: QuantPart::ZeroPoints,
                },
                DType::U8,
            ));
        }
        out
    }

    #[test]
    fn streamed_columns_equal_the_whole_weight_quantized_and_relaid_out() {
        let cases = [
            // (K, N, stored dtype, quantized as, bits, block size, symmetric)
            (64, 200, DType::BF16, DType::F16, 4, 32, true),
            (77, 130, DType::F32, DType::F32, 4, 16, false),
            (33, 65, DType::F16, DType::F16, 4, 16, true),
            (40, 129, DType::BF16, DType::F32, 8, 16, false),
            (256, 70, DType::BF16, DType::BF16, 4, 128, false),
            (5, 3, DType::F32, DType::F16, 8, 32, true),
        ];
        for (case, &(k, n, stored_as, dtype, bits, block_size, symmetric)) in
            cases.iter().enumerate()
        {
            let spec = QuantParams::new(bits, block_size, symmetric);
            let w = values(k * n, case as u32 + 1);
            // Rows `rows` × columns `cols` of `w`, row-major or transposed.
            let block = |rows: Range<usize>, cols: Range<usize>, transposed: bool| {
                let shape = [rows.len(), cols.len()];
                let at = |r: usize, c: usize| w[(rows.start + r) * n + cols.start + c];
                let stored_as_shape =
                    |v: Vec<f32>, s: [usize; 2]| stored(&v, stored_as, s.to_vec());
                match transposed {
                    false => stored_as_shape(
                        (0..shape[0] * shape[1])
                            .map(|i| at(i / shape[1], i % shape[1]))
                            .collect(),
                        shape,
                    ),
                    true => TensorSource::Transpose(Box::new(stored_as_shape(
                        (0..shape[0] * shape[1])
                            .map(|i| at(i % shape[0], i / shape[0]))
                            .collect(),
                        [shape[1], shape[0]],
                    ))),
                }
            };
            // The same `[K, N]` weight stored as it is, stored transposed, as experts side by
            // side and one above the other (split where tiles of columns cross parts).
            let (a, b, c) = (n / 3, 2 * n / 3, k / 2);
            let weights = [
                block(0..k, 0..n, false),
                block(0..k, 0..n, true),
                TensorSource::Concat {
                    parts: vec![
                        block(0..k, 0..a, true),
                        block(0..k, a..b, false),
                        block(0..k, b..n, true),
                    ],
                    axis: 1,
                },
                TensorSource::Concat {
                    parts: vec![block(0..c, 0..n, true), block(c..k, 0..n, false)],
                    axis: 0,
                },
            ];
            // The reference: the plain weight quantized whole.
            let mut ev = Evaluator::new(None);
            let plain = inputs(&weights[0], dtype, spec);
            let wholes: Vec<Vec<u8>> = plain
                .iter()
                .map(|(src, _)| ev.materialize(src).unwrap().2)
                .collect();
            let converted = ev.read(&weights[0], dtype).unwrap();
            let quantized = quant::quantize(&converted, dtype, k, n, &spec).unwrap();
            let values_part = TensorSource::Quantize {
                source: Box::new(weights[0].clone()),
                dtype,
                spec,
                part: QuantPart::Values,
            };
            assert_eq!(ev.materialize(&values_part).unwrap().2, quantized.values);
            for weight in &weights {
                for ((src, target), whole) in inputs(weight, dtype, spec).iter().zip(&wholes) {
                    let mut ev = Evaluator::new(None);
                    let (_, _, materialized) = ev.materialize(src).unwrap();
                    assert!(&materialized == whole, "case {case}, {src:?}: materialized");
                    for every in [usize::MAX, 1000, 7] {
                        let mut sink = Uneven {
                            bytes: Vec::new(),
                            every,
                        };
                        let mut ev = Evaluator::new(None);
                        assert!(ev.stream_nbits_columns(src, *target, &mut sink).unwrap());
                        assert!(
                            &sink.bytes == whole,
                            "case {case}, {src:?}, pieces of {every}: streamed bytes differ"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn scales_and_zero_points_kept_by_the_values_pass_are_those_computed_alone() {
        // A Hugging Face `[N, K]` weight (stored by columns) quantized as MatMulNBits reads it:
        // one evaluator writes its values, then its scales and zero points, as the data file
        // holds them, and they must equal each part computed on its own.
        for (k, n, symmetric) in [(64, 200, false), (96, 70, true), (40, 3, false)] {
            let spec = QuantParams::new(4, 16, symmetric);
            let stored_t = stored(&values(k * n, k as u32), DType::BF16, vec![n, k]);
            let weight = TensorSource::Transpose(Box::new(stored_t));
            let parts = inputs(&weight, DType::F16, spec);
            let alone: Vec<Vec<u8>> = parts
                .iter()
                .map(|(src, target)| {
                    let mut sink = Vec::new();
                    assert!(Evaluator::new(None)
                        .stream_nbits_columns(src, *target, &mut sink)
                        .unwrap());
                    sink
                })
                .collect();
            for every in [usize::MAX, 1000, 7] {
                let mut ev = Evaluator::new(None);
                for (i, ((src, target), alone)) in parts.iter().zip(&alone).enumerate() {
                    let mut sink = Uneven {
                        bytes: Vec::new(),
                        every,
                    };
                    assert!(ev.stream_nbits_columns(src, *target, &mut sink).unwrap());
                    assert!(
                        &sink.bytes == alone,
                        "[{k}, {n}] part {i}, pieces of {every}"
                    );
                    // The values pass kept what the following parts took.
                    let kept = ev.kept_parameters.as_ref().expect("kept parameters");
                    let left = [kept.scales.is_some(), kept.zero_points.is_some()];
                    let want = match i {
                        0 => [true, !symmetric],
                        1 => [false, !symmetric],
                        _ => [false, false],
                    };
                    assert_eq!(left, want, "[{k}, {n}] after part {i}");
                }
                // Another weight's values pass forgets them.
                let other = inputs(
                    &stored(&values(k * 5, 1), DType::F32, vec![k, 5]),
                    DType::F16,
                    spec,
                );
                ev.stream_nbits_columns(&other[0].0, other[0].1, &mut Vec::new())
                    .unwrap();
                assert!(ev.kept_parameters.is_none());
            }
        }
    }

    #[test]
    fn other_sources_are_left_to_the_general_path() {
        let w = stored(&values(64 * 8, 3), DType::F32, vec![64, 8]);
        let spec = QuantParams::new(4, 32, true);
        let mut ev = Evaluator::new(None);
        let mut sink = Vec::new();
        // The DequantizeLinear layout's values, a relayout of a computed weight, scales wanted
        // in another dtype.
        let values_part = TensorSource::Quantize {
            source: Box::new(w.clone()),
            dtype: DType::F32,
            spec,
            part: QuantPart::Values,
        };
        let computed = TensorSource::NBits {
            source: Box::new(TensorSource::Quantize {
                source: Box::new(TensorSource::AddScalar {
                    source: Box::new(w.clone()),
                    value: 1.0,
                }),
                dtype: DType::F32,
                spec,
                part: QuantPart::Values,
            }),
            spec,
            part: QuantPart::Values,
        };
        let scales = TensorSource::Transpose(Box::new(TensorSource::Quantize {
            source: Box::new(w),
            dtype: DType::F32,
            spec,
            part: QuantPart::Scales,
        }));
        for (src, target) in [
            (&values_part, DType::I4),
            (&computed, DType::U8),
            (&scales, DType::F16),
        ] {
            assert!(!ev.stream_nbits_columns(src, target, &mut sink).unwrap());
        }
        assert!(sink.is_empty());
    }

    #[test]
    fn a_non_finite_element_is_named_with_its_tensor_and_columns() {
        let (k, n) = (40, 150);
        let mut w = values(k * n, 9);
        w[37 * n + 140] = f32::INFINITY;
        w[38 * n + 3] = f32::NAN;
        let t: Vec<f32> = (0..k * n).map(|i| w[(i % k) * n + i / k]).collect();
        let spec = QuantParams::new(4, 16, false);
        // Columns 0..75 and 75..150 as two transposed experts side by side.
        let (first, second) = t.split_at(75 * k);
        let experts = TensorSource::Concat {
            parts: vec![
                TensorSource::Transpose(Box::new(stored(first, DType::BF16, vec![75, k]))),
                TensorSource::Transpose(Box::new(stored(second, DType::BF16, vec![75, k]))),
            ],
            axis: 1,
        };
        for weight in [
            stored(&w, DType::F32, vec![k, n]),
            TensorSource::Transpose(Box::new(stored(&t, DType::BF16, vec![n, k]))),
            experts,
        ] {
            for (src, target) in inputs(&weight, DType::F16, spec) {
                let mut ev = Evaluator::new(None);
                let err = ev
                    .stream_nbits_columns(&src, target, &mut Vec::new())
                    .unwrap_err();
                let Error::Quantize { tensor, message } = err else {
                    panic!("expected a quantization error, got {err}");
                };
                assert_eq!(tensor, Some(describe_source(&weight)));
                assert_eq!(
                    message,
                    "element (38, 3) of the [40, 150] weight is NaN, not a finite number"
                );
            }
        }
    }

    /// Quantized by columns from a checkpoint, a weight is unmapped a write at a time: at most
    /// `READ_PER_WRITE` of it (and the folios around) is mapped at once, none once written,
    /// and the bytes are those quantized without unmapping.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_weight_quantized_by_columns_is_unmapped_as_it_is_read() {
        use super::super::unmap::{self, checkpoint, resident_kib, unmap_all, Watching};
        let (n, k) = (8192, 1024);
        let stored_bytes: Vec<u8> = values(n * k, 7)
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect();
        let (_dir, store) = checkpoint(&[("w", DType::BF16, vec![n, k], stored_bytes)]);
        let map = store.maps().next().unwrap();
        let base = map.as_ptr() as usize;
        let weight = TensorSource::Transpose(Box::new(TensorSource::Checkpoint("w".into())));
        let spec = QuantParams::new(4, 32, true);
        for (src, to) in inputs(&weight, DType::F16, spec) {
            let expected = Evaluator::new(Some(&store)).read(&src, to).unwrap();
            unmap_all(map);
            let mut ev = Evaluator::new(Some(&store));
            ev.unmap_when_read();
            let mut sink = Watching {
                base,
                bytes: Vec::new(),
                most: 0,
            };
            assert!(ev.stream_nbits_columns(&src, to, &mut sink).unwrap());
            let (bytes, most) = (sink.bytes, sink.most);
            assert!(bytes == expected, "{src:?}: other bytes");
            let bound = (READ_PER_WRITE + 2 * unmap::AROUND) >> 10;
            assert!(
                most <= bound,
                "{src:?}: {most} KiB mapped at once (16 MiB weight)"
            );
            assert!(
                resident_kib(base) <= (2 * unmap::AROUND) >> 10,
                "{src:?}: left mapped"
            );
            ev.unmap_read();
            assert_eq!(resident_kib(base), 0, "{src:?}: left mapped");
        }
    }
}
