//! Deleting a stream (asked for, or expired): removed, or soft-deleted
//! while forks of it still read its bytes (see `core::fork`).
//!
//! A removed stream's objects go (its incarnation's prefix), its file goes
//! once the delete is durable, and edges hear of it. A soft-deleted one
//! keeps all of that; its path answers 410 once the delete is durable, and
//! it is removed with the last fork that read it, in the same batch and
//! under the same log record (recovery replays the record through the same
//! rule, so it comes to the same end).

use std::sync::Arc;

use shared::invalidation::Change;

use super::super::engine::{Deletion, Entry};
use super::super::janitor::Garbage;
use super::super::record::{self, Record};
use super::super::view::End;
use super::{AfterCommit, Writer};
use crate::objects::keys;

impl Writer {
    pub(super) fn expire_if_due(
        &mut self,
        path: &str,
        now: u64,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
    ) {
        let due = self.engine.entries.get(path).is_some_and(|e| {
            !e.core.soft_deleted && e.core.config.is_expired(e.view.last_access(), now)
        });
        if due {
            self.delete(path, now, frames, after);
        }
    }

    pub(super) fn delete(
        &mut self,
        path: &str,
        now: u64,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
    ) {
        let Some(deletion) = self.engine.delete(path) else {
            return;
        };
        match deletion {
            Deletion::Soft(view) => {
                self.touched.insert(view.id);
                record::encode(
                    &Record::Delete {
                        id: view.id,
                        at: now,
                    },
                    frames,
                );
                let (path, incarnation) = (view.path.clone(), view.incarnation.clone());
                after.push(AfterCommit::Reply(Box::new(move || {
                    view.set_soft_deleted(true);
                    view.publish(End {
                        gone: true,
                        ..view.end()
                    });
                })));
                self.invalidate(after, path, incarnation, Change::Deleted, None);
            }
            Deletion::Removed(entries) => {
                if let Some(first) = entries.first() {
                    record::encode(
                        &Record::Delete {
                            id: first.core.id,
                            at: now,
                        },
                        frames,
                    );
                }
                for entry in entries {
                    self.removed(&entry, after);
                }
            }
        }
    }

    /// What goes with a stream removed from the table: its pending seals,
    /// its memory copy, its objects, its file and its registration.
    pub(super) fn removed(&mut self, entry: &Entry, after: &mut Vec<AfterCommit>) {
        let id = entry.core.id;
        if let Some(requested) = self.seal_requested.remove(&id) {
            let waiting = requested.saturating_sub(entry.core.sealed);
            self.unsealed -= waiting.min(self.unsealed);
            self.metrics.set_unsealed(self.unsealed);
        }
        self.forget_memory(id);
        self.touched.insert(id);
        self.pending_gc
            .push(Garbage::Prefix(keys::incarnation_prefix(
                &entry.core.path,
                &entry.core.incarnation,
            )));
        let (path, incarnation) = (entry.core.path.clone(), entry.core.incarnation.clone());
        after.push(AfterCommit::Unregister(Arc::clone(&entry.view)));
        // Again for a soft-deleted source: its path now answers 404.
        self.invalidate(after, path, incarnation, Change::Deleted, None);
    }
}
