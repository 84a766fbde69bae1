//! Where [`Evaluator::stream`](super::eval::Evaluator::stream) puts a tensor's bytes.

use crate::Result;

/// The destination of a streamed tensor: bytes are appended in order, either copied
/// ([`Sink::write`]) or produced straight into the sink's own memory ([`Sink::write_with`]),
/// which saves a copy when the sink is a write buffer.
pub trait Sink {
    /// Appends `bytes`.
    fn write(&mut self, bytes: &[u8]) -> Result<()>;

    /// Appends `len` bytes that `fill` writes into the slice it is given (exactly `len` bytes,
    /// zeroed or stale); returns what `fill` returned (a count of clamped values).
    fn write_with(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<usize> {
        let mut buf = vec![0u8; len];
        let n = fill(&mut buf);
        self.write(&buf)?;
        Ok(n)
    }

    /// How many bytes the next [`Sink::write_with`] should produce at most to go into the
    /// current buffer without starting a new one; producers that cannot split that finely
    /// ask for more.
    fn room(&self) -> usize {
        1 << 20
    }

    /// Whether the bytes written land in memory the producer does not read again (the data
    /// file's blocks, read once more only by the kernel's copy into the page cache, after a
    /// whole block is filled): producers may then store them around the CPU caches
    /// ([`Store::Streamed`]).
    fn streams(&self) -> bool {
        false
    }

    /// Lends at least `len` bytes of working memory (any content) for the producer to use
    /// between writes, taken back by [`Sink::give_back`]: a sink that keeps buffers of its own
    /// lends one of them, so that the producer's working memory is not taken on top of them.
    fn lend(&mut self, len: usize) -> Result<Vec<u8>> {
        Ok(vec![0u8; len])
    }

    /// Takes back a buffer [`Sink::lend`] gave.
    fn give_back(&mut self, buffer: Vec<u8>) {
        let _ = buffer;
    }
}

/// A closure receiving each piece.
impl<F: FnMut(&[u8]) -> Result<()>> Sink for F {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self(bytes)
    }
}

/// Collects the whole tensor.
impl Sink for Vec<u8> {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.extend_from_slice(bytes);
        Ok(())
    }

    fn write_with(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<usize> {
        let start = self.len();
        self.resize(start + len, 0);
        Ok(fill(&mut self[start..]))
    }

    fn room(&self) -> usize {
        usize::MAX
    }
}

/// A sink whose buffers end every `every` bytes, so that tensors arrive in odd pieces.
/// How a producer stores bytes bound for a sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// Through the CPU caches: the bytes are read again soon (a buffer, a quantizer's tile).
    Cached,
    /// Around the caches where the CPU can (x86-64's non-temporal stores, 16-byte aligned):
    /// for memory the producer does not read again ([`Sink::streams`]), where a store that
    /// does not first load each cache line it fills takes half the memory traffic. Slower
    /// than [`Store::Cached`] for bytes read soon.
    Streamed,
}

impl Store {
    /// The store a sink asks for ([`Sink::streams`]).
    pub fn of(sink: &dyn Sink) -> Store {
        match sink.streams() {
            true => Store::Streamed,
            false => Store::Cached,
        }
    }

    /// Copies `src` into `dst` (as long): streamed, the aligned middle with streaming stores,
    /// which another thread sees only after a [fence](Store::fence) by this one.
    ///
    /// Panics if the lengths differ.
    pub fn copy(self, dst: &mut [u8], src: &[u8]) {
        assert_eq!(dst.len(), src.len(), "Store::copy: lengths");
        #[cfg(target_arch = "x86_64")]
        if self == Store::Streamed {
            let head = dst.as_ptr().align_offset(16).min(dst.len());
            let body = (dst.len() - head) / 16 * 16;
            let (start, rest) = dst.split_at_mut(head);
            let (middle, end) = rest.split_at_mut(body);
            start.copy_from_slice(&src[..head]);
            if body > 0 {
                // SAFETY: SSE2 is part of x86-64; `middle` starts 16-byte aligned (it is not
                // empty) and is as long as its source piece, a multiple of 16 bytes, as the
                // function requires.
                unsafe { x86::stream_copy(middle, &src[head..head + body]) };
            }
            end.copy_from_slice(&src[head + body..]);
            return;
        }
        dst.copy_from_slice(src);
    }

    /// Makes the streaming stores made so far reach memory before any store that follows
    /// (what another thread, told of it by that store, then reads); nothing elsewhere.
    pub fn fence() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE is part of x86-64; a fence reads and writes nothing.
        unsafe {
            std::arch::x86_64::_mm_sfence()
        }
    }
}

/// The streaming stores of [`Store::Streamed`].
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Copies `src` into `dst` with non-temporal stores, 16 bytes at a time.
    ///
    /// # Safety
    /// The CPU must have SSE2 (every x86-64 does). Panics unless `dst` is 16-byte aligned and
    /// as long as `src`, a multiple of 16 bytes.
    #[target_feature(enable = "sse2")]
    pub(super) unsafe fn stream_copy(dst: &mut [u8], src: &[u8]) {
        assert!(dst.len() == src.len() && src.len() % 16 == 0 && dst.as_ptr() as usize % 16 == 0);
        for (d, s) in dst.chunks_exact_mut(16).zip(src.chunks_exact(16)) {
            // SAFETY: `d` is 16 bytes at a 16-byte boundary, `s` 16 bytes (unaligned load).
            unsafe { _mm_stream_si128(d.as_mut_ptr().cast(), _mm_loadu_si128(s.as_ptr().cast())) };
        }
    }
}

#[cfg(test)]
pub(super) struct Uneven {
    /// What was written.
    pub(super) bytes: Vec<u8>,
    /// The size of the buffers.
    pub(super) every: usize,
}

#[cfg(test)]
impl Sink for Uneven {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }

    fn room(&self) -> usize {
        self.every - self.bytes.len() % self.every
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_copies_are_copies_at_any_place_and_length() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
        for shift in 0..17 {
            for len in [0, 1, 15, 16, 17, 31, 64, 100, 255, 283] {
                for store in [Store::Cached, Store::Streamed] {
                    let mut buffer = vec![0u8; 320];
                    store.copy(&mut buffer[shift..shift + len], &src[..len]);
                    Store::fence();
                    assert_eq!(
                        &buffer[shift..shift + len],
                        &src[..len],
                        "{store:?} {shift} {len}"
                    );
                    assert!(buffer[..shift]
                        .iter()
                        .chain(&buffer[shift + len..])
                        .all(|&b| b == 0));
                }
            }
        }
    }
}
