//! The external data file, written while the next tensor is read, transposed and converted.
//!
//! [`DataSink`]: tensors are appended to fixed-size blocks ([`BLOCK`] bytes) taken from a pool
//! of [`BLOCKS`] buffers; a full block goes to the writer thread, which writes it at its offset
//! with `write(2)`, [`PIECE`] bytes a call, and hands the buffer back. The pool bounds both the
//! memory (`BLOCKS · BLOCK` bytes) and how far the producer runs ahead. Padding between
//! consecutive tensors is written as zeros inside a block, so writes stay large and, blocks
//! starting at multiples of [`BLOCK`], aligned; a gap too large for the current block (tensors
//! declared without data) is left as a hole. Before anything is written, the file gets its
//! final size and the ranges the tensors fill are allocated on the disk (`fallocate`, where
//! the file system can): a full disk is an error naming the file before the first byte.
//!
//! Two things keep its copies few: a tensor written unchanged and at least two blocks long (an
//! embedding kept in its dtype) is written straight from where it lies (the mapped checkpoint)
//! at its offset, by the producer, instead of being copied into blocks first; and the blocks
//! ask for transparent huge pages, so that the kernel's copy out of them does not walk page
//! tables every 4 KiB. The producers fill blocks with streaming stores ([`Sink::streams`]).
//!
//! Why `write(2)` in pieces and not a shared map of the file: the kernel gives a write of `n`
//! bytes page-cache folios of at most `n` bytes, and a map's faults folios of up to 2 MiB. On a
//! virtual machine that hands free memory back to its host (free page reporting), large folios
//! are memory the host must back again fault by fault, while small ones come from what was
//! freed last; docs/performance.md has the figures.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::thread::{Scope, ScopedJoinHandle};

use crate::weights::sink::Sink;
use crate::{Error, Result};

/// Bytes per block: the most one [`Sink::write_with`] is asked to produce ([`Sink::room`]).
pub const BLOCK: usize = 4 << 20;
/// Blocks in the pool: one being filled, the others queued or being written.
pub const BLOCKS: usize = 4;
/// Bytes per `write(2)` call: folios of at most this size (see the module's docs): as fast as
/// smaller writes, where larger ones are slower on a VM whose free memory goes back to its host.
pub const PIECE: usize = 256 << 10;
/// Gaps between written ranges shorter than this (alignment padding) are allocated with them.
const MERGE_GAP: u64 = 1 << 16;

/// Linux's error numbers for a full disk and an exhausted quota (asm-generic's, which x86-64
/// and aarch64 use; elsewhere a full disk is the first write's error instead).
const ENOSPC: i32 = 28;
const EDQUOT: i32 = 122;

/// A block on its way to the writer: `data[..len]` goes to byte `offset` of the file.
struct Block {
    offset: u64,
    data: Vec<u8>,
    len: usize,
}

/// Where a build's tensors go: a [`Sink`] that fills blocks and queues them for the writer
/// thread.
pub struct DataSink<'scope, 'p> {
    /// The block being filled (empty `data` before the first byte).
    current: Block,
    queue: Option<SyncSender<Block>>,
    free: Receiver<Vec<u8>>,
    /// Buffers given back after a [`Sink::lend`], used before any other.
    spare: Vec<Vec<u8>>,
    allocated: usize,
    writer: Option<ScopedJoinHandle<'scope, Result<File>>>,
    path: &'p Path,
    progress: &'p indicatif::ProgressBar,
    /// The file again, for the writes that bypass the blocks (`None` where the handle could
    /// not be duplicated or the platform has no positioned writes: everything goes through
    /// blocks then).
    direct: Option<File>,
    /// Bytes written by [`DataSink::write_direct`].
    direct_bytes: u64,
}

impl<'scope, 'p> DataSink<'scope, 'p> {
    /// Starts writing `file` (at `path`, named in errors), to be `len` bytes long, of which
    /// the tensors fill `ranges` (start and end offsets, in order), with the writer thread in
    /// `scope`. The file gets its size and `ranges` are allocated on the disk first, where the
    /// file system can: a disk without room for them is an error, before anything is written.
    pub fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        file: File,
        path: &'p Path,
        progress: &'p indicatif::ProgressBar,
        len: u64,
        ranges: &[(u64, u64)],
    ) -> Result<DataSink<'scope, 'p>>
    where
        'p: 'scope,
    {
        file.set_len(len).map_err(|e| Error::io(path, e))?;
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
                // No allocation ahead on this file system: the writes allocate.
                Err(_) => break,
            }
        }
        let direct = if cfg!(unix) {
            file.try_clone().ok()
        } else {
            None
        };
        let (queue, blocks) = sync_channel(BLOCKS);
        let (give_back, free) = channel();
        let writer = scope.spawn(move || write_blocks(file, path, blocks, give_back));
        Ok(DataSink {
            current: Block {
                offset: 0,
                data: Vec::new(),
                len: 0,
            },
            queue: Some(queue),
            free,
            spare: Vec::new(),
            allocated: 0,
            writer: Some(writer),
            path,
            progress,
            direct,
            direct_bytes: 0,
        })
    }

    /// The file offset the next byte goes to.
    pub fn position(&self) -> u64 {
        self.current.offset + self.current.len as u64
    }

    /// Moves on to `offset` (at or after [`DataSink::position`]): zeros up to it when they fit
    /// in the current block, a hole otherwise.
    pub fn skip_to(&mut self, offset: u64) -> Result<()> {
        let gap = offset.checked_sub(self.position()).ok_or_else(|| {
            Error::Graph(format!(
                "external data offset {offset} is before the end of the previous tensor ({})",
                self.position()
            ))
        })?;
        match usize::try_from(gap) {
            Ok(gap) if self.current.len > 0 && gap <= BLOCK - self.current.len => {
                let len = self.current.len;
                self.current.data[len..len + gap].fill(0);
                self.current.len += gap;
            }
            _ => {
                self.flush()?;
                self.current.offset = offset;
            }
        }
        Ok(())
    }

    /// Writes what is left, waits for the writer and returns the file.
    pub fn finish(mut self) -> Result<File> {
        self.flush()?;
        self.queue = None;
        self.join_writer()
    }

    /// Queues the current block (if it holds anything) and starts an empty one after it.
    fn flush(&mut self) -> Result<()> {
        if self.current.len == 0 {
            return Ok(());
        }
        let next = self.position();
        let block = std::mem::replace(
            &mut self.current,
            Block {
                offset: next,
                data: Vec::new(),
                len: 0,
            },
        );
        self.send(block)
    }

    fn send(&mut self, block: Block) -> Result<()> {
        let queue = self.queue.as_ref().expect("the queue lives until finish");
        if queue.send(block).is_err() {
            // The writer stopped: its error says why.
            return Err(self.writer_failure());
        }
        Ok(())
    }

    /// Makes sure the current block has a buffer.
    fn ensure_buffer(&mut self) -> Result<()> {
        if self.current.data.is_empty() {
            self.current.data = self.take_buffer()?;
        }
        Ok(())
    }

    /// A buffer of the pool: a spare one, a new one while the pool is not full, else the next
    /// one the writer hands back.
    fn take_buffer(&mut self) -> Result<Vec<u8>> {
        if let Some(buffer) = self.spare.pop() {
            return Ok(buffer);
        }
        if self.allocated < BLOCKS {
            self.allocated += 1;
            let mut block = vec![0u8; BLOCK];
            advise_huge_pages(&mut block);
            return Ok(block);
        }
        match self.free.recv() {
            Ok(buffer) => Ok(buffer),
            Err(_) => Err(self.writer_failure()),
        }
    }

    /// The writer's result once it has stopped early.
    fn writer_failure(&mut self) -> Error {
        self.queue = None;
        match self.join_writer() {
            Err(e) => e,
            Ok(_) => Error::Graph(format!(
                "the writer of {} stopped before the last block",
                self.path.display()
            )),
        }
    }

    fn join_writer(&mut self) -> Result<File> {
        let writer = self.writer.take().ok_or_else(|| {
            Error::Graph(format!(
                "the writer of {} already stopped",
                self.path.display()
            ))
        })?;
        writer
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

impl DataSink<'_, '_> {
    /// Writes `bytes` at [`DataSink::position`] from this thread, past the blocks (the
    /// current one is empty): a positioned write, so the writer thread's own position and
    /// the blocks it has queued are untouched.
    fn write_direct(&mut self, bytes: &[u8]) -> Result<()> {
        debug_assert_eq!(self.current.len, 0);
        let at = self.position();
        let file = self.direct.as_ref().expect("checked by the caller");
        #[cfg(unix)]
        let written = bytes
            .chunks(PIECE)
            .zip((at..).step_by(PIECE))
            .try_for_each(|(piece, at)| std::os::unix::fs::FileExt::write_all_at(file, piece, at));
        #[cfg(not(unix))]
        let written: std::io::Result<()> = Err(std::io::Error::other(format!(
            "no positioned writes here ({file:?} at {at})"
        )));
        written.map_err(|e| Error::io(self.path, e))?;
        self.current.offset += bytes.len() as u64;
        self.direct_bytes += bytes.len() as u64;
        self.progress.inc(bytes.len() as u64);
        Ok(())
    }

    /// Copies `bytes` into blocks, queueing each block as it fills.
    fn write_blocks(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            self.ensure_buffer()?;
            let at = self.current.len;
            let n = bytes.len().min(BLOCK - at);
            self.current.data[at..at + n].copy_from_slice(&bytes[..n]);
            self.current.len += n;
            self.progress.inc(n as u64);
            bytes = &bytes[n..];
            if self.current.len == BLOCK {
                self.flush()?;
            }
        }
        Ok(())
    }
}

impl Sink for DataSink<'_, '_> {
    fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        if bytes.len() >= 2 * BLOCK && self.direct.is_some() {
            // Top up the current block (blocks stay aligned), queue it, write the whole
            // blocks' worth that follows straight from `bytes`, the rest into a new block.
            let top = (BLOCK - self.current.len) % BLOCK;
            self.write_blocks(&bytes[..top])?;
            self.flush()?;
            let n = (bytes.len() - top) / BLOCK * BLOCK;
            self.write_direct(&bytes[top..top + n])?;
            bytes = &bytes[top + n..];
        }
        self.write_blocks(bytes)
    }

    fn write_with(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<usize> {
        if len > BLOCK - self.current.len {
            self.flush()?;
        }
        if len > BLOCK {
            // Larger than any block (one output row of a huge matrix): a block of its own.
            let mut data = vec![0u8; len];
            let n = fill(&mut data);
            let offset = self.position();
            self.send(Block { offset, data, len })?;
            self.current.offset += len as u64;
            self.progress.inc(len as u64);
            return Ok(n);
        }
        self.ensure_buffer()?;
        let at = self.current.len;
        let n = fill(&mut self.current.data[at..at + len]);
        self.current.len += len;
        self.progress.inc(len as u64);
        if self.current.len == BLOCK {
            self.flush()?;
        }
        Ok(n)
    }

    fn room(&self) -> usize {
        BLOCK - self.current.len
    }

    /// Streaming stores: a block is read once more, by the kernel's copy into the page cache,
    /// after the producer has filled all of it (f16 and bf16 builds of the bench checkpoint,
    /// interleaved: 0.227 → 0.224 s and 0.221 → 0.213 s against stores through the caches).
    fn streams(&self) -> bool {
        true
    }

    /// One of the pool's blocks when `len` fits in one (the pool then has one block fewer
    /// for writing until it is given back), else new memory.
    fn lend(&mut self, len: usize) -> Result<Vec<u8>> {
        if len > BLOCK {
            return Ok(vec![0u8; len]);
        }
        self.take_buffer()
    }

    fn give_back(&mut self, buffer: Vec<u8>) {
        if buffer.len() == BLOCK {
            self.spare.push(buffer);
        }
    }
}

/// Asks the kernel to back the 2 MiB-aligned part of `buffer` with transparent huge pages (a
/// hint: nothing changes where they are off or the call fails). A fresh block is memory the
/// allocator has just mapped and nothing has touched yet, so its pages are faulted in huge.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn advise_huge_pages(buffer: &mut [u8]) {
    const HUGE: usize = 2 << 20;
    /// Its value in Linux's generic and x86 headers.
    const MADV_HUGEPAGE: std::os::raw::c_int = 14;
    extern "C" {
        fn madvise(
            addr: *mut std::os::raw::c_void,
            len: usize,
            advice: std::os::raw::c_int,
        ) -> std::os::raw::c_int;
    }
    let start = buffer.as_mut_ptr();
    let skip = start.align_offset(HUGE);
    if skip >= buffer.len() {
        return;
    }
    let len = (buffer.len() - skip) / HUGE * HUGE;
    if len == 0 {
        return;
    }
    // SAFETY: the range lies within `buffer` (`skip + len <= buffer.len()`) and starts on a
    // page boundary, as madvise requires; MADV_HUGEPAGE only changes which page size backs
    // the range, never its contents, so the borrow of `buffer` stays valid. The result is
    // ignored on purpose (an older kernel or THP turned off: the pages stay small).
    unsafe {
        madvise(start.add(skip).cast(), len, MADV_HUGEPAGE);
    }
}

/// Elsewhere blocks keep the platform's page size.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn advise_huge_pages(_buffer: &mut [u8]) {}

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

/// Elsewhere the writes allocate.
#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn allocate(_file: &File, _offset: u64, _len: u64) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

/// The writer thread: writes each block at its offset and hands its buffer back.
fn write_blocks(
    mut file: File,
    path: &Path,
    blocks: Receiver<Block>,
    give_back: Sender<Vec<u8>>,
) -> Result<File> {
    let mut position = 0u64;
    for block in blocks {
        if block.offset != position {
            file.seek(SeekFrom::Start(block.offset))
                .map_err(|e| Error::io(path, e))?;
        }
        for piece in block.data[..block.len].chunks(PIECE) {
            file.write_all(piece).map_err(|e| Error::io(path, e))?;
        }
        position = block.offset + block.len as u64;
        if block.data.len() == BLOCK {
            // Ignored when the producer is gone (it failed and no longer needs buffers).
            let _ = give_back.send(block.data);
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `tensors` ((offset, bytes), in order, written through `write` or `write_with`
    /// alternately) and returns the file's bytes.
    fn written(tensors: &[(u64, Vec<u8>)], total: u64) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let file = File::create(&path).unwrap();
        let progress = indicatif::ProgressBar::hidden();
        let ranges: Vec<(u64, u64)> = tensors
            .iter()
            .map(|(o, b)| (*o, o + b.len() as u64))
            .collect();
        std::thread::scope(|scope| {
            let mut sink = DataSink::start(scope, file, &path, &progress, total, &ranges).unwrap();
            for (i, (offset, bytes)) in tensors.iter().enumerate() {
                sink.skip_to(*offset).unwrap();
                if i % 2 == 0 {
                    sink.write(bytes).unwrap();
                } else {
                    for piece in bytes.chunks(3 << 20) {
                        let n = sink
                            .write_with(piece.len(), &mut |dst| {
                                dst.copy_from_slice(piece);
                                7
                            })
                            .unwrap();
                        assert_eq!(n, 7);
                    }
                }
                assert_eq!(sink.position(), offset + bytes.len() as u64);
            }
            // The 7-block tensor, written unchanged, went past the blocks.
            assert!(sink.direct_bytes >= 6 * BLOCK as u64 || sink.direct.is_none());
            sink.finish().unwrap();
        });
        assert_eq!(
            progress.position(),
            tensors.iter().map(|t| t.1.len() as u64).sum::<u64>()
        );
        std::fs::read(&path).unwrap()
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

    #[test]
    fn blocks_land_at_their_offsets_with_zeros_and_holes_between() {
        let bytes = |n: usize, seed: u8| -> Vec<u8> {
            (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
        };
        // Small padding, tensors spanning several blocks, a row larger than a block, a gap
        // larger than a block, and enough data to cycle through the pool several times.
        let mut tensors = Vec::new();
        let mut end = 0u64;
        for (i, (len, gap)) in [
            (100, 0),
            (3 * BLOCK + 5, 60),
            (BLOCK + 1, 1 << 16),
            (5, 2 * BLOCK as u64),
            (7 * BLOCK, 3),
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
        let file = written(&tensors, total);
        let mut want = vec![0u8; total as usize];
        for (offset, data) in &tensors {
            want[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
        }
        assert!(
            file == want,
            "the file differs from the tensors at their offsets"
        );
    }

    #[test]
    fn lent_memory_is_a_block_of_the_pool_and_writing_goes_on_around_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let file = File::create(&path).unwrap();
        let progress = indicatif::ProgressBar::hidden();
        let data: Vec<u8> = (0..6 * BLOCK + 17).map(|i| (i % 251) as u8).collect();
        let len = data.len() as u64;
        std::thread::scope(|scope| {
            let mut sink =
                DataSink::start(scope, file, &path, &progress, len, &[(0, len)]).unwrap();
            sink.write(&data[..BLOCK / 2]).unwrap();
            let mut lent = sink.lend(1000).unwrap();
            assert_eq!(lent.len(), BLOCK);
            // Written while the block is lent: the pool turns over with one block fewer
            // (pieces of one block, which go through the pool, not past it).
            for piece in data[BLOCK / 2..5 * BLOCK].chunks(BLOCK) {
                sink.write(piece).unwrap();
            }
            lent[..3].copy_from_slice(b"abc");
            sink.give_back(lent);
            sink.write(&data[5 * BLOCK..]).unwrap();
            assert_eq!(sink.allocated, BLOCKS);
            let huge = sink.lend(BLOCK + 1).unwrap();
            assert_eq!(huge.len(), BLOCK + 1);
            sink.give_back(huge);
            assert!(sink.spare.len() <= 1);
            sink.finish().unwrap();
        });
        assert!(std::fs::read(&path).unwrap() == data);
    }

    #[test]
    fn huge_page_advice_keeps_the_contents_of_any_buffer() {
        // Fresh, already written, shorter than a huge page, and at an odd start.
        let mut fresh = vec![0u8; BLOCK];
        advise_huge_pages(&mut fresh);
        fresh[BLOCK - 1] = 9;
        assert!(fresh[..BLOCK - 1].iter().all(|&b| b == 0) && fresh[BLOCK - 1] == 9);
        let mut written: Vec<u8> = (0..3 * BLOCK + 7).map(|i| (i % 253) as u8).collect();
        let want = written.clone();
        advise_huge_pages(&mut written[1..]);
        advise_huge_pages(&mut written[..100]);
        advise_huge_pages(&mut []);
        assert!(written == want);
    }

    #[test]
    fn offsets_going_backwards_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let file = File::create(&path).unwrap();
        let progress = indicatif::ProgressBar::hidden();
        std::thread::scope(|scope| {
            let mut sink = DataSink::start(scope, file, &path, &progress, 3, &[(0, 3)]).unwrap();
            sink.write(&[1, 2, 3]).unwrap();
            let err = sink.skip_to(2).unwrap_err().to_string();
            assert!(
                err.contains("before the end of the previous tensor"),
                "{err}"
            );
        });
    }
}
