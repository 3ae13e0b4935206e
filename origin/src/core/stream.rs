//! One stream's state and the append rule.
//!
//! The order of the checks is the protocol's: a fenced (stale-epoch) producer
//! is refused first, then a producer's retry is recognised (so a retry of the
//! append that closed the stream still succeeds), then a closed stream
//! refuses, then the content type, then the producer's sequence, then
//! `Stream-Seq`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use shared::content_type::same_media_type;

use super::config::StreamConfig;
use super::producer::{
    self, ProducerCheck, ProducerClaim, ProducerRefusal, ProducerState, Receipt,
};
use super::Millis;

/// Everything the log knows about one stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamCore {
    pub id: u64,
    /// Shared with the stream's view and the maps that index it (one copy
    /// per stream; an origin holds a million).
    pub path: Arc<str>,
    pub incarnation: Arc<str>,
    pub config: StreamConfig,
    pub created_at: Millis,
    /// Bytes in the stream: the next append's offset.
    pub len: u64,
    pub closed: bool,
    /// The last `Stream-Seq` applied.
    pub stream_seq: Option<String>,
    pub producers: BTreeMap<String, ProducerState>,
    /// Bytes `[0, sealed)` are in immutable chunks in object storage.
    #[serde(default)]
    pub sealed: u64,
    /// Reads before this offset answer 410 (a snapshot replaced them).
    #[serde(default)]
    pub retained: u64,
    /// The latest published snapshot (boxed: most streams have none).
    #[serde(default)]
    pub snapshot: Option<Box<super::snapshot::SnapshotMeta>>,
    /// Set on a fork: the source whose bytes `[0, at)` it reads (boxed:
    /// most streams are not forks).
    #[serde(default)]
    pub fork: Option<Box<super::fork::ForkOf>>,
    /// Deleted (or expired) while forks still read it: its path answers
    /// 410 until the last of them goes (see `core::fork`).
    #[serde(default)]
    pub soft_deleted: bool,
    /// A soft-deleted stream a rollback replaced (`core::restore`): no
    /// longer at its path (the stream table keys it by [`Self::key`]),
    /// kept while its forks (the rollback's among them) read it.
    #[serde(default)]
    pub detached: bool,
}

/// An append as the writer loop sees it: headers already parsed, the body
/// already in its stored form.
#[derive(Clone, Debug)]
pub struct AppendRequest {
    /// The request's `Content-Type`, when it sent one.
    pub content_type: Option<String>,
    pub payload_len: u64,
    pub producer: Option<ProducerClaim>,
    pub stream_seq: Option<String>,
    pub close: bool,
}

/// What an applied append changes. It is logged before it is applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendEffect {
    pub start: u64,
    pub len: u64,
    pub close: bool,
    pub producer: Option<ProducerClaim>,
    pub stream_seq: Option<String>,
    pub at: Millis,
}

/// An append that succeeds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendDecision {
    Apply(AppendEffect),
    /// A producer retry: nothing is appended.
    Duplicate {
        epoch: u64,
        highest_seq: u64,
        receipt: Option<Receipt>,
    },
    /// `Stream-Closed: true` with no body on a closed stream.
    AlreadyClosed,
}

/// An append that is refused; nothing changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendRefusal {
    Closed,
    ContentTypeMismatch { expected: String },
    Producer(ProducerRefusal),
    StreamSeqConflict { last: String },
}

impl StreamCore {
    pub fn new(
        id: u64,
        path: Arc<str>,
        incarnation: Arc<str>,
        config: StreamConfig,
        created_at: Millis,
    ) -> Self {
        StreamCore {
            id,
            path,
            incarnation,
            config,
            created_at,
            len: 0,
            closed: false,
            stream_seq: None,
            producers: BTreeMap::new(),
            sealed: 0,
            retained: 0,
            snapshot: None,
            fork: None,
            soft_deleted: false,
            detached: false,
        }
    }

    /// Where the stream table keeps this stream: its path, or for a
    /// detached stream a key no path can be (a path never holds NUL).
    pub fn key(&self) -> std::sync::Arc<str> {
        if self.detached {
            format!("\0{}", self.id).into()
        } else {
            self.path.clone()
        }
    }

    /// Decides an append at `now` without changing anything.
    pub fn decide_append(
        &self,
        req: &AppendRequest,
        now: Millis,
    ) -> Result<AppendDecision, AppendRefusal> {
        let producer_check = req
            .producer
            .as_ref()
            .map(|claim| producer::check(self.producers.get(&claim.id), claim, now));
        match producer_check {
            Some(Ok(ProducerCheck::Duplicate {
                epoch,
                highest_seq,
                receipt,
            })) => {
                return Ok(AppendDecision::Duplicate {
                    epoch,
                    highest_seq,
                    receipt,
                });
            }
            Some(Err(stale @ ProducerRefusal::StaleEpoch { .. })) => {
                return Err(AppendRefusal::Producer(stale))
            }
            _ => {}
        }
        if self.closed {
            return if req.close && req.payload_len == 0 {
                Ok(AppendDecision::AlreadyClosed)
            } else {
                Err(AppendRefusal::Closed)
            };
        }
        if req.payload_len > 0 {
            let matches = req
                .content_type
                .as_deref()
                .is_some_and(|ct| same_media_type(ct, &self.config.content_type));
            if !matches {
                return Err(AppendRefusal::ContentTypeMismatch {
                    expected: self.config.content_type.to_string(),
                });
            }
        }
        if let Some(Err(refusal)) = producer_check {
            return Err(AppendRefusal::Producer(refusal));
        }
        if let Some(claim) = &req.producer {
            let known = self
                .producers
                .get(&claim.id)
                .is_some_and(|p| p.is_live(now));
            let max = producer::MAX_PRODUCERS_PER_STREAM;
            if !known
                && self.producers.len() >= max
                && self.producers.values().filter(|p| p.is_live(now)).count() >= max
            {
                return Err(AppendRefusal::Producer(ProducerRefusal::TooMany { max }));
            }
        }
        if let (Some(seq), Some(last)) = (&req.stream_seq, &self.stream_seq) {
            if seq.as_bytes() <= last.as_bytes() {
                return Err(AppendRefusal::StreamSeqConflict { last: last.clone() });
            }
        }
        Ok(AppendDecision::Apply(AppendEffect {
            start: self.len,
            len: req.payload_len,
            close: req.close,
            producer: req.producer.clone(),
            stream_seq: req.stream_seq.clone(),
            at: now,
        }))
    }

    /// Applies a decided (or replayed) effect.
    pub fn apply(&mut self, effect: &AppendEffect) {
        debug_assert_eq!(effect.start, self.len, "effects apply in log order");
        self.len = effect.start + effect.len;
        if effect.close {
            self.closed = true;
        }
        if let Some(seq) = &effect.stream_seq {
            self.stream_seq = Some(seq.clone());
        }
        if let Some(claim) = &effect.producer {
            let receipt = Receipt {
                seq: claim.seq,
                start: effect.start,
                end: self.len,
            };
            // The common case (a known producer) updates in place, without
            // allocating its id again.
            match self.producers.get_mut(&claim.id) {
                Some(state) => {
                    let old = std::mem::replace(state, producer::ProducerState::empty());
                    *state = producer::record(Some(old), claim, receipt, effect.at);
                }
                None => {
                    // At the bound, idle producers make room (see `decide_append`).
                    if self.producers.len() >= producer::MAX_PRODUCERS_PER_STREAM {
                        self.forget_idle_producers(effect.at);
                    }
                    let state = producer::record(None, claim, receipt, effect.at);
                    self.producers.insert(claim.id.clone(), state);
                }
            }
        }
    }

    /// Drops producers idle past the forget window, so their state does not
    /// grow without bound.
    pub fn forget_idle_producers(&mut self, now: Millis) {
        self.producers.retain(|_, p| p.is_live(now));
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::Expiry;
    use super::*;

    fn stream(ct: &str) -> StreamCore {
        let cfg = StreamConfig {
            content_type: ct.into(),
            expiry: Expiry::Never,
            public: false,
        };
        StreamCore::new(1, "/s".into(), "inc".into(), cfg, 0)
    }

    fn req(len: u64) -> AppendRequest {
        AppendRequest {
            content_type: Some("text/plain".into()),
            payload_len: len,
            producer: None,
            stream_seq: None,
            close: false,
        }
    }

    fn apply(s: &mut StreamCore, r: &AppendRequest) -> AppendDecision {
        let d = s.decide_append(r, 0).unwrap();
        if let AppendDecision::Apply(e) = &d {
            s.apply(e);
        }
        d
    }

    /// A stream keeps a bounded number of producers: a new one past it is
    /// refused (nothing changes), known ones go on, and producers idle for
    /// the forget window make room.
    #[test]
    fn producers_per_stream_are_bounded() {
        use super::producer::{MAX_PRODUCERS_PER_STREAM, PRODUCER_FORGET_AFTER_MS};
        let mut s = stream("text/plain");
        let claim = |i: usize, seq: u64| AppendRequest {
            producer: Some(ProducerClaim {
                id: format!("p{i}"),
                epoch: 0,
                seq,
            }),
            ..req(1)
        };
        let at = |s: &mut StreamCore, r: &AppendRequest, now: Millis| {
            let d = s.decide_append(r, now)?;
            if let AppendDecision::Apply(e) = &d {
                s.apply(e);
            }
            Ok::<_, AppendRefusal>(d)
        };
        for i in 0..MAX_PRODUCERS_PER_STREAM {
            at(&mut s, &claim(i, 0), 1).unwrap();
        }
        let len = s.len;
        assert_eq!(
            at(&mut s, &claim(MAX_PRODUCERS_PER_STREAM, 0), 2),
            Err(AppendRefusal::Producer(ProducerRefusal::TooMany {
                max: MAX_PRODUCERS_PER_STREAM
            }))
        );
        assert_eq!(s.len, len, "a refusal changes nothing");
        assert!(matches!(
            at(&mut s, &claim(7, 1), 2),
            Ok(AppendDecision::Apply(_))
        ));
        // All idle past the window but one: a new producer gets in, and the
        // idle ones are dropped to make room.
        let later = 2 + PRODUCER_FORGET_AFTER_MS;
        assert!(matches!(
            at(&mut s, &claim(MAX_PRODUCERS_PER_STREAM, 0), later),
            Ok(AppendDecision::Apply(_))
        ));
        assert!(s.producers.len() <= 2, "{}", s.producers.len());
    }

    #[test]
    fn appends_move_the_tail() {
        let mut s = stream("text/plain");
        apply(&mut s, &req(5));
        apply(&mut s, &req(3));
        assert_eq!(s.len, 8);
    }

    #[test]
    fn closed_refuses_but_close_is_idempotent() {
        let mut s = stream("text/plain");
        apply(
            &mut s,
            &AppendRequest {
                close: true,
                ..req(2)
            },
        );
        assert!(s.closed);
        assert_eq!(s.decide_append(&req(1), 0), Err(AppendRefusal::Closed));
        let close_only = AppendRequest {
            close: true,
            content_type: None,
            ..req(0)
        };
        assert_eq!(
            s.decide_append(&close_only, 0),
            Ok(AppendDecision::AlreadyClosed)
        );
        assert_eq!(
            s.decide_append(
                &AppendRequest {
                    close: true,
                    ..req(1)
                },
                0
            ),
            Err(AppendRefusal::Closed)
        );
    }

    #[test]
    fn closed_is_checked_before_content_type() {
        let mut s = stream("text/plain");
        apply(
            &mut s,
            &AppendRequest {
                close: true,
                ..req(0)
            },
        );
        let wrong = AppendRequest {
            content_type: Some("application/json".into()),
            ..req(1)
        };
        assert_eq!(s.decide_append(&wrong, 0), Err(AppendRefusal::Closed));
    }

    #[test]
    fn content_type_must_match_when_there_is_a_body() {
        let s = stream("text/plain");
        let wrong = AppendRequest {
            content_type: Some("text/html".into()),
            ..req(1)
        };
        assert!(matches!(
            s.decide_append(&wrong, 0),
            Err(AppendRefusal::ContentTypeMismatch { .. })
        ));
        let case = AppendRequest {
            content_type: Some("TEXT/PLAIN; charset=utf-8".into()),
            ..req(1)
        };
        assert!(s.decide_append(&case, 0).is_ok());
    }

    #[test]
    fn stream_seq_is_bytewise_and_strict() {
        let mut s = stream("text/plain");
        apply(
            &mut s,
            &AppendRequest {
                stream_seq: Some("2".into()),
                ..req(1)
            },
        );
        let r = AppendRequest {
            stream_seq: Some("10".into()),
            ..req(1)
        };
        assert!(matches!(
            s.decide_append(&r, 0),
            Err(AppendRefusal::StreamSeqConflict { .. })
        ));
        let same = AppendRequest {
            stream_seq: Some("2".into()),
            ..req(1)
        };
        assert!(s.decide_append(&same, 0).is_err());
        apply(
            &mut s,
            &AppendRequest {
                stream_seq: Some("3".into()),
                ..req(1)
            },
        );
        assert_eq!(s.stream_seq.as_deref(), Some("3"));
    }

    #[test]
    fn producer_retry_of_the_closing_append_succeeds() {
        let mut s = stream("text/plain");
        let claim = ProducerClaim {
            id: "p".into(),
            epoch: 0,
            seq: 0,
        };
        let closing = AppendRequest {
            producer: Some(claim.clone()),
            close: true,
            ..req(4)
        };
        apply(&mut s, &closing);
        let retry = s.decide_append(&closing, 0).unwrap();
        assert_eq!(
            retry,
            AppendDecision::Duplicate {
                epoch: 0,
                highest_seq: 0,
                receipt: Some(Receipt {
                    seq: 0,
                    start: 0,
                    end: 4
                })
            }
        );
        let next = AppendRequest {
            producer: Some(ProducerClaim { seq: 1, ..claim }),
            ..req(1)
        };
        assert_eq!(s.decide_append(&next, 0), Err(AppendRefusal::Closed));
    }

    #[test]
    fn producer_duplicate_wins_over_stream_seq() {
        let mut s = stream("text/plain");
        let claim = ProducerClaim {
            id: "p".into(),
            epoch: 0,
            seq: 0,
        };
        let r = AppendRequest {
            producer: Some(claim),
            stream_seq: Some("a".into()),
            ..req(1)
        };
        apply(&mut s, &r);
        assert!(matches!(
            s.decide_append(&r, 0),
            Ok(AppendDecision::Duplicate { .. })
        ));
    }
}
