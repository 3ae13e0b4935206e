//! Cleaning the log: small streams keep their bytes in log segments (see
//! `store::warm`), which pins those segments. Once the pinned segments
//! older than the last checkpoint pass `StoreConfig::log_retain_bytes`,
//! the oldest one is cleaned: every stream with bytes in it is promoted
//! into its own file, [`CLEAN_PER_BATCH`] streams after each batch, and the
//! next checkpoint deletes the segment.
//!
//! The streams are found through `Engine::by_segment` (the streams that
//! got extents in each segment), so cleaning costs the streams in that
//! segment, not the streams held; the promotions are each one file write of
//! that stream's log-only bytes, which under a round-robin load over many
//! streams gathered several appends each while the segments were kept.

use std::collections::BTreeMap;

use super::Writer;

/// Streams promoted off the segment being cleaned, per batch.
pub const CLEAN_PER_BATCH: usize = 1024;

#[derive(Default)]
pub struct Cleaning {
    /// The segment being cleaned.
    segment: Option<u64>,
    /// Streams (by id) still to promote off it.
    left: Vec<u64>,
    /// Sizes of the segments before the open one.
    pub sizes: BTreeMap<u64, u64>,
}

impl Writer {
    /// Starts cleaning the oldest pinned segment when the pinned log is over
    /// its bound (at a checkpoint, before `retire_from`, the first segment
    /// the checkpoint does not replace).
    pub(super) fn start_cleaning(&mut self, retire_from: u64) {
        if self.cleaning.segment.is_some() {
            return;
        }
        let pinned: u64 = self
            .cleaning
            .sizes
            .iter()
            .filter(|(n, _)| **n < retire_from && self.engine.pins.contains_key(n))
            .map(|(_, size)| *size)
            .sum();
        if pinned <= self.config.log_retain_bytes {
            return;
        }
        let Some(oldest) = self
            .cleaning
            .sizes
            .keys()
            .copied()
            .find(|n| self.engine.pins.contains_key(n))
        else {
            return;
        };
        let mut ids = self
            .engine
            .by_segment
            .get(&oldest)
            .cloned()
            .unwrap_or_default();
        ids.sort_unstable();
        ids.dedup();
        // Those that still have bytes there (others moved on since).
        ids.retain(|&id| {
            self.engine.entry_by_id(id).is_some_and(|e| {
                e.view
                    .warm
                    .lock()
                    .extents()
                    .iter()
                    .any(|x| x.segment == oldest)
            })
        });
        self.cleaning.left = ids;
        tracing::info!(
            segment = oldest,
            streams = self.cleaning.left.len(),
            pinned_bytes = pinned,
            "cleaning a log segment: its streams move into their own files"
        );
        self.cleaning.segment = Some(oldest);
    }

    /// Promotes the next streams off the segment being cleaned.
    pub(super) fn clean_some(&mut self) {
        if self.cleaning.segment.is_none() {
            return;
        }
        let at = self.cleaning.left.len().saturating_sub(CLEAN_PER_BATCH);
        let batch = self.cleaning.left.split_off(at);
        self.promote_ids(batch);
        if self.cleaning.left.is_empty() {
            self.cleaning.segment = None;
        }
    }

    /// Segments before `retire_from` that nothing points into any more.
    pub(super) fn unpinned_before(&self, retire_from: u64) -> Vec<u64> {
        self.cleaning
            .sizes
            .keys()
            .copied()
            .filter(|n| *n < retire_from && !self.engine.pins.contains_key(n))
            .collect()
    }
}
