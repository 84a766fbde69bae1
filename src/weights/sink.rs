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
