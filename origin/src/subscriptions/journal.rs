//! Where subscriptions are durable: a journal stream of the store itself,
//! so subscriptions, links, acked offsets, wakes and retry times are in
//! the same log and checkpoints as the streams (and, with object
//! durability, in the bucket) and need no store of their own.
//!
//! The journal is the stream `/.ds-region/subscriptions/{n}` (hidden: no
//! client may name it). Each append is one or more lines of JSON, each a
//! subscription's [`Event`] or its whole state. A change is answered only
//! once its lines are durable, and applied in memory while the journal is
//! held for reading, so the memory state is always the journal's fold.
//!
//! The journal would grow without end (every wake and ack is a line), so
//! past `compact_bytes` it is rewritten: a new journal `n + 1` gets every
//! subscription's whole state, then a `complete` line, and only then is
//! journal `n` deleted. Recovery folds the highest journal that has its
//! `complete` line and deletes every other: a crash before the line leaves
//! journal `n` authoritative, a crash after it leaves `n + 1`.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::Error;
use crate::core::subscription::state::{Event, Subscription};
use crate::store::{AppendOutcome, Store, StreamView};

/// The journals' folder among the hidden streams.
pub const PREFIX: &str = "/.ds-region/subscriptions/";

/// The most bytes one append of the rewrite carries.
const REWRITE_PIECE: usize = 4 << 20;

#[derive(Serialize, Deserialize)]
#[serde(tag = "j", rename_all = "snake_case")]
enum Line {
    Event {
        root: String,
        id: String,
        e: Event,
    },
    State {
        root: String,
        id: String,
        s: Box<Subscription>,
    },
    Complete,
    /// The signing keys and token secret, in a region (`keys.rs`): the
    /// last such line holds.
    Keys {
        k: super::keys::Stored,
    },
}

struct Current {
    n: u64,
    view: Arc<StreamView>,
}

pub struct Journal {
    store: Store,
    current: tokio::sync::RwLock<Current>,
    /// The size the last rewrite left (0: none yet).
    rewritten: std::sync::atomic::AtomicU64,
}

/// What a journal held: every subscription (its root, id and state), and
/// the keys if it kept them.
pub struct Recovered {
    pub subscriptions: Vec<(String, String, Subscription)>,
    pub keys: Option<super::keys::Stored>,
}

fn path(n: u64) -> String {
    format!("{PREFIX}{n:016x}")
}

fn config() -> crate::core::config::StreamConfig {
    crate::core::config::StreamConfig {
        content_type: "application/octet-stream".into(),
        expiry: crate::core::config::Expiry::Never,
        public: false,
    }
}

fn lines_of(bytes: &[u8]) -> impl Iterator<Item = Line> + '_ {
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| match serde_json::from_slice(l) {
            Ok(line) => Some(line),
            Err(e) => {
                tracing::error!(error = %e, "a subscription journal line that does not parse is skipped");
                None
            }
        })
}

impl Journal {
    /// Folds the authoritative journal and deletes every other one (or
    /// starts the first).
    pub async fn open(store: Store) -> Result<(Journal, Recovered), Error> {
        let mut found: Vec<(u64, Arc<StreamView>)> = store
            .region_streams_under(PREFIX)
            .into_iter()
            .filter(|v| !v.is_soft_deleted())
            .filter_map(|v| {
                let n = u64::from_str_radix(v.path.strip_prefix(PREFIX)?, 16).ok()?;
                Some((n, v))
            })
            .collect();
        found.sort_by_key(|(n, _)| *n);
        let mut chosen: Option<(u64, Arc<StreamView>, Vec<Line>)> = None;
        for (n, view) in found.iter().rev() {
            let bytes = view
                .read(0, view.end().next)
                .await
                .map_err(|e| Error::Journal(format!("reading it: {e}")))?;
            let lines: Vec<Line> = lines_of(&bytes).collect();
            if lines.iter().any(|l| matches!(l, Line::Complete)) {
                chosen = Some((*n, Arc::clone(view), lines));
                break;
            }
        }
        let (n, view, lines) = match chosen {
            Some(c) => c,
            None => {
                let n = found.last().map_or(1, |(n, _)| n + 1);
                let created = store
                    .create(path(n), config(), false, line_bytes(&[Line::Complete]))
                    .await?;
                (n, created.view, Vec::new())
            }
        };
        for (other, _) in found.iter().filter(|(o, _)| *o != n) {
            store.delete(path(*other), None).await?;
        }
        let mut subs: std::collections::BTreeMap<(String, String), Subscription> =
            Default::default();
        let mut keys = None;
        for line in lines {
            match line {
                Line::State { root, id, s } => {
                    subs.insert((root, id), *s);
                }
                Line::Event { root, id, e } => {
                    let sub = subs.entry((root, id)).or_insert_with(Subscription::unborn);
                    sub.apply(&e);
                }
                Line::Keys { k } => keys = Some(k),
                Line::Complete => {}
            }
        }
        let subscriptions = subs
            .into_iter()
            .filter(|(_, s)| !s.deleted && !s.id.is_empty())
            .map(|((root, id), s)| (root, id, s))
            .collect();
        Ok((
            Journal {
                store,
                current: tokio::sync::RwLock::new(Current { n, view }),
                rewritten: std::sync::atomic::AtomicU64::new(0),
            },
            Recovered {
                subscriptions,
                keys,
            },
        ))
    }

    /// Logs the keys' state (before it is used).
    pub async fn keys(&self, k: &super::keys::Stored) -> Result<(), Error> {
        let line = Line::Keys { k: k.clone() };
        let current = self.current.read().await;
        self.write(&current.view, line_bytes(&[line])).await
    }

    /// Logs a subscription's events, then (while the journal is held, so a
    /// rewrite sees it) applies them with `apply`.
    pub async fn append(
        &self,
        root: &str,
        id: &str,
        events: &[Event],
        apply: impl FnOnce(),
    ) -> Result<(), Error> {
        let lines: Vec<Line> = events
            .iter()
            .map(|e| Line::Event {
                root: root.to_owned(),
                id: id.to_owned(),
                e: e.clone(),
            })
            .collect();
        let current = self.current.read().await;
        self.write(&current.view, line_bytes(&lines)).await?;
        apply();
        Ok(())
    }

    async fn write(&self, view: &Arc<StreamView>, payload: Bytes) -> Result<(), Error> {
        let req = super::plain_append(view, payload.len());
        let appended = self
            .store
            .append(Arc::clone(view), None, req, payload)
            .await?;
        match appended.outcome {
            AppendOutcome::Applied { .. } => Ok(()),
            other => Err(Error::Journal(format!(
                "an append was not applied: {other:?}"
            ))),
        }
    }

    /// The journal's size, in bytes.
    pub async fn size(&self) -> u64 {
        self.current.read().await.view.end().next
    }

    /// Whether a rewrite is due: past `threshold`, and past twice what the
    /// last rewrite left (live state larger than the threshold is not
    /// rewritten again and again).
    pub async fn rewrite_due(&self, threshold: u64) -> bool {
        let last = self.rewritten.load(std::sync::atomic::Ordering::Relaxed);
        self.size().await > threshold.max(last.saturating_mul(2))
    }

    /// Rewrites the journal as `states` (taken while it is held, so no
    /// change is between them and the new journal), then deletes the old.
    pub async fn rewrite(
        &self,
        keys: Option<super::keys::Stored>,
        states: impl FnOnce() -> Vec<(String, String, Subscription)>,
    ) -> Result<(), Error> {
        let mut current = self.current.write().await;
        let next = current.n + 1;
        // What an earlier rewrite that failed left there is not this one's.
        if self.store.get(&path(next)).is_some() {
            self.store.delete(path(next), None).await?;
        }
        let created = self
            .store
            .create(path(next), config(), false, Bytes::new())
            .await?;
        let mut piece = Vec::new();
        if let Some(k) = keys {
            piece.extend_from_slice(&line_bytes(&[Line::Keys { k }]));
        }
        for (root, id, s) in states() {
            let line = Line::State {
                root,
                id,
                s: Box::new(s),
            };
            piece.extend_from_slice(&line_bytes(std::slice::from_ref(&line)));
            if piece.len() >= REWRITE_PIECE {
                self.write(&created.view, Bytes::from(std::mem::take(&mut piece)))
                    .await?;
            }
        }
        piece.extend_from_slice(&line_bytes(&[Line::Complete]));
        self.write(&created.view, Bytes::from(piece)).await?;
        let old = current.n;
        self.rewritten.store(
            created.view.end().next,
            std::sync::atomic::Ordering::Relaxed,
        );
        *current = Current {
            n: next,
            view: created.view,
        };
        // The new journal is authoritative from its `complete` line on; a
        // failed delete leaves the old one for the next recovery to remove.
        if let Err(e) = self.store.delete(path(old), None).await {
            tracing::warn!(error = %e, "the old subscription journal stays until the next start");
        }
        Ok(())
    }
}

fn line_bytes(lines: &[Line]) -> Bytes {
    let mut out = Vec::new();
    for l in lines {
        serde_json::to_writer(&mut out, l).expect("journal lines serialize");
        out.push(b'\n');
    }
    Bytes::from(out)
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
