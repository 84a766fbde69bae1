//! 2-D weights read where they lie, block by block: a stored matrix, the transpose of one, or
//! a concatenation of such along either axis — how mixture-of-experts layers stack their
//! experts' weights (`[gate_0ᵀ | … | gate_{E-1}ᵀ]`, `[down_0ᵀ; …; down_{E-1}ᵀ]`) and how fused
//! projections join theirs.
//!
//! Any block of rows × columns is written converted into row slices the caller gives, each
//! part of a concatenation straight from its stored tensor (a transposed one by the tiled
//! transpose, [`transpose::transpose_rows_to`]), so a concatenation is never materialised.

use std::ops::Range;

use rayon::prelude::*;

use super::convert;
use super::transpose;
use crate::ir::DType;

/// Values converted per task when stored rows are converted in parallel.
const ELEMS_PER_TASK: usize = 1 << 14;

/// A `[rows, cols]` matrix of `dtype` elements read in place (see the [module doc](self)).
#[derive(Debug)]
pub(super) struct Matrix<'a> {
    rows: usize,
    cols: usize,
    dtype: DType,
    layout: Layout<'a>,
}

/// Where a [`Matrix`]'s elements are.
#[derive(Debug)]
enum Layout<'a> {
    /// Row-major `[rows, cols]` bytes.
    RowMajor(&'a [u8]),
    /// Row-major `[cols, rows]` bytes: the matrix is their transpose.
    Transposed(&'a [u8]),
    /// Parts of `cols` columns each, one above the other (concatenated along axis 0).
    Stacked(Vec<Matrix<'a>>),
    /// Parts of `rows` rows each, side by side (concatenated along axis 1).
    Joined(Vec<Matrix<'a>>),
}

impl<'a> Matrix<'a> {
    /// The row-major `[rows, cols]` matrix `data`; `None` when `data` is not that long.
    pub(super) fn row_major(
        data: &'a [u8],
        dtype: DType,
        rows: usize,
        cols: usize,
    ) -> Option<Self> {
        fits(data, dtype, rows, cols).then_some(Matrix {
            rows,
            cols,
            dtype,
            layout: Layout::RowMajor(data),
        })
    }

    /// The transpose (`[cols, rows]`) of the row-major `[rows, cols]` matrix `data`; `None`
    /// when `data` is not that long.
    pub(super) fn transposed(
        data: &'a [u8],
        dtype: DType,
        rows: usize,
        cols: usize,
    ) -> Option<Self> {
        fits(data, dtype, rows, cols).then_some(Matrix {
            rows: cols,
            cols: rows,
            dtype,
            layout: Layout::Transposed(data),
        })
    }

    /// `parts` concatenated along `axis` (0: one above the other, 1: side by side); `None`
    /// when there are none, the axis is not 0 or 1, or the parts differ in dtype or in the
    /// other dimension.
    pub(super) fn concat(parts: Vec<Matrix<'a>>, axis: usize) -> Option<Self> {
        let first = parts.first()?;
        let (dtype, rows, cols) = (first.dtype, first.rows, first.cols);
        let same = |m: &Matrix<'_>| match axis {
            0 => m.cols == cols,
            _ => m.rows == rows,
        };
        if axis > 1 || !parts.iter().all(|m| m.dtype == dtype && same(m)) {
            return None;
        }
        let (rows, cols, layout) = match axis {
            0 => (
                parts.iter().map(|m| m.rows).sum(),
                cols,
                Layout::Stacked(parts),
            ),
            _ => (
                rows,
                parts.iter().map(|m| m.cols).sum(),
                Layout::Joined(parts),
            ),
        };
        Some(Matrix {
            rows,
            cols,
            dtype,
            layout,
        })
    }

    /// Number of rows.
    pub(super) fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub(super) fn cols(&self) -> usize {
        self.cols
    }

    /// Element type.
    pub(super) fn dtype(&self) -> DType {
        self.dtype
    }

    /// Writes rows `first..` of columns `cols`, converted to `to`, into `dst` (as many whole
    /// rows of `cols.len()` elements as it holds). Returns the number of values clamped to the
    /// f16 range.
    ///
    /// Panics if the block is not within the matrix or the dtype does not convert to `to`
    /// ([`convert::can_convert`]): callers check both.
    pub(super) fn fill(
        &self,
        first: usize,
        cols: Range<usize>,
        to: DType,
        dst: &mut [u8],
    ) -> usize {
        let row = cols.len() * to.size();
        if row == 0 {
            return 0;
        }
        let mut out: Vec<&mut [u8]> = dst.chunks_exact_mut(row).collect();
        self.fill_rows(first, cols, to, &mut out)
    }

    /// [`Matrix::fill`] into one slice per row: `out[i]` receives columns `cols` of row
    /// `first + i`.
    fn fill_rows(
        &self,
        first: usize,
        cols: Range<usize>,
        to: DType,
        out: &mut [&mut [u8]],
    ) -> usize {
        assert!(
            first + out.len() <= self.rows && cols.end <= self.cols,
            "block outside the matrix"
        );
        if out.is_empty() || cols.is_empty() {
            return 0;
        }
        let (from, width) = (self.dtype, cols.len());
        match &self.layout {
            Layout::RowMajor(data) => {
                let size = from.size();
                let per_task = (ELEMS_PER_TASK / width).max(1);
                out.par_iter_mut()
                    .with_min_len(per_task)
                    .enumerate()
                    .map(|(i, row)| {
                        let at = ((first + i) * self.cols + cols.start) * size;
                        let src = &data[at..at + width * size];
                        convert::convert_slice(src, from, to, row)
                    })
                    .sum()
            }
            Layout::Transposed(data) => {
                // Columns `cols` are the stored rows `cols`: a `[width, rows]` matrix.
                let stored_row = self.rows * from.size();
                let block = &data[cols.start * stored_row..cols.end * stored_row];
                transpose::transpose_rows_to(block, width, self.rows, from, to, first, out)
            }
            Layout::Stacked(parts) => {
                // `row`: the next row to write; `start`: the first row of `part`.
                let (mut clamped, mut start, mut row) = (0, 0, first);
                let mut rest = out;
                for part in parts {
                    let end = start + part.rows;
                    if row < end && !rest.is_empty() {
                        let n = (end - row).min(rest.len());
                        let (here, after) = std::mem::take(&mut rest).split_at_mut(n);
                        clamped += part.fill_rows(row - start, cols.clone(), to, here);
                        (rest, row) = (after, row + n);
                    }
                    start = end;
                }
                clamped
            }
            Layout::Joined(parts) => {
                // The parts that hold some of `cols`, with their columns among them.
                let mut pieces = Vec::new();
                let mut start = 0;
                for part in parts {
                    let end = start + part.cols;
                    let wanted = cols.start.max(start)..cols.end.min(end);
                    if !wanted.is_empty() {
                        pieces.push((part, wanted.start - start..wanted.end - start));
                    }
                    start = end;
                }
                if let [(part, local)] = &pieces[..] {
                    return part.fill_rows(first, local.clone(), to, out);
                }
                // Each output row split into the parts' pieces, the parts written in parallel.
                let mut per_part: Vec<Vec<&mut [u8]>> = pieces
                    .iter()
                    .map(|_| Vec::with_capacity(out.len()))
                    .collect();
                for row in out.iter_mut() {
                    let mut rest: &mut [u8] = row;
                    for ((_, local), rows) in pieces.iter().zip(per_part.iter_mut()) {
                        let (piece, after) =
                            std::mem::take(&mut rest).split_at_mut(local.len() * to.size());
                        rows.push(piece);
                        rest = after;
                    }
                }
                pieces
                    .par_iter()
                    .zip(per_part.par_iter_mut())
                    .map(|((part, local), rows)| part.fill_rows(first, local.clone(), to, rows))
                    .sum()
            }
        }
    }
}

/// Whether `data` is exactly a `[rows, cols]` matrix of `dtype`.
fn fits(data: &[u8], dtype: DType, rows: usize, cols: usize) -> bool {
    rows.checked_mul(cols)
        .and_then(|n| n.checked_mul(dtype.size()))
        .is_some_and(|len| len == data.len())
}
