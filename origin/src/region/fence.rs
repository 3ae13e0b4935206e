//! The fencing rules of a partition's WAL in object storage: pure
//! decisions, no I/O (the shell is `object_wal`).
//!
//! Terms. A partition's WAL is a sequence of objects at numbers
//! `0, 1, 2, …`, each written with a create-only put (`If-None-Match: *`),
//! so a number holds the first put that reached it and no other. An
//! *owner* holds an *epoch*, a number nobody else ever holds (each epoch is
//! itself a create-only object, see `object_wal`). An owner writes its group
//! commits at consecutive numbers, up to [`WINDOW`] in flight, and
//! acknowledges a commit only once it and every commit before it are in.
//!
//! Claim (a new owner at epoch `E`): list the numbers present from the
//! partition's start; let `h` be the highest. Put a fence (`E`, no frames)
//! at every missing number up to `h` and at `h+1 ..= h+WINDOW`; a fence
//! that finds a newer epoch's object there ends the claim. Read every
//! object up to `h+WINDOW` and replay them by the epoch rule; if any of
//! them has an epoch above `E` (a newer owner's claim got there first),
//! the claim ends too ([`Replayed::Superseded`]). Write data from
//! `h+WINDOW+1`; a data put that finds any object not its own stops the
//! owner.
//!
//! Why an older owner `O` can acknowledge nothing the new owner did not
//! replay: `O` acknowledged only commits at consecutive numbers from its
//! own start, each landed. Its highest acknowledged one was listed (`≤ h`),
//! so every put `O` still has in flight is at most `h+WINDOW`, and each of
//! those numbers now holds either `O`'s put (landed first) or a fence of
//! `E`. Replay admits `O`'s objects up to the first fence of `E` among
//! them; `O` can acknowledge at most up to the put before that fence,
//! since the fenced number failed. Every number past `h+WINDOW` is free of
//! `O`'s puts, so `E`'s own data never meets them.
//!
//! Why the epoch rule never drops what an owner `X` acknowledged: every
//! number below `X`'s first data number was taken when `X` read it, with
//! epochs at most `X`'s (else the claim ended), and every number from
//! there to an acknowledged one holds `X`'s own put. Objects never change,
//! so the highest epoch before any of them is `X`'s own.
//!
//! The epoch rule (every reader applies it the same way): walking the
//! numbers in order, an object counts only if its epoch is at least every
//! epoch before it. An older owner's put that landed after a newer owner's
//! fence was never acknowledged (the fenced number came first in its
//! order), so dropping it loses nothing, and every reader agrees.
//!
//! Checkpoints (`region::checkpoint`) move the partition's start. A
//! checkpoint at `c` holds what the epoch rule replays of every number
//! below `c` and the highest epoch among them; it is made only once every
//! number below `c` is taken, so it can never change. After its manifest is
//! in the bucket, the numbers below `c` may be deleted. A claim starts from
//! the newest checkpoint `b` (the partition's start is `b`): it lists and
//! fences from `b`, and looks for a newer checkpoint twice, after listing
//! and after its replay; one found sends it back to the start (a newer
//! checkpoint may mean deleted numbers that the listing or a fence took for
//! free). A number it then finds missing while it replays was deleted
//! since: back to the start too. A fence that lands on a deleted number is
//! harmless after the look that follows it: the number is below a newer
//! checkpoint, which every later reader starts from. A data put that lands
//! on a deleted number must not be acknowledged: an owner acknowledges a
//! landed put only once a look after the landing finds no epoch after its
//! own, or no checkpoint above the put's number. A build reads no further
//! than its owner acknowledged, and publishes only if, after its reads, its
//! base is still the newest checkpoint and no epoch after its owner's
//! exists. The model in `fence/tests.rs` shows each of these rules needed.
//!
//! Settling a put: a create that answers "already exists" (or a retry
//! after a timeout that does) is settled by reading the object back: the
//! same put id is our own put, anything else means a newer owner fenced
//! us. Never guessed either way.

use super::format::{Kind, PutId, WalHeader};

/// Group commits an owner may have in flight at once, and so the numbers a
/// new owner closes past the last it finds. A protocol constant: changing
/// it needs every owner of a bucket to agree.
pub const WINDOW: u64 = 8;

/// What a new owner must write before it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimPlan {
    /// Numbers to put a fence at, in order: the holes below the highest
    /// number found, then the window past it.
    pub fences: Vec<u64>,
    /// Every object to replay is below this.
    pub replay_below: u64,
    /// The first number the new owner writes data at.
    pub first_data: u64,
}

/// The claim for a partition whose WAL starts at `start` and holds the
/// numbers `found` (sorted, each at least `start`).
pub fn plan_claim(start: u64, found: &[u64]) -> ClaimPlan {
    debug_assert!(found.is_sorted());
    let next = found.last().map_or(start, |h| h + 1);
    let mut fences = Vec::new();
    let mut present = found.iter().peekable();
    for n in start..next {
        if present.peek() == Some(&&n) {
            present.next();
        } else {
            fences.push(n);
        }
    }
    fences.extend(next..next + WINDOW);
    ClaimPlan {
        fences,
        replay_below: next + WINDOW,
        first_data: next + WINDOW,
    }
}

/// What an object found at a number means to the one who meant to put
/// `ours` there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Our own put (an earlier try of it landed).
    Ours,
    /// Another owner's: for a data put, we are fenced and must stop
    /// acknowledging; for a fence of a claim, see [`Settled::Older`].
    Newer { epoch: u64 },
    /// An older owner's put that landed first: at a claim's fence, that is
    /// expected (it is replayed by the epoch rule); at a data number of
    /// ours, a claim with an older epoch that listed after ours fenced it
    /// (that claim then ends, superseded): the writer stops, as fenced,
    /// since it cannot acknowledge past a number it does not hold.
    Older { epoch: u64 },
}

pub fn settle(ours_epoch: u64, ours: PutId, found: &WalHeader) -> Settled {
    if found.put_id == ours && found.epoch == ours_epoch {
        Settled::Ours
    } else if found.epoch > ours_epoch {
        Settled::Newer { epoch: found.epoch }
    } else {
        Settled::Older { epoch: found.epoch }
    }
}

/// The epoch rule, applied in number order by every reader.
#[derive(Clone, Debug, Default)]
pub struct EpochRule {
    highest: u64,
}

impl EpochRule {
    /// The rule past a checkpoint whose objects' highest epoch was `epoch`
    /// (see `region::checkpoint`): what comes after is judged as if they
    /// had been read.
    pub fn after(epoch: u64) -> Self {
        EpochRule { highest: epoch }
    }

    /// The highest epoch of every object read so far (a checkpoint of them
    /// carries it).
    pub fn highest(&self) -> u64 {
        self.highest
    }

    /// Whether the object with this header counts, given those before it.
    pub fn admit(&mut self, header: &WalHeader) -> bool {
        if header.epoch < self.highest {
            return false;
        }
        self.highest = header.epoch;
        true
    }

    /// Whether its frames are replayed: admitted data.
    pub fn replays(&mut self, header: &WalHeader) -> bool {
        self.admit(header) && header.kind == Kind::Data
    }

    /// Whether a claim at `epoch` that read everything below its first
    /// data number may serve.
    pub fn replayed(&self, epoch: u64) -> Replayed {
        if self.highest > epoch {
            Replayed::Superseded { by: self.highest }
        } else {
            Replayed::Owner
        }
    }
}

/// The end of a claim's replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replayed {
    /// The claim holds: it may write from its first data number.
    Owner,
    /// A newer epoch's object came first: serving would write what every
    /// reader drops.
    Superseded { by: u64 },
}

/// The epoch a new claim takes, given the epochs claimed so far.
pub fn next_epoch(claimed: &[u64]) -> u64 {
    claimed.iter().max().map_or(1, |e| e + 1)
}

#[cfg(test)]
mod tests;
