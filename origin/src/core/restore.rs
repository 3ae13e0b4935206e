//! Rolling a stream back (decision 0029): what the stream is after its
//! history is put back to an earlier offset.
//!
//! A rollback makes a new incarnation at the same path that forks the
//! replaced one at the point (its bytes below it are the old ones, read
//! through, never copied: `core::fork`). What is not bytes is decided
//! here, from the replaced stream's state alone, and logged with the new
//! incarnation, so recovery never decides it again:
//! - **producers**: no retry may be answered as a duplicate of an append
//!   the restored stream does not hold, and a resend of an append the
//!   rollback took is applied once ([`producer_at`]);
//! - **closed** only when nothing was taken and the stream was closed:
//!   rolling back to before a close reopens it;
//! - **`Stream-Seq`**: kept when nothing was taken, else forgotten (only
//!   the last one is kept, so the one at the point is not known): the next
//!   append may send any;
//! - **snapshots and retention**: the point may not be below the retained
//!   offset (410), nor past a snapshot that replaced bytes readers would
//!   need (409: no base would be left to read from).

use std::collections::{BTreeMap, VecDeque};

use super::producer::{ProducerState, NOTHING_HELD};
use super::stream::StreamCore;

/// A rollback's point and the state it leaves, as logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollback {
    pub at: u64,
    pub closed: bool,
    pub stream_seq: Option<String>,
    pub producers: BTreeMap<String, ProducerState>,
}

/// Why a stream cannot be rolled back to a point; nothing changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreRefusal {
    /// Below the retained offset (410).
    Trimmed { retained: u64 },
    /// Past the stream's end (400).
    BeyondEnd { end: u64 },
    /// The latest snapshot lies past the point and the bytes before it are
    /// gone: readers would have nothing to start from (409).
    SnapshotGone { snapshot: u64 },
}

/// What readers of a stream start from: its retained offset and the
/// snapshot they bootstrap from, as a fork's readers see them too (a
/// fork's are at least its source's: `core::fork::retained`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Readable {
    pub retained: u64,
    pub snapshot: Option<u64>,
}

/// The stream `core`, whose readers start as `readable` says, rolled back
/// to offset `to` (a message boundary for a JSON stream: the request
/// handler checked it, as it reads bytes).
pub fn rollback(
    core: &StreamCore,
    readable: Readable,
    to: u64,
) -> Result<Rollback, RestoreRefusal> {
    if to > core.len {
        return Err(RestoreRefusal::BeyondEnd { end: core.len });
    }
    let retained = readable.retained.max(core.retained);
    if to < retained {
        return Err(RestoreRefusal::Trimmed { retained });
    }
    if let Some(snapshot) = readable.snapshot {
        if retained > 0 && snapshot > to {
            return Err(RestoreRefusal::SnapshotGone { snapshot });
        }
    }
    let whole = to == core.len;
    Ok(Rollback {
        at: to,
        closed: whole && core.closed,
        stream_seq: if whole { core.stream_seq.clone() } else { None },
        producers: core
            .producers
            .iter()
            .map(|(id, s)| (id.clone(), producer_at(s, to)))
            .collect(),
    })
}

/// A producer's state once the stream ends at `to`:
/// - nothing of it past `to`: as it was;
/// - some of its kept receipts end at or before `to` and the rest start at
///   or after it: its sequence goes back to the last one held, so a resend
///   of the next is applied once;
/// - all of its kept receipts start at or after `to`, the oldest being
///   sequence 0: the stream holds nothing of this epoch, whose sequence 0
///   is next;
/// - otherwise (an append cut in two, or more of its appends taken than
///   receipts kept): which of its appends are held is not known, so its
///   epoch is fenced: its next epoch starts at 0, and a retry in the old
///   one is refused as a stale epoch (403), which the official clients
///   answer by taking the next epoch.
pub fn producer_at(state: &ProducerState, to: u64) -> ProducerState {
    let past = |r: &super::producer::Receipt| r.end > to;
    if !state.receipts.iter().any(past) {
        return state.clone();
    }
    let held: VecDeque<_> = state
        .receipts
        .iter()
        .copied()
        .take_while(|r| !past(r))
        .collect();
    let cut_clean = state
        .receipts
        .iter()
        .skip(held.len())
        .all(|r| r.start >= to);
    let fenced = |epoch: u64| ProducerState {
        epoch,
        last_seq: NOTHING_HELD,
        last_active: state.last_active,
        receipts: VecDeque::new(),
    };
    match held.back() {
        Some(last) if cut_clean => ProducerState {
            epoch: state.epoch,
            last_seq: last.seq,
            last_active: state.last_active,
            receipts: held.clone(),
        },
        None if cut_clean && state.receipts.front().is_some_and(|r| r.seq == 0) => {
            fenced(state.epoch)
        }
        _ => fenced(state.epoch.saturating_add(1)),
    }
}

/// Where a rollback to `to` of a stream forks from: the stream itself, or
/// the furthest ancestor whose bytes below `to` are the same (while `to`
/// is at or below a fork point, the fork's source holds those bytes), so
/// repeated rollbacks do not make the chain of forks deeper. `chain` is
/// the stream's id and fork point, then its source's, and so on (a stream
/// that is no fork has no point).
pub fn fork_source(chain: &[(u64, Option<u64>)], to: u64) -> u64 {
    let mut source = chain[0].0;
    for pair in chain.windows(2) {
        match pair[0].1 {
            Some(at) if to <= at => source = pair[1].0,
            _ => break,
        }
    }
    source
}

#[cfg(test)]
mod tests {
    use super::super::producer::{self, ProducerCheck, ProducerClaim, ProducerRefusal, Receipt};
    use super::*;

    fn state(epoch: u64, receipts: &[(u64, u64, u64)]) -> ProducerState {
        ProducerState {
            epoch,
            last_seq: receipts.last().map_or(0, |r| r.0),
            last_active: 5,
            receipts: receipts
                .iter()
                .map(|&(seq, start, end)| Receipt { seq, start, end })
                .collect(),
        }
    }

    fn check(s: &ProducerState, epoch: u64, seq: u64) -> Result<ProducerCheck, ProducerRefusal> {
        let claim = ProducerClaim {
            id: "p".into(),
            epoch,
            seq,
        };
        producer::check(Some(s), &claim, 6)
    }

    #[test]
    fn a_producer_with_nothing_past_the_point_is_unchanged() {
        let s = state(2, &[(4, 0, 10), (5, 10, 20)]);
        assert_eq!(producer_at(&s, 20), s);
        assert_eq!(producer_at(&s, 25), s);
    }

    #[test]
    fn a_clean_cut_goes_back_to_the_last_append_held() {
        let s = state(2, &[(4, 0, 10), (5, 10, 20), (6, 30, 40)]);
        let back = producer_at(&s, 25);
        assert_eq!(back, state(2, &[(4, 0, 10), (5, 10, 20)]));
        // The resend of the append taken is applied (once), the held one
        // is a duplicate.
        assert_eq!(check(&back, 2, 6), Ok(ProducerCheck::Fresh));
        assert!(matches!(
            check(&back, 2, 5),
            Ok(ProducerCheck::Duplicate { .. })
        ));
    }

    #[test]
    fn an_epoch_wholly_taken_starts_again_at_zero() {
        let s = state(3, &[(0, 50, 60), (1, 60, 70)]);
        let back = producer_at(&s, 40);
        assert_eq!(back.epoch, 3);
        assert_eq!(check(&back, 3, 0), Ok(ProducerCheck::Fresh));
        assert!(matches!(
            check(&back, 3, 1),
            Err(ProducerRefusal::SeqGap { expected: 0, .. })
        ));
        assert!(matches!(
            check(&back, 2, 0),
            Err(ProducerRefusal::StaleEpoch { current: 3 })
        ));
    }

    #[test]
    fn an_unknown_history_fences_the_epoch() {
        // An append cut in two by the point.
        let cut = producer_at(&state(1, &[(7, 0, 10), (8, 10, 20)]), 15);
        // More appends taken than receipts kept (the oldest is not seq 0).
        let lost = producer_at(&state(1, &[(7, 30, 40)]), 20);
        for back in [cut, lost] {
            assert_eq!(back.epoch, 2);
            assert!(matches!(
                check(&back, 1, 8),
                Err(ProducerRefusal::StaleEpoch { current: 2 })
            ));
            assert_eq!(check(&back, 2, 0), Ok(ProducerCheck::Fresh));
        }
    }

    #[test]
    fn an_append_after_nothing_held_records_normally() {
        let back = producer_at(&state(3, &[(0, 50, 60)]), 40);
        let claim = ProducerClaim {
            id: "p".into(),
            epoch: 3,
            seq: 0,
        };
        let after = producer::record(
            Some(back),
            &claim,
            Receipt {
                seq: 0,
                start: 40,
                end: 45,
            },
            7,
        );
        assert_eq!(after.last_seq, 0);
        assert_eq!(check(&after, 3, 1), Ok(ProducerCheck::Fresh));
    }

    fn core(len: u64) -> StreamCore {
        let config = super::super::config::StreamConfig {
            content_type: "text/plain".into(),
            expiry: super::super::config::Expiry::Never,
            public: false,
        };
        let mut c = StreamCore::new(1, "/s".into(), "1-0".into(), config, 0);
        c.len = len;
        c
    }

    fn readable(c: &StreamCore) -> Readable {
        Readable {
            retained: c.retained,
            snapshot: c.snapshot.as_ref().map(|s| s.offset),
        }
    }

    #[test]
    fn closed_and_stream_seq_survive_only_a_rollback_that_takes_nothing() {
        let mut c = core(100);
        c.closed = true;
        c.stream_seq = Some("b".into());
        let same = rollback(&c, readable(&c), 100).unwrap();
        assert!(same.closed);
        assert_eq!(same.stream_seq.as_deref(), Some("b"));
        let back = rollback(&c, readable(&c), 99).unwrap();
        assert!(!back.closed);
        assert_eq!(back.stream_seq, None);
        assert_eq!(back.at, 99);
    }

    #[test]
    fn points_outside_the_readable_range_are_refused() {
        let mut c = core(100);
        c.retained = 40;
        assert_eq!(
            rollback(&c, readable(&c), 101),
            Err(RestoreRefusal::BeyondEnd { end: 100 })
        );
        assert_eq!(
            rollback(&c, readable(&c), 39),
            Err(RestoreRefusal::Trimmed { retained: 40 })
        );
        c.snapshot = Some(Box::new(super::super::snapshot::SnapshotMeta {
            offset: 80,
            len: 3,
            digest: "d".into(),
            content_type: "text/plain".into(),
        }));
        assert_eq!(
            rollback(&c, readable(&c), 60),
            Err(RestoreRefusal::SnapshotGone { snapshot: 80 })
        );
        assert!(rollback(&c, readable(&c), 80).is_ok());
        // Without retention, a later snapshot just goes: reads start at 0.
        c.retained = 0;
        assert!(rollback(&c, readable(&c), 10).is_ok());
    }

    #[test]
    fn rollbacks_fork_the_furthest_ancestor_that_holds_the_same_bytes() {
        // 9 forks 5 at 300, which forks 2 at 100; 2 is no fork.
        let chain = [(9, Some(300)), (5, Some(100)), (2, None)];
        assert_eq!(fork_source(&chain, 400), 9);
        assert_eq!(fork_source(&chain, 300), 5);
        assert_eq!(fork_source(&chain, 150), 5);
        assert_eq!(fork_source(&chain, 100), 2);
        assert_eq!(fork_source(&chain, 0), 2);
        assert_eq!(fork_source(&[(4, None)], 0), 4);
    }
}
