//! The writer's side of a stream's metadata: snapshots, retention and
//! visibility, decided by the pure core and logged like appends.

use crate::core::fork;
use std::sync::Arc;

use shared::invalidation::Change;
use shared::offset::{Offset, CHUNK_BYTES};

use super::super::engine::Entry;
use super::super::error::StoreError;
use super::super::janitor::Garbage;
use super::super::record::{self, Record};
use super::super::view::StreamView;
use super::{AfterCommit, Writer};
use crate::core::snapshot::{SnapshotDecision, SnapshotMeta};
use crate::objects::keys;

impl Writer {
    pub(super) fn entry_checked(
        &self,
        path: &str,
        incarnation: Option<String>,
    ) -> Result<&Entry, StoreError> {
        let entry = self.engine.entries.get(path).ok_or(StoreError::NotFound)?;
        match incarnation {
            Some(i) if *i != *entry.core.incarnation => Err(StoreError::mismatch(&entry.view)),
            _ => Ok(entry),
        }
    }

    pub(super) fn snapshot(
        &mut self,
        path: &str,
        incarnation: Option<String>,
        meta: SnapshotMeta,
        expect_digest: Option<String>,
        frames: &mut Vec<u8>,
    ) -> Result<bool, StoreError> {
        let entry = self.entry_checked(path, incarnation)?;
        let decision = entry
            .core
            .decide_snapshot(&meta, expect_digest.as_deref())
            .map_err(StoreError::SnapshotRefused)?;
        let SnapshotDecision::Publish { replaced } = decision else {
            return Ok(false);
        };
        let replaces = replaced.is_some();
        let id = entry.core.id;
        if let Some(old) = replaced {
            self.pending_gc.push(Garbage::Key(keys::snapshot(
                &entry.core.path,
                &entry.core.incarnation,
                Offset(old.offset),
                &old.digest,
            )));
        }
        record::encode(
            &Record::Snapshot {
                id,
                meta: meta.clone(),
            },
            frames,
        );
        self.touched.insert(id);
        let entry = self.engine.entries.get_mut(path).expect("checked above");
        entry.core.snapshot = Some(Box::new(meta));
        Ok(replaces)
    }

    pub(super) fn retain(
        &mut self,
        path: &str,
        incarnation: Option<String>,
        offset: u64,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<(), StoreError> {
        let entry = self.entry_checked(path, incarnation)?;
        let advance = entry
            .core
            .decide_retain(offset)
            .map_err(StoreError::RetainRefused)?;
        if !advance {
            return Ok(());
        }
        let id = entry.core.id;
        record::encode(&Record::Retain { id, offset }, frames);
        self.touched.insert(id);
        let entry = self.engine.entries.get_mut(path).expect("checked above");
        let before = entry.core.retained;
        entry.core.retained = offset;
        // Sealed chunks that now lie wholly before retention are garbage;
        // the rest become garbage when they are sealed.
        // A fork's chunks before its fork point's are its source's.
        let own = entry
            .core
            .fork
            .as_deref()
            .map_or(0, |f| f.at - f.at % CHUNK_BYTES);
        let first = (before - before % CHUNK_BYTES).max(own);
        let mut start = first;
        while start + CHUNK_BYTES <= offset && start + CHUNK_BYTES <= entry.core.sealed {
            self.pending_gc.push(Garbage::Key(keys::chunk(
                &entry.core.path,
                &entry.core.incarnation,
                Offset(start),
            )));
            start += CHUNK_BYTES;
        }
        after.push(AfterCommit::Publish(Arc::clone(&entry.view), entry.end()));
        let (path, incarnation) = (entry.core.path.clone(), entry.core.incarnation.clone());
        // What the stream's readers see now (a fork's own retention may
        // be below what it inherits).
        let was = entry.view.end().retained;
        let now = was.max(offset);
        self.invalidate(after, path, incarnation, Change::Retained, Some(now));
        self.retention_reaches_forks(id, was, now, after);
        Ok(())
    }

    /// Forks without a snapshot of their own start from their source's
    /// (see `StreamView::bootstrap_snapshot`): edges that keep their
    /// snapshot answers hear that it changed, down to forks that have one
    /// of their own.
    pub(super) fn snapshot_reaches_forks(&self, id: u64, after: &mut Vec<AfterCommit>) {
        let mut sources = vec![id];
        while let Some(source) = sources.pop() {
            for &fork in self.engine.forks_of(source) {
                let Some(path) = self.engine.paths_by_id.get(&fork) else {
                    continue;
                };
                let core = &self.engine.entries[path].core;
                if core.snapshot.is_none() {
                    let (path, incarnation) = (core.path.clone(), core.incarnation.clone());
                    self.invalidate(after, path, incarnation, Change::SnapshotReplaced, None);
                    sources.push(fork);
                }
            }
        }
    }

    /// A fork cannot read before its source's retention (up to its fork
    /// point), so a source's retention moves its forks' too, and edges
    /// that keep their bytes must hear of it as of the fork's own.
    fn retention_reaches_forks(&self, id: u64, was: u64, now: u64, after: &mut Vec<AfterCommit>) {
        let mut moved = vec![(id, was, now)];
        while let Some((source, was, now)) = moved.pop() {
            for &fork in self.engine.forks_of(source) {
                let Some(path) = self.engine.paths_by_id.get(&fork) else {
                    continue;
                };
                let core = &self.engine.entries[path].core;
                let at = core.fork.as_deref().map_or(0, |f| f.at);
                let (fork_was, fork_now) = (
                    fork::retained(core.retained, was, at),
                    fork::retained(core.retained, now, at),
                );
                if fork_now > fork_was {
                    let (path, incarnation) = (core.path.clone(), core.incarnation.clone());
                    self.invalidate(after, path, incarnation, Change::Retained, Some(fork_now));
                    moved.push((fork, fork_was, fork_now));
                }
            }
        }
    }

    /// Tells the edges, once the change is durable and visible and before
    /// the request that made it is answered (see `store::invalidations`).
    pub(super) fn invalidate(
        &self,
        after: &mut Vec<AfterCommit>,
        path: impl Into<Arc<str>>,
        incarnation: impl Into<Arc<str>>,
        change: Change,
        retained: Option<u64>,
    ) {
        if let Some(feed) = &self.invalidations {
            let feed = Arc::clone(feed);
            let (path, incarnation) = (path.into(), incarnation.into());
            // A region's feed: the event gets its position now and is
            // logged in this batch, so every owner answers the same.
            if let Some(seq) = feed.assign() {
                let event = shared::invalidation::Invalidation {
                    seq,
                    stream: shared::invalidation::stream_id(&path),
                    incarnation: incarnation.to_string(),
                    change,
                    retained,
                };
                record::encode(
                    &Record::Feed(event.clone()),
                    &mut self.feed_frames.borrow_mut(),
                );
                after.push(AfterCommit::Reply(Box::new(move || feed.push_event(event))));
                return;
            }
            after.push(AfterCommit::Reply(Box::new(move || {
                feed.push(&path, &incarnation, change, retained)
            })));
        }
    }

    /// Makes the stream public (or private); the view changes once durable.
    pub(super) fn set_public(
        &mut self,
        path: &str,
        incarnation: String,
        public: bool,
        frames: &mut Vec<u8>,
    ) -> Result<Arc<StreamView>, StoreError> {
        let entry = self.entry_checked(path, Some(incarnation))?;
        let (id, before, view) = (
            entry.core.id,
            entry.core.config.public,
            Arc::clone(&entry.view),
        );
        if before != public {
            record::encode(&Record::Visibility { id, public }, frames);
            self.touched.insert(id);
            let entry = self.engine.entries.get_mut(path).expect("checked");
            entry.core.config.public = public;
        }
        Ok(view)
    }
}
