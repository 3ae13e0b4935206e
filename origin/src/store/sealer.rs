//! Sealing: copy each complete 4 MiB chunk of a stream (and the last, short
//! chunk of a closed stream) into object storage, once and for good.
//!
//! The writer hands over a job once the bytes are durable in the log; the
//! sealer writes the chunk with a create-only put, checks that what is stored
//! is exactly those bytes, and only then tells the writer, which logs
//! `Sealed` and advances the stream's sealed prefix. One sealer per origin
//! and one writer per key, so correctness never rests on two writers racing
//! for a key (s3s-fs's conditional put is not atomic). A failed upload is
//! retried with backoff until it succeeds or the stream is deleted; appends
//! go on meanwhile (the local log holds the bytes).
//!
//! Each stream's chunks are sealed in order by a worker of its own (its
//! sealed bytes are a prefix), and up to [`CONCURRENT_UPLOADS`] streams upload
//! at once: object storage is latency-bound, so one upload at a time would
//! cap the seal rate at one chunk per round trip.
//!
//! Once the writer has logged the seal durably, it drops the chunk's local
//! copy (`StreamView::drop_sealed`); reads of it go to object storage.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use shared::offset::Offset;
use tokio::sync::{mpsc, Semaphore};

use super::view::StreamView;
use super::writer::Command;
use crate::metrics::Metrics;
use crate::objects::instrumented::Objects;
use crate::objects::keys;

/// One chunk to seal: bytes `[start, end)` of a stream.
pub struct SealJob {
    pub view: Arc<StreamView>,
    pub start: u64,
    pub end: u64,
}

#[derive(Debug, thiserror::Error)]
enum SealError {
    #[error("reading the chunk from the log: {0}")]
    Read(#[from] super::view::ReadError),
    #[error("object storage: {0}")]
    Store(#[from] object_store::Error),
    #[error("the stored chunk differs from the log ({stored} bytes stored, {expected} expected)")]
    Mismatch { stored: usize, expected: usize },
}

pub struct Sealer {
    pub objects: Objects,
    pub writer: super::writer_pool::CommandTx,
    pub metrics: Arc<Metrics>,
    /// Longest wait between two tries of a failed upload.
    pub retry_max: Duration,
}

const FIRST_RETRY: Duration = Duration::from_millis(100);

/// Chunks uploaded at once (each holds one chunk, 4 MiB, in memory).
pub const CONCURRENT_UPLOADS: usize = 4;

impl Sealer {
    /// Hands each job to its stream's worker, starting workers as needed.
    pub async fn run(self, mut jobs: mpsc::UnboundedReceiver<SealJob>) {
        let me = Arc::new(self);
        let uploads = Arc::new(Semaphore::new(CONCURRENT_UPLOADS));
        // One worker per stream, for as long as the stream lives: a worker
        // never ends while another could start for the same stream, so a
        // stream's chunks are never sealed out of order.
        let mut workers: HashMap<u64, (mpsc::UnboundedSender<SealJob>, Arc<StreamView>)> =
            HashMap::new();
        while let Some(job) = jobs.recv().await {
            // Dropping a deleted stream's sender ends its worker.
            workers.retain(|_, (_, view)| !view.is_removed());
            let id = job.view.id;
            let (tx, _) = workers.entry(id).or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(Arc::clone(&me).stream_worker(rx, Arc::clone(&uploads)));
                (tx, Arc::clone(&job.view))
            });
            let _ = tx.send(job);
        }
    }

    /// Seals one stream's chunks in order.
    async fn stream_worker(
        self: Arc<Self>,
        mut jobs: mpsc::UnboundedReceiver<SealJob>,
        uploads: Arc<Semaphore>,
    ) {
        while let Some(job) = jobs.recv().await {
            let mut wait = FIRST_RETRY;
            loop {
                if job.view.is_removed() {
                    break;
                }
                let permit = uploads.acquire().await.expect("never closed");
                let result = self.seal(&job).await;
                drop(permit);
                match result {
                    Ok(()) => break,
                    Err(e) => {
                        self.metrics.seal_error();
                        tracing::warn!(stream = %job.view.path, start = job.start, error = %e, "sealing a chunk failed; retrying");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(self.retry_max);
                    }
                }
            }
        }
    }

    async fn seal(&self, job: &SealJob) -> Result<(), SealError> {
        let started = tokio::time::Instant::now();
        let bytes = job.view.read(job.start, job.end).await?;
        let key = keys::chunk(&job.view.path, &job.view.incarnation, Offset(job.start));
        // Created, or found from an earlier try: verified the same way.
        self.objects.put_new(&key, bytes.clone()).await?;
        // Verify what is stored: after a fresh put as after finding an object
        // an earlier attempt (before a crash) left.
        let stored = self.objects.get(&key).await?;
        if stored != bytes {
            return Err(SealError::Mismatch {
                stored: stored.len(),
                expected: bytes.len(),
            });
        }
        // Counted whether the put created the object or found the one an
        // earlier try left (a retried put whose first answer was lost, or
        // an attempt before a crash).
        self.metrics.sealed(bytes.len(), started.elapsed());
        let _ = self
            .writer
            .send(Command::Sealed {
                id: job.view.id,
                through: job.end,
            })
            .await;
        Ok(())
    }
}
