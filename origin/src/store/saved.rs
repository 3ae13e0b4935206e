//! What a checkpoint keeps of one stream.
//!
//! A stream's bytes are in two places: its own file holds a prefix of them,
//! and the write-ahead log holds the rest until they are written to that
//! file. A checkpoint that says where the rest is need not wait for every
//! stream file to be written and synced, which at a million streams would
//! be most of its cost: recovery reads the missing bytes from the log
//! segments the extents name, so those segments stay until the bytes are in
//! the file.
//!
//! Terms: the *file length* is how much of the stream its file holds,
//! `[0, file_len)`; an *extent* is one run of the stream's later bytes in one
//! log segment. The extents of a stream are contiguous and in order, and
//! cover `[file_len, core.len)`.

use crate::core::stream::StreamCore;

/// Where some of a stream's unsealed bytes are in the write-ahead log: `len` bytes at byte `pos` of segment `segment`, holding stream offsets `[start, start + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub segment: u64,
    pub pos: u32,
    pub len: u32,
    pub start: u64,
}

impl Extent {
    /// The stream offset just past this extent.
    pub fn end(&self) -> u64 {
        self.start + u64::from(self.len)
    }
}

/// One stream as a checkpoint keeps it: its state, how much of it its own file holds (`[0, file_len)`), and where the rest is in the log (contiguous extents covering `[file_len, core.len)`, in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedStream {
    pub core: StreamCore,
    pub file_len: u64,
    pub extents: Vec<Extent>,
    /// When the last append was applied (its logged time; the creation
    /// time until one is): what a listing names as `last_write_at_ms`.
    pub last_write_at: crate::core::Millis,
}

impl SavedStream {
    /// A stream whose file holds every byte it has (nothing of it is only
    /// in the log).
    pub fn in_file(core: StreamCore) -> Self {
        SavedStream {
            file_len: core.len,
            last_write_at: core.created_at,
            core,
            extents: Vec::new(),
        }
    }

    /// Whether the extents cover `[file_len, core.len)` exactly, one after
    /// the other. The checkpoint keeps whatever it is given; callers can
    /// assert this before they hand a stream over.
    pub fn extents_cover_tail(&self) -> bool {
        let end = self.extents.iter().try_fold(self.file_len, |at, e| {
            if e.start == at {
                at.checked_add(u64::from(e.len))
            } else {
                None
            }
        });
        end == Some(self.core.len)
    }
}
