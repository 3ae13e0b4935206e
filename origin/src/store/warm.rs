//! Where a stream's unsealed bytes are on local disk, and the newest of them
//! in memory (the pure part of the layout: no I/O here).
//!
//! Every appended byte is in the write-ahead log once its batch is durable,
//! so the log is where a small stream's bytes stay: an [`Extent`] per append
//! names the segment and position. Writing each touched stream's bytes to a
//! file of its own cost a file write per stream per checkpoint, which with
//! a million streams touched round-robin was one file write per append (see
//! `docs/decisions/0008-stream-layout.md`). A stream gets its bytes copied
//! into its own file ("promoted") only once it has gathered
//! [`PROMOTE_BYTES`] or [`MAX_EXTENTS`] appends since the last time (or
//! [`HEAVY_EXTENTS`] once all streams hold too many extents), or when
//! the log segment holding them is to be cleaned; either way the copy is
//! amortised over many appends.
//!
//! ```text
//! [0, file_len)        the stream's own file (its dropped prefix a hole)
//! [file_len, end)      extents of the log, contiguous and in order
//! [mem_start, end)     also in memory (the hot tail live readers ask for)
//! ```
//! The memory copy is a cache: it can be dropped at any time (the writer
//! does when all streams together hold too much), since the bytes are in the
//! log. It is kept only while someone waits for the stream's next bytes (a
//! long-poll or an SSE tail, who read them at once) or the stream is written
//! often ([`HOT_BATCHES`]); for every other stream an append copies nothing
//! into memory, which at a hundred thousand streams written round-robin cost
//! the writer a tenth of its time in fresh pages and their release.

use bytes::Bytes;

use super::saved::Extent;

/// An append keeps a memory copy when it comes within this many writer
/// batches of the stream's last one (a stream written often: its
/// promotion then copies from memory rather than reading the log), or when
/// someone waits for the stream's next bytes.
pub const HOT_BATCHES: u64 = 16;

/// A stream is promoted into its own file once this much of it is only in
/// the log...
pub const PROMOTE_BYTES: u64 = 64 * 1024;
/// ...or once it has this many extents (24 bytes each: 6 KiB at most)...
pub const MAX_EXTENTS: usize = 256;
/// ...or, with this many, once all streams' extents together pass
/// `StoreConfig::max_log_extents` (the writer promotes these "heavy" streams
/// then). So an idle stream keeps at most 16 extents (384 B) for long, and
/// a stream written with small appends gets its file per 64 KiB rather
/// than per 16 appends: creating files was the cost (a new inode each; at
/// 15,000 streams promoted per 16 appends, a third fewer appends/s).
pub const HEAVY_EXTENTS: usize = 16;

#[derive(Debug, Default)]
pub struct Warm {
    file_len: u64,
    extents: Vec<Extent>,
    end: u64,
    mem_start: u64,
    bytes: Vec<u8>,
    /// Compared for equality only, so it may wrap (32 bits: a stream's
    /// `Warm` is one of a million).
    generation: u32,
    /// The writer batch of the last append (see [`Warm::hot`]).
    /// Its low 32 bits: only the distance to the next batch counts.
    last_batch: u32,
}

/// Where the bytes of a range are.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Located {
    /// `[start, end)` to read from the stream's file, if any.
    pub file: Option<(u64, u64)>,
    /// Pieces to read from the log, in order (clipped to the range).
    pub log: Vec<Extent>,
    /// The rest, copied out of memory.
    pub memory: Option<Bytes>,
}

impl Warm {
    /// A stream whose file holds `[0, file_len)` and whose log extents are
    /// `extents` (as a checkpoint saved them).
    pub fn new(file_len: u64, extents: Vec<Extent>) -> Self {
        let end = extents.last().map_or(file_len, Extent::end);
        Warm {
            file_len,
            extents,
            end,
            mem_start: end,
            bytes: Vec::new(),
            generation: 0,
            last_batch: 0,
        }
    }

    /// Whether an append in writer batch `batch` (0: none, as in recovery)
    /// comes soon enough after the stream's last one to keep a memory copy,
    /// and notes it as the last.
    pub fn hot(&mut self, batch: u64) -> bool {
        // Batch numbers start at 1; a low half of 0 after a wrap only
        // costs one append its memory copy.
        let batch = batch as u32;
        let hot = batch != 0
            && self.last_batch != 0
            && u64::from(batch.wrapping_sub(self.last_batch)) <= HOT_BATCHES;
        self.last_batch = batch;
        hot
    }

    /// An append of `bytes` at the end, logged at `extent`; kept in memory
    /// too when `keep`, else the memory copy is dropped (it must reach the
    /// end). Returns the memory released.
    pub fn push(&mut self, extent: Extent, bytes: &[u8], keep: bool) -> u64 {
        debug_assert_eq!(extent.start, self.end);
        debug_assert_eq!(u64::from(extent.len), bytes.len() as u64);
        if bytes.is_empty() {
            return 0;
        }
        // One slot at a time up to a heavy stream's count: an idle stream
        // keeps the few it has, not a vector's doubled capacity; past it the
        // vector grows as vectors do.
        if self.extents.len() < HEAVY_EXTENTS {
            self.extents.reserve_exact(1);
        }
        self.extents.push(extent);
        self.end = extent.end();
        if keep {
            self.bytes.extend_from_slice(bytes);
            0
        } else {
            self.drop_memory()
        }
    }

    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// Bytes held in memory.
    pub fn memory_len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Whether the stream should be promoted into its own file.
    pub fn wants_promotion(&self) -> bool {
        self.end - self.file_len >= PROMOTE_BYTES || self.extents.len() >= MAX_EXTENTS
    }

    /// Whether the stream has just become heavy (see [`HEAVY_EXTENTS`]).
    pub fn became_heavy(&self) -> bool {
        self.extents.len() == HEAVY_EXTENTS
    }

    /// Drops the memory copy; returns the bytes released.
    pub fn drop_memory(&mut self) -> u64 {
        let n = self.bytes.len() as u64;
        self.bytes = Vec::new();
        self.mem_start = self.end;
        n
    }

    /// What a promotion up to `through` writes: at `file_len`, the log
    /// pieces then the memory copy, which together are `[file_len,
    /// through)` (nothing when the file already holds it).
    pub fn promotion(&self, through: u64) -> Located {
        if through <= self.file_len {
            return Located::default();
        }
        let mut located = self.locate(self.file_len, through.min(self.end));
        located.file = None;
        located
    }

    /// The stream offset just past the last byte.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// A promotion up to `through` (an extent boundary: the end when it
    /// started) was written: the file holds `[0, through)`. Appends made
    /// since stay in the log. Returns the extents no longer needed and the
    /// memory copy's bytes released.
    pub fn promoted_through(&mut self, through: u64) -> (Vec<Extent>, u64) {
        let keep = self.extents.partition_point(|e| e.end() <= through);
        let gone: Vec<Extent> = self.extents.drain(..keep).collect();
        self.file_len = self.file_len.max(through);
        self.generation = self.generation.wrapping_add(1);
        let released = if self.mem_start < through {
            let cut = (through.min(self.end) - self.mem_start) as usize;
            self.bytes.drain(..cut);
            self.mem_start += cut as u64;
            if self.bytes.is_empty() {
                self.bytes = Vec::new();
            }
            cut as u64
        } else {
            0
        };
        (gone, released)
    }

    /// [`Warm::promoted_through`] the end (no append came in between).
    #[cfg(test)]
    pub fn promoted(&mut self) -> (Vec<Extent>, u64) {
        self.promoted_through(self.end)
    }

    /// Moves whenever extents are forgotten (a promotion, a sealed prefix
    /// dropped): a read that found a log segment gone looks again if it did.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Bytes `[0, through)` are no longer read locally (sealed): returns
    /// the extents wholly before `through`, which are forgotten. `file_len`
    /// moves up to the first byte still in the log, so the layout stays
    /// contiguous (the file's part below `through` is a hole either way).
    pub fn drop_before(&mut self, through: u64) -> Vec<Extent> {
        let keep = self.extents.partition_point(|e| e.end() <= through);
        let gone: Vec<Extent> = self.extents.drain(..keep).collect();
        self.generation = self.generation.wrapping_add(1);
        if let Some(last) = gone.last() {
            self.file_len = self.file_len.max(last.end());
        }
        if self.extents.is_empty() {
            self.file_len = self.file_len.max(through.min(self.end));
        }
        gone
    }

    /// Where `[start, end)` is, for a range within `[file_len's hole, end)`.
    pub fn locate(&self, start: u64, end: u64) -> Located {
        debug_assert!(start <= end && end <= self.end);
        let mut located = Located::default();
        if start < self.file_len {
            located.file = Some((start, end.min(self.file_len)));
        }
        let log_to = end.min(self.mem_start);
        let log_from = start.max(self.file_len);
        if log_from < log_to {
            let first = self.extents.partition_point(|e| e.end() <= log_from);
            for e in &self.extents[first..] {
                if e.start >= log_to {
                    break;
                }
                let s = e.start.max(log_from);
                let t = e.end().min(log_to);
                located.log.push(Extent {
                    segment: e.segment,
                    pos: e.pos + (s - e.start) as u32,
                    len: (t - s) as u32,
                    start: s,
                });
            }
        }
        if end > self.mem_start {
            let from = (start.max(self.mem_start) - self.mem_start) as usize;
            let to = (end - self.mem_start) as usize;
            located.memory = Some(Bytes::copy_from_slice(&self.bytes[from..to]));
        }
        located
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A fake log: every append's bytes at increasing positions of one
    /// segment, with a gap between (like frame headers).
    struct Model {
        keep: bool,
        warm: Warm,
        all: Vec<u8>,
        log: Vec<u8>,
        file: Vec<u8>,
    }

    impl Model {
        fn new() -> Self {
            Model {
                keep: true,
                warm: Warm::new(0, Vec::new()),
                all: Vec::new(),
                log: Vec::new(),
                file: Vec::new(),
            }
        }

        fn append(&mut self, bytes: &[u8]) {
            self.keep = true;
            self.push(bytes);
        }

        /// An append nobody waits for: not kept in memory.
        fn append_unwatched(&mut self, bytes: &[u8]) {
            self.keep = false;
            self.push(bytes);
        }

        fn push(&mut self, bytes: &[u8]) {
            self.log.extend_from_slice(&[0xEE; 3]);
            let extent = Extent {
                segment: 1,
                pos: self.log.len() as u32,
                len: bytes.len() as u32,
                start: self.all.len() as u64,
            };
            self.log.extend_from_slice(bytes);
            self.all.extend_from_slice(bytes);
            self.warm.push(extent, bytes, self.keep);
        }

        fn gather(&self, l: &Located) -> Vec<u8> {
            let mut out = Vec::new();
            if let Some((s, e)) = l.file {
                out.extend_from_slice(&self.file[s as usize..e as usize]);
            }
            for e in &l.log {
                out.extend_from_slice(&self.log[e.pos as usize..e.pos as usize + e.len as usize]);
            }
            if let Some(m) = &l.memory {
                out.extend_from_slice(m);
            }
            out
        }

        fn promote(&mut self) {
            let at = self.warm.file_len() as usize;
            let bytes = self.gather(&self.warm.promotion(self.warm.end()));
            self.file.resize(at, 0);
            self.file.extend_from_slice(&bytes);
            self.warm.promoted();
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Append(Vec<u8>),
        Unwatched(Vec<u8>),
        DropMemory,
        Promote,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => proptest::collection::vec(any::<u8>(), 1..40).prop_map(Op::Append),
            2 => proptest::collection::vec(any::<u8>(), 1..40).prop_map(Op::Unwatched),
            1 => Just(Op::DropMemory),
            1 => Just(Op::Promote),
        ]
    }

    proptest! {
        /// Whatever the mix of appends, dropped memory and promotions,
        /// every range reads back as appended.
        #[test]
        fn every_range_reads_back(ops in proptest::collection::vec(op(), 1..30), a in 0u64..800, b in 0u64..800) {
            let mut m = Model::new();
            for op in ops {
                match op {
                    Op::Append(bytes) => m.append(&bytes),
                    Op::Unwatched(bytes) => m.append_unwatched(&bytes),
                    Op::DropMemory => { m.warm.drop_memory(); }
                    Op::Promote => m.promote(),
                }
            }
            let len = m.all.len() as u64;
            let (start, end) = (a.min(b).min(len), a.max(b).min(len));
            let got = m.gather(&m.warm.locate(start, end));
            prop_assert_eq!(&got[..], &m.all[start as usize..end as usize]);
        }
    }

    #[test]
    fn promotion_is_asked_for_by_size_or_count() {
        let mut m = Model::new();
        for _ in 0..MAX_EXTENTS - 1 {
            m.append(b"x");
        }
        assert!(!m.warm.wants_promotion());
        m.append(b"x");
        assert!(m.warm.wants_promotion());
        m.promote();
        assert!(!m.warm.wants_promotion());
        assert!(m.warm.extents().is_empty());
        m.append(&vec![1; PROMOTE_BYTES as usize]);
        assert!(m.warm.wants_promotion());
    }

    /// A promotion covers what was there when it started; appends made
    /// while it ran stay in the log (and memory) for the next.
    #[test]
    fn appends_during_a_promotion_stay_in_the_log() {
        let mut m = Model::new();
        m.append(b"aaaa");
        m.append(b"bbbb");
        let through = m.warm.end();
        let bytes = m.gather(&m.warm.promotion(through));
        m.append(b"cccc");
        m.file.extend_from_slice(&bytes);
        let (gone, released) = m.warm.promoted_through(through);
        assert_eq!((gone.len(), released), (2, 8));
        assert_eq!(m.warm.file_len(), 8);
        assert_eq!(m.warm.extents().len(), 1);
        assert_eq!(m.gather(&m.warm.locate(0, 12)), b"aaaabbbbcccc");
        assert_eq!(m.warm.memory_len(), 4);
    }

    #[test]
    fn dropping_a_sealed_prefix_forgets_its_extents() {
        let mut m = Model::new();
        m.append(b"aaaa");
        m.append(b"bbbb");
        m.append(b"cccc");
        let gone = m.warm.drop_before(8);
        assert_eq!(gone.len(), 2);
        assert_eq!(m.warm.file_len(), 8);
        assert_eq!(m.gather(&m.warm.locate(8, 12)), b"cccc");
        // Straddling: the extent stays.
        assert!(m.warm.drop_before(10).is_empty());
        assert_eq!(m.gather(&m.warm.locate(10, 12)), b"cc");
    }
}
