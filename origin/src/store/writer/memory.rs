//! After each batch: memory copies of the newest bytes stay within their
//! budget, and streams that outgrew the log are promoted into their own
//! files (see `store::warm`).
//!
//! Dropping a memory copy costs nothing (the bytes are in the log), so the
//! budget is kept by dropping every copy at once when it is passed, as the
//! old flush of all buffers did, but without writing anything. A promotion
//! that fails (disk full, no descriptor) is logged and tried again at the
//! stream's next append or clean: the log still holds the bytes.

use std::sync::Arc;

use super::super::engine::LogPos;
use super::super::view::StreamView;
use super::Writer;

impl Writer {
    /// Where a payload at `offset` of this batch's frames will be in the log.
    pub(super) fn log_pos(&self, offset: usize) -> LogPos {
        LogPos {
            segment: self.wal.segment(),
            pos: self.wal.written + offset as u64,
        }
    }

    /// Notes that `view`'s memory copy grew by `added` bytes (an append),
    /// and whether the stream wants its own file now.
    pub(super) fn in_memory(&mut self, view: &Arc<StreamView>, added: u64, promote: bool) {
        if added == 0 {
            return;
        }
        self.in_memory
            .entry(view.id)
            .or_insert_with(|| Arc::clone(view));
        self.memory_total += added;
        if promote {
            self.to_promote.push(Arc::clone(view));
        }
    }

    /// Promotions due and the memory budget, once the batch is durable.
    pub(super) fn after_batch(&mut self) {
        for view in std::mem::take(&mut self.to_promote) {
            self.promote(&view);
        }
        self.clean_some();
        if self.memory_total > self.config.buffered_bytes_limit {
            // A fresh map: the old one's capacity is not kept for idle
            // streams.
            for view in std::mem::take(&mut self.in_memory).into_values() {
                view.drop_memory();
            }
            self.memory_total = 0;
        }
    }

    /// Copies a stream's log-only bytes into its own file.
    pub(super) fn promote(&mut self, view: &Arc<StreamView>) {
        // Deleted since (its extents were unpinned with it; a path created
        // again is another stream, with another id).
        if !self.engine.paths_by_id.contains_key(&view.id) {
            return;
        }
        match view.promote() {
            Ok((written, gone, released)) => {
                if self.in_memory.remove(&view.id).is_some() {
                    self.memory_total -= released.min(self.memory_total);
                }
                if written > 0 {
                    self.engine.unpin(&gone);
                    self.touched.insert(view.id);
                    self.promoted_since_checkpoint = true;
                    self.metrics.promoted(written);
                }
            }
            Err(e) => {
                tracing::warn!(stream = %view.path, error = %e, "could not copy a stream's bytes into its file; they stay in the log");
                self.metrics.promotion_failed();
            }
        }
    }
}
