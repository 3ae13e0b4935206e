//! Idempotent producers: the rule that makes a retried append apply once.
//!
//! A producer is named by `Producer-Id` and writes in epochs; within an epoch
//! its sequence numbers go up by exactly one per append. The stream keeps, per
//! producer, the epoch, the highest accepted sequence number and the receipts
//! (offsets) of its last few appends, so a retry is answered with the offsets
//! the original got. A producer idle for seven days is forgotten.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::Millis;

/// A producer idle this long is forgotten; its next append starts afresh.
pub const PRODUCER_FORGET_AFTER_MS: Millis = 7 * 24 * 3600 * 1000;
/// Receipts kept per producer: a retry of one of its last this-many appends is
/// answered with that append's own offsets.
pub const RECEIPTS_KEPT: usize = 16;
/// The largest epoch or sequence number (JavaScript's safe integers).
pub const MAX_PRODUCER_NUMBER: u64 = (1 << 53) - 1;
/// The longest `Producer-Id`, in bytes (400 past it): each is kept in
/// memory and in every checkpoint for as long as its producer lives.
pub const MAX_PRODUCER_ID_BYTES: usize = 256;
/// Producers a stream keeps at most (one idle for seven days no longer
/// counts): a new one past it is refused with 409 `PRODUCER_LIMIT`. With
/// their receipts, ~1,000 producers are ~500 KB of a stream's state.
pub const MAX_PRODUCERS_PER_STREAM: usize = 1024;
/// `last_seq` of an epoch in which the stream holds none of the producer's
/// appends: a rollback took them all (`core::restore`). Sequence 0 of the
/// epoch is next; older epochs stay fenced. (Above every real sequence
/// number, which stops at [`MAX_PRODUCER_NUMBER`].)
pub const NOTHING_HELD: u64 = u64::MAX;

/// What a request claims with its three producer headers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerClaim {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// Where one accepted append landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub seq: u64,
    pub start: u64,
    pub end: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerState {
    pub epoch: u64,
    pub last_seq: u64,
    pub last_active: Millis,
    pub receipts: VecDeque<Receipt>,
}

/// An append the producer rule lets through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProducerCheck {
    /// The next append in sequence (or the first of a new epoch).
    Fresh,
    /// Seen before: answer as the original was answered, append nothing.
    Duplicate {
        epoch: u64,
        highest_seq: u64,
        receipt: Option<Receipt>,
    },
}

/// An append the producer rule refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProducerRefusal {
    /// A newer epoch took over this producer: 403.
    StaleEpoch { current: u64 },
    /// A new epoch must start at sequence 0: 400.
    NewEpochNotAtZero,
    /// The sequence skipped ahead: 409 with the expected number.
    SeqGap { expected: u64, received: u64 },
    /// A new producer on a stream that has [`MAX_PRODUCERS_PER_STREAM`]
    /// live ones: 409.
    TooMany { max: usize },
}

impl ProducerState {
    /// A placeholder with no history (it allocates nothing).
    pub fn empty() -> Self {
        ProducerState {
            epoch: 0,
            last_seq: 0,
            last_active: 0,
            receipts: VecDeque::new(),
        }
    }

    /// Whether this state still counts at `now`.
    pub fn is_live(&self, now: Millis) -> bool {
        now.saturating_sub(self.last_active) < PRODUCER_FORGET_AFTER_MS
    }
}

/// Decides a claim against the producer's state (if the stream knows it).
pub fn check(
    state: Option<&ProducerState>,
    claim: &ProducerClaim,
    now: Millis,
) -> Result<ProducerCheck, ProducerRefusal> {
    // A producer the stream does not know, or whose epoch it holds nothing
    // of, starts at sequence 0.
    let from_zero = || {
        if claim.seq == 0 {
            Ok(ProducerCheck::Fresh)
        } else {
            Err(ProducerRefusal::SeqGap {
                expected: 0,
                received: claim.seq,
            })
        }
    };
    let Some(state) = state.filter(|s| s.is_live(now)) else {
        return from_zero();
    };
    if claim.epoch < state.epoch {
        return Err(ProducerRefusal::StaleEpoch {
            current: state.epoch,
        });
    }
    if claim.epoch > state.epoch {
        return if claim.seq == 0 {
            Ok(ProducerCheck::Fresh)
        } else {
            Err(ProducerRefusal::NewEpochNotAtZero)
        };
    }
    if state.last_seq == NOTHING_HELD {
        return from_zero();
    }
    if claim.seq <= state.last_seq {
        let receipt = state.receipts.iter().find(|r| r.seq == claim.seq).copied();
        return Ok(ProducerCheck::Duplicate {
            epoch: state.epoch,
            highest_seq: state.last_seq,
            receipt,
        });
    }
    if claim.seq == state.last_seq + 1 {
        return Ok(ProducerCheck::Fresh);
    }
    Err(ProducerRefusal::SeqGap {
        expected: state.last_seq + 1,
        received: claim.seq,
    })
}

/// The producer's state after its append was applied.
pub fn record(
    state: Option<ProducerState>,
    claim: &ProducerClaim,
    receipt: Receipt,
    now: Millis,
) -> ProducerState {
    let mut state = match state {
        Some(s) if s.is_live(now) && s.epoch == claim.epoch => s,
        _ => ProducerState {
            epoch: claim.epoch,
            last_seq: claim.seq,
            last_active: now,
            receipts: VecDeque::new(),
        },
    };
    state.last_seq = claim.seq;
    state.last_active = now;
    state.receipts.push_back(receipt);
    while state.receipts.len() > RECEIPTS_KEPT {
        state.receipts.pop_front();
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(epoch: u64, seq: u64) -> ProducerClaim {
        ProducerClaim {
            id: "p".into(),
            epoch,
            seq,
        }
    }

    fn after(claims: &[(u64, u64)]) -> ProducerState {
        let mut state = None;
        for (i, &(e, s)) in claims.iter().enumerate() {
            let c = claim(e, s);
            assert_eq!(check(state.as_ref(), &c, 0), Ok(ProducerCheck::Fresh));
            state = Some(record(
                state,
                &c,
                Receipt {
                    seq: s,
                    start: i as u64,
                    end: i as u64 + 1,
                },
                0,
            ));
        }
        state.unwrap()
    }

    #[test]
    fn unknown_producer_starts_at_zero() {
        assert_eq!(check(None, &claim(7, 0), 0), Ok(ProducerCheck::Fresh));
        assert_eq!(
            check(None, &claim(0, 3), 0),
            Err(ProducerRefusal::SeqGap {
                expected: 0,
                received: 3
            })
        );
    }

    #[test]
    fn sequence_rules() {
        let s = after(&[(0, 0), (0, 1), (0, 2)]);
        assert_eq!(check(Some(&s), &claim(0, 3), 0), Ok(ProducerCheck::Fresh));
        assert_eq!(
            check(Some(&s), &claim(0, 1), 0),
            Ok(ProducerCheck::Duplicate {
                epoch: 0,
                highest_seq: 2,
                receipt: Some(Receipt {
                    seq: 1,
                    start: 1,
                    end: 2
                })
            })
        );
        assert_eq!(
            check(Some(&s), &claim(0, 5), 0),
            Err(ProducerRefusal::SeqGap {
                expected: 3,
                received: 5
            })
        );
    }

    #[test]
    fn epochs_fence() {
        let s = after(&[(0, 0), (1, 0)]);
        assert_eq!(
            check(Some(&s), &claim(0, 1), 0),
            Err(ProducerRefusal::StaleEpoch { current: 1 })
        );
        assert_eq!(
            check(Some(&s), &claim(2, 1), 0),
            Err(ProducerRefusal::NewEpochNotAtZero)
        );
        assert_eq!(check(Some(&s), &claim(2, 0), 0), Ok(ProducerCheck::Fresh));
        assert_eq!(
            s.receipts.len(),
            1,
            "a new epoch drops the old epoch's receipts"
        );
    }

    #[test]
    fn idle_producers_are_forgotten() {
        let s = after(&[(3, 0), (3, 1)]);
        assert_eq!(
            check(Some(&s), &claim(0, 0), PRODUCER_FORGET_AFTER_MS),
            Ok(ProducerCheck::Fresh)
        );
        assert!(check(Some(&s), &claim(0, 0), PRODUCER_FORGET_AFTER_MS - 1).is_err());
    }

    #[test]
    fn receipts_are_bounded() {
        let claims: Vec<_> = (0..100).map(|s| (0, s)).collect();
        let s = after(&claims);
        assert_eq!(s.receipts.len(), RECEIPTS_KEPT);
        assert_eq!(
            check(Some(&s), &claim(0, 2), 0),
            Ok(ProducerCheck::Duplicate {
                epoch: 0,
                highest_seq: 99,
                receipt: None
            })
        );
    }
}
