//! The read side of a stream: what request handlers see. The writer thread
//! publishes a new [`Tail`] only after the bytes under it are durable, so a
//! reader never sees an append that a crash could take back.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;

use crate::core::config::StreamConfig;
use crate::core::Millis;

/// The durable end of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tail {
    pub next: u64,
    pub closed: bool,
    /// Deleted or expired: waiters stop and answer 404.
    pub gone: bool,
}

pub struct StreamView {
    pub id: u64,
    pub path: String,
    pub incarnation: String,
    pub config: StreamConfig,
    pub created_at: Millis,
    tail: watch::Sender<Tail>,
    file: Arc<File>,
    last_access: AtomicU64,
}

impl StreamView {
    pub fn new(id: u64, path: String, incarnation: String, config: StreamConfig, created_at: Millis, tail: Tail, file: Arc<File>, last_access: Millis) -> Self {
        StreamView {
            id,
            path,
            incarnation,
            config,
            created_at,
            tail: watch::Sender::new(tail),
            file,
            last_access: AtomicU64::new(last_access),
        }
    }

    pub fn tail(&self) -> Tail {
        *self.tail.borrow()
    }

    /// A receiver that wakes on every published tail.
    pub fn watch_tail(&self) -> watch::Receiver<Tail> {
        self.tail.subscribe()
    }

    pub(crate) fn publish(&self, tail: Tail) {
        self.tail.send_replace(tail);
    }

    /// Marks a read or write for the sliding TTL.
    pub fn touch(&self, now: Millis) {
        self.last_access.fetch_max(now, Ordering::Relaxed);
    }

    pub fn last_access(&self) -> Millis {
        self.last_access.load(Ordering::Relaxed)
    }

    pub fn is_expired(&self, now: Millis) -> bool {
        self.config.is_expired(self.last_access(), now)
    }

    pub fn is_json(&self) -> bool {
        self.config.is_json()
    }

    /// Reads durable bytes `[start, end)`. `end` must not pass the tail.
    pub fn read_blocking(&self, start: u64, end: u64) -> io::Result<Bytes> {
        let mut buf = vec![0; (end - start) as usize];
        self.file.read_exact_at(&mut buf, start)?;
        Ok(buf.into())
    }

    /// Reads durable bytes `[start, end)`: small reads inline (the hot tail is
    /// in the page cache), large ones on the blocking pool.
    pub async fn read(self: &Arc<Self>, start: u64, end: u64) -> io::Result<Bytes> {
        const INLINE: u64 = 64 * 1024;
        if end - start <= INLINE {
            return self.read_blocking(start, end);
        }
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || me.read_blocking(start, end)).await.map_err(io::Error::other)?
    }
}
