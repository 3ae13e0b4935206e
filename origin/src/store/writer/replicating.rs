//! A replica's writer takes its owner's commits (decision 0018): the
//! frames of each WAL object, read from the bucket once a round of them
//! stood (`region::follow`), are written to the replica's own log as they
//! are and applied as recovery applies them, and the streams they touched
//! are published once that log write is done, as any batch is.
//!
//! A replica never decides anything: no refusal, no expiry, no seal of its
//! own. What the owner decided is in its records (appends, deletes by
//! expiry or by request, seals, retention), so the replica comes to the
//! owner's state by replaying them. A record it cannot apply (a frame it
//! cannot read, an append at the wrong offset) means the replica is not
//! what the bucket holds: the round answers an error and the follower
//! builds the replica again from the newest checkpoint.

use std::sync::Arc;

use bytes::Bytes;

use super::super::engine::{Deletion, LogPos};
use super::super::error::StoreError;
use super::super::record::{self, Record};
use super::super::view::Tail;
use super::super::FastSet;
use super::{AfterCommit, Writer};

impl Writer {
    /// Applies `objects` (each one WAL object's frames, in order) and logs
    /// their frames in this batch; returns an error if one cannot be applied.
    pub(super) fn replicate(
        &mut self,
        objects: &[Bytes],
        now: u64,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<(), StoreError> {
        let mut touched = FastSet::default();
        let result = objects
            .iter()
            .try_for_each(|object| self.replicate_object(object, now, frames, after, &mut touched));
        // What was applied (all of it, or up to a bad record) is published
        // once its frames are in the log, with their memory copies dropped:
        // the log holds them.
        for id in touched {
            let Some(entry) = self.engine.entry_by_id(id) else {
                continue;
            };
            let (view, tail, snapshot) = (
                Arc::clone(&entry.view),
                entry.tail(),
                entry.core.snapshot.clone(),
            );
            self.touched.insert(id);
            after.push(AfterCommit::Publish(Arc::clone(&view), tail));
            after.push(AfterCommit::Reply(Box::new(move || {
                view.set_snapshot(snapshot);
                view.drop_memory();
            })));
        }
        result
    }

    /// One object: its records applied in order, its frames logged.
    fn replicate_object(
        &mut self,
        object: &Bytes,
        now: u64,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
        touched: &mut FastSet<u64>,
    ) -> Result<(), StoreError> {
        let base = self.wal.written + frames.len() as u64;
        let mut at = 0;
        let diverged = |why: String| StoreError::ReplicaDiverged(why);
        while at < object.len() {
            let (rec, used) = match record::decode(&object[at..]) {
                Ok(Some(found)) => found,
                Ok(None) => break,
                Err(e) => return Err(diverged(format!("a frame it cannot read: {e}"))),
            };
            let pos = LogPos {
                segment: self.wal.segment(),
                pos: base + (at + used - record::payload_len(&rec)) as u64,
                batch: self.batches,
            };
            // The frame goes into the log with what it changes.
            frames.extend_from_slice(&object[at..at + used]);
            at += used;
            self.replicate_record(rec, now, pos, after, touched)?;
        }
        Ok(())
    }

    fn replicate_record(
        &mut self,
        rec: Record,
        now: u64,
        pos: LogPos,
        after: &mut Vec<AfterCommit>,
        touched: &mut FastSet<u64>,
    ) -> Result<(), StoreError> {
        match rec {
            Record::Delete { id, .. } => {
                let Some(path) = self.engine.paths_by_id.get(&id).cloned() else {
                    return Ok(());
                };
                match self.engine.delete(&path) {
                    Some(Deletion::Soft(view)) => {
                        self.touched.insert(view.id);
                        after.push(AfterCommit::Reply(Box::new(move || {
                            view.set_soft_deleted(true);
                            view.publish(Tail {
                                gone: true,
                                ..view.tail()
                            });
                        })));
                    }
                    Some(Deletion::Removed(entries)) => {
                        for entry in entries {
                            touched.remove(&entry.core.id);
                            self.touched.insert(entry.core.id);
                            after.push(AfterCommit::Unregister(Arc::clone(&entry.view)));
                        }
                    }
                    None => {}
                }
                Ok(())
            }
            rec => {
                let id = rec.stream_id();
                let made = match &rec {
                    Record::Create(c, _) => Some(c.path.clone()),
                    Record::Image { saved, .. } => Some(saved.core.path.to_string()),
                    _ => None,
                };
                // A stream the record makes replaces one at its path.
                let replaced = made
                    .as_deref()
                    .and_then(|p| self.engine.entries.get(p))
                    .map(|e| Arc::clone(&e.view));
                self.engine
                    .replay(rec, now, pos)
                    .map_err(|e| StoreError::ReplicaDiverged(e.to_string()))?;
                if let Some(old) = replaced {
                    touched.remove(&old.id);
                    after.push(AfterCommit::Unregister(old));
                }
                if let Some(entry) = made.and_then(|p| self.engine.entries.get(p.as_str())) {
                    after.push(AfterCommit::Register(Arc::clone(&entry.view)));
                }
                touched.insert(id);
                Ok(())
            }
        }
    }
}
