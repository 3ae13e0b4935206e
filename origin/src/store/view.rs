//! The read side of a stream: what request handlers see. The writer thread
//! publishes a new [`Tail`] only after the bytes under it are durable, so a
//! reader never sees an append that a crash could take back.
//!
//! Bytes live in three places, and a read may span all of them: sealed
//! chunks whose local copy is gone come from object storage ([`Cold`]), older
//! unsealed bytes from the stream's file, the newest from memory
//! ([`TailBuffer`]). The file's sealed prefix is dropped (a hole punched) only
//! after `dropped` moved past it, and a read of the file checks `dropped`
//! again afterwards: a read that raced with a drop starts over from object
//! storage instead of returning the hole's zeros.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::cold::{Cold, ColdUnavailable};
use super::tail_buffer::TailBuffer;
use super::tail_watch::{TailReceiver, TailWatch};

use crate::core::config::StreamConfig;
use crate::core::snapshot::SnapshotMeta;
use crate::core::stream::StreamCore;
use crate::core::Millis;

/// The durable end of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tail {
    pub next: u64,
    pub closed: bool,
    /// Deleted or expired: waiters stop and answer 404.
    pub gone: bool,
    /// Reads before this offset answer 410.
    pub retained: u64,
}

pub struct StreamView {
    pub id: u64,
    pub path: String,
    pub incarnation: String,
    /// `incarnation` as a ready header value (it goes on every answer).
    pub incarnation_header: http::HeaderValue,
    pub config: StreamConfig,
    /// `config.is_json()`, asked on every append and read.
    json: bool,
    pub created_at: Millis,
    tail: TailWatch,
    file: Arc<File>,
    /// The hot tail not yet in the file (written by the writer thread only).
    pub(crate) buffer: Mutex<TailBuffer>,
    last_access: AtomicU64,
    /// Bytes `[0, dropped)` are sealed and no longer read from the file.
    dropped: AtomicU64,
    cold: Option<Arc<Cold>>,
    snapshot: parking_lot::RwLock<Option<SnapshotMeta>>,
    public: std::sync::atomic::AtomicBool,
    /// A slot the HTTP layer fills once with the headers its answers about
    /// this stream share (see `http::append`).
    pub answer_template: std::sync::OnceLock<http::HeaderMap>,
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading the stream file: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Cold(#[from] ColdUnavailable),
}

impl StreamView {
    /// The view of a stream as `core` describes it, with its bytes in `file`.
    pub fn new(
        core: &StreamCore,
        file: Arc<File>,
        last_access: Millis,
        cold: Option<Arc<Cold>>,
    ) -> Self {
        let tail = Tail {
            next: core.len,
            closed: core.closed,
            gone: false,
            retained: core.retained,
        };
        StreamView {
            id: core.id,
            path: core.path.clone(),
            incarnation: core.incarnation.clone(),
            incarnation_header: http::HeaderValue::from_str(&core.incarnation)
                .expect("incarnation tokens are header-safe"),
            config: core.config.clone(),
            json: core.config.is_json(),
            created_at: core.created_at,
            tail: TailWatch::new(tail),
            buffer: Mutex::new(TailBuffer::new(tail.next)),
            file,
            last_access: AtomicU64::new(last_access),
            dropped: AtomicU64::new(0),
            cold,
            snapshot: parking_lot::RwLock::new(core.snapshot.clone()),
            public: std::sync::atomic::AtomicBool::new(core.config.public),
            answer_template: std::sync::OnceLock::new(),
        }
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
        self.snapshot.read().clone()
    }

    pub(crate) fn set_snapshot(&self, meta: Option<SnapshotMeta>) {
        *self.snapshot.write() = meta;
    }

    pub fn tail(&self) -> Tail {
        self.tail.get()
    }

    /// A receiver that wakes on every published tail.
    pub fn watch_tail(&self) -> TailReceiver {
        self.tail.subscribe()
    }

    pub(crate) fn publish(&self, tail: Tail) {
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

    pub fn last_access(&self) -> Millis {
        self.last_access.load(Ordering::Relaxed)
    }

    pub fn is_expired(&self, now: Millis) -> bool {
        self.config.is_expired(self.last_access(), now)
    }

    pub fn is_json(&self) -> bool {
        self.json
    }

    fn read_file(&self, start: u64, end: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; (end - start) as usize];
        self.file.read_exact_at(&mut buf, start)?;
        Ok(buf)
    }

    /// Reads durable bytes `[start, end)` (`end` must not pass the tail).
    pub async fn read(self: &Arc<Self>, start: u64, end: u64) -> Result<Bytes, ReadError> {
        loop {
            let dropped = self.dropped.load(Ordering::Acquire);
            let warm_from = start.max(dropped).min(end);
            let cold = if start < warm_from {
                let cold = self.cold.as_ref().ok_or_else(|| {
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
            let warm = self.read_warm(warm_from, end).await?;
            if self.dropped.load(Ordering::Acquire) > warm_from {
                continue; // raced with a drop: the file part may be a hole
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

    /// Unsealed bytes: the hot tail from memory, older bytes from the file,
    /// inline when small (they are in the page cache) and on the blocking
    /// pool when large.
    async fn read_warm(self: &Arc<Self>, start: u64, end: u64) -> io::Result<Bytes> {
        const INLINE: u64 = 64 * 1024;
        let located = self.buffer.lock().locate(start, end);
        let file_part = match located.file {
            None => return Ok(located.memory.unwrap_or_default()),
            Some((s, e)) if e - s <= INLINE => self.read_file(s, e)?,
            Some((s, e)) => {
                let me = Arc::clone(self);
                tokio::task::spawn_blocking(move || me.read_file(s, e))
                    .await
                    .map_err(io::Error::other)??
            }
        };
        let mut out = file_part;
        if let Some(memory) = located.memory {
            out.extend_from_slice(&memory);
        }
        Ok(out.into())
    }

    /// Sealed bytes `[0, through)` are durable in object storage: reads of
    /// them go there from now on, and their local copy is released (a hole
    /// punched into the file; its size stays). Returns the bytes released.
    pub(crate) fn drop_sealed(&self, through: u64) -> u64 {
        if self.cold.is_none() {
            return 0;
        }
        let before = self.dropped.fetch_max(through, Ordering::AcqRel);
        if before >= through {
            return 0;
        }
        use rustix::fs::{fallocate, FallocateFlags};
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        // Punch from 0: bytes of the range that the tail buffer wrote after
        // an earlier punch are released too.
        match fallocate(&*self.file, flags, 0, through) {
            Ok(()) => through - before,
            Err(e) => {
                tracing::warn!(stream = %self.path, error = %e, "could not release sealed bytes from the stream file");
                0
            }
        }
    }

    /// Where the locally held bytes start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Acquire)
    }

    /// Writes the buffered tail to the file (writer thread). Returns the
    /// number of bytes written.
    pub(crate) fn flush(&self) -> io::Result<u64> {
        let (at, bytes) = self.buffer.lock().unflushed();
        if bytes.is_empty() {
            return Ok(0);
        }
        self.file.write_all_at(&bytes, at)?;
        self.buffer.lock().mark_flushed(bytes.len() as u64);
        Ok(bytes.len() as u64)
    }

    pub(crate) fn pending(&self) -> u64 {
        self.buffer.lock().pending()
    }

    pub(crate) fn flushed(&self) -> u64 {
        self.buffer.lock().flushed()
    }
}
