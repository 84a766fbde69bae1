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
use super::sink::Store;
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

    /// Whether every column is stored in contiguous pieces: every stored part is the transpose
    /// of a row-major tensor (a Hugging Face Linear weight), so [`Matrix::column_pieces`]
    /// reads a column without transposing.
    pub(super) fn columns_stored(&self) -> bool {
        match &self.layout {
            Layout::RowMajor(_) => false,
            Layout::Transposed(_) => true,
            Layout::Stacked(parts) | Layout::Joined(parts) => {
                parts.iter().all(Matrix::columns_stored)
            }
        }
    }

    /// Calls `visit(first_row, bytes)` for the stored pieces of column `col`, top to bottom:
    /// `bytes` are rows `first_row..` of the column, in the matrix's dtype.
    ///
    /// Panics if `col` is out of range or the columns are not [stored](Matrix::columns_stored).
    pub(super) fn column_pieces(&self, col: usize, visit: &mut dyn FnMut(usize, &[u8])) {
        self.column_pieces_from(col, 0, visit);
    }

    fn column_pieces_from(&self, col: usize, first: usize, visit: &mut dyn FnMut(usize, &[u8])) {
        assert!(col < self.cols, "column outside the matrix");
        match &self.layout {
            Layout::Transposed(data) => {
                let len = self.rows * self.dtype.size();
                visit(first, &data[col * len..(col + 1) * len]);
            }
            Layout::Stacked(parts) => {
                let mut row = first;
                for part in parts {
                    part.column_pieces_from(col, row, visit);
                    row += part.rows;
                }
            }
            Layout::Joined(parts) => {
                let mut start = 0;
                for part in parts {
                    if col < start + part.cols {
                        return part.column_pieces_from(col - start, first, visit);
                    }
                    start += part.cols;
                }
            }
            Layout::RowMajor(_) => panic!("column_pieces of a row-major matrix"),
        }
    }

    /// Calls `visit` with the stored bytes of columns `cols`, one contiguous run per stored
    /// part they lie in (its rows for those columns): what reading those columns by
    /// [`Matrix::column_pieces`] reads.
    ///
    /// Panics if `cols` is out of range or the columns are not [stored](Matrix::columns_stored).
    pub(super) fn column_runs(&self, cols: Range<usize>, visit: &mut dyn FnMut(&[u8])) {
        assert!(cols.end <= self.cols, "columns outside the matrix");
        match &self.layout {
            Layout::Transposed(data) => {
                let len = self.rows * self.dtype.size();
                visit(&data[cols.start * len..cols.end * len]);
            }
            Layout::Stacked(parts) => {
                for part in parts {
                    part.column_runs(cols.clone(), visit);
                }
            }
            Layout::Joined(parts) => {
                let mut start = 0;
                for part in parts {
                    let (from, to) = (cols.start.max(start), cols.end.min(start + part.cols));
                    if from < to {
                        part.column_runs(from - start..to - start, visit);
                    }
                    start += part.cols;
                }
            }
            Layout::RowMajor(_) => panic!("column_runs of a row-major matrix"),
        }
    }

    /// Writes rows `first..` of columns `cols`, converted to `to`, into `dst` (as many whole
    /// rows of `cols.len()` elements as it holds), transposed parts stored as `store` says.
    /// Returns the number of values clamped to the f16 range.
    ///
    /// Panics if the block is not within the matrix or the dtype does not convert to `to`
    /// ([`convert::can_convert`]): callers check both.
    pub(super) fn fill(
        &self,
        first: usize,
        cols: Range<usize>,
        to: DType,
        dst: &mut [u8],
        store: Store,
    ) -> usize {
        let row = cols.len() * to.size();
        if row == 0 {
            return 0;
        }
        let mut out: Vec<&mut [u8]> = dst.chunks_exact_mut(row).collect();
        self.fill_rows(first, cols, to, &mut out, store)
    }

    /// [`Matrix::fill`] into one slice per row: `out[i]` receives columns `cols` of row
    /// `first + i`.
    fn fill_rows(
        &self,
        first: usize,
        cols: Range<usize>,
        to: DType,
        out: &mut [&mut [u8]],
        store: Store,
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
                transpose::transpose_rows_to(block, width, self.rows, from, to, first, out, store)
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
                        clamped += part.fill_rows(row - start, cols.clone(), to, here, store);
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
                    return part.fill_rows(first, local.clone(), to, out, store);
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
                    .map(|((part, local), rows)| {
                        part.fill_rows(first, local.clone(), to, rows, store)
                    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// How a test matrix is laid out: `[rows, cols]` stored row-major, `[rows, cols]` stored
    /// transposed, or parts concatenated along axis 0 or 1.
    enum Shape {
        RowMajor(usize, usize),
        Transposed(usize, usize),
        Stacked(Vec<Shape>),
        Joined(Vec<Shape>),
    }

    /// Deterministic `dtype` elements (finite; some outside the f16 range), different per seed.
    fn elements(n: usize, dtype: DType, seed: usize) -> Vec<u8> {
        let f = |i: usize| {
            let j = i + 1000 * seed;
            ((j * 7919 % 1000) as f32 - 500.0) * if j % 89 == 0 { 1e3 } else { 0.37 }
        };
        match dtype {
            DType::F32 => (0..n).flat_map(|i| f(i).to_le_bytes()).collect(),
            DType::F16 => (0..n)
                .flat_map(|i| half::f16::from_f32(f(i).clamp(-6e4, 6e4)).to_le_bytes())
                .collect(),
            _ => (0..n)
                .flat_map(|i| half::bf16::from_f32(f(i)).to_le_bytes())
                .collect(),
        }
    }

    /// The stored bytes of every leaf of `shape`, in order.
    fn stored(shape: &Shape, dtype: DType, out: &mut Vec<Vec<u8>>) {
        match shape {
            Shape::RowMajor(r, c) | Shape::Transposed(r, c) => {
                out.push(elements(r * c, dtype, out.len()));
            }
            Shape::Stacked(parts) | Shape::Joined(parts) => {
                parts.iter().for_each(|p| stored(p, dtype, out));
            }
        }
    }

    /// The matrix of `shape` over the leaves `data` (taken in order), with its rows computed
    /// element by element (each row `cols · size` bytes).
    fn build<'a>(
        shape: &Shape,
        dtype: DType,
        data: &mut std::slice::Iter<'a, Vec<u8>>,
    ) -> (Matrix<'a>, Vec<Vec<u8>>) {
        let e = dtype.size();
        match shape {
            Shape::RowMajor(r, c) => {
                let bytes = data.next().unwrap();
                let rows = bytes.chunks(c * e).map(<[u8]>::to_vec).collect();
                (Matrix::row_major(bytes, dtype, *r, *c).unwrap(), rows)
            }
            Shape::Transposed(r, c) => {
                let bytes = data.next().unwrap();
                let rows = (0..*r)
                    .map(|i| {
                        (0..*c)
                            .flat_map(|j| bytes[(j * r + i) * e..(j * r + i + 1) * e].to_vec())
                            .collect()
                    })
                    .collect();
                (Matrix::transposed(bytes, dtype, *c, *r).unwrap(), rows)
            }
            Shape::Stacked(parts) | Shape::Joined(parts) => {
                let built: Vec<_> = parts.iter().map(|p| build(p, dtype, data)).collect();
                let axis = usize::from(matches!(shape, Shape::Joined(_)));
                let mut rows: Vec<Vec<u8>> = Vec::new();
                for (_, part_rows) in &built {
                    if axis == 0 {
                        rows.extend(part_rows.iter().cloned());
                    } else {
                        rows.resize(part_rows.len(), Vec::new());
                        for (row, part_row) in rows.iter_mut().zip(part_rows) {
                            row.extend_from_slice(part_row);
                        }
                    }
                }
                let matrices = built.into_iter().map(|(m, _)| m).collect();
                (Matrix::concat(matrices, axis).unwrap(), rows)
            }
        }
    }

    /// Mixture-of-experts stacks (odd sizes, more rows than a strip of the transpose) and
    /// nested concatenations of every layout.
    fn shapes() -> Vec<Shape> {
        use Shape::*;
        vec![
            RowMajor(5, 7),
            Transposed(70, 9),
            // Gate/up stack: [H, E·I] of transposed [I, H] experts.
            Joined(vec![
                Transposed(70, 13),
                Transposed(70, 13),
                Transposed(70, 13),
            ]),
            // Down stack: [E·I, H] of transposed [H, I] experts.
            Stacked(vec![
                Transposed(11, 37),
                Transposed(11, 37),
                Transposed(11, 37),
            ]),
            Joined(vec![
                Transposed(67, 3),
                RowMajor(67, 40),
                Stacked(vec![RowMajor(30, 2), Transposed(37, 2)]),
                Transposed(67, 1),
            ]),
            Stacked(vec![
                RowMajor(1, 20),
                Joined(vec![Transposed(33, 19), RowMajor(33, 1)]),
                Transposed(40, 20),
            ]),
        ]
    }

    #[test]
    fn blocks_equal_the_matrix_built_element_by_element_then_converted() {
        let floats = [DType::F32, DType::F16, DType::BF16];
        let mut clamped_somewhere = false;
        for shape in shapes() {
            for from in floats {
                let mut leaves = Vec::new();
                stored(&shape, from, &mut leaves);
                let (matrix, rows) = build(&shape, from, &mut leaves.iter());
                let (r, c) = (matrix.rows(), matrix.cols());
                assert_eq!((rows.len(), rows[0].len()), (r, c * from.size()));
                let blocks = [
                    (0..r, 0..c),
                    (1..r, 2..c - 1),
                    (r / 3..r / 3 + 1, 0..c),
                    (r - 1..r, c / 2..c),
                    (r / 2..r, c / 3..c / 3 + 5),
                ];
                for to in floats {
                    for (block_rows, cols) in blocks.clone() {
                        let e = from.size();
                        let naive: Vec<u8> = rows[block_rows.clone()]
                            .iter()
                            .flat_map(|row| row[cols.start * e..cols.end * e].to_vec())
                            .collect();
                        let mut want = Vec::new();
                        let want_clamped = convert::convert_into(&naive, from, to, &mut want);
                        clamped_somewhere |= want_clamped > 0;
                        for store in [Store::Cached, Store::Streamed] {
                            let mut got = vec![0xAA; want.len()];
                            let first = block_rows.start;
                            let clamped = matrix.fill(first, cols.clone(), to, &mut got, store);
                            let what = format!(
                                "{from} -> {to}, [{r}, {c}], {block_rows:?} × {cols:?}, {store:?}"
                            );
                            assert!(got == want, "{what}: bytes differ");
                            assert_eq!(clamped, want_clamped, "{what}");
                        }
                    }
                }
            }
        }
        assert!(
            clamped_somewhere,
            "no block clamped a value: the count went untested"
        );
    }

    #[test]
    fn column_pieces_are_the_columns_of_matrices_stored_by_columns() {
        let mut by_columns = 0;
        for shape in shapes() {
            let mut leaves = Vec::new();
            stored(&shape, DType::BF16, &mut leaves);
            let (matrix, rows) = build(&shape, DType::BF16, &mut leaves.iter());
            let has_row_major = rows.is_empty() || !matrix.columns_stored();
            if has_row_major {
                continue;
            }
            by_columns += 1;
            for col in 0..matrix.cols() {
                let mut column = Vec::new();
                matrix.column_pieces(col, &mut |first, bytes| {
                    assert_eq!(first * 2, column.len(), "pieces in order, without gaps");
                    column.extend_from_slice(bytes);
                });
                let want: Vec<u8> = rows
                    .iter()
                    .flat_map(|r| r[col * 2..col * 2 + 2].to_vec())
                    .collect();
                assert_eq!(
                    column,
                    want,
                    "column {col} of [{}, {}]",
                    matrix.rows(),
                    matrix.cols()
                );
            }
        }
        // The transposed weight, the gate/up stack and the down stack.
        assert_eq!(by_columns, 3);
    }

    #[test]
    fn parts_that_do_not_fit_are_refused() {
        let bytes = elements(12, DType::F32, 0);
        let a = || Matrix::row_major(&bytes, DType::F32, 3, 4).unwrap();
        let b = || Matrix::transposed(&bytes, DType::F32, 3, 4).unwrap(); // [4, 3]
        assert!(Matrix::row_major(&bytes, DType::F32, 3, 5).is_none());
        assert!(Matrix::transposed(&bytes[1..], DType::F32, 3, 4).is_none());
        assert!(Matrix::concat(vec![a(), b()], 0).is_none());
        assert!(Matrix::concat(vec![a(), b()], 1).is_none());
        assert!(Matrix::concat(vec![a(), a()], 2).is_none());
        assert!(Matrix::concat(Vec::new(), 0).is_none());
        let halves = elements(12, DType::F16, 0);
        let h = Matrix::row_major(&halves, DType::F16, 3, 4).unwrap();
        assert!(Matrix::concat(vec![a(), h], 0).is_none());
        let joined = Matrix::concat(vec![a(), a(), a()], 1).unwrap();
        assert_eq!((joined.rows(), joined.cols()), (3, 12));
        let stacked = Matrix::concat(vec![b(), b()], 0).unwrap();
        assert_eq!((stacked.rows(), stacked.cols()), (8, 3));
    }
}
