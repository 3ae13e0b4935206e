//! A follower's reads of a partition's objects for its replica (decision
//! 0018; the rules are `follow`'s): laying the replica out from the newest
//! checkpoint, and reading one round of the owner's WAL objects after it.
//! A replica writes nothing to the bucket.
//!
//! Cost: a round is one `GET` per WAL object it reads, plus one `GET` of
//! the first number not there yet (an idle partition costs that one per
//! round), and a listing of the checkpoints after a round that read
//! anything (the look `follow` needs) or, for an idle partition, every
//! [`IDLE_LOOK`] (a checkpoint may have deleted the number the replica
//! waits at: then it is rebuilt).

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStore;

use super::bucket::{newest_checkpoint, newest_checkpoint_number, read_image, read_object};
use super::follow::{Follow, Read, Round};
use super::local::LocalLog;
use super::object_wal::{Replay, WalError, CLAIM_TRIES, REPLAY_READS};
use crate::objects::keys;

/// WAL objects one round reads at most (the next round goes on).
pub const ROUND_OBJECTS: usize = 256;

/// Frames one round keeps in memory at most before it is applied (a round
/// ends after the object that passes it).
pub const ROUND_BYTES: u64 = 16 << 20;

/// How often a replica of an idle partition looks at the checkpoints.
pub const IDLE_LOOK: Duration = Duration::from_secs(5);

/// How a round ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// At a number not there: everything the owner had acknowledged when
    /// the round began is read.
    Missing,
    /// Its budget ([`ROUND_OBJECTS`], [`ROUND_BYTES`]) was spent.
    Budget,
}

/// What a round read.
pub struct RoundRead {
    /// The frames of each object the epoch rule replays, in order.
    pub frames: Vec<Bytes>,
    /// Objects read (replayed or skipped).
    pub objects: usize,
    pub ended: Ended,
}

/// Lays the replica of partition `p` out as the local log under `data`:
/// the newest checkpoint's image and the WAL objects after it, up to the
/// first number not there, read again from the start if a checkpoint
/// newer than the one it began from appears meanwhile. Returns where the
/// replica goes on from.
pub async fn lay_out(store: &dyn ObjectStore, p: u32, data: &Path) -> Result<Follow, WalError> {
    for _ in 0..CLAIM_TRIES {
        let base = newest_checkpoint(store, p).await?;
        let (start, epoch) = base.as_ref().map_or((0, 0), |b| (b.number, b.epoch));
        let mut follow = Follow::from_checkpoint(start, epoch);
        let mut log = LocalLog::begin(data).map_err(WalError::Local)?;
        if let Some(b) = &base {
            let mut push = |r: Replay| match r {
                Replay::Frames(f) => log.push(&f),
                Replay::Begin => Ok(()),
            };
            match read_image(store, p, b, &mut push).await {
                Ok(_) => {}
                // Replaced by a newer checkpoint while read.
                Err(WalError::Moved) => continue,
                Err(e) => return Err(e),
            }
        }
        let mut round = follow.round(start, u64::MAX);
        let mut push = |f: Bytes| log.push(&f);
        read_round(store, p, &mut round, usize::MAX, u64::MAX, &mut push).await?;
        let newest = newest_checkpoint_number(store, p).await?;
        if follow.finish(round, newest) {
            log.finish().map_err(WalError::Local)?;
            return Ok(follow);
        }
    }
    Err(WalError::Contended(CLAIM_TRIES))
}

/// Reads one round of `follow`'s WAL objects (at most [`ROUND_OBJECTS`]
/// and about [`ROUND_BYTES`]), kept aside: the caller shows them only if
/// [`Follow::finish`] lets the round stand after its look.
pub async fn read_next(
    store: &dyn ObjectStore,
    p: u32,
    follow: &Follow,
) -> Result<(Round, RoundRead), WalError> {
    let mut round = follow.round(follow.next(), follow.next().saturating_add(u64::MAX / 2));
    let mut frames = Vec::new();
    let mut keep = |f: Bytes| {
        frames.push(f);
        Ok(())
    };
    let (objects, ended) =
        read_round(store, p, &mut round, ROUND_OBJECTS, ROUND_BYTES, &mut keep).await?;
    Ok((
        round,
        RoundRead {
            frames,
            objects,
            ended,
        },
    ))
}

/// Reads `round`'s objects in number order, [`REPLAY_READS`] at once, until
/// the first number not there or the budget is spent; hands on the frames
/// of those the epoch rule replays. Returns the objects read and why it ended.
async fn read_round(
    store: &dyn ObjectStore,
    p: u32,
    round: &mut Round,
    most: usize,
    most_bytes: u64,
    keep: &mut (dyn FnMut(Bytes) -> std::io::Result<()> + Send),
) -> Result<(usize, Ended), WalError> {
    let (mut objects, mut bytes) = (0usize, 0u64);
    while let Some(from) = round.next() {
        let window = REPLAY_READS.min(most - objects) as u64;
        let reads = (from..from.saturating_add(window))
            .map(|n| async move { read_object(store, &keys::partition_wal_object(p, n)).await });
        for read in futures::future::join_all(reads).await {
            if round.next().is_none() {
                break;
            }
            match read {
                Ok(object) => {
                    objects += 1;
                    bytes += object.frames.len() as u64;
                    if round.read(&object.header) == Read::Replay {
                        keep(object.frames).map_err(WalError::Local)?;
                    }
                }
                Err(WalError::Moved) => {
                    round.missing();
                    return Ok((objects, Ended::Missing));
                }
                Err(e) => return Err(e),
            }
            if objects >= most || bytes >= most_bytes {
                round.end();
                return Ok((objects, Ended::Budget));
            }
        }
    }
    Ok((objects, Ended::Budget))
}
