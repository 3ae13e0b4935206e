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

use super::super::engine::{Applied, LogPos};
use super::super::view::StreamView;
use super::Writer;

impl Writer {
    /// Where a payload at `offset` of this batch's frames will be in the log.
    pub(super) fn log_pos(&self, offset: usize) -> LogPos {
        LogPos {
            segment: self.wal.segment(),
            pos: self.wal.written + offset as u64,
            batch: self.batches,
        }
    }

    /// Notes what an append did to `view`'s memory copy, and queues the
    /// stream's promotion if it wants its own file now.
    pub(super) fn in_memory(&mut self, view: &Arc<StreamView>, applied: &Applied) {
        if applied.promote {
            self.to_promote.push(Arc::clone(view));
        }
        if applied.released > 0 {
            self.memory_total -= applied.released.min(self.memory_total);
            if applied.kept == 0 {
                self.in_memory.remove(&view.id);
            }
        }
        if applied.kept > 0 {
            self.in_memory
                .entry(view.id)
                .or_insert_with(|| Arc::clone(view));
            self.memory_total += applied.kept;
        }
    }

    /// Stream `id` is gone: its memory copy no longer counts.
    pub(super) fn forget_memory(&mut self, id: u64) {
        if let Some(view) = self.in_memory.remove(&id) {
            self.memory_total -= view.memory_len().min(self.memory_total);
        }
    }

    /// Promotions due and the memory budget, once the batch is durable.
    pub(super) fn after_batch(&mut self) {
        for view in std::mem::take(&mut self.to_promote) {
            self.promote(&view);
        }
        self.clean_some();
        self.promote_heavy();
        if self.memory_total > self.config.buffered_bytes_limit {
            // A fresh map: the old one's capacity is not kept for idle
            // streams.
            for view in std::mem::take(&mut self.in_memory).into_values() {
                view.drop_memory();
            }
            self.memory_total = 0;
        }
    }

    /// When all streams' extents passed their bound, promotes the heavy
    /// streams (1,024 per batch); the promotions bring the total down.
    fn promote_heavy(&mut self) {
        if self.engine.extents_total <= self.config.max_log_extents {
            return;
        }
        let batch: Vec<u64> = self
            .heavy
            .iter()
            .take(super::cleaning::CLEAN_PER_BATCH)
            .copied()
            .collect();
        for id in &batch {
            self.heavy.remove(id);
        }
        self.promote_ids(batch);
    }

    /// Has a stream's log-only bytes copied into its own file by the
    /// promoter, once at a time per stream.
    pub(super) fn promote(&mut self, view: &Arc<StreamView>) {
        // Deleted since (its extents were unpinned with it; a path created
        // again is another stream, with another id).
        if !self.engine.paths_by_id.contains_key(&view.id) || self.promoting.contains(&view.id) {
            return;
        }
        // Called between batches: every byte logged so far is durable.
        let through = view.logged_end();
        if self.promoter.send((Arc::clone(view), through)).is_ok() {
            self.promoting.insert(view.id);
        }
    }

    /// Promotes the streams with these ids that still exist.
    pub(super) fn promote_ids(&mut self, ids: impl IntoIterator<Item = u64>) {
        for id in ids {
            let view = self.engine.entry_by_id(id).map(|e| Arc::clone(&e.view));
            if let Some(view) = view {
                self.promote(&view);
            }
        }
    }

    /// A promotion came back: the extents it covered are forgotten (their
    /// segments may go), the memory copy below it released.
    pub(super) fn promoted(&mut self, id: u64, through: Option<u64>, written: u64) {
        self.promoting.remove(&id);
        self.heavy.remove(&id);
        let Some(through) = through else {
            self.metrics.promotion_failed();
            return;
        };
        let Some(view) = self.engine.entry_by_id(id).map(|e| Arc::clone(&e.view)) else {
            // Deleted meanwhile: the file written after its removal goes.
            super::super::engine::Engine::remove_file(
                &self.engine.data,
                &self.engine.disk.files,
                id,
            );
            return;
        };
        let (gone, released) = view.promoted_through(through);
        if view.warm.lock().extents().len() >= super::super::warm::HEAVY_EXTENTS {
            self.heavy.insert(id);
        }
        self.engine.unpin(&gone);
        self.memory_total -= released.min(self.memory_total);
        if view.memory_len() == 0 {
            self.in_memory.remove(&id);
        }
        self.touched.insert(id);
        self.promoted_since_checkpoint = true;
        if written > 0 {
            self.metrics.promoted(written);
        }
        // Appends that came meanwhile may want another.
        if view.wants_promotion() {
            self.to_promote.push(view);
        }
    }
}
