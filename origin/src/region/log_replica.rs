//! A follower's replica of a partition with one WAL per origin (decision
//! 0028; with a WAL per partition it is `replica`, under `follow`'s rules):
//! laid out from the partition's newest checkpoint and its tenures, then
//! kept up by rounds that walk the newest tenure on in its origin's log.
//!
//! A replica puts nothing, so it never fences: a walk that meets a missing
//! number stops there ([`AtOpen::Stop`]), and a tenure that ended (a
//! release, or a taker's fence) is followed by the next tenure once it
//! exists, which must name the same end. The one race is `follow`'s: a
//! number below a newer checkpoint may be deleted while a round reads, and
//! a taker may even put a fence on such a number (rule 5 of `tenure` makes
//! that harmless to claims). Both lie below the newer checkpoint, so a
//! round stands only if the newest checkpoint, looked at after it, stands
//! no further than where the round began; otherwise the replica is built
//! again from that checkpoint.

use std::path::Path;
use std::sync::atomic::AtomicBool;

use object_store::ObjectStore;

use super::local::LocalLog;
use super::object_wal::{Replay, WalError, CLAIM_TRIES};
use super::origin_wal::format::TenureRecord;
use super::origin_wal::read::{read_tenure, walk, AtOpen, End, History, Reading};
use super::origin_wal::{newest_stand, read_history, SharedReads};
use super::replica::{Ended, RoundRead, ROUND_BYTES, ROUND_OBJECTS};
use super::tenure::Stand;

/// Where a replica stands in a partition's history: in tenure `tenure`
/// (None before the first), at number `at` of its log.
#[derive(Clone, Debug)]
pub struct LogFollow {
    tenure: Option<(u64, TenureRecord)>,
    at: u64,
    /// Where the tenure ended, once the replica read to its end.
    ended: Option<u64>,
}

impl LogFollow {
    /// Where the replica stands, as the newest checkpoint would say it.
    fn position(&self) -> Stand {
        Stand {
            tenure: self.tenure.as_ref().map_or(0, |(k, _)| *k),
            number: self.at,
        }
    }

    /// Whether `other` stands where this does (a round that read nothing).
    pub fn same_place(&self, other: &LogFollow) -> bool {
        self.position() == other.position() && self.ended == other.ended
    }

    /// Ends a round: `newest` is a look at the newest checkpoint taken
    /// after its last read. `true`: the round stands (its frames are to be
    /// shown); `false`: the replica must be built again.
    pub fn finish(&mut self, round: LogFollow, began: Stand, newest: Option<Stand>) -> bool {
        if newest.is_some_and(|n| n > began) {
            return false;
        }
        *self = round;
        true
    }
}

/// Lays the replica of partition `p` out as the local log under `data`,
/// read again if a checkpoint deleted what it read meanwhile; returns
/// where it goes on from.
pub async fn lay_out(store: &dyn ObjectStore, p: u32, data: &Path) -> Result<LogFollow, WalError> {
    let stopping = AtomicBool::new(false);
    for _ in 0..CLAIM_TRIES {
        let mut log = LocalLog::begin(data).map_err(WalError::Local)?;
        let mut push = |r: Replay| match r {
            Replay::Begin => Ok(()),
            Replay::Frames(f) => log.push(&f),
        };
        let history = match read_history(store, p, AtOpen::Stop, &stopping, &mut push).await {
            Err(WalError::Moved) => continue,
            read => read?,
        };
        let newest = newest_stand(store, p, &stopping).await?.map(|m| m.stand);
        if newest != history.base {
            continue;
        }
        log.finish().map_err(WalError::Local)?;
        let k = history.tenures.len().checked_sub(1);
        let (at, ended) = match history.end {
            Some(End::Open(n)) => (n, None),
            Some(End::Ended(n)) => (n, Some(n)),
            None => (0, None),
        };
        return Ok(LogFollow {
            tenure: k.map(|k| (k as u64, history.tenures[k].clone())),
            at,
            ended,
        });
    }
    Err(WalError::Contended(CLAIM_TRIES))
}

/// Reads one round from where `follow` stands, kept aside: the caller
/// shows it only if [`LogFollow::finish`] lets it stand. Returns the round's
/// new place, where it began, and what it read. Its log objects are read
/// through `shared`, with the other replicas' rounds.
pub async fn read_next(
    store: &dyn ObjectStore,
    p: u32,
    follow: &LogFollow,
    shared: &SharedReads,
) -> Result<(LogFollow, Stand, RoundRead), WalError> {
    let began = follow.position();
    let mut round = follow.clone();
    // A tenure read to its end: go on in the next one, once made.
    if round.ended.is_some() || round.tenure.is_none() {
        let next = round.tenure.as_ref().map_or(0, |(k, _)| k + 1);
        let Some(record) = read_tenure(store, p, next, &AtomicBool::new(false)).await? else {
            let read = RoundRead {
                frames: Vec::new(),
                objects: 0,
                ended: Ended::Missing,
            };
            return Ok((round, began, read));
        };
        if record.previous_end != round.ended {
            // It names another end than the one read: what was read is
            // not the partition's history (a fence on a deleted number).
            return Err(WalError::Moved);
        }
        round = LogFollow {
            at: record.from,
            tenure: Some((next, record)),
            ended: None,
        };
    }
    let (_, tenure) = round.tenure.clone().expect("a tenure to walk");
    let mut frames = Vec::new();
    let mut bytes = 0u64;
    let mut keep = |r: Replay| {
        if let Replay::Frames(f) = r {
            bytes = bytes.saturating_add(f.len() as u64);
            frames.push(f);
        }
        Ok(())
    };
    let mut history = History::default();
    let start = round.at.max(tenure.from);
    let reading = Reading {
        start,
        below: None,
        at_open: AtOpen::Stop,
        most: ROUND_OBJECTS as u64,
        shared: Some(shared),
    };
    let stopping = AtomicBool::new(false);
    let end = walk(
        store,
        p,
        &tenure,
        reading,
        &stopping,
        &mut keep,
        &mut history,
    )
    .await?;
    let (at, ended) = match end {
        End::Open(n) => (n, None),
        End::Ended(n) => (n, Some(n)),
    };
    round.at = at;
    round.ended = ended;
    // Read on at once after a tenure's end (the next may be there) or a
    // full budget; after a missing number, the replica has caught up.
    let full = at >= start.saturating_add(ROUND_OBJECTS as u64) || bytes >= ROUND_BYTES;
    let read = RoundRead {
        objects: (at - start) as usize,
        ended: if ended.is_some() || full {
            Ended::Budget
        } else {
            Ended::Missing
        },
        frames,
    };
    Ok((round, began, read))
}

/// The partition's newest checkpoint's stand, for the look after a round.
pub async fn newest(store: &dyn ObjectStore, p: u32) -> Result<Option<Stand>, WalError> {
    let stopping = AtomicBool::new(false);
    Ok(newest_stand(store, p, &stopping).await?.map(|m| m.stand))
}
