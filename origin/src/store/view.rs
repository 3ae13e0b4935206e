//! The read side of a stream: what request handlers see. The writer thread
//! publishes a new [`End`] only after the bytes under it are durable, so a
//! reader never sees an append that a crash could take back.
//!
//! Bytes live in four places, and a read may span all of them: sealed
//! chunks whose local copy is gone come from object storage ([`ChunkCache`]), then
//! the stream's own file, then the log segments that logged the newest
//! appends, the newest of all also in memory (see [`Warm`]). The file's
//! sealed prefix is dropped (a hole punched) only after `dropped` moved past
//! it, and a read of local bytes checks `dropped` again afterwards: a read
//! that raced with a drop starts over from object storage instead of
//! returning the hole's zeros.

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::chunk_cache::{ChunkCache, ChunkCacheUnavailable};
use super::end_watch::{EndReceiver, EndWatch};
use super::files::{Open, StreamFiles};
use super::saved::Extent;
use super::segments::Segments;
use super::warm::{Located, Warm};

use crate::core::config::StreamConfig;
use crate::core::snapshot::SnapshotMeta;
use crate::core::stream::StreamCore;
use crate::core::Millis;

/// Milliseconds after `since` below 2^31 (24.8 days); past that, whole
/// seconds after it with the top bit set (68 years). Monotonic in `at`,
/// so the latest time is the largest value.
pub fn pack_since(since: Millis, at: Millis) -> u32 {
    const SECONDS: u32 = 1 << 31;
    let ms = at.saturating_sub(since);
    match u32::try_from(ms) {
        Ok(ms) if ms < SECONDS => ms,
        _ => {
            SECONDS
                | u32::try_from(ms / 1000)
                    .unwrap_or(u32::MAX)
                    .min(SECONDS - 1)
        }
    }
}

/// The time [`pack_since`] packed (to the second past 24.8 days).
pub fn unpack_since(since: Millis, packed: u32) -> Millis {
    const SECONDS: u32 = 1 << 31;
    if packed < SECONDS {
        since.saturating_add(u64::from(packed))
    } else {
        since.saturating_add(u64::from(packed - SECONDS) * 1000)
    }
}

/// The durable end of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    pub next: u64,
    pub closed: bool,
    /// Deleted or expired: waiters stop and answer 404.
    pub gone: bool,
    /// Reads before this offset answer 410.
    pub retained: u64,
}

pub struct StreamView {
    pub id: u64,
    pub path: Arc<str>,
    pub incarnation: Arc<str>,
    pub config: StreamConfig,
    /// `config.is_json()`, asked on every append and read.
    json: bool,
    pub created_at: Millis,
    tail: EndWatch,
    /// Where the unsealed bytes are (changed by the writer thread only).
    pub(crate) warm: Mutex<Warm>,
    last_access: AtomicU64,
    /// When the last append was applied (the logged time), for listings,
    /// after `created_at` (see [`pack_since`]): four bytes in what was
    /// padding, so the view stays 240 B (with its `Arc`, one 256 B
    /// allocation; eight more bytes would take the next size class).
    last_write: std::sync::atomic::AtomicU32,
    /// Bytes `[0, dropped)` are sealed and no longer read locally.
    dropped: AtomicU64,
    disk: Arc<Disk>,
    snapshot: parking_lot::RwLock<Option<Box<SnapshotMeta>>>,
    public: std::sync::atomic::AtomicBool,
    /// Deleted while forks still read it (see `core::fork`).
    soft_deleted: std::sync::atomic::AtomicBool,
    /// A fork's source, whose bytes `[0, at)` it reads (boxed: most streams
    /// are not forks).
    fork: Option<Box<Inherited>>,
}

/// The prefix a fork reads from its source's view (which its `Arc` keeps:
/// a source is not removed while a fork of it exists).
pub struct Inherited {
    pub parent: Arc<StreamView>,
    pub at: u64,
    /// Set when a rollback made this stream: the incarnation it replaced
    /// (`Stream-Previous-Incarnation`; `at` is `Stream-Inherited-Offset`).
    pub previous: Option<Arc<str>>,
}

/// What every stream reads its local and sealed bytes through.
pub struct Disk {
    pub files: StreamFiles,
    pub segments: Segments,
    /// Sealed chunks (none without object storage).
    pub chunk_cache: Option<Arc<ChunkCache>>,
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading the stream file: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    ChunkCache(#[from] ChunkCacheUnavailable),
}

impl StreamView {
    /// The view of a stream as `core` describes it, its bytes where `warm`
    /// says.
    pub fn new(
        core: &StreamCore,
        warm: Warm,
        last_access: Millis,
        disk: Arc<Disk>,
        fork: Option<Inherited>,
    ) -> Self {
        let tail = End {
            next: core.len,
            closed: core.closed,
            gone: false,
            retained: core.retained,
        };
        StreamView {
            id: core.id,
            path: core.path.clone(),
            incarnation: core.incarnation.clone(),
            config: core.config.clone(),
            json: core.config.is_json(),
            created_at: core.created_at,
            tail: EndWatch::new(tail),
            warm: Mutex::new(warm),
            last_access: AtomicU64::new(last_access),
            last_write: std::sync::atomic::AtomicU32::new(0),
            dropped: AtomicU64::new(0),
            disk,
            snapshot: parking_lot::RwLock::new(core.snapshot.clone()),
            public: std::sync::atomic::AtomicBool::new(core.config.public),
            soft_deleted: std::sync::atomic::AtomicBool::new(core.soft_deleted),
            fork: fork.map(Box::new),
        }
    }

    /// Whether the stream was deleted while forks still read it: its path
    /// answers 410.
    pub fn is_soft_deleted(&self) -> bool {
        self.soft_deleted.load(Ordering::Acquire)
    }

    /// Set when forks keep the deleted stream (before its tail is
    /// published gone, so whoever sees it gone sees this); cleared when it
    /// is removed at last (gone then means removed).
    pub(crate) fn set_soft_deleted(&self, soft: bool) {
        self.soft_deleted.store(soft, Ordering::Release);
    }

    /// Removed for good: its tail is gone and it is not kept for forks
    /// (sealing it stops).
    pub fn is_removed(&self) -> bool {
        self.end().gone && !self.is_soft_deleted()
    }

    /// A fork's source and the end of what it inherits.
    pub fn inherited(&self) -> Option<&Inherited> {
        self.fork.as_deref()
    }

    /// Forks between this stream and the first that is none (0 for a
    /// stream that is not a fork).
    pub fn fork_depth(&self) -> usize {
        std::iter::successors(self.inherited(), |f| f.parent.inherited()).count()
    }

    /// The files, log segments and object storage the stream reads through.
    pub(crate) fn disk(&self) -> &Arc<Disk> {
        &self.disk
    }

    /// `incarnation` as a header value (it goes on every answer). Made per
    /// answer rather than kept: a copy per stream costs a million streams
    /// 70 MB, the copy per answer about as much as the clone it replaces.
    /// After a rollback: the incarnation this one replaced, and the offset
    /// below which its bytes are that one's.
    pub fn restored_from(&self) -> Option<(&str, u64)> {
        let f = self.fork.as_deref()?;
        Some((f.previous.as_deref()?, f.at))
    }

    pub fn incarnation_header(&self) -> http::HeaderValue {
        http::HeaderValue::from_str(&self.incarnation).expect("incarnation tokens are header-safe")
    }

    /// Whether anyone may read the stream without a credential.
    pub fn is_public(&self) -> bool {
        self.public.load(Ordering::Acquire)
    }

    pub(crate) fn set_public(&self, public: bool) {
        self.public.store(public, Ordering::Release);
    }

    /// The latest published snapshot.
    pub fn snapshot(&self) -> Option<SnapshotMeta> {
        self.snapshot.read().as_deref().cloned()
    }

    /// The snapshot a reader of the stream starts from, and the stream
    /// whose object it is: its own latest, or, for a fork without one, its
    /// source's latest if that is at or before the fork point (the state
    /// the fork inherits is the source's there).
    pub fn bootstrap_snapshot(self: &Arc<Self>) -> Option<(SnapshotMeta, Arc<StreamView>)> {
        if let Some(own) = self.snapshot() {
            return Some((own, Arc::clone(self)));
        }
        let f = self.fork.as_deref()?;
        let (meta, owner) = f.parent.bootstrap_snapshot()?;
        (meta.offset <= f.at).then_some((meta, owner))
    }

    pub(crate) fn set_snapshot(&self, meta: Option<Box<SnapshotMeta>>) {
        *self.snapshot.write() = meta;
    }

    /// The durable end. A fork cannot read before its source's retention
    /// either (the source's snapshot replaced those bytes for every reader
    /// of them), so its retained offset is at least that, up to its fork
    /// point.
    pub fn end(&self) -> End {
        let mut tail = self.tail.get();
        if let Some(f) = &self.fork {
            tail.retained =
                crate::core::fork::retained(tail.retained, f.parent.end().retained, f.at);
        }
        tail
    }

    /// Whether a reader waits for the next tail (a long-poll, an SSE tail).
    pub fn has_waiters(&self) -> bool {
        self.tail.has_waiters()
    }

    /// A receiver that wakes on every published tail.
    pub fn watch_end(&self) -> EndReceiver {
        self.tail.subscribe()
    }

    pub(crate) fn publish(&self, tail: End) {
        self.tail.publish(tail);
    }

    /// Marks a read or write for the sliding TTL.
    pub fn touch(&self, now: Millis) {
        // Most touches find the time already set (same millisecond): a read
        // leaves the line shared with the other core, a write would not.
        if self.last_access.load(Ordering::Relaxed) < now {
            self.last_access.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Notes an append applied at `at` (writer thread, and replay).
    pub(crate) fn wrote(&self, at: Millis) {
        let packed = pack_since(self.created_at, at);
        if self.last_write.load(Ordering::Relaxed) < packed {
            self.last_write.fetch_max(packed, Ordering::Relaxed);
        }
    }

    /// When the last append was applied (the creation time until one is).
    pub fn last_write(&self) -> Millis {
        unpack_since(self.created_at, self.last_write.load(Ordering::Relaxed))
    }

    pub fn last_access(&self) -> Millis {
        self.last_access.load(Ordering::Relaxed)
    }

    pub fn is_expired(&self, now: Millis) -> bool {
        self.config.is_expired(self.last_access(), now)
    }

    pub fn is_json(&self) -> bool {
        self.json
    }

    /// Reads durable bytes `[start, end)` (`end` must not pass the tail):
    /// a fork's inherited part through its source, the rest its own.
    pub async fn read(self: &Arc<Self>, start: u64, end: u64) -> Result<Bytes, ReadError> {
        let Some(f) = self.fork.as_deref().filter(|f| start < f.at) else {
            return self.read_own(start, end).await;
        };
        let mid = end.min(f.at);
        // Below the source's retention its bytes may be gone; no reader
        // of the fork asks for them (its retention is at least that), but
        // sealing the fork's first chunk spans them: zeros stand in.
        let kept_from = f.parent.end().retained.clamp(start, mid);
        let inherited = if kept_from > start {
            let mut part = vec![0; (kept_from - start) as usize];
            part.extend_from_slice(&Box::pin(f.parent.read(kept_from, mid)).await?);
            Bytes::from(part)
        } else {
            Box::pin(f.parent.read(start, mid)).await?
        };
        if mid == end {
            return Ok(inherited);
        }
        let own = self.read_own(mid, end).await?;
        let mut out = Vec::with_capacity((end - start) as usize);
        out.extend_from_slice(&inherited);
        out.extend_from_slice(&own);
        Ok(out.into())
    }

    /// Reads the stream's own bytes `[start, end)`.
    async fn read_own(self: &Arc<Self>, start: u64, end: u64) -> Result<Bytes, ReadError> {
        loop {
            let dropped = self.dropped.load(Ordering::Acquire);
            let warm_from = start.max(dropped).min(end);
            let cold = if start < warm_from {
                let cold = self.disk.chunk_cache.as_ref().ok_or_else(|| {
                    io::Error::other("sealed bytes were dropped without object storage")
                })?;
                cold.read(self.id, &self.path, &self.incarnation, start, warm_from)
                    .await?
            } else {
                Bytes::new()
            };
            if warm_from == end {
                return Ok(cold);
            }
            // Raced with a drop: the file part may be a hole, or (bytes
            // that were only in the log) past the file's end or with no
            // file at all; either way they are in object storage now.
            // `drop_sealed` raises `dropped` before it changes the layout,
            // so a read that saw the new layout sees the new `dropped`.
            let warm = match self.read_warm(warm_from, end).await {
                Err(_) if self.dropped.load(Ordering::Acquire) > warm_from => continue,
                warm => warm?,
            };
            if self.dropped.load(Ordering::Acquire) > warm_from {
                continue;
            }
            if cold.is_empty() {
                return Ok(warm);
            }
            let mut out = Vec::with_capacity((end - start) as usize);
            out.extend_from_slice(&cold);
            out.extend_from_slice(&warm);
            return Ok(out.into());
        }
    }

    /// Unsealed bytes: the hot tail from memory, older bytes from the file
    /// and the log, inline when small (they are in the page cache) and on
    /// the blocking pool when large.
    ///
    /// A log segment can be deleted while a read of it waits (the stream was
    /// promoted or sealed meanwhile, and a checkpoint retired the segment):
    /// the read then looks again, since the bytes are elsewhere now.
    async fn read_warm(self: &Arc<Self>, start: u64, end: u64) -> io::Result<Bytes> {
        const INLINE: u64 = 64 * 1024;
        const LOOKS: usize = 4;
        let mut looks = 0;
        loop {
            looks += 1;
            let (generation, located) = {
                let warm = self.warm.lock();
                (warm.generation(), warm.locate(start, end))
            };
            if located.file.is_none() && located.log.is_empty() {
                return Ok(located.memory.unwrap_or_default());
            }
            let read = if end - start <= INLINE {
                self.gather(located)
            } else {
                let me = Arc::clone(self);
                tokio::task::spawn_blocking(move || me.gather(located))
                    .await
                    .map_err(io::Error::other)?
            };
            match read {
                Err(_) if looks < LOOKS && self.warm.lock().generation() != generation => {}
                other => return other.map(Bytes::from),
            }
        }
    }

    /// Reads what `located` names, in order.
    pub(crate) fn gather(&self, located: Located) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        if let Some((s, e)) = located.file {
            let file = self.disk.files.get(self.id, Open::Existing)?;
            out.resize((e - s) as usize, 0);
            file.read_exact_at(&mut out, s)?;
        }
        self.disk.segments.read_into(&located.log, &mut out)?;
        if let Some(memory) = located.memory {
            out.extend_from_slice(&memory);
        }
        Ok(out)
    }

    /// Sealed bytes `[0, through)` are durable in object storage: reads of
    /// them go there from now on, and their local copy is released (a hole
    /// punched into the file, whose size stays; their log extents
    /// forgotten). Returns the bytes released and the extents forgotten.
    pub(crate) fn drop_sealed(&self, through: u64) -> (u64, Vec<Extent>) {
        if self.disk.chunk_cache.is_none() {
            return (0, Vec::new());
        }
        let before = self.dropped.fetch_max(through, Ordering::AcqRel);
        if before >= through {
            return (0, Vec::new());
        }
        let (file_len, gone) = {
            let mut warm = self.warm.lock();
            let file_len = warm.file_len();
            (file_len, warm.drop_before(through))
        };
        let punch = through.min(file_len);
        if punch == 0 {
            return (through - before, gone);
        }
        use rustix::fs::{fallocate, FallocateFlags};
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        // Punch from 0: bytes of the range that a promotion wrote after an
        // earlier punch are released too.
        let punched = self
            .disk
            .files
            .get(self.id, Open::Existing)
            .and_then(|f| fallocate(&*f, flags, 0, punch).map_err(io::Error::from));
        // No file: nothing to release (a fork's bytes below its fork point
        // are its source's; a stream never promoted has none).
        if let Err(e) = punched.as_ref().map_err(|e| e.kind()) {
            if e == io::ErrorKind::NotFound {
                return (through - before, gone);
            }
        }
        if let Err(e) = punched {
            tracing::warn!(stream = %self.path, error = %e, "could not release sealed bytes from the stream file");
        }
        (through - before, gone)
    }

    /// Sealed bytes `[0, through)` are read from object storage, as
    /// [`StreamView::drop_sealed`], without punching the file (recovery: it
    /// was punched before the restart, or is at this stream's next drop,
    /// which punches from 0). Returns the extents forgotten.
    pub(crate) fn forget_sealed(&self, through: u64) -> Vec<Extent> {
        if self.disk.chunk_cache.is_none() || through == 0 {
            return Vec::new();
        }
        self.dropped.fetch_max(through, Ordering::AcqRel);
        self.warm.lock().drop_before(through)
    }

    /// Where the locally held bytes start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Acquire)
    }

    /// Copies the bytes only in the log (and memory) up to `through` into
    /// the stream's own file (the promoter's thread; see `promoter`).
    /// `through` must be durable: the writer names the end it had when its
    /// last batch was durable, since the extents of a batch being built
    /// point at log not yet written. Returns the bytes written; the writer
    /// then forgets the extents before `through`
    /// ([`StreamView::promoted_through`]).
    pub(crate) fn promote(&self, through: u64) -> io::Result<u64> {
        let (at, located) = {
            let warm = self.warm.lock();
            (warm.file_len(), warm.promotion(through))
        };
        let bytes = self.gather(located)?;
        if !bytes.is_empty() {
            let file = self.disk.files.get(self.id, Open::Create)?;
            file.write_all_at(&bytes, at)?;
        }
        Ok(bytes.len() as u64)
    }

    /// Where the stream's bytes end now (the writer thread: after a batch
    /// is durable, all of them are).
    pub(crate) fn logged_end(&self) -> u64 {
        self.warm.lock().end()
    }

    /// The file holds `[0, through)` (writer thread, after a promotion):
    /// returns the extents no longer needed and the memory released.
    pub(crate) fn promoted_through(&self, through: u64) -> (Vec<Extent>, u64) {
        self.warm.lock().promoted_through(through)
    }

    /// Bytes held in memory.
    pub(crate) fn memory_len(&self) -> u64 {
        self.warm.lock().memory_len()
    }

    pub(crate) fn wants_promotion(&self) -> bool {
        self.warm.lock().wants_promotion()
    }

    /// Drops the memory copy of the newest bytes; returns the bytes released.
    pub(crate) fn drop_memory(&self) -> u64 {
        self.warm.lock().drop_memory()
    }
}

#[cfg(test)]
mod tests {
    use super::{pack_since, unpack_since};

    #[test]
    fn last_writes_pack_in_four_bytes() {
        let c = 1_700_000_000_000;
        for d in [0, 1, 999, (1 << 31) - 1] {
            assert_eq!(unpack_since(c, pack_since(c, c + d)), c + d);
        }
        // Past 24.8 days, to the second.
        let d = (1u64 << 31) + 1_234;
        assert_eq!(unpack_since(c, pack_since(c, c + d)), c + d / 1000 * 1000);
        let mut last = 0;
        for d in (0..80u64).map(|i| i * 1_000_000_000) {
            let p = pack_since(c, c + d);
            assert!(p >= last, "monotonic at {d}");
            last = p;
        }
        // A clock that went back: the creation time.
        assert_eq!(pack_since(c, c - 5), 0);
    }
}
