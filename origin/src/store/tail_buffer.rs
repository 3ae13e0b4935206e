//! The hot tail of a stream, kept in memory until it is written to the
//! stream's file in bulk.
//!
//! An append is durable once it is in the WAL; writing it to the stream's own
//! file right away would cost a syscall per append for nothing. So appended
//! bytes wait here and go to the file in one write when a stream has gathered
//! [`FLUSH_BYTES`], when all buffers together pass the writer's global limit,
//! and before every checkpoint. Live readers, who read the newest bytes, are
//! served from here.
//!
//! The bytes are copied into one contiguous buffer rather than kept as the
//! request bodies: a small body's `Bytes` can pin a much larger receive
//! buffer, and holding hundreds of them per stream multiplied memory by that
//! ratio. After a flush the buffer is released, so an idle stream holds none.
//!
//! The file always holds exactly `[0, flushed)`; the buffer holds
//! `[flushed, flushed + pending)`.

use bytes::Bytes;

/// A stream's buffer is written to its file once it holds this much.
pub const FLUSH_BYTES: u64 = 64 * 1024;

#[derive(Debug, Default)]
pub struct TailBuffer {
    flushed: u64,
    bytes: Vec<u8>,
}

/// Where the bytes of a range are.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Located {
    /// `[start, end)` to read from the file, if any.
    pub file: Option<(u64, u64)>,
    /// The rest, copied out of memory.
    pub memory: Option<Bytes>,
}

impl TailBuffer {
    /// A buffer for a stream whose file already holds `flushed` bytes.
    pub fn new(flushed: u64) -> Self {
        TailBuffer {
            flushed,
            bytes: Vec::new(),
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    pub fn pending(&self) -> u64 {
        self.bytes.len() as u64
    }

    pub fn flushed(&self) -> u64 {
        self.flushed
    }

    /// The bytes to write to the file at [`TailBuffer::flushed`], without
    /// removing them (readers still find them here while they are written).
    pub fn unflushed(&self) -> (u64, Bytes) {
        (self.flushed, Bytes::copy_from_slice(&self.bytes))
    }

    /// Drops the first `n` pending bytes, which are now in the file.
    pub fn mark_flushed(&mut self, n: u64) {
        self.flushed += n;
        if n as usize == self.bytes.len() {
            self.bytes = Vec::new();
        } else {
            self.bytes.drain(..n as usize);
        }
    }

    /// Where `[start, end)` is, for a range within the stream.
    pub fn locate(&self, start: u64, end: u64) -> Located {
        let mut located = Located::default();
        if start < self.flushed {
            located.file = Some((start, end.min(self.flushed)));
        }
        if end > self.flushed {
            let from = (start.max(self.flushed) - self.flushed) as usize;
            let to = (end - self.flushed) as usize;
            located.memory = Some(Bytes::copy_from_slice(&self.bytes[from..to]));
        }
        located
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gather(b: &TailBuffer, file: &[u8], start: u64, end: u64) -> Vec<u8> {
        let l = b.locate(start, end);
        let mut out = Vec::new();
        if let Some((s, e)) = l.file {
            out.extend_from_slice(&file[s as usize..e as usize]);
        }
        if let Some(m) = l.memory {
            out.extend_from_slice(&m);
        }
        out
    }

    proptest! {
        #[test]
        fn every_range_reads_back(parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 1..12),
                                  flush_after in 0usize..12, a in 0u64..600, b in 0u64..600) {
            let mut all = Vec::new();
            let mut file = Vec::new();
            let mut buf = TailBuffer::new(0);
            for (i, p) in parts.iter().enumerate() {
                all.extend_from_slice(p);
                buf.push(p);
                if i == flush_after {
                    let (at, bytes) = buf.unflushed();
                    prop_assert_eq!(at as usize, file.len());
                    file.extend_from_slice(&bytes);
                    buf.mark_flushed(bytes.len() as u64);
                }
            }
            let len = all.len() as u64;
            let (start, end) = (a.min(b).min(len), a.max(b).min(len));
            prop_assert_eq!(gather(&buf, &file, start, end), &all[start as usize..end as usize]);
            prop_assert_eq!(buf.flushed() + buf.pending(), len);
        }
    }

    #[test]
    fn partial_flush_keeps_the_rest() {
        let mut b = TailBuffer::new(10);
        b.push(b"abcdef");
        b.mark_flushed(2);
        assert_eq!(b.flushed(), 12);
        assert_eq!(b.locate(12, 16).memory, Some(Bytes::from_static(b"cdef")));
        assert_eq!(b.locate(5, 13).file, Some((5, 12)));
    }
}
