//! The evaluation of each kind of lazy [`TensorSource`] by the [`Evaluator`]: its element type
//! and shape ([`Evaluator::describe`]), its bytes in memory ([`Evaluator::materialize`]) and
//! streamed into a sink ([`Evaluator::stream`]). Leaves and plain transforms (transpose,
//! concatenation, slice, reshape, rotary tables) are evaluated here; the quantized kinds and
//! the MoE relayouts by their modules, over the evaluator's reads in place ([`super::eval`]).

use super::convert::{self, CHUNK_ELEMS};
use super::eval::{reshaped, slice_shape, Evaluator, SourceInfo};
use super::matrix::Matrix;
use super::sink::{Sink, Store};
use super::transpose;
use super::{moe_experts, prequantized, quantized};
use crate::ir::{DType, TensorSource};
use crate::{Error, Result};

impl Evaluator<'_> {
    /// Element type and shape of `src`, checking that every referenced tensor exists and that
    /// transposes and concatenations fit.
    pub fn describe(&self, src: &TensorSource) -> Result<SourceInfo> {
        match src {
            TensorSource::Checkpoint(name) => {
                let t = self.checkpoint(name)?;
                Ok(SourceInfo {
                    dtype: t.dtype,
                    shape: t.shape.to_vec(),
                })
            }
            TensorSource::Inline(data) => Ok(SourceInfo {
                dtype: data.dtype,
                shape: data.shape.clone(),
            }),
            TensorSource::External { dtype, shape, .. } => Ok(SourceInfo {
                dtype: *dtype,
                shape: shape.clone(),
            }),
            TensorSource::RotaryTable {
                inv_freq,
                positions,
                ..
            } => Ok(SourceInfo {
                dtype: DType::F32,
                shape: vec![*positions, inv_freq.len()],
            }),
            TensorSource::Transpose(inner) => {
                let info = self.describe(inner)?;
                match info.shape.as_slice() {
                    [r, c] => Ok(SourceInfo {
                        dtype: info.dtype,
                        shape: vec![*c, *r],
                    }),
                    other => Err(Error::Graph(format!(
                        "transpose of a rank-{} tensor (only 2-D is supported)",
                        other.len()
                    ))),
                }
            }
            TensorSource::Concat { parts, axis } => {
                let infos = parts
                    .iter()
                    .map(|p| self.describe(p))
                    .collect::<Result<Vec<_>>>()?;
                let first = infos
                    .first()
                    .ok_or_else(|| Error::Graph("concatenation of no tensors".into()))?;
                let mut shape = first.shape.clone();
                if *axis >= shape.len() {
                    return Err(Error::Graph(format!(
                        "concatenation axis {axis} out of range for rank {}",
                        shape.len()
                    )));
                }
                shape[*axis] = 0;
                for info in &infos {
                    let fits = info.dtype == first.dtype
                        && info.shape.len() == first.shape.len()
                        && (0..first.shape.len())
                            .all(|i| i == *axis || info.shape[i] == first.shape[i]);
                    if !fits {
                        return Err(Error::Graph(format!(
                            "cannot concatenate {:?} ({}) with {:?} ({}) along axis {axis}",
                            first.shape, first.dtype, info.shape, info.dtype
                        )));
                    }
                    shape[*axis] += info.shape[*axis];
                }
                Ok(SourceInfo {
                    dtype: first.dtype,
                    shape,
                })
            }
            TensorSource::AddScalar { source, .. } => {
                let info = self.describe(source)?;
                if !convert::can_convert(info.dtype, DType::F32) {
                    return Err(Error::Graph(format!(
                        "adding a scalar to a {} tensor (expected f32, f16 or bf16)",
                        info.dtype
                    )));
                }
                Ok(SourceInfo {
                    dtype: DType::F32,
                    shape: info.shape,
                })
            }
            TensorSource::Slice {
                source,
                axis,
                start,
                len,
                total,
            } => {
                let mut info = self.describe(source)?;
                slice_shape(&mut info.shape, *axis, *start, *len, *total, source)?;
                Ok(info)
            }
            TensorSource::Quantize {
                source,
                dtype,
                spec,
                part,
            } => quantized::describe_quantize(&self.describe(source)?, *dtype, spec, *part),
            TensorSource::NBits { source, spec, part } => {
                quantized::describe_nbits(&self.describe(source)?, spec, *part)
            }
            TensorSource::FromNBits {
                source,
                spec,
                rows,
                part,
            } => quantized::describe_from_nbits(&self.describe(source)?, spec, *rows, *part),
            TensorSource::Packed4 {
                prefix,
                format,
                group_size,
                part,
            } => prequantized::describe_packed4(self, prefix, *format, *group_size, *part),
            TensorSource::Fp8Blocks {
                weight,
                scales,
                block,
            } => prequantized::describe_fp8(self, weight, scales, *block),
            TensorSource::MoeExperts {
                source,
                experts,
                layer,
            } => moe_experts::describe(&self.describe(source)?, *experts, *layer),
            TensorSource::Reshape { source, shape } => {
                let info = self.describe(source)?;
                reshaped(&info.shape, shape, source)?;
                Ok(SourceInfo {
                    dtype: info.dtype,
                    shape: shape.clone(),
                })
            }
        }
    }

    /// Streams `src` converted to `target` into `sink`, block by block where no transform
    /// needs the whole tensor (checkpoint tensors, their row slices and transposes, and
    /// concatenations of these, are read in place). Returns the number of values clamped to
    /// the f16 range.
    pub fn stream(
        &mut self,
        src: &TensorSource,
        target: DType,
        sink: &mut dyn Sink,
    ) -> Result<usize> {
        if self.stream_nbits_columns(src, target, sink)? {
            return Ok(0);
        }
        match src {
            TensorSource::Transpose(inner) => {
                if let Some(matrix) = self.matrix(src)? {
                    return stream_matrix(&matrix, target, sink);
                }
                // MatMulNBits' scales (or zero points) of a weight just quantized: transposed
                // straight from the kept quantization.
                if let Some((part, dtype, shape)) = self.shared_part(inner)? {
                    if let Some(matrix) = match shape[..] {
                        [rows, cols] => Matrix::transposed(&part, dtype, rows, cols),
                        _ => None,
                    } {
                        return stream_matrix(&matrix, target, sink);
                    }
                }
                let (dtype, _, bytes) = self.materialize(src)?;
                stream_converted(&bytes, dtype, target, sink, &owned)
            }
            TensorSource::Quantize { .. } => {
                let (part, dtype, _) = self.shared_part(src)?.expect("a Quantize part");
                stream_converted(&part, dtype, target, sink, &owned)
            }
            TensorSource::Concat { parts, axis } => {
                self.stream_concat(src, parts, *axis, target, sink)
            }
            TensorSource::AddScalar { .. }
            | TensorSource::NBits { .. }
            | TensorSource::FromNBits { .. }
            | TensorSource::Packed4 { .. }
            | TensorSource::Fp8Blocks { .. } => {
                let (dtype, _, bytes) = self.materialize(src)?;
                stream_converted(&bytes, dtype, target, sink, &owned)
            }
            TensorSource::MoeExperts { .. } => {
                let blocks = self.moe_blocks(src)?;
                self.stream(&blocks, target, sink)
            }
            TensorSource::Reshape { source, .. } => {
                self.describe(src)?;
                self.stream(source, target, sink)
            }
            TensorSource::Slice { .. } => match self.stream_leaf(src, target, sink)? {
                Some(clamped) => Ok(clamped),
                None => {
                    let (dtype, _, bytes) = self.materialize(src)?;
                    stream_converted(&bytes, dtype, target, sink, &owned)
                }
            },
            TensorSource::RotaryTable {
                inv_freq,
                positions,
                sine,
            } => {
                let mut clamped = 0;
                let mut values = Vec::new();
                let mut bytes = Vec::new();
                let rows_per_chunk = (CHUNK_ELEMS / inv_freq.len().max(1)).max(1);
                for start in (0..*positions).step_by(rows_per_chunk) {
                    let end = (start + rows_per_chunk).min(*positions);
                    rotary_rows(inv_freq, *sine, start..end, &mut values);
                    bytes.clear();
                    clamped += convert::convert_into(
                        bytemuck::cast_slice(&values),
                        DType::F32,
                        target,
                        &mut bytes,
                    );
                    sink.write(&bytes)?;
                }
                Ok(clamped)
            }
            leaf => match self.stream_leaf(leaf, target, sink)? {
                Some(clamped) => Ok(clamped),
                // Packed 4-bit external data: unpacked in memory first.
                None => {
                    let (dtype, _, bytes) = self.materialize(src)?;
                    stream_converted(&bytes, dtype, target, sink, &owned)
                }
            },
        }
    }

    /// Streams `src`, the concatenation of `parts` along `axis`, without materialising it
    /// where its layout allows: along axis 0 the parts one after the other, each streamed as
    /// it would be alone; along the last axis of 2-D parts, blocks of whole rows, each
    /// assembled from the same rows of every part ([`Matrix`]: read in place where the part
    /// is a stored matrix, its transpose or a concatenation of such; the parts that are none
    /// of these are materialised first, each on its own). A concatenation along an inner axis
    /// of higher-rank tensors is materialised whole.
    fn stream_concat(
        &mut self,
        src: &TensorSource,
        parts: &[TensorSource],
        axis: usize,
        target: DType,
        sink: &mut dyn Sink,
    ) -> Result<usize> {
        let info = self.describe(src)?;
        if axis == 0 {
            let mut clamped = 0;
            for part in parts {
                clamped += self.stream(part, target, sink)?;
            }
            return Ok(clamped);
        }
        if info.shape.len() == 2 {
            self.map_files(src)?;
            let mut owned = Vec::with_capacity(parts.len());
            for part in parts {
                let in_place = self.stored_matrix(part)?.is_some();
                owned.push(match in_place {
                    true => None,
                    false => Some(self.materialize(part)?),
                });
            }
            let this = &*self;
            let mut matrices = Vec::with_capacity(parts.len());
            for (part, owned) in parts.iter().zip(&owned) {
                matrices.push(match owned {
                    None => this.stored_matrix(part)?,
                    Some((dtype, shape, bytes)) => match shape[..] {
                        [rows, cols] => Matrix::row_major(bytes, *dtype, rows, cols),
                        _ => None,
                    },
                });
            }
            let joined = matrices
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .and_then(|m| Matrix::concat(m, 1));
            if let Some(matrix) = joined {
                return stream_matrix(&matrix, target, sink);
            }
        }
        let (dtype, _, bytes) = self.materialize(src)?;
        stream_converted(&bytes, dtype, target, sink, &owned)
    }

    /// Streams the stored bytes of `src` in place (a leaf, see [`Evaluator::leaf`]) converted
    /// to `target`, unmapping each piece of mapped input once the sink has it (when unmapping
    /// is on); `None`, with nothing written, where `src` is not read in place.
    fn stream_leaf(
        &mut self,
        src: &TensorSource,
        target: DType,
        sink: &mut dyn Sink,
    ) -> Result<Option<usize>> {
        self.map_files(src)?;
        let this = &*self;
        let Some(leaf) = this.stored_leaf(src)? else {
            return Ok(None);
        };
        let passed = |piece: &[u8]| this.unmap_passed(piece);
        stream_converted(leaf.data, leaf.dtype, target, sink, &passed).map(Some)
    }

    /// The bytes of `src` converted to `target`, collected in memory (small tensors, or when
    /// a whole tensor is needed, e.g. to interpret it).
    pub fn read(&mut self, src: &TensorSource, target: DType) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.stream(src, target, &mut bytes)?;
        Ok(bytes)
    }

    /// Evaluates `src` fully into memory (dtype, shape, bytes); used for transforms.
    pub fn materialize(&mut self, src: &TensorSource) -> Result<(DType, Vec<usize>, Vec<u8>)> {
        match src {
            TensorSource::Checkpoint(name) => {
                let t = self.checkpoint(name)?;
                Ok((t.dtype, t.shape.to_vec(), t.data.to_vec()))
            }
            TensorSource::Inline(d) => Ok((d.dtype, d.shape.clone(), d.bytes.clone())),
            TensorSource::External {
                path,
                offset,
                length,
                dtype,
                shape,
            } => {
                let (dtype, shape) = (*dtype, shape.clone());
                let stored = self.external(path, *offset, *length)?;
                let data = if dtype.is_4bit() {
                    let numel = crate::limits::numel(&shape).unwrap_or(usize::MAX);
                    if stored.len() != dtype.stored_bytes(numel) {
                        return Err(Error::Graph(format!(
                            "external {dtype} tensor of shape {shape:?} needs {} packed bytes, \
                             found {}",
                            dtype.stored_bytes(numel),
                            stored.len()
                        )));
                    }
                    crate::ir::unpack_4bit(stored, numel, dtype == DType::I4)
                } else {
                    stored.to_vec()
                };
                Ok((dtype, shape, data))
            }
            TensorSource::RotaryTable {
                inv_freq,
                positions,
                sine,
            } => {
                let mut values = Vec::new();
                rotary_rows(inv_freq, *sine, 0..*positions, &mut values);
                Ok((
                    DType::F32,
                    vec![*positions, inv_freq.len()],
                    bytemuck::cast_slice(&values).to_vec(),
                ))
            }
            TensorSource::Transpose(inner) => {
                if let Some(leaf) = self.leaf(inner)? {
                    if let [r, c] = leaf.shape[..] {
                        let bytes = transpose::transposed(leaf.data, r, c, leaf.dtype);
                        return Ok((leaf.dtype, vec![c, r], bytes));
                    }
                }
                let (dtype, shape, bytes) = self.materialize(inner)?;
                let [r, c] = shape[..] else {
                    return Err(Error::Graph("transpose of a non-2-D tensor".into()));
                };
                Ok((
                    dtype,
                    vec![c, r],
                    transpose::transposed(&bytes, r, c, dtype),
                ))
            }
            TensorSource::Concat { parts, axis } => {
                let info = self.describe(src)?;
                let outer: usize = info.shape[..*axis].iter().product();
                let evaluated = parts
                    .iter()
                    .map(|p| self.materialize(p))
                    .collect::<Result<Vec<_>>>()?;
                let mut out =
                    Vec::with_capacity(info.shape.iter().product::<usize>() * info.dtype.size());
                for o in 0..outer {
                    for (_, _, bytes) in &evaluated {
                        let block = bytes.len() / outer.max(1);
                        out.extend_from_slice(&bytes[o * block..(o + 1) * block]);
                    }
                }
                Ok((info.dtype, info.shape, out))
            }
            TensorSource::AddScalar { source, value } => {
                let info = self.describe(src)?;
                let (dtype, _, bytes) = self.materialize(source)?;
                let (as_f32, _) = convert::convert(&bytes, dtype, DType::F32);
                let sums: Vec<f32> = bytemuck::cast_slice::<u8, f32>(&as_f32)
                    .iter()
                    .map(|v| v + value)
                    .collect();
                Ok((DType::F32, info.shape, bytemuck::cast_slice(&sums).to_vec()))
            }
            TensorSource::Slice {
                source,
                axis,
                start,
                len,
                total,
            } => {
                // Row blocks of a stored tensor are copied alone (e.g. one head's rows of a
                // fused projection), not after a copy of the whole tensor.
                if let Some(leaf) = self.leaf(src)? {
                    return Ok((leaf.dtype, leaf.shape, leaf.data.to_vec()));
                }
                let (dtype, mut shape, bytes) = self.materialize(source)?;
                let (outer, whole, inner) = split_at_axis(&shape, *axis);
                slice_shape(&mut shape, *axis, *start, *len, *total, source)?;
                let (row, elem) = (inner * dtype.size(), whole * inner * dtype.size());
                let mut out = Vec::with_capacity(outer * len * row);
                for o in 0..outer {
                    let begin = o * elem + start * row;
                    out.extend_from_slice(&bytes[begin..begin + len * row]);
                }
                Ok((dtype, shape, out))
            }
            TensorSource::Quantize { .. } => {
                let (part, dtype, shape) = self.shared_part(src)?.expect("a Quantize part");
                Ok((dtype, shape, part.to_vec()))
            }
            TensorSource::NBits { source, spec, part } => self.nbits_part(source, spec, *part),
            TensorSource::FromNBits {
                source,
                spec,
                rows,
                part,
            } => {
                let (dtype, shape, bytes) = self.materialize(source)?;
                quantized::from_nbits(&bytes, dtype, &shape, spec, *rows, *part)
            }
            TensorSource::Packed4 {
                prefix,
                format,
                group_size,
                part,
            } => prequantized::packed4(self, prefix, *format, *group_size, *part),
            TensorSource::Fp8Blocks {
                weight,
                scales,
                block,
            } => prequantized::fp8_blocks(self, weight, scales, *block),
            TensorSource::Reshape { source, shape } => {
                let (dtype, from, bytes) = self.materialize(source)?;
                reshaped(&from, shape, source)?;
                Ok((dtype, shape.clone(), bytes))
            }
            TensorSource::MoeExperts { .. } => {
                let info = self.describe(src)?;
                let blocks = self.moe_blocks(src)?;
                let (dtype, _, bytes) = self.materialize(&blocks)?;
                Ok((dtype, info.shape, bytes))
            }
        }
    }

    /// A [`TensorSource::MoeExperts`] relayout as the blocks of its stack it is made of, with
    /// the same bytes, simplified against the stack's source so that checkpoint tensors are
    /// read in place (see [`super::moe_experts`]).
    fn moe_blocks(&self, src: &TensorSource) -> Result<TensorSource> {
        let TensorSource::MoeExperts {
            source,
            experts,
            layer,
        } = src
        else {
            return Err(Error::Graph("not an MoE expert relayout".into()));
        };
        let info = self.describe(source)?;
        let blocks = moe_experts::expand(source, &info, *experts, *layer)?;
        moe_experts::simplify(self, blocks)
    }
}

/// The sizes before `axis` (product), at `axis`, and after it (product).
fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis.min(shape.len())].iter().product();
    let whole = shape.get(axis).copied().unwrap_or(1);
    let inner = shape.get(axis + 1..).map_or(1, |s| s.iter().product());
    (outer, whole, inner)
}

/// The `passed` of [`stream_converted`] for bytes the evaluator owns (nothing to unmap).
fn owned(_: &[u8]) {}

/// Bytes written at a time of a tensor streamed unchanged: large, so that a sink that writes
/// long runs straight from where they lie (the `write(2)` path, from two of its 8 MiB blocks
/// on) still does.
const UNCHANGED_PIECE: usize = 32 << 20;

/// Streams `data` converted from `from` to `to`, in blocks that fill the sink's buffer, each
/// converted in parallel; `passed` is told of each piece of `data` once the sink has it.
fn stream_converted(
    data: &[u8],
    from: DType,
    to: DType,
    sink: &mut dyn Sink,
    passed: &dyn Fn(&[u8]),
) -> Result<usize> {
    if from == to {
        for piece in data.chunks(UNCHANGED_PIECE) {
            sink.write(piece)?;
            passed(piece);
        }
        return Ok(0);
    }
    let (from_size, to_size) = (from.size(), to.size());
    let total = data.len() / from_size;
    let (mut clamped, mut at) = (0, 0);
    let store = Store::of(sink);
    while at < total {
        let n = (sink.room() / to_size).clamp(1, total - at);
        let piece = &data[at * from_size..(at + n) * from_size];
        clamped += sink.write_with(n * to_size, &mut |dst| {
            convert::convert_parallel_to(piece, from, to, dst, store)
        })?;
        passed(piece);
        at += n;
    }
    Ok(clamped)
}

/// Rows `rows` of a rotary table: `cos(p · f)` (or `sin`) in f32, exactly as transformers
/// computes its caches (the angle `p · f` rounded to f32 first), rows spread over threads.
fn rotary_rows(inv_freq: &[f32], sine: bool, rows: std::ops::Range<usize>, out: &mut Vec<f32>) {
    use rayon::prelude::*;
    let width = inv_freq.len();
    out.clear();
    out.resize(rows.len() * width, 0.0);
    if width == 0 {
        return;
    }
    out.par_chunks_mut(width).enumerate().for_each(|(i, row)| {
        let p = (rows.start + i) as f32;
        for (v, &f) in row.iter_mut().zip(inv_freq) {
            let angle = p * f;
            *v = if sine { angle.sin() } else { angle.cos() };
        }
    });
}

/// Streams `matrix` converted to `to`, in blocks of whole rows that fill the sink's buffer,
/// each filled in place ([`Matrix::fill`]: transposed parts tiled, conversion fused, in
/// parallel).
fn stream_matrix(matrix: &Matrix<'_>, to: DType, sink: &mut dyn Sink) -> Result<usize> {
    let (rows, cols) = (matrix.rows(), matrix.cols());
    let out_row = cols * to.size();
    if out_row == 0 {
        return Ok(0);
    }
    let (mut clamped, mut first) = (0, 0);
    let store = Store::of(sink);
    while first < rows {
        let n = (sink.room() / out_row).clamp(1, rows - first);
        clamped += sink.write_with(n * out_row, &mut |dst| {
            matrix.fill(first, 0..cols, to, dst, store)
        })?;
        first += n;
    }
    Ok(clamped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::TensorData;

    #[test]
    fn transpose_and_concat_evaluate_lazily() {
        let a = TensorSource::Inline(TensorData::from_f32(vec![2, 3], &[1., 2., 3., 4., 5., 6.]));
        let b = TensorSource::Inline(TensorData::from_f32(vec![1, 3], &[7., 8., 9.]));
        let mut ev = Evaluator::new(None);
        let t = TensorSource::Transpose(Box::new(TensorSource::Concat {
            parts: vec![a.clone(), b],
            axis: 0,
        }));
        assert_eq!(ev.describe(&t).unwrap().shape, vec![3, 3]);
        let (_, shape, bytes) = ev.materialize(&t).unwrap();
        assert_eq!(shape, vec![3, 3]);
        let v: &[f32] = bytemuck::cast_slice(&bytes);
        assert_eq!(v, &[1., 4., 7., 2., 5., 8., 3., 6., 9.]);
        let c = TensorSource::Concat {
            parts: vec![a.clone(), a],
            axis: 1,
        };
        let (_, shape, bytes) = ev.materialize(&c).unwrap();
        assert_eq!(shape, vec![2, 6]);
        let v: &[f32] = bytemuck::cast_slice(&bytes);
        assert_eq!(v, &[1., 2., 3., 1., 2., 3., 4., 5., 6., 4., 5., 6.]);
    }

    #[test]
    fn rows_slice_a_block_streamed_or_materialized() {
        let a = TensorSource::Inline(TensorData::from_f32(vec![3, 2], &[1., 2., 3., 4., 5., 6.]));
        let rows = |start, len, total| TensorSource::Slice {
            source: Box::new(a.clone()),
            axis: 0,
            start,
            len,
            total,
        };
        let mut ev = Evaluator::new(None);
        let mid = rows(1, 2, 3);
        assert_eq!(ev.describe(&mid).unwrap().shape, vec![2, 2]);
        let streamed = ev.read(&mid, DType::F32).unwrap();
        let v: &[f32] = bytemuck::cast_slice(&streamed);
        assert_eq!(v, &[3., 4., 5., 6.]);
        let t = TensorSource::Transpose(Box::new(rows(0, 2, 3)));
        let (_, shape, bytes) = ev.materialize(&t).unwrap();
        assert_eq!(shape, vec![2, 2]);
        let v: &[f32] = bytemuck::cast_slice(&bytes);
        assert_eq!(v, &[1., 3., 2., 4.]);
        assert_eq!(ev.read(&t, DType::F32).unwrap(), bytes);
        let err = ev.describe(&rows(2, 2, 3)).unwrap_err().to_string();
        assert!(err.contains("2..4 along axis 0"), "{err}");
        let err = ev.describe(&rows(0, 2, 4)).unwrap_err().to_string();
        assert!(err.contains("expected 4 along that axis"), "{err}");
    }

    #[test]
    fn streamed_transpose_matches_materialized_transpose_across_blocks() {
        // 3 rows × 100_000 cols of f32: several 1 MiB output blocks.
        let (rows, cols) = (3usize, 100_000usize);
        let values: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
        let src = TensorSource::Transpose(Box::new(TensorSource::Inline(TensorData::from_f32(
            vec![rows, cols],
            &values,
        ))));
        let mut ev = Evaluator::new(None);
        let mut streamed = Vec::new();
        ev.stream(&src, DType::F32, &mut |b: &[u8]| {
            streamed.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        let (_, _, materialized) = ev.materialize(&src).unwrap();
        assert_eq!(streamed, materialized);
        let mut halves = Vec::new();
        ev.stream(&src, DType::F16, &mut |b: &[u8]| {
            halves.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(halves.len(), rows * cols * 2);
    }

    #[test]
    fn rotary_tables_stream_in_chunks_like_they_materialize() {
        let src = TensorSource::RotaryTable {
            inv_freq: vec![1.0, 0.5, 0.25],
            positions: CHUNK_ELEMS, // several chunks of rows
            sine: true,
        };
        let mut ev = Evaluator::new(None);
        assert_eq!(ev.describe(&src).unwrap().shape, vec![CHUNK_ELEMS, 3]);
        let (_, _, full) = ev.materialize(&src).unwrap();
        let mut streamed = Vec::new();
        ev.stream(&src, DType::F32, &mut |b: &[u8]| {
            streamed.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(streamed, full);
        let v: &[f32] = bytemuck::cast_slice(&full);
        assert_eq!(&v[..3], &[0.0, 0.0, 0.0]);
        assert_eq!(v[3 * 7 + 1], (7.0f32 * 0.5).sin());
    }

    #[test]
    fn add_scalar_adds_in_f32_and_converts_on_the_way_out() {
        let w = TensorSource::Inline(TensorData::from_f32(vec![3], &[0.0, -0.25, 1e-4]));
        let src = TensorSource::AddScalar {
            source: Box::new(w),
            value: 1.0,
        };
        let mut ev = Evaluator::new(None);
        let info = ev.describe(&src).unwrap();
        assert_eq!((info.dtype, info.shape), (DType::F32, vec![3]));
        let bytes = ev.read(&src, DType::F32).unwrap();
        let v: &[f32] = bytemuck::cast_slice(&bytes);
        assert_eq!(v, &[1.0, 0.75, 1.0 + 1e-4]);
        let halves = ev.read(&src, DType::F16).unwrap();
        assert_eq!(halves.len(), 6);
        let ints = TensorSource::AddScalar {
            source: Box::new(TensorSource::Inline(TensorData::from_i64(vec![1], &[1]))),
            value: 1.0,
        };
        assert!(ev.describe(&ints).is_err());
    }

    #[test]
    fn slices_take_column_and_row_blocks() {
        let m = TensorSource::Inline(TensorData::from_f32(
            vec![2, 6],
            &[0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11.],
        ));
        let mut ev = Evaluator::new(None);
        let cols = TensorSource::Slice {
            source: Box::new(m.clone()),
            axis: 1,
            start: 2,
            len: 2,
            total: 6,
        };
        assert_eq!(ev.describe(&cols).unwrap().shape, vec![2, 2]);
        let bytes = ev.read(&cols, DType::F32).unwrap();
        let v: &[f32] = bytemuck::cast_slice(&bytes);
        assert_eq!(v, &[2., 3., 8., 9.]);
        let rows = TensorSource::Slice {
            source: Box::new(m.clone()),
            axis: 0,
            start: 1,
            len: 1,
            total: 2,
        };
        let (_, shape, bytes) = ev.materialize(&rows).unwrap();
        assert_eq!(shape, vec![1, 6]);
        let v: &[f32] = bytemuck::cast_slice(&bytes);
        assert_eq!(v, &[6., 7., 8., 9., 10., 11.]);
        let outside = TensorSource::Slice {
            source: Box::new(m),
            axis: 1,
            start: 4,
            len: 3,
            total: 6,
        };
        let err = ev.describe(&outside).unwrap_err().to_string();
        assert!(err.contains("4..7 along axis 1"), "{err}");
    }

    /// `[rows, cols]` of `dtype` (f32 or bf16) from a seed: varied values, some outside the
    /// f16 range.
    fn matrix(dtype: DType, shape: Vec<usize>, seed: usize) -> TensorSource {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|i| {
                let j = i * 31 + seed * 1009;
                ((j % 997) as f32 - 498.0) * if j % 61 == 0 { 1e3 } else { 0.21 }
            })
            .collect();
        let (data, _) = convert::convert(bytemuck::cast_slice(&values), DType::F32, dtype);
        TensorSource::Inline(TensorData {
            dtype,
            shape,
            bytes: data,
        })
    }

    #[test]
    fn concatenations_stream_as_they_materialize_converted() {
        for from in [DType::F32, DType::BF16] {
            let m = |shape: Vec<usize>, seed| matrix(from, shape, seed);
            let t = |shape: Vec<usize>, seed| TensorSource::Transpose(Box::new(m(shape, seed)));
            // Columns 2..6 of a stored matrix: not read in place, materialised alone.
            let computed = |rows: usize, seed| TensorSource::Slice {
                source: Box::new(m(vec![rows, 9], seed)),
                axis: 1,
                start: 2,
                len: 4,
                total: 9,
            };
            let concat = |parts, axis| TensorSource::Concat { parts, axis };
            let sources = [
                // A gate/up stack [H, E·I] of transposed [I, H] experts, H = 70.
                concat(
                    vec![t(vec![13, 70], 1), t(vec![13, 70], 2), t(vec![13, 70], 3)],
                    1,
                ),
                // A down stack [E·I, H] of transposed [H, I] experts.
                concat(vec![t(vec![70, 13], 4), t(vec![70, 13], 5)], 0),
                // Side by side: transposed, stored, computed and nested parts.
                concat(
                    vec![
                        t(vec![3, 70], 6),
                        m(vec![70, 5], 7),
                        computed(70, 8),
                        concat(vec![m(vec![30, 2], 9), t(vec![2, 40], 10)], 0),
                        t(vec![1, 70], 11),
                    ],
                    1,
                ),
                // One above the other: transposed, stored, computed, side-by-side parts.
                concat(
                    vec![
                        t(vec![4, 33], 12),
                        m(vec![2, 4], 13),
                        computed(3, 14),
                        concat(vec![t(vec![1, 40], 15), m(vec![40, 3], 16)], 1),
                    ],
                    0,
                ),
                // Rank 3: along axis 0 part by part, along an inner axis materialised.
                concat(vec![m(vec![2, 3, 5], 17), m(vec![1, 3, 5], 18)], 0),
                concat(vec![m(vec![2, 3, 5], 19), m(vec![2, 1, 5], 20)], 1),
                concat(vec![m(vec![2, 3, 5], 21), m(vec![2, 3, 1], 22)], 2),
            ];
            let mut clamped_somewhere = false;
            for src in &sources {
                let mut ev = Evaluator::new(None);
                let (dtype, _, whole) = ev.materialize(src).unwrap();
                assert_eq!(dtype, from);
                for to in [DType::F32, DType::F16, DType::BF16] {
                    let (want, want_clamped) = convert::convert(&whole, from, to);
                    clamped_somewhere |= want_clamped > 0;
                    for every in [usize::MAX, 4000, 1000, 7] {
                        let mut sink = super::super::sink::Uneven {
                            bytes: Vec::new(),
                            every,
                        };
                        let clamped = ev.stream(src, to, &mut sink).unwrap();
                        let what = format!("{from} -> {to}, pieces of {every}, {src:?}");
                        assert!(sink.bytes == want, "{what}: bytes differ");
                        assert_eq!(clamped, want_clamped, "{what}");
                    }
                }
            }
            assert!(
                clamped_somewhere,
                "no value was clamped: the count went untested"
            );
        }
    }

    #[test]
    fn concat_rejects_mismatched_parts() {
        let a = TensorSource::Inline(TensorData::from_f32(vec![2, 3], &[0.; 6]));
        let b = TensorSource::Inline(TensorData::from_f32(vec![2, 2], &[0.; 4]));
        let ev = Evaluator::new(None);
        let c = TensorSource::Concat {
            parts: vec![a, b],
            axis: 0,
        };
        assert!(ev.describe(&c).is_err());
    }

    #[test]
    fn missing_checkpoint_tensor_is_named() {
        let ev = Evaluator::new(None);
        let err = ev
            .describe(&TensorSource::Checkpoint("model.norm.weight".into()))
            .unwrap_err();
        assert!(err.to_string().contains("model.norm.weight"));
    }

    /// With unmapping on, every tensor streams the same bytes as without, a tensor streamed
    /// in place is unmapped piece by piece as the sink takes it, nothing read stays mapped
    /// once its initializer is written, and a tensor read again (as a tied embedding is) maps
    /// again with the same contents.
    #[cfg(target_os = "linux")]
    #[test]
    fn streamed_inputs_are_unmapped_and_read_back_the_same() {
        use super::super::unmap::{checkpoint, resident_kib, unmap_all, Watching};
        let bf16 = |n: usize, seed: usize| -> Vec<u8> {
            (0..n)
                .flat_map(|i| {
                    half::bf16::from_f32(((i * 31 + seed) % 1000) as f32 / 100.0 - 5.0)
                        .to_le_bytes()
                })
                .collect()
        };
        let (_dir, store) = checkpoint(&[
            ("emb", DType::BF16, vec![4096, 1024], bf16(4096 * 1024, 1)),
            ("norm", DType::BF16, vec![1024], bf16(1024, 2)),
            ("w", DType::BF16, vec![2048, 1024], bf16(2048 * 1024, 3)),
        ]);
        let map = store.maps().next().unwrap();
        let base = map.as_ptr() as usize;
        let checkpoint = |name: &str| TensorSource::Checkpoint(name.into());
        let sources = [
            (checkpoint("emb"), DType::F16),
            (checkpoint("norm"), DType::F32),
            (
                TensorSource::Transpose(Box::new(checkpoint("w"))),
                DType::F16,
            ),
            (checkpoint("emb"), DType::BF16),
        ];
        let mut plain = Evaluator::new(Some(&store));
        let expected: Vec<Vec<u8>> = sources
            .iter()
            .map(|(src, to)| plain.read(src, *to).unwrap())
            .collect();
        assert!(
            resident_kib(base) >= 12 << 10,
            "read without unmapping: all mapped"
        );
        unmap_all(map);

        let mut ev = Evaluator::new(Some(&store));
        ev.unmap_when_read();
        for _ in 0..2 {
            for ((src, to), expected) in sources.iter().zip(&expected) {
                let mut sink = Watching {
                    base,
                    bytes: Vec::new(),
                    most: 0,
                };
                ev.stream(src, *to, &mut sink).unwrap();
                let (bytes, most) = (sink.bytes, sink.most);
                assert!(bytes == *expected, "{src:?} as {to}: other bytes");
                if *to == DType::F16 && matches!(src, TensorSource::Checkpoint(_)) {
                    // 8 MiB streamed in 1 MiB pieces: never more than a few mapped at once.
                    assert!(most <= 4 << 10, "{src:?}: {most} KiB mapped while streamed");
                }
                ev.unmap_read();
                assert_eq!(resident_kib(base), 0, "{src:?} as {to}: left mapped");
            }
        }
    }
}
