//! The external data file written through a shared memory map of it (Linux, 64-bit): the
//! transposes and conversions write their tiles straight into the file's page-cache pages, so
//! the kernel does not copy every byte once more out of a write buffer, which was most of a
//! build's time.
//!
//! Before anything is mapped, the file gets its final size and the ranges the tensors will
//! fill are allocated on the disk (`fallocate`): a full disk is then an error naming the file,
//! before anything is written, instead of a `SIGBUS` when a page of the map cannot be backed.
//! Tensors declared without data are not allocated and stay holes, as the write path leaves
//! them. Where the file system cannot allocate ahead or the map fails, the caller falls back
//! to the write path ([`super::data_writer`]).
//!
//! A page touched for the first time costs a page fault; a populator thread takes them ahead
//! of the producer, [`CHUNK`] bytes at a time (`MADV_POPULATE_WRITE`, Linux 5.14 and later;
//! on older kernels the pages fault in as they are written), at most [`AHEAD`] chunks ahead,
//! and drops from the map (`MADV_DONTNEED`: the written data stays in the page cache, bound
//! for the disk) the pages the producer has gone past, so that the process does not keep the
//! whole output mapped.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};

use memmap2::{Advice, MmapOptions, MmapRaw, UncheckedAdvice};

use crate::weights::sink::{Sink, Store};
use crate::{Error, Result};

/// Bytes populated at a time; also the most one [`Sink::write_with`] is asked to produce
/// ([`Sink::room`]).
pub const CHUNK: u64 = 8 << 20;
/// Chunks the populator may have ready beyond the one being written.
const AHEAD: usize = 3;
/// Gaps between written ranges shorter than this (alignment padding) are allocated with them.
const MERGE_GAP: u64 = 1 << 16;

/// Linux's error numbers (the same on every architecture Linux runs 64-bit on).
const EINVAL: i32 = 22;
const ENOSPC: i32 = 28;
const EDQUOT: i32 = 122;

/// What the populator tells the producer.
enum Populated {
    /// Every byte to be written below this offset is in the map, writable.
    Below(u64),
    /// The kernel cannot populate ahead: pages fault in as they are written.
    Unsupported,
    /// Populating failed (memory, or a page the file system could not back).
    Failed(std::io::Error),
}

/// The producer's side: a [`Sink`] writing into the map at the current position.
pub struct MappedSink<'scope, 'p> {
    map: Arc<MmapRaw>,
    file: File,
    position: u64,
    /// Written bytes below this offset are populated (as far as the populator said).
    populated: u64,
    /// `None` once the populator has nothing more to say.
    ready: Option<Receiver<Populated>>,
    /// Everything below this offset is written and no longer touched: the populator may
    /// drop it from the map.
    done: Arc<AtomicU64>,
    populator: Option<ScopedJoinHandle<'scope, ()>>,
    path: &'p Path,
    progress: &'p indicatif::ProgressBar,
    /// A buffer given back after a [`Sink::lend`], lent again first.
    spare: Option<Vec<u8>>,
}

impl<'scope, 'p> MappedSink<'scope, 'p> {
    /// Sizes `file` (at `path`) to `len` bytes, allocates `ranges` (the byte ranges the
    /// tensors will fill, in order) on the disk, maps it and starts the populator in `scope`.
    /// `Ok(Err(file))` hands the file back where there is nothing to write (a build without
    /// weights) or this cannot be done here (not Linux, a file larger than the address space,
    /// no map, no allocation ahead on this file system); a disk too full for `ranges` is an
    /// error.
    pub fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        file: File,
        path: &'p Path,
        progress: &'p indicatif::ProgressBar,
        len: u64,
        ranges: &[(u64, u64)],
    ) -> Result<std::result::Result<MappedSink<'scope, 'p>, File>>
    where
        'p: 'scope,
    {
        if !cfg!(all(target_os = "linux", target_pointer_width = "64"))
            || ranges.iter().all(|(s, e)| e <= s)
            || usize::try_from(len).is_err()
        {
            return Ok(Err(file));
        }
        file.set_len(len).map_err(|e| Error::io(path, e))?;
        let map = match MmapOptions::new().len(len as usize).map_raw(&file) {
            Ok(map) => Arc::new(map),
            Err(_) => return Ok(Err(file)),
        };
        let ranges = merged(ranges);
        for &(start, end) in &ranges {
            match allocate(&file, start, end - start) {
                Ok(()) => {}
                Err(e) if matches!(e.raw_os_error(), Some(ENOSPC | EDQUOT)) => {
                    let total: u64 = ranges.iter().map(|(s, e)| e - s).sum();
                    return Err(Error::io(
                        path,
                        std::io::Error::new(
                            e.kind(),
                            format!("no room on the disk for the {total} bytes of weights ({e})"),
                        ),
                    ));
                }
                Err(_) => return Ok(Err(file)),
            }
        }
        let done = Arc::new(AtomicU64::new(0));
        let (tell, ready) = sync_channel(AHEAD - 1);
        let populator = {
            let (map, done) = (Arc::clone(&map), Arc::clone(&done));
            scope.spawn(move || populate(&map, &ranges, &done, &tell))
        };
        Ok(Ok(MappedSink {
            map,
            file,
            position: 0,
            populated: 0,
            ready: Some(ready),
            done,
            populator: Some(populator),
            path,
            progress,
            spare: None,
        }))
    }

    /// The file offset the next byte goes to.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Moves on to `offset` (at or after [`MappedSink::position`]): the bytes between are
    /// the file's zeros (allocated padding, or holes).
    pub fn skip_to(&mut self, offset: u64) -> Result<()> {
        if offset < self.position {
            return Err(Error::Graph(format!(
                "external data offset {offset} is before the end of the previous tensor ({})",
                self.position
            )));
        }
        self.position = offset;
        Ok(())
    }

    /// Stops the populator, unmaps the file and returns it. (A sink dropped without this,
    /// on an error, stops its populator the same way: it stops when nobody listens.)
    pub fn finish(mut self) -> Result<File> {
        // Dropping the receiver ends a populator waiting to say more.
        self.ready = None;
        if let Some(populator) = self.populator.take() {
            populator
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        }
        Ok(self.file)
    }

    /// The `len` bytes at the current position, populated (as far as the kernel can), for
    /// the producer to write into; the bytes before them are done with.
    fn claim(&mut self, len: usize) -> Result<&mut [u8]> {
        let end = self.position + len as u64;
        if end > self.map.len() as u64 {
            return Err(Error::Graph(format!(
                "{}: {len} bytes at offset {} go past the end of the planned data ({} bytes)",
                self.path.display(),
                self.position,
                self.map.len()
            )));
        }
        self.done.store(self.position, Ordering::Release);
        while self.populated < end {
            let Some(ready) = &self.ready else { break };
            match ready.recv() {
                Ok(Populated::Below(offset)) => self.populated = offset,
                Ok(Populated::Failed(e)) => {
                    return Err(Error::io(
                        self.path,
                        std::io::Error::new(
                            e.kind(),
                            format!("cannot back the mapped data file ({e})"),
                        ),
                    ))
                }
                Ok(Populated::Unsupported) | Err(_) => {
                    self.ready = None;
                    self.populated = u64::MAX;
                }
            }
        }
        // SAFETY: `position..end` lies within the map (checked above), which lives as long
        // as `self` (the `Arc`); the producer is the only one to reference its bytes, through
        // this borrow of `self`, one range at a time; the populator only passes the kernel
        // ranges of it (populating keeps the contents; dropping is for bytes below `done`,
        // which no borrow reaches any more).
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(self.position as usize), len)
        })
    }

    fn advance(&mut self, len: usize) {
        self.position += len as u64;
        self.progress.inc(len as u64);
    }
}

impl Sink for MappedSink<'_, '_> {
    fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let n = bytes.len().min(self.room());
            Store::Streamed.copy(self.claim(n)?, &bytes[..n]);
            Store::fence();
            self.advance(n);
            bytes = &bytes[n..];
        }
        Ok(())
    }

    fn write_with(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<usize> {
        let n = fill(self.claim(len)?);
        self.advance(len);
        Ok(n)
    }

    fn room(&self) -> usize {
        (CHUNK - self.position % CHUNK) as usize
    }

    fn streams(&self) -> bool {
        true
    }

    /// The buffer given back last when it holds `len` bytes, else new memory of `len` bytes:
    /// the map holds no blocks to lend, so the producer's working memory is its own, sized to
    /// what it asks (not a block, not advised onto huge pages: a quantizer's scratch is tens of
    /// KiB, and a whole block would put megabytes on the build's peak).
    fn lend(&mut self, len: usize) -> Result<Vec<u8>> {
        match self.spare.take() {
            Some(buffer) if buffer.len() >= len => Ok(buffer),
            _ => Ok(vec![0u8; len]),
        }
    }

    fn give_back(&mut self, buffer: Vec<u8>) {
        self.spare = Some(buffer);
    }
}

/// `ranges` (in order) with the short gaps between them closed.
fn merged(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(start, end) in ranges.iter().filter(|(s, e)| e > s) {
        match out.last_mut() {
            Some(last) if start <= last.1 + MERGE_GAP => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

/// The populator thread: populates `ranges` chunk by chunk, telling the producer how far it
/// got, and drops from the map what the producer is done with. Stops when the producer stops
/// listening.
fn populate(map: &MmapRaw, ranges: &[(u64, u64)], done: &AtomicU64, tell: &SyncSender<Populated>) {
    let mut dropped = 0u64;
    for &(start, end) in ranges {
        let mut at = start;
        while at < end {
            let chunk_end = ((at / CHUNK + 1) * CHUNK).min(end);
            let finished = done.load(Ordering::Acquire) / CHUNK * CHUNK;
            if finished > dropped {
                // SAFETY: the producer has written everything below `done` and holds no
                // borrow of it; on a shared file mapping MADV_DONTNEED only unmaps the pages
                // (their data, dirty or not, stays in the page cache and goes to the file).
                // A failure leaves them mapped, which is harmless.
                let _ = unsafe {
                    map.unchecked_advise_range(
                        UncheckedAdvice::DontNeed,
                        dropped as usize,
                        (finished - dropped) as usize,
                    )
                };
                dropped = finished;
            }
            let message = match map.advise_range(
                Advice::PopulateWrite,
                at as usize,
                (chunk_end - at) as usize,
            ) {
                Ok(()) => Populated::Below(chunk_end),
                Err(e) if e.raw_os_error() == Some(EINVAL) => Populated::Unsupported,
                Err(e) => Populated::Failed(e),
            };
            let last = !matches!(message, Populated::Below(_));
            if tell.send(message).is_err() || last {
                return;
            }
            at = chunk_end;
        }
    }
}

/// Allocates `len` bytes at `offset` of `file` on the disk (`fallocate`, keeping the
/// contents: zeros where there were none).
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn allocate(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::raw::c_int;
    extern "C" {
        fn fallocate(fd: c_int, mode: c_int, offset: i64, len: i64) -> c_int;
    }
    let (offset, len) = (
        i64::try_from(offset).map_err(std::io::Error::other)?,
        i64::try_from(len).map_err(std::io::Error::other)?,
    );
    // SAFETY: a plain system call on an open descriptor; mode 0 only allocates and extends.
    if unsafe { fallocate(file.as_raw_fd(), 0, offset, len) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Elsewhere nothing is mapped ([`MappedSink::start`] returns before allocating).
#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn allocate(_file: &File, _offset: u64, _len: u64) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::data_writer::DataSink;

    /// A new file at `path`, opened as a build opens its data file.
    fn read_write(path: &Path) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .unwrap()
    }

    #[test]
    fn short_gaps_are_merged_and_empty_ranges_dropped() {
        let ranges = [
            (0, 10),
            (20, 20),
            (64, 100),
            (100 + MERGE_GAP, 200 + MERGE_GAP),
        ];
        assert_eq!(merged(&ranges), vec![(0, 200 + MERGE_GAP)]);
        let far = [(0, 10), (11 + MERGE_GAP, 12 + MERGE_GAP)];
        assert_eq!(merged(&far), far.to_vec());
        assert!(merged(&[]).is_empty());
    }

    /// Tensors at their offsets, a gap larger than several chunks (a tensor declared without
    /// data) and writes of every kind: the mapped file holds the same bytes as the plan, the
    /// gap stays a hole, and the pages written are dropped from the map as it goes.
    #[test]
    fn mapped_writes_land_at_their_offsets_and_holes_stay_holes() {
        let chunk = CHUNK as usize;
        let bytes = |n: usize, seed: u8| -> Vec<u8> {
            (0..n).map(|i| (i as u8).wrapping_mul(29) ^ seed).collect()
        };
        let mut tensors: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut end = 0u64;
        for (i, (len, gap)) in [
            (100, 0),
            (3 * chunk + 5, 60),
            (chunk + 1, 1 << 16),
            (5, 4 * CHUNK),
            (7 * chunk, 3),
            (1, 0),
        ]
        .into_iter()
        .enumerate()
        {
            let offset = end + gap;
            tensors.push((offset, bytes(len, i as u8)));
            end = offset + len as u64;
        }
        let total = end + 10;
        let ranges: Vec<(u64, u64)> = tensors
            .iter()
            .map(|(o, b)| (*o, o + b.len() as u64))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let file = read_write(&path);
        let progress = indicatif::ProgressBar::hidden();
        std::thread::scope(|scope| {
            let mut sink = DataSink::start(scope, file, &path, &progress, total, &ranges).unwrap();
            let mapped = matches!(sink, DataSink::Mapped(_));
            assert_eq!(
                mapped,
                cfg!(all(target_os = "linux", target_pointer_width = "64")),
                "the temporary folder's file system cannot be mapped here"
            );
            for (i, (offset, data)) in tensors.iter().enumerate() {
                sink.skip_to(*offset).unwrap();
                if i % 2 == 0 {
                    sink.write(data).unwrap();
                } else {
                    let mut rest = &data[..];
                    while !rest.is_empty() {
                        // Pieces of what room allows, and one larger (a row wider than it).
                        let n = match rest.len() > chunk {
                            true => (sink.room() + chunk / 2).min(rest.len()),
                            false => sink.room().min(rest.len()),
                        };
                        let got = sink
                            .write_with(n, &mut |dst| {
                                dst.copy_from_slice(&rest[..n]);
                                3
                            })
                            .unwrap();
                        assert_eq!(got, 3);
                        rest = &rest[n..];
                    }
                }
                assert_eq!(sink.position(), offset + data.len() as u64);
            }
            let err = sink.skip_to(1).unwrap_err().to_string();
            assert!(
                err.contains("before the end of the previous tensor"),
                "{err}"
            );
            let lent = sink.lend(1000).unwrap();
            assert!(lent.len() >= 1000);
            let at = lent.as_ptr();
            sink.give_back(lent);
            let again = sink.lend(1000).unwrap();
            assert_eq!(again.as_ptr(), at, "the buffer lent before is lent again");
            sink.give_back(again);
            assert!(sink.lend(1001).unwrap().len() >= 1001);
            sink.finish().unwrap();
        });
        let file = std::fs::read(&path).unwrap();
        let mut want = vec![0u8; total as usize];
        for (offset, data) in &tensors {
            want[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
        }
        assert!(
            file == want,
            "the file differs from the tensors at their offsets"
        );
        assert_eq!(
            progress.position(),
            tensors.iter().map(|t| t.1.len() as u64).sum::<u64>()
        );
        #[cfg(unix)]
        {
            // The gap of four chunks before the fourth tensor was not allocated.
            use std::os::unix::fs::MetadataExt;
            let blocks = std::fs::metadata(&path).unwrap().blocks() * 512;
            assert!(
                blocks < total - 3 * CHUNK,
                "{blocks} bytes allocated of {total}"
            );
        }
    }

    /// Where files are mapped (elsewhere the write path checks its offsets).
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    #[test]
    fn writing_past_the_planned_length_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let file = read_write(&path);
        let progress = indicatif::ProgressBar::hidden();
        std::thread::scope(|scope| {
            let Ok(Ok(mut sink)) = MappedSink::start(scope, file, &path, &progress, 10, &[(0, 10)])
            else {
                panic!("the temporary folder's file system cannot be mapped here");
            };
            sink.write(&[1; 8]).unwrap();
            let err = sink.write(&[2; 3]).unwrap_err().to_string();
            assert!(err.contains("past the end of the planned data"), "{err}");
        });
    }
}
