//! A replica's writer takes its owner's commits (decision 0018): the
//! frames of each WAL object, read from the bucket once a round of them
//! stood (`region::follow`), are written to the replica's own log as they
//! are and applied as recovery applies them, and the streams they touched
//! are published once that log write is done, as any batch is.
//!
//! Its log is kept as the owner's writer keeps its own: appends' memory
//! copies counted against the memory budget, streams promoted into their
//! own files when they want one, sealed bytes' local copies dropped (their
//! reads go to the bucket) once the batch holding the seal is durable.
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
use super::super::view::End;
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
        // once its frames are in the log.
        for id in touched {
            let Some(entry) = self.engine.entry_by_id(id) else {
                continue;
            };
            let (view, tail, snapshot) = (
                Arc::clone(&entry.view),
                entry.end(),
                entry.core.snapshot.clone(),
            );
            self.touched.insert(id);
            after.push(AfterCommit::Publish(Arc::clone(&view), tail));
            after.push(AfterCommit::Reply(Box::new(move || {
                view.set_snapshot(snapshot)
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
                if let Some(path) = self.engine.paths_by_id.get(&id).cloned() {
                    let deletion = self.engine.delete(&path);
                    self.replicated_deletion(deletion, after, touched);
                }
                Ok(())
            }
            // A rollback: the new incarnation takes the path (registered
            // first, so the old one's readers find it), the old one goes as
            // a delete would.
            Record::Restore { previous, saved } => {
                let (id, key) = (saved.core.id, saved.core.key());
                let deletion = self
                    .engine
                    .restore_stream(previous, *saved, now)
                    .map_err(|e| StoreError::ReplicaDiverged(e.to_string()))?;
                let view = Arc::clone(&self.engine.entries[&key].view);
                after.push(AfterCommit::Register(view));
                self.replicated_deletion(deletion, after, touched);
                touched.insert(id);
                Ok(())
            }
            // As the owner's writer appends: its memory copy counted, and
            // the stream promoted into its own file when it wants one.
            Record::Append {
                id,
                effect,
                payload,
            } => {
                let path = self
                    .engine
                    .logged_append(id, effect.start)
                    .map_err(|e| StoreError::ReplicaDiverged(e.to_string()))?;
                let entry = self.engine.entries.get_mut(&path).expect("indexed");
                let view = Arc::clone(&entry.view);
                let applied = entry.apply(&effect, &payload, pos);
                if let Some(e) = &applied.extent {
                    self.engine.pin(e, id);
                }
                if applied.heavy {
                    self.heavy.insert(id);
                }
                self.in_memory(&view, &applied);
                touched.insert(id);
                Ok(())
            }
            // As the owner's writer takes a seal: its local copy goes (holes
            // punched) once this batch is durable; reads of it go to the bucket.
            Record::Sealed { id, through } => {
                let Some(entry) = self.engine.entry_by_id(id) else {
                    return Ok(());
                };
                if through > entry.core.sealed {
                    entry.core.sealed = through;
                    self.pending_drops.push((Arc::clone(&entry.view), through));
                    touched.insert(id);
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
                let memory_before = self
                    .engine
                    .entry_by_id(id)
                    .map_or(0, |e| e.view.memory_len());
                self.engine
                    .replay(rec, now, pos)
                    .map_err(|e| StoreError::ReplicaDiverged(e.to_string()))?;
                if let Some(old) = replaced {
                    touched.remove(&old.id);
                    self.forget_memory(old.id);
                    after.push(AfterCommit::Unregister(old));
                }
                if let Some(entry) = made.and_then(|p| self.engine.entries.get(p.as_str())) {
                    after.push(AfterCommit::Register(Arc::clone(&entry.view)));
                }
                // A create's (or image's) bytes kept in memory count as an
                // append's do.
                if let Some(entry) = self.engine.entry_by_id(id) {
                    let view = Arc::clone(&entry.view);
                    let added = view.memory_len().saturating_sub(memory_before);
                    if added > 0 {
                        self.in_memory
                            .entry(id)
                            .or_insert_with(|| Arc::clone(&view));
                        self.memory_total += added;
                    }
                }
                touched.insert(id);
                Ok(())
            }
        }
    }

    /// The owner deleted a stream (or rolled it back): removed, or
    /// soft-deleted while forks of it still read its bytes, as recovery
    /// replays a delete.
    fn replicated_deletion(
        &mut self,
        deletion: Option<Deletion>,
        after: &mut Vec<AfterCommit>,
        touched: &mut FastSet<u64>,
    ) {
        match deletion {
            Some(Deletion::Soft(view)) => {
                // Published gone here, not by the round's publish.
                touched.remove(&view.id);
                self.touched.insert(view.id);
                after.push(AfterCommit::Reply(Box::new(move || {
                    view.set_soft_deleted(true);
                    view.publish(End {
                        gone: true,
                        ..view.end()
                    });
                })));
            }
            Some(Deletion::Removed(entries)) => {
                for entry in entries {
                    let gone = entry.core.id;
                    touched.remove(&gone);
                    self.touched.insert(gone);
                    self.forget_memory(gone);
                    after.push(AfterCommit::Unregister(Arc::clone(&entry.view)));
                }
            }
            None => {}
        }
    }
}
