//! Checkpoints: rotate the log, then write the states of the streams
//! changed since the last checkpoint (a delta; see `store::checkpoint`) on
//! a thread of their own, so the writer goes on. The cost follows the
//! streams touched, not the streams held: an idle stream costs nothing.
//!
//! Order on the checkpoint thread: streams' own files written since the
//! last checkpoint are synced (one `syncfs` for all), then the delta is
//! written durably, then the log segments that nothing points into any more
//! are deleted. A crash anywhere leaves the previous checkpoint and every
//! segment it needs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::super::checkpoint::{self, Delta};
use super::super::layout;
use super::super::saved::SavedStream;
use super::super::view::Disk;
use super::Writer;
use crate::metrics::Metrics;

/// A segment is rotated early, checkpoint or not, past this size: log
/// extents address bytes in a segment with 32 bits.
const SEGMENT_HARD_LIMIT: u64 = 1 << 31;

/// What a failed checkpoint leaves for the next one.
pub struct Failed {
    /// The streams it was to write (changed or deleted).
    streams: Vec<u64>,
    /// The segments it was to delete, with their sizes.
    retire: Vec<(u64, u64)>,
    /// Whether it was to sync stream files.
    sync_files: bool,
}

impl Writer {
    /// Rotates the WAL and writes a checkpoint in the background when the
    /// open segment is large or old enough (or at once when `now`).
    pub(super) fn maybe_checkpoint(&mut self, now: bool) {
        // Log written since the last checkpoint: this segment, plus older
        // segments that recovery replayed and no checkpoint has retired yet.
        let unretired = self.wal.written + self.replayed_bytes;
        let due = unretired >= self.config.checkpoint_bytes
            || self.wal.written >= SEGMENT_HARD_LIMIT
            || (unretired > 0 && self.last_checkpoint.elapsed() >= self.config.checkpoint_interval);
        if self.wal.written >= SEGMENT_HARD_LIMIT && self.checkpoint_running.load(Ordering::Acquire)
        {
            let written = self.wal.written;
            if self.rotate().is_some() {
                self.replayed_bytes += written;
            }
            return;
        }
        if !(due || now && unretired > 0) || self.checkpoint_running.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(replay_from) = self.rotate() else {
            // Tried again after the next batch; the log goes on meanwhile.
            self.checkpoint_running.store(false, Ordering::Release);
            return;
        };
        self.last_checkpoint = Instant::now();
        self.replayed_bytes = 0;
        let at = self.clock.now_ms();
        // What a failed checkpoint was to write is written by this one.
        if let Some(failed) = self.checkpoint_failed.lock().take() {
            self.touched.extend(failed.streams);
            self.cleaning.sizes.extend(failed.retire);
            self.promoted_since_checkpoint |= failed.sync_files;
        }
        let (changed, deleted) = self.touched_streams(at);
        self.start_cleaning(replay_from);
        let retire: Vec<(u64, u64)> = self
            .unpinned_before(replay_from)
            .into_iter()
            .filter_map(|n| self.cleaning.sizes.remove(&n).map(|size| (n, size)))
            .collect();
        let delta = Delta {
            replay_from_segment: replay_from,
            next_stream_id: self.engine.next_id,
            changed,
            deleted,
        };
        let job = Job {
            sync_files: std::mem::take(&mut self.promoted_since_checkpoint),
            data: self.engine.data.clone(),
            disk: Arc::clone(&self.engine.disk),
            running: Arc::clone(&self.checkpoint_running),
            failed: Arc::clone(&self.checkpoint_failed),
            metrics: Arc::clone(&self.metrics),
            delta,
            retire,
        };
        let job = move || job.run();
        if now {
            job();
        } else {
            std::thread::Builder::new()
                .name("checkpoint".into())
                .spawn(job)
                .expect("spawn the checkpoint thread");
        }
    }

    /// The streams changed since the last checkpoint, saved, and those
    /// deleted. A fresh set after: the old one's capacity (from a burst of
    /// touched streams) is not kept for idle ones.
    fn touched_streams(&mut self, at: u64) -> (Vec<SavedStream>, Vec<u64>) {
        let ids: Vec<u64> = std::mem::take(&mut self.touched).into_iter().collect();
        let mut changed = Vec::with_capacity(ids.len());
        let mut deleted = Vec::new();
        for id in ids {
            match self.engine.entry_by_id(id) {
                Some(entry) => {
                    entry.core.forget_idle_producers(at);
                    changed.push(entry.saved());
                }
                None => deleted.push(id),
            }
        }
        (changed, deleted)
    }

    /// Starts the next log segment; returns its number. None when it
    /// cannot be made (a full disk, no descriptor): the open segment goes
    /// on (see `room`), and the next checkpoint tries again.
    fn rotate(&mut self) -> Option<u64> {
        let (old, size) = (self.wal.segment(), self.wal.written);
        match self.wal.rotate() {
            Ok(n) => {
                self.cleaning.sizes.insert(old, size);
                self.engine.disk.segments.add(n, self.wal.file());
                Some(n)
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not start a new log segment; the open one goes on");
                None
            }
        }
    }
}

/// One checkpoint's writing, off the writer's thread.
struct Job {
    sync_files: bool,
    data: std::path::PathBuf,
    disk: Arc<Disk>,
    running: Arc<AtomicBool>,
    failed: Arc<Mutex<Option<Failed>>>,
    metrics: Arc<Metrics>,
    delta: Delta,
    /// Segments to delete once the delta is durable, with their sizes.
    retire: Vec<(u64, u64)>,
}

impl Job {
    fn run(self) {
        let started = Instant::now();
        match self.write() {
            Ok(()) => self.metrics.checkpoint(started.elapsed()),
            // The old checkpoint and every segment after it are still in
            // place, so recovery stays correct; the next checkpoint writes
            // what this one held (deletions included), retires its segments
            // and syncs its files.
            Err(e) => {
                let streams = self
                    .delta
                    .changed
                    .iter()
                    .map(|s| s.core.id)
                    .chain(self.delta.deleted.iter().copied())
                    .collect();
                *self.failed.lock() = Some(Failed {
                    streams,
                    retire: self.retire.clone(),
                    sync_files: self.sync_files,
                });
                tracing::error!(error = %e, "checkpoint failed");
            }
        }
        self.running.store(false, Ordering::Release);
    }

    fn write(&self) -> std::io::Result<()> {
        if self.sync_files {
            let dir = std::fs::File::open(&self.data)?;
            rustix::fs::syncfs(&dir)?;
        }
        let report = checkpoint::write(&self.data, &self.delta)?;
        tracing::debug!(
            seq = report.seq,
            delta_bytes = report.delta_bytes,
            bytes = report.bytes_written(),
            "checkpoint written"
        );
        // The delta is durable either way; a failed compaction is tried
        // again at the next checkpoint.
        if let Some(Err(e)) = report.compaction {
            tracing::warn!(error = %e, "could not compact the checkpoint");
        }
        for &(n, _) in &self.retire {
            self.disk.segments.remove(n);
            match std::fs::remove_file(layout::segment_path(&self.data, n)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }
}
