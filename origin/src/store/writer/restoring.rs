//! Rolling a stream back to an earlier offset (`core::restore`, decision
//! 0029): one log record replaces the stream at its path by a new
//! incarnation that forks it (or the furthest source holding the same
//! bytes) at the point, so it costs the same whatever the stream holds,
//! and a crash leaves the old history or the new, never a mix.
//!
//! The replaced incarnation is deleted as any stream is (soft while forks
//! read it, the new one among them); readers that held it see it gone, and
//! edges hear `Deleted` for it and `Created` for the new one.

use std::sync::Arc;

use shared::invalidation::Change;

use super::super::engine::Deletion;
use super::super::error::StoreError;
use super::super::record::{self, Record};
use super::super::saved::SavedStream;
use super::super::view::End;
use super::{new_incarnation, same_incarnation, AfterCommit, Writer};
use crate::core::fork::{ForkOf, ForkRefusal};
use crate::core::restore;
use crate::core::stream::StreamCore;

/// A rollback done: the new incarnation, and what it inherited.
pub struct Restored {
    pub view: Arc<super::super::StreamView>,
    pub end: End,
}

impl Writer {
    /// Rolls the stream at `path`, which must be incarnation `incarnation`,
    /// back to offset `to`. (Cold: rare, and kept out of the command loop
    /// the appends go through.)
    #[cold]
    #[inline(never)]
    pub(super) fn restore(
        &mut self,
        path: &str,
        incarnation: String,
        to: u64,
        now: u64,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<Restored, StoreError> {
        self.expire_if_due(path, now, frames, after);
        let entry = self.engine.entries.get(path).ok_or(StoreError::NotFound)?;
        if entry.core.soft_deleted {
            return Err(StoreError::SoftDeleted);
        }
        same_incarnation(&entry.view, Some(incarnation))?;
        if self.sealing_behind() {
            return Err(StoreError::SealingBehind);
        }
        let readable = restore::Readable {
            retained: entry.view.end().retained,
            snapshot: match entry.core.snapshot.as_deref() {
                Some(own) => Some(own.offset),
                None => entry.view.bootstrap_snapshot().map(|(s, _)| s.offset),
            },
        };
        let rollback =
            restore::rollback(&entry.core, readable, to).map_err(StoreError::RestoreRefused)?;
        let source = restore::fork_source(&self.fork_chain(entry.core.id), to);
        let max = self.config.max_fork_depth;
        if source == entry.core.id && entry.view.fork_depth() >= max {
            return Err(StoreError::ForkRefused(ForkRefusal::TooDeep { max }));
        }
        let (previous, old) = (entry.core.id, entry.core.incarnation.clone());
        let id = self.engine.next_id;
        let mut core = StreamCore::new(
            id,
            entry.core.path.clone(),
            new_incarnation(id).into(),
            entry.core.config.clone(),
            now,
        );
        core.len = to;
        core.sealed = to - to % shared::offset::CHUNK_BYTES;
        core.closed = rollback.closed;
        core.stream_seq = rollback.stream_seq;
        core.producers = rollback.producers;
        core.fork = Some(Box::new(ForkOf {
            source,
            at: to,
            anchor: to,
            sub: 0,
            restored: Some(old.clone()),
        }));
        let saved = SavedStream {
            core,
            file_len: to,
            extents: Vec::new(),
            last_write_at: now,
        };
        let record = Record::Restore {
            previous,
            saved: Box::new(saved),
        };
        record::encode(&record, frames);
        let Record::Restore { saved, .. } = record else {
            unreachable!("just built")
        };
        let deletion = self
            .engine
            .restore_stream(previous, *saved, now)
            .expect("checked against the table above");
        let entry = &self.engine.entries[path];
        let (view, end) = (Arc::clone(&entry.view), entry.end());
        self.touched.insert(id);
        self.expiry.schedule(&entry.core.config, id, now);
        self.queue_seals(path);
        // The new incarnation is registered first: the old one's readers,
        // woken below, find it at the path.
        after.push(AfterCommit::Register(Arc::clone(&view)));
        match deletion {
            Some(Deletion::Soft(old_view)) => {
                self.touched.insert(old_view.id);
                after.push(AfterCommit::Reply(Box::new(move || {
                    old_view.set_soft_deleted(true);
                    old_view.publish(End {
                        gone: true,
                        ..old_view.end()
                    });
                })));
                self.invalidate(after, path, old, Change::Deleted, None);
            }
            Some(Deletion::Removed(entries)) => {
                for entry in entries {
                    self.removed(&entry, after);
                }
            }
            None => {}
        }
        self.invalidate(after, path, view.incarnation.clone(), Change::Created, None);
        Ok(Restored { view, end })
    }

    /// Stream `id`, then its source, and so on: each with its fork point.
    fn fork_chain(&self, id: u64) -> Vec<(u64, Option<u64>)> {
        let mut chain = Vec::new();
        let mut next = Some(id);
        while let Some(id) = next {
            let fork = self
                .engine
                .paths_by_id
                .get(&id)
                .and_then(|key| self.engine.entries.get(key))
                .and_then(|e| e.core.fork.as_deref());
            chain.push((id, fork.map(|f| f.at)));
            next = fork.map(|f| f.source);
        }
        chain
    }
}
