//! Letting go of the pages of mapped input files once their bytes are written out.
//!
//! A build reads every weight from the memory-mapped checkpoint (or an imported model's external
//! data file) and writes it to its own data file. Each page it reads stays mapped into the
//! process until the map goes, at exit, so the build's resident set grew to the whole
//! checkpoint (the page cache holds those pages either way; the process's RSS counted them too,
//! and exit spent milliseconds tearing the mappings down). While the data file is written
//! ([`Evaluator::unmap_when_read`](super::eval::Evaluator::unmap_when_read)), the pages around
//! every input tensor are unmapped as soon as its initializer is written, and the pages of a
//! tensor streamed in place (converted, not transposed) as soon as each piece of it is.
//!
//! Unmapping is `MADV_DONTNEED` on a read-only shared file mapping: it removes the page-table
//! entries and nothing else. The pages stay in the page cache, and a later read of the same
//! bytes (a tied embedding read again for the LM head) maps them again, with the same contents:
//! what is read never changes, only what stays mapped. Linux only; elsewhere nothing is
//! unmapped.

use std::ops::Range;

use memmap2::Mmap;

/// After a tensor is written, the span of its bytes is widened to this alignment before it is
/// unmapped: a page fault on a file cached in large folios maps the whole folio (up to 2 MiB on
/// x86-64), so reading the 2 KiB of a norm's weight maps the pages around it as well.
pub(super) const AROUND: usize = 2 << 20;

/// A piece of a tensor streamed in place is narrowed to this alignment (a multiple of every
/// page size Linux uses) before it is unmapped, so that the bytes after it, still to be read,
/// stay mapped.
pub(super) const WITHIN: usize = 64 << 10;

/// How the ends of a span are rounded before it is unmapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Round {
    /// Outwards, to multiples of this many bytes from the start of the map.
    Out(usize),
    /// Inwards, to multiples of this many bytes from the start of the map.
    In(usize),
}

/// Unmaps the pages of `span` (addresses), rounded as `round` says and kept within `map`, when
/// `map` holds the whole span; returns whether it does (nothing is done otherwise).
pub(super) fn unmap(map: &Mmap, span: &Range<usize>, round: Round) -> bool {
    let base = map.as_ptr() as usize;
    if span.start < base || span.end > base + map.len() || span.is_empty() {
        return false;
    }
    let (start, end) = (span.start - base, span.end - base);
    let (start, end) = match round {
        Round::Out(align) => (start / align * align, end.div_ceil(align) * align),
        Round::In(align) => (start.div_ceil(align) * align, end / align * align),
    };
    let end = end.min(map.len());
    if end > start {
        drop_pages(map, start, end - start);
    }
    true
}

/// `MADV_DONTNEED` on bytes `offset..offset + len` of `map` (a failure leaves them mapped,
/// which is harmless).
#[cfg(target_os = "linux")]
fn drop_pages(map: &Mmap, offset: usize, len: usize) {
    // SAFETY: `map` is a read-only shared mapping of a file (memmap2's `Mmap::map`). On such a
    // mapping MADV_DONTNEED only removes page-table entries: the next read of those bytes maps
    // the same file pages again, so every slice borrowed from the map keeps its contents.
    let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len) };
}

/// Elsewhere the pages stay mapped until the map is dropped.
#[cfg(not(target_os = "linux"))]
fn drop_pages(_map: &Mmap, _offset: usize, _len: usize) {}

#[cfg(all(test, target_os = "linux"))]
/// The resident size in KiB of this process's mapping that starts at `address`, from
/// /proc/self/smaps.
pub(super) fn resident_kib(address: usize) -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let start = format!("{address:x}-");
    let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
    assert!(lines.next().is_some(), "no mapping at {address:x}");
    lines
        .find_map(|l| l.strip_prefix("Rss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A checkpoint of one file holding `tensors` (name, dtype, shape, little-endian bytes), in a
/// new temporary folder, opened as a build opens one.
#[cfg(all(test, target_os = "linux"))]
pub(super) fn checkpoint(
    tensors: &[(&str, crate::ir::DType, Vec<usize>, Vec<u8>)],
) -> (tempfile::TempDir, super::store::TensorStore) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let start = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype.to_string().to_uppercase(), "shape": shape,
                "data_offsets": [start, data.len()]}),
        );
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&data);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    std::fs::write(&path, file).unwrap();
    let store = super::store::TensorStore::open(&crate::source::WeightFiles::Single(path)).unwrap();
    (dir, store)
}

/// Unmaps all of `map` and checks that nothing of it stays resident.
#[cfg(all(test, target_os = "linux"))]
pub(super) fn unmap_all(map: &Mmap) {
    let base = map.as_ptr() as usize;
    assert!(unmap(map, &(base..base + map.len()), Round::Out(AROUND)));
    assert_eq!(resident_kib(base), 0);
}

/// A sink that collects what it is given and notes the most of the mapping at `base` that was
/// resident whenever it was given a piece.
#[cfg(all(test, target_os = "linux"))]
pub(super) struct Watching {
    /// The mapping watched.
    pub(super) base: usize,
    /// What was written.
    pub(super) bytes: Vec<u8>,
    /// The most KiB of the mapping resident at a write.
    pub(super) most: usize,
}

#[cfg(all(test, target_os = "linux"))]
impl super::sink::Sink for Watching {
    fn write(&mut self, bytes: &[u8]) -> crate::Result<()> {
        self.most = self.most.max(resident_kib(self.base));
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;

    fn mapped_file(len: usize) -> (tempfile::NamedTempFile, Mmap) {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        file.write_all(&bytes).unwrap();
        file.flush().unwrap();
        // SAFETY: a private temporary file nothing else writes.
        let map = unsafe { Mmap::map(file.as_file()) }.unwrap();
        (file, map)
    }

    #[test]
    fn unmapped_pages_leave_the_resident_set_and_read_back_the_same() {
        let len = 3 * AROUND + 12_345;
        let (_file, map) = mapped_file(len);
        let base = map.as_ptr() as usize;
        let sum = |m: &Mmap| m.iter().map(|&b| b as u64).sum::<u64>();
        let before = sum(&map);
        assert!(resident_kib(base) >= len / 1024 - 4);
        // A few bytes in the middle: the 2 MiB around them go.
        assert!(unmap(
            &map,
            &(base + AROUND + 10..base + AROUND + 20),
            Round::Out(AROUND)
        ));
        assert!(resident_kib(base) <= (len - AROUND) / 1024 + 4);
        // Inwards: a span shorter than the alignment unmaps nothing.
        let resident = resident_kib(base);
        assert!(unmap(
            &map,
            &(base + 10..base + WITHIN - 1),
            Round::In(WITHIN)
        ));
        assert_eq!(resident_kib(base), resident);
        // The whole map, past its end rounded outwards: nothing stays resident.
        assert!(unmap(&map, &(base..base + len), Round::Out(AROUND)));
        assert_eq!(resident_kib(base), 0);
        // Reading again maps the same bytes.
        assert_eq!(sum(&map), before);
        assert!(resident_kib(base) > 0);
    }

    #[test]
    fn spans_outside_the_map_are_left_alone() {
        let (_file, map) = mapped_file(100_000);
        let base = map.as_ptr() as usize;
        let _ = map.iter().map(|&b| b as u64).sum::<u64>();
        let resident = resident_kib(base);
        let other = vec![1u8; 10_000];
        let outside = other.as_ptr() as usize;
        assert!(!unmap(
            &map,
            &(outside..outside + other.len()),
            Round::Out(AROUND)
        ));
        assert!(!unmap(
            &map,
            &(base + 10..base + 100_001),
            Round::Out(AROUND)
        ));
        assert!(!unmap(&map, &(base + 10..base + 10), Round::Out(AROUND)));
        assert_eq!(resident_kib(base), resident);
        assert_eq!(other.iter().map(|&b| b as usize).sum::<usize>(), 10_000);
    }
}
