//! Creating a stream, plain or as a fork (see `core::fork`): one log record
//! either way, so a fork exists with its whole prefix or not at all.
//!
//! The request handler resolved the fork against its source (the fork
//! point, the inherited configuration: reading a JSON source to count
//! messages is I/O, which this thread does not do); here it is checked
//! again against the stream table, which is what counts.

use std::sync::Arc;

use bytes::Bytes;
use shared::invalidation::Change;

use super::super::engine::Entry;
use super::super::error::StoreError;
use super::super::record::{self, CreateRecord, Record};
use super::super::ForkPlan;
use super::{new_incarnation, AfterCommit, Created, Writer};
use crate::core::config::StreamConfig;
use crate::core::fork::{self, ForkOf, ForkRefusal};
use crate::core::stream::AppendEffect;

impl Writer {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create(
        &mut self,
        path: String,
        config: StreamConfig,
        closed: bool,
        payload: Bytes,
        now: u64,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<Created, StoreError> {
        // A soft-deleted stream's path is taken until its forks go; a plain
        // create does not name a fork (a stream a rollback made is one
        // inside only: to its clients it is the stream they created).
        let plain = |e: &Entry| e.core.fork.as_deref().is_none_or(|f| f.restored.is_some());
        let same =
            |e: &Entry| plain(e) && e.core.config.same_as(&config) && e.core.closed == closed;
        if let Some(answer) = self.existing(&path, same) {
            return answer;
        }
        self.make(path, config, None, closed, payload, now, frames, after)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn fork(
        &mut self,
        path: String,
        plan: ForkPlan,
        closed: bool,
        payload: Bytes,
        now: u64,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<Created, StoreError> {
        let paths = &self.engine.paths_by_id;
        let same = |e: &Entry| {
            e.core.closed == closed
                && e.core.fork.as_deref().is_some_and(|f| {
                    let source_matches = paths
                        .get(&f.source)
                        .is_some_and(|p| **p == *plan.request.from);
                    fork::same_fork(f, &e.core.config, source_matches, &plan.request)
                })
        };
        if let Some(answer) = self.existing(&path, same) {
            return answer;
        }
        let Some(resolved) = plan.resolved else {
            return Err(StoreError::NotFound);
        };
        let source = match self.engine.entries.get(plan.request.from.as_str()) {
            Some(s) if Arc::ptr_eq(&s.view, &resolved.source) => s,
            // Deleted, or deleted and created again, since the handler
            // looked: the source it resolved against is gone.
            _ => return Err(StoreError::NotFound),
        };
        if source.core.soft_deleted {
            return Err(StoreError::ForkSourceDeleted);
        }
        let max = self.config.max_fork_depth;
        if source.view.fork_depth() >= max {
            return Err(StoreError::ForkRefused(ForkRefusal::TooDeep { max }));
        }
        if source
            .core
            .config
            .is_expired(source.view.last_access(), now)
        {
            return Err(StoreError::NotFound);
        }
        if resolved.at > source.core.len {
            return Err(StoreError::ForkRefused(ForkRefusal::BeyondTail {
                tail: source.core.len,
            }));
        }
        let of = ForkOf {
            source: source.core.id,
            at: resolved.at,
            anchor: resolved.anchor,
            sub: plan.request.sub,
            restored: None,
        };
        self.make(
            path,
            resolved.config,
            Some(of),
            closed,
            payload,
            now,
            frames,
            after,
        )
    }

    /// The answer to a create at a path that is taken: the stream there
    /// when it is the one asked for (and not soft-deleted), 409 otherwise;
    /// None when the path is free.
    fn existing(
        &self,
        path: &str,
        same: impl FnOnce(&Entry) -> bool,
    ) -> Option<Result<Created, StoreError>> {
        let e = self.engine.entries.get(path)?;
        Some(if !e.core.soft_deleted && same(e) {
            Ok(Created {
                view: Arc::clone(&e.view),
                created: false,
                end: e.end(),
            })
        } else {
            Err(StoreError::ConfigMismatch)
        })
    }

    /// Logs and applies a new stream (a fork when `fork` is set).
    #[allow(clippy::too_many_arguments)]
    fn make(
        &mut self,
        path: String,
        config: StreamConfig,
        fork: Option<ForkOf>,
        closed: bool,
        payload: Bytes,
        now: u64,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<Created, StoreError> {
        if self.sealing_behind() {
            return Err(StoreError::SealingBehind);
        }
        let id = self.engine.next_id;
        let rec = CreateRecord {
            id,
            created_at: now,
            path: path.clone(),
            incarnation: new_incarnation(id),
            config,
            initial: AppendEffect {
                start: fork.as_ref().map_or(0, |f| f.at),
                len: payload.len() as u64,
                close: closed,
                producer: None,
                stream_seq: None,
                at: now,
            },
            fork,
        };
        let record = Record::Create(rec, payload);
        let at = self.log_pos(record::encode(&record, frames));
        let Record::Create(rec, payload) = record else {
            unreachable!("just built")
        };
        self.engine.create(&rec, &payload, now, at);
        let entry = &self.engine.entries[path.as_str()];
        let (view, tail) = (Arc::clone(&entry.view), entry.end());
        self.touched.insert(view.id);
        self.expiry.schedule(&entry.core.config, view.id, now);
        let applied = super::super::engine::Applied {
            kept: view.memory_len(),
            promote: view.wants_promotion(),
            ..Default::default()
        };
        self.in_memory(&view, &applied);
        self.queue_seals(&path);
        after.push(AfterCommit::Register(Arc::clone(&view)));
        let incarnation = view.incarnation.clone();
        self.invalidate(after, path, incarnation, Change::Created, None);
        Ok(Created {
            view,
            created: true,
            end: tail,
        })
    }
}
