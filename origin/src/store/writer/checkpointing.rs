//! Checkpoints: rotate the log, then write every stream's state and sync
//! the stream files on a thread of their own, so the writer goes on.

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::super::checkpoint::{self, Checkpoint};
use super::super::wal;
use super::Writer;

impl Writer {
    /// Rotates the WAL and writes a checkpoint in the background when the
    /// open segment is large or old enough (or at once when `now`).
    pub(super) fn maybe_checkpoint(&mut self, now: bool) {
        // Log written since the last checkpoint: this segment, plus older
        // segments that recovery replayed and no checkpoint has retired yet.
        let unretired = self.wal.written + self.replayed_bytes;
        let due = unretired >= self.config.checkpoint_bytes
            || (unretired > 0 && self.last_checkpoint.elapsed() >= self.config.checkpoint_interval);
        if !(due || now && unretired > 0) || self.checkpoint_running.swap(true, Ordering::AcqRel) {
            return;
        }
        let replay_from = match self.wal.rotate() {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(error = %e, "could not start a new WAL segment; stopping");
                std::process::abort();
            }
        };
        self.last_checkpoint = Instant::now();
        self.replayed_bytes = 0;
        // The checkpoint's lengths must be in the files it syncs.
        self.flush_buffers(true);
        for entry in self.engine.entries.values_mut() {
            entry.core.forget_idle_producers(self.clock.now_ms());
        }
        let snapshot = Checkpoint {
            replay_from_segment: replay_from,
            next_stream_id: self.engine.next_id,
            streams: self
                .engine
                .entries
                .values()
                .map(|e| e.core.clone())
                .collect(),
        };
        let files: Vec<Arc<File>> = self
            .engine
            .entries
            .values()
            .map(|e| Arc::clone(&e.file))
            .collect();
        let data = self.engine.data.clone();
        let running = Arc::clone(&self.checkpoint_running);
        let metrics = Arc::clone(&self.metrics);
        let job = move || {
            let started = Instant::now();
            let result = (|| -> std::io::Result<()> {
                for f in &files {
                    f.sync_data()?;
                }
                checkpoint::write(&data, &snapshot)?;
                wal::remove_segments_before(&data, replay_from)
            })();
            match result {
                Ok(()) => metrics.checkpoint(started.elapsed()),
                // The old checkpoint and every segment after it are still in
                // place, so recovery stays correct; the next try may succeed.
                Err(e) => tracing::error!(error = %e, "checkpoint failed"),
            }
            running.store(false, Ordering::Release);
        };
        if now {
            job();
        } else {
            std::thread::Builder::new()
                .name("checkpoint".into())
                .spawn(job)
                .expect("spawn the checkpoint thread");
        }
    }
}
