//! Cache-blocked transposes of row-major matrices, the element-type conversion fused into each
//! tile, spread over rayon's threads by strips of output rows (and bands of their columns).
//!
//! The transpose of a `[rows, cols]` matrix is `[cols, rows]`. A strip is as many output rows
//! as four cache lines hold source columns, one task; where a call writes fewer strips than
//! twice the threads (output rows so long that a few fill the writer's buffer: an LM head's),
//! each strip is also cut into bands of source rows, one task each. Within a strip the source
//! is walked in tiles of [`TILE_ROWS`] rows: the tile's lines are copied into a local buffer,
//! transposed there, and each output row of the strip receives the tile's [`TILE_ROWS`] values
//! at once, copied, or converted by [`convert`](super::convert) (the same conversion, bit for
//! bit, as untransposed tensors get) while they are in L1. Elements move as fixed-size byte
//! arrays, so the source needs no alignment.

use std::ops::Range;

use rayon::prelude::*;

use super::convert;
use super::sink::Store;
use crate::ir::DType;

/// Source rows per tile.
const TILE_ROWS: usize = 64;
/// Source bytes per row of a strip: four cache lines. A strip reads each source row's page
/// once per 256 bytes (its lines are consecutive), not once per 64: the strips of a matrix
/// whose rows span pages cost a quarter of the TLB misses, and a tile's lines and their
/// transpose (16 KiB each) still fit in L1, its conversion buffers (64 KiB) in L2.
const STRIP_BYTES: usize = 256;
/// Elements of a tile of 2-byte elements (the smallest that convert): the most a tile converts.
const CONVERTED_ELEMS: usize = TILE_ROWS * STRIP_BYTES / 2;

/// The transpose of `src`, a row-major `[rows, cols]` matrix of `dtype` elements.
pub fn transposed(src: &[u8], rows: usize, cols: usize, dtype: DType) -> Vec<u8> {
    let mut out = vec![0u8; src.len()];
    transpose_rows_into(src, rows, cols, dtype, dtype, 0, &mut out);
    out
}

/// Writes output rows `first..first + n` of the transpose of `src` (row-major `[rows, cols]`
/// of `from` elements), converted to `to`, into `dst`, which holds exactly `n` output rows
/// (`n · rows` elements of `to`). Returns the number of values clamped to the f16 range.
///
/// Panics if `dst` is not a whole number of output rows within the matrix, or `from` cannot
/// be converted to `to` ([`convert::can_convert`]): callers check both.
pub fn transpose_rows_into(
    src: &[u8],
    rows: usize,
    cols: usize,
    from: DType,
    to: DType,
    first: usize,
    dst: &mut [u8],
) -> usize {
    let out_row = rows * to.size();
    if dst.is_empty() {
        return 0;
    }
    assert!(
        dst.len() % out_row == 0,
        "destination is not whole output rows of the transpose"
    );
    let mut out: Vec<&mut [u8]> = dst.chunks_exact_mut(out_row).collect();
    transpose_rows_to(src, rows, cols, from, to, first, &mut out, Store::Cached)
}

/// [`transpose_rows_into`] with each output row in a slice of its own (`dst[i]` receives
/// output row `first + i`, `rows` elements of `to`), e.g. one part of the rows of a wider
/// matrix that other tensors fill beside it, stored as `store` says.
///
/// Panics as [`transpose_rows_into`] does, or if a slice is not one output row long.
#[allow(clippy::too_many_arguments)]
pub fn transpose_rows_to(
    src: &[u8],
    rows: usize,
    cols: usize,
    from: DType,
    to: DType,
    first: usize,
    dst: &mut [&mut [u8]],
    store: Store,
) -> usize {
    assert_eq!(
        src.len(),
        rows * cols * from.size(),
        "source is not [rows, cols]"
    );
    let out_row = rows * to.size();
    assert!(
        first + dst.len() <= cols && dst.iter().all(|row| row.len() == out_row),
        "destination is not whole output rows of the transpose"
    );
    if dst.is_empty() || out_row == 0 {
        return 0;
    }
    let job = Job {
        rows,
        cols,
        from,
        to,
        first,
        store,
    };
    match from.size() {
        1 => job.run::<1, STRIP_BYTES>(src, dst),
        2 => job.run::<2, { STRIP_BYTES / 2 }>(src, dst),
        4 => job.run::<4, { STRIP_BYTES / 4 }>(src, dst),
        8 => job.run::<8, { STRIP_BYTES / 8 }>(src, dst),
        other => unreachable!("no dtype has {other}-byte elements"),
    }
}

/// One call of [`transpose_rows_into`]: the matrix and the output rows wanted.
struct Job {
    rows: usize,
    cols: usize,
    from: DType,
    to: DType,
    first: usize,
    store: Store,
}

impl Job {
    /// Splits the output rows `dst` into strips of `S`, transposed in parallel; `N` is the
    /// source element size and `S · N` four cache lines. When there are too few strips to
    /// keep every thread busy (output rows so long that a write holds a few: an LM head's, a
    /// wide MLP's), each strip is cut into bands of source rows (output columns), whole tiles
    /// each, and every band of every strip is a task.
    fn run<const N: usize, const S: usize>(&self, src: &[u8], dst: &mut [&mut [u8]]) -> usize
    where
        [u8; N]: bytemuck::Pod,
    {
        let src: &[[u8; N]] = bytemuck::cast_slice(src);
        let strips = dst.len().div_ceil(S);
        let wanted = 2 * rayon::current_num_threads();
        let bands = match strips >= wanted {
            true => 1,
            false => wanted.div_ceil(strips).min(self.rows.div_ceil(TILE_ROWS)),
        };
        if bands <= 1 {
            return dst
                .par_chunks_mut(S)
                .enumerate()
                .map(|(i, strip)| self.strip::<N, S>(src, self.first + i * S, 0..self.rows, strip))
                .sum();
        }
        let band_rows = self.rows.div_ceil(bands).next_multiple_of(TILE_ROWS);
        let band = |b: usize| b * band_rows..((b + 1) * band_rows).min(self.rows);
        // Task (strip i, band b): the band's slice of each of the strip's output rows.
        let mut tasks = Vec::new();
        for (i, strip) in dst.chunks_mut(S).enumerate() {
            let first = tasks.len();
            tasks.extend((0..self.rows.div_ceil(band_rows)).map(|b| (i, b, Vec::new())));
            for row in strip.iter_mut() {
                for (b, slice) in row.chunks_mut(band_rows * self.to.size()).enumerate() {
                    tasks[first + b].2.push(slice);
                }
            }
        }
        tasks
            .into_par_iter()
            .map(|(i, b, mut rows)| self.strip::<N, S>(src, self.first + i * S, band(b), &mut rows))
            .sum()
    }

    /// Output rows `c0..` (one per slice of `out`, at most `S`), their columns `band` (source
    /// rows: `out`'s slices hold those columns alone), tile by tile: each tile of source rows
    /// is copied line by line into a local buffer, transposed there, converted when the type
    /// changes, and each of its output rows copied into place. Every cache line of the source
    /// and of `out` is touched once per tile, whatever the power-of-two strides that would
    /// make a direct gather evict its own lines.
    fn strip<const N: usize, const S: usize>(
        &self,
        src: &[[u8; N]],
        c0: usize,
        band: Range<usize>,
        out: &mut [&mut [u8]],
    ) -> usize
    where
        [u8; N]: bytemuck::Pod,
    {
        // The tiles stop at the band's end.
        let (rows, cols, size) = (band.end, self.cols, self.to.size());
        let width = out.len();
        let mut lines = [[[0u8; N]; S]; TILE_ROWS];
        let mut transposed = [[[0u8; N]; TILE_ROWS]; S];
        let mut converted = [0u8; 4 * CONVERTED_ELEMS];
        let mut f32s = [0f32; CONVERTED_ELEMS];
        let mut clamped = 0;
        prefetch_tile(src, cols, band.start, rows, c0, width);
        for r0 in band.clone().step_by(TILE_ROWS) {
            let r1 = (r0 + TILE_ROWS).min(rows);
            prefetch_tile(src, cols, r1, rows, c0, width);
            let height = r1 - r0;
            // Where the tile's values go in each output row's slice.
            let at = (r0 - band.start) * size..(r1 - band.start) * size;
            for (r, line) in (r0..r1).zip(lines.iter_mut()) {
                let start = r * cols + c0;
                match src[start..].first_chunk::<S>() {
                    Some(whole) if width == S => *line = *whole,
                    _ => line[..width].copy_from_slice(&src[start..start + width]),
                }
            }
            let whole = height == TILE_ROWS && width == S;
            if !(whole && transpose_whole_tile(&lines, &mut transposed)) {
                for (k, column) in transposed[..width].iter_mut().enumerate() {
                    for (value, line) in column[..height].iter_mut().zip(&lines[..height]) {
                        *value = line[k];
                    }
                }
            }
            let columns = transposed[..width]
                .iter()
                .map(|c| bytemuck::cast_slice(&c[..height]));
            let rows_out = out.iter_mut();
            if self.from == self.to {
                for (row, column) in rows_out.zip(columns) {
                    copy_column(&mut row[at.clone()], column, self.store);
                }
                continue;
            }
            // Floats only (`can_convert`): at most CONVERTED_ELEMS values of 2 or 4 bytes,
            // converted at once when the tile is whole (its columns are then contiguous).
            if height == TILE_ROWS {
                let all: &[u8] = bytemuck::cast_slice(&transposed[..width]);
                let converted = &mut converted[..width * TILE_ROWS * size];
                clamped += convert::convert_through(all, self.from, self.to, converted, &mut f32s);
                for (row, column) in rows_out.zip(converted.chunks_exact(TILE_ROWS * size)) {
                    copy_column(&mut row[at.clone()], column, self.store);
                }
            } else {
                for (row, column) in rows_out.zip(columns) {
                    let dst = &mut row[at.clone()];
                    clamped += convert::convert_through(column, self.from, self.to, dst, &mut f32s);
                }
            }
        }
        if self.store == Store::Streamed {
            // The strip's streaming stores reach memory before the task is seen done.
            Store::fence();
        }
        clamped
    }
}

/// Copies a tile's column into its place in an output row (`dst` as long as `column`): a
/// whole tile's column of 2- or 4-byte elements as a fixed-size array, a copy the compiler
/// inlines, where a length known only at run time costs a call to `memcpy` each (one per 64
/// values of every transposed weight); streamed where `store` asks and the place is aligned.
#[inline(always)]
fn copy_column(dst: &mut [u8], column: &[u8], store: Store) {
    const TWO: usize = TILE_ROWS * 2;
    const FOUR: usize = TILE_ROWS * 4;
    if store == Store::Streamed
        && matches!(column.len(), TWO | FOUR)
        && dst.as_ptr() as usize % 16 == 0
    {
        store.copy(dst, column);
        return;
    }
    match column.len() {
        TWO => copy_fixed::<TWO>(dst, column),
        FOUR => copy_fixed::<FOUR>(dst, column),
        _ => dst.copy_from_slice(column),
    }
}

/// `dst.copy_from_slice(src)` for slices of `L` bytes.
#[inline(always)]
fn copy_fixed<const L: usize>(dst: &mut [u8], src: &[u8]) {
    let dst: &mut [u8; L] = dst.try_into().expect("a column's place in its row");
    let src: &[u8; L] = src.try_into().expect("a whole tile's column");
    *dst = *src;
}

/// Transposes a whole tile (`transposed[k][r] = lines[r][k]`) with SIMD shuffles where there
/// is a kernel for the element size (2 bytes, on x86-64: bf16 and f16 weights); returns false,
/// touching nothing, where there is none.
fn transpose_whole_tile<const N: usize, const S: usize>(
    lines: &[[[u8; N]; S]; TILE_ROWS],
    transposed: &mut [[[u8; N]; TILE_ROWS]; S],
) -> bool
where
    [u8; N]: bytemuck::Pod,
{
    #[cfg(target_arch = "x86_64")]
    if N == 2 {
        let src: &[u8] = bytemuck::cast_slice(lines.as_flattened());
        let dst: &mut [u8] = bytemuck::cast_slice_mut(transposed.as_flattened_mut());
        // SAFETY: SSE2 is part of x86-64; `src` is TILE_ROWS lines of STRIP_BYTES and `dst`
        // the same bytes as STRIP_BYTES / 2 columns of TILE_ROWS 2-byte values, as the
        // function requires (it checks both lengths).
        unsafe { x86::transpose_tile_2(src, dst) };
        return true;
    }
    let _ = (lines, transposed);
    false
}

/// The SIMD tile transposes of [`transpose_whole_tile`].
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{STRIP_BYTES, TILE_ROWS};

    /// Transposes `src`, [`TILE_ROWS`] rows of `STRIP_BYTES / 2` 2-byte values, into `dst`,
    /// `STRIP_BYTES / 2` rows of [`TILE_ROWS`] values, by blocks of 8 × 8 values: three rounds
    /// of interleaving (16-, 32- then 64-bit) turn 8 rows into 8 columns.
    ///
    /// # Safety
    /// The CPU must have SSE2 (every x86-64 does). Panics if the lengths are not those.
    #[target_feature(enable = "sse2")]
    pub(super) unsafe fn transpose_tile_2(src: &[u8], dst: &mut [u8]) {
        const COLS: usize = STRIP_BYTES / 2;
        assert!(src.len() == TILE_ROWS * COLS * 2 && dst.len() == src.len());
        for r0 in (0..TILE_ROWS).step_by(8) {
            for c0 in (0..COLS).step_by(8) {
                // Row r0 + i, values c0..c0 + 8: 16 bytes at (r0 + i) · STRIP_BYTES + 2 · c0,
                // in bounds as r0 + i < TILE_ROWS and c0 + 8 <= COLS.
                let row = |i: usize| src[(r0 + i) * STRIP_BYTES + 2 * c0..].as_ptr();
                // Spelled out: `array::map` with this closure stayed an out-of-line call per
                // block (3% of an f16 build's samples).
                let a = [
                    _mm_loadu_si128(row(0).cast()),
                    _mm_loadu_si128(row(1).cast()),
                    _mm_loadu_si128(row(2).cast()),
                    _mm_loadu_si128(row(3).cast()),
                    _mm_loadu_si128(row(4).cast()),
                    _mm_loadu_si128(row(5).cast()),
                    _mm_loadu_si128(row(6).cast()),
                    _mm_loadu_si128(row(7).cast()),
                ];
                let b = [
                    _mm_unpacklo_epi16(a[0], a[1]),
                    _mm_unpackhi_epi16(a[0], a[1]),
                    _mm_unpacklo_epi16(a[2], a[3]),
                    _mm_unpackhi_epi16(a[2], a[3]),
                    _mm_unpacklo_epi16(a[4], a[5]),
                    _mm_unpackhi_epi16(a[4], a[5]),
                    _mm_unpacklo_epi16(a[6], a[7]),
                    _mm_unpackhi_epi16(a[6], a[7]),
                ];
                let c = [
                    _mm_unpacklo_epi32(b[0], b[2]),
                    _mm_unpackhi_epi32(b[0], b[2]),
                    _mm_unpacklo_epi32(b[1], b[3]),
                    _mm_unpackhi_epi32(b[1], b[3]),
                    _mm_unpacklo_epi32(b[4], b[6]),
                    _mm_unpackhi_epi32(b[4], b[6]),
                    _mm_unpacklo_epi32(b[5], b[7]),
                    _mm_unpackhi_epi32(b[5], b[7]),
                ];
                // Column c0 + j, values r0..r0 + 8.
                let columns = [
                    _mm_unpacklo_epi64(c[0], c[4]),
                    _mm_unpackhi_epi64(c[0], c[4]),
                    _mm_unpacklo_epi64(c[1], c[5]),
                    _mm_unpackhi_epi64(c[1], c[5]),
                    _mm_unpacklo_epi64(c[2], c[6]),
                    _mm_unpackhi_epi64(c[2], c[6]),
                    _mm_unpacklo_epi64(c[3], c[7]),
                    _mm_unpackhi_epi64(c[3], c[7]),
                ];
                for (j, column) in columns.into_iter().enumerate() {
                    // 16 bytes at (c0 + j) · 2 · TILE_ROWS + 2 · r0: in bounds likewise.
                    let at = &mut dst[(c0 + j) * 2 * TILE_ROWS + 2 * r0..][..16];
                    _mm_storeu_si128(at.as_mut_ptr().cast(), column);
                }
            }
        }
    }
}

/// Asks the CPU to start loading the cache lines of the tile of source rows `r0..` (at most
/// [`TILE_ROWS`], before `rows`) and columns `c0..c0 + width`, which the strip reads next: its
/// rows lie a whole source row apart, too far for the hardware prefetcher.
fn prefetch_tile<T>(src: &[T], cols: usize, r0: usize, rows: usize, c0: usize, width: usize) {
    let r1 = (r0 + TILE_ROWS).min(rows);
    for r in r0..r1 {
        prefetch(&src[r * cols + c0]);
        prefetch(&src[r * cols + c0 + width - 1]);
    }
}

/// A hint to load the cache line holding `value` (nothing on targets other than x86-64).
#[inline(always)]
fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch only hints the cache; it reads nothing and never faults.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transpose one element at a time, then the conversion of the whole result.
    fn naive(src: &[u8], rows: usize, cols: usize, from: DType, to: DType) -> (Vec<u8>, usize) {
        let e = from.size();
        let mut t = vec![0u8; src.len()];
        for r in 0..rows {
            for c in 0..cols {
                let (s, d) = ((r * cols + c) * e, (c * rows + r) * e);
                t[d..d + e].copy_from_slice(&src[s..s + e]);
            }
        }
        let mut out = Vec::new();
        let clamped = convert::convert_into(&t, from, to, &mut out);
        (out, clamped)
    }

    /// Deterministic bytes that are finite values of `dtype` for float types, some of them
    /// outside the f16 range.
    fn values(n: usize, dtype: DType) -> Vec<u8> {
        let f =
            |i: usize| ((i * 7919 % 1000) as f32 - 500.0) * if i % 97 == 0 { 1e3 } else { 0.37 };
        match dtype {
            DType::F32 => (0..n).flat_map(|i| f(i).to_le_bytes()).collect(),
            DType::F16 => (0..n)
                .flat_map(|i| half::f16::from_f32(f(i).clamp(-6e4, 6e4)).to_le_bytes())
                .collect(),
            DType::BF16 => (0..n)
                .flat_map(|i| half::bf16::from_f32(f(i)).to_le_bytes())
                .collect(),
            other => (0..n * other.size()).map(|i| (i * 31 + 7) as u8).collect(),
        }
    }

    const SHAPES: &[(usize, usize)] = &[
        (1, 1),
        (1, 300),
        (300, 1),
        (7, 13),
        (13, 7),
        (31, 257),
        (257, 33),
        (TILE_ROWS, 64),
        (TILE_ROWS + 1, 65),
        (TILE_ROWS - 1, 63),
        (2 * TILE_ROWS + 3, 129),
        // Whole strips of every element size (STRIP_BYTES / size columns), then part of one.
        (2 * TILE_ROWS, STRIP_BYTES + 44),
        (TILE_ROWS, 2 * STRIP_BYTES),
        (0, 5),
        (5, 0),
    ];

    #[test]
    fn tiled_transpose_matches_the_naive_one_for_every_element_size() {
        for dtype in [DType::U8, DType::F16, DType::BF16, DType::F32, DType::I64] {
            for &(rows, cols) in SHAPES {
                let src = values(rows * cols, dtype);
                let (want, _) = naive(&src, rows, cols, dtype, dtype);
                assert_eq!(
                    transposed(&src, rows, cols, dtype),
                    want,
                    "{dtype} {rows}x{cols}"
                );
            }
        }
    }

    #[test]
    fn fused_conversion_matches_transpose_then_convert() {
        let floats = [DType::F32, DType::F16, DType::BF16];
        for from in floats {
            for to in floats {
                for &(rows, cols) in SHAPES {
                    let src = values(rows * cols, from);
                    let (want, want_clamped) = naive(&src, rows, cols, from, to);
                    let mut got = vec![0u8; want.len()];
                    let clamped = transpose_rows_into(&src, rows, cols, from, to, 0, &mut got);
                    assert_eq!(got, want, "{from} -> {to} {rows}x{cols}");
                    assert_eq!(clamped, want_clamped, "{from} -> {to} {rows}x{cols}");
                }
            }
        }
        // Some values were clamped, so the count is checked for real.
        let src = values(300, DType::F32);
        assert!(naive(&src, 1, 300, DType::F32, DType::F16).1 > 0);
    }

    #[test]
    fn row_ranges_concatenate_to_the_whole_transpose() {
        let (rows, cols) = (TILE_ROWS + 5, 77);
        let src = values(rows * cols, DType::BF16);
        let (want, _) = naive(&src, rows, cols, DType::BF16, DType::F32);
        let mut got = Vec::new();
        let mut first = 0;
        for n in [1, 16, 3, 40, 17] {
            let mut part = vec![0u8; n * rows * 4];
            transpose_rows_into(&src, rows, cols, DType::BF16, DType::F32, first, &mut part);
            got.extend(part);
            first += n;
        }
        assert_eq!(first, cols);
        assert_eq!(got, want);
    }

    #[test]
    fn rows_written_into_slices_of_wider_rows_leave_the_rest_alone() {
        // Output rows 3..3 + 40 of the transpose (each 70 values) into columns 5..75 of a
        // `[40, 80]` f16 buffer, as one part of a wider matrix is written beside others.
        let (rows, cols, first, n) = (70, 50, 3, 40);
        let src = values(rows * cols, DType::F32);
        let (want, _) = naive(&src, rows, cols, DType::F32, DType::F16);
        // The values clamped in the rows written.
        let (as_f32, _) = naive(&src, rows, cols, DType::F32, DType::F32);
        let written = &as_f32[first * rows * 4..(first + n) * rows * 4];
        let want_clamped = convert::convert_into(written, DType::F32, DType::F16, &mut Vec::new());
        let mut wide = vec![0xEEu8; n * 80 * 2];
        let mut slices: Vec<&mut [u8]> = wide
            .chunks_exact_mut(80 * 2)
            .map(|row| &mut row[5 * 2..75 * 2])
            .collect();
        let clamped = transpose_rows_to(
            &src,
            rows,
            cols,
            DType::F32,
            DType::F16,
            first,
            &mut slices,
            Store::Cached,
        );
        for (i, row) in wide.chunks_exact(80 * 2).enumerate() {
            let out_row = &want[(first + i) * rows * 2..(first + i + 1) * rows * 2];
            assert_eq!(&row[10..150], out_row, "row {i}");
            assert!(row[..10].iter().chain(&row[150..]).all(|&b| b == 0xEE));
        }
        assert!(want_clamped > 0);
        assert_eq!(clamped, want_clamped);
    }

    #[test]
    fn streamed_stores_write_what_cached_ones_do() {
        // Whole tiles (source rows a multiple of TILE_ROWS, so every output row is whole tile
        // columns) into a 16-byte-aligned buffer, and the same shifted off alignment (cached
        // stores then), for 2- and 4-byte outputs.
        let floats = [DType::F32, DType::F16, DType::BF16];
        for (rows, cols) in [(2 * TILE_ROWS, 70), (TILE_ROWS, 33), (3 * TILE_ROWS + 5, 9)] {
            for from in floats {
                for to in floats {
                    let src = values(rows * cols, from);
                    let (want, want_clamped) = naive(&src, rows, cols, from, to);
                    for shift in [0, 2] {
                        let mut buffer = vec![0u128; want.len() / 16 + 2];
                        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut buffer);
                        let got = &mut bytes[shift..shift + want.len()];
                        let mut out: Vec<&mut [u8]> =
                            got.chunks_exact_mut(rows * to.size()).collect();
                        let clamped = transpose_rows_to(
                            &src,
                            rows,
                            cols,
                            from,
                            to,
                            0,
                            &mut out,
                            Store::Streamed,
                        );
                        let what = format!("{from} -> {to} {rows}x{cols}, shifted {shift}");
                        assert!(got[..] == want[..], "{what}");
                        assert_eq!(clamped, want_clamped, "{what}");
                    }
                }
            }
        }
    }

    #[test]
    fn unaligned_sources_transpose_like_aligned_ones() {
        let (rows, cols) = (9, 11);
        let src = values(rows * cols, DType::F32);
        let mut shifted = vec![0u8];
        shifted.extend_from_slice(&src);
        let (want, _) = naive(&src, rows, cols, DType::F32, DType::F16);
        let mut got = vec![0u8; want.len()];
        transpose_rows_into(
            &shifted[1..],
            rows,
            cols,
            DType::F32,
            DType::F16,
            0,
            &mut got,
        );
        assert_eq!(got, want);
    }

    /// With fewer strips than threads want, strips are cut into bands of source rows: for any
    /// number of threads (and so of bands, whole tiles each and a partial last one), the
    /// output and the count of clamped values are the transpose's.
    #[test]
    fn strips_cut_into_bands_write_the_whole_transpose() {
        let floats = [DType::F32, DType::F16, DType::BF16];
        for (rows, cols) in [
            (5 * TILE_ROWS + 3, 3),
            (2 * TILE_ROWS, 130),
            (TILE_ROWS - 1, 2),
        ] {
            for (from, to) in floats.into_iter().flat_map(|f| floats.map(|t| (f, t))) {
                let src = values(rows * cols, from);
                let (want, want_clamped) = naive(&src, rows, cols, from, to);
                for threads in [1, 2, 3, 8] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    for store in [Store::Cached, Store::Streamed] {
                        let mut got = vec![0u8; want.len()];
                        let mut out: Vec<&mut [u8]> =
                            got.chunks_exact_mut(rows * to.size()).collect();
                        let clamped = pool.install(|| {
                            transpose_rows_to(&src, rows, cols, from, to, 0, &mut out, store)
                        });
                        let what = format!("{from} -> {to} {rows}x{cols}, {threads} threads");
                        assert!(got == want, "{what}, {store:?}");
                        assert_eq!(clamped, want_clamped, "{what}");
                    }
                }
            }
        }
    }
}
