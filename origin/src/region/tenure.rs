//! One WAL per origin (decision 0028): which origin's log holds each
//! stretch of a partition's history, and where a stretch ends. Pure
//! rules, no I/O; the model in `tenure/tests.rs` checks them, and the
//! shell that writes such logs is `origin_wal`.
//!
//! Terms. An origin writes one *log* per process start: objects at numbers
//! `0, 1, 2, …`, each a create-only put, each carrying the frames of every
//! partition the origin serves (one put per group commit, whatever the
//! partition count: the cost decision 0015 measured). A log has one
//! writer, at one epoch. A partition's history is a chain of *tenures*,
//! create-only objects numbered `0, 1, 2, …` per partition: tenure `k`
//! names a log, its writer's epoch, and the first number of that log that
//! may hold the partition's frames; tenure `k+1` also names where tenure
//! `k` ended.
//!
//! Reading tenure `k` (a [`Walk`]): from its first number, in order, an
//! object of the tenure's epoch counts (its frames of the partition are
//! replayed); the partition's *release*, or an object of another epoch
//! (a fence), ends the tenure there; a missing number leaves it *open*
//! (its writer may still put there). A closed tenure is read only below
//! the end its successor names.
//!
//! The rules:
//! 1. A writer puts a partition's frames only under a tenure it made, and
//!    acknowledges its puts in number order, each once it landed as its
//!    own. A put that finds its number taken stops the whole log: every
//!    partition the origin serves.
//! 2. A hand-off between live origins: the writer stops taking the
//!    partition's appends, waits until every put holding its frames is
//!    acknowledged, then puts the partition's release, and no frame of it
//!    after.
//! 3. A takeover: a walk that finds its tenure open puts a fence, at a new
//!    epoch of that log, at the missing number. If the fence landed, the
//!    tenure ends there; if an object was there first, it is read as any.
//!    The fence stops the old writer's whole log (rule 1), so a takeover
//!    of one partition is a takeover of every partition that log serves.
//! 4. A new owner makes tenure `k+1` only after it replayed every tenure
//!    up to `k` and its walk of `k` ended; it names that end. The put is
//!    create-only: if the tenure exists, another origin made it first, and
//!    this one gives up.
//!
//! Why no acknowledged append is lost. The writer of tenure `k`
//! acknowledged a frame at number `x` only once every number from its
//! tenure's first to `x` held its own landed puts (rule 1). The walk ends
//! at a release, which comes after every acknowledged frame of the
//! partition (rule 2), or at a fence at a number that was missing, where
//! the writer's own put then fails, so it acknowledges nothing from there
//! on (rules 1 and 3). Either way `x` lies before the end, and the walk
//! counted it. Every number before the end holds an object, and objects
//! never change, so every later reader counts the same frames; tenure
//! `k+1` has one maker (rule 4), which replayed exactly those.
//!
//! Why nothing is counted twice: a tenure's frames are its own log's
//! objects of its own epoch, from its first number to its end; a writer
//! that takes a partition back starts a new tenure past the release of
//! the old one.
//!
//! Checkpoints and deleting a log. A partition's owner publishes
//! checkpoints of it, create-only, keyed by where they stand (a tenure and
//! a number in it, below which the checkpoint holds every frame); the
//! newest is the highest key, so a late checkpoint of an older tenure never
//! hides a newer one. A reader starts from the newest. A log's writer
//! deletes its objects below the lowest point some partition may still be
//! read from: for each tenure in the log, the partition's newest
//! checkpoint's number when that checkpoint is in the tenure, the tenure's
//! first number when it is older, nothing when it is newer; and never at
//! or past what it acknowledged. So a walk may meet a number deleted since
//! it started, take it for missing and even fence it: rule 5 keeps that
//! harmless.
//!
//! 5. A new owner, before it makes tenure `k+1`, looks at the partition's
//!    newest checkpoint again; if it is not the one its replay started
//!    from, it starts over (numbers it read as missing may have been
//!    deleted, not yet written). A deleted number's fence is never read:
//!    every reader starts past it.
//!
//! 6. Another origin may delete a log (one whose writer died or was
//!    fenced: it cannot tell which, nor a slow writer from a dead one). It
//!    lists the log, puts a fence where the listing ended (so the writer
//!    acknowledges nothing from there on), then reads every tenure and
//!    checkpoint, and deletes the writer's objects below
//!    `deletion_bound(listed, …)`, never a fence. A put the writer still
//!    has in flight lies past the fence, or before the last object listed,
//!    which was put after it, so its tenure was made before the listing
//!    and is counted. A claim in progress took its first number before
//!    its tenure exists: once the fence stands, nothing under that tenure
//!    is acknowledged. A fence stays: a writer's put delayed past it would
//!    otherwise land in its place and be acknowledged. For the same claim
//!    in progress, a writer's own deletion counts it from the number it
//!    took, as a tenure no checkpoint covers.

/// One stretch of a partition's history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tenure {
    /// The log holding it (a log is one origin's, from one process start).
    pub log: u64,
    /// Its writer's epoch: the log's objects of this epoch count.
    pub epoch: u64,
    /// The first number of the log that may hold the partition's frames.
    pub from: u64,
    /// Where the tenure before this one ended (none for the first).
    pub previous_end: Option<u64>,
}

/// What a walk finds at its next number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    Missing,
    Object {
        epoch: u64,
        /// The object releases the walk's partition.
        releases: bool,
    },
}

/// What a walk made of what it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The object's frames of the partition count; read on.
    Count,
    /// The tenure ends before this number.
    Ended { at: u64 },
    /// The number is missing: the tenure's writer may still put there.
    Open { at: u64 },
}

/// A reading of one tenure, number by number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    epoch: u64,
    at: u64,
    /// The end the next tenure names, when there is one.
    below: Option<u64>,
}

impl Walk {
    /// A walk of `tenure`, whose successor (if any) names `below` as its
    /// end (the model's; the shell always walks from a start).
    #[cfg(test)]
    pub fn new(tenure: &Tenure, below: Option<u64>) -> Walk {
        Walk {
            epoch: tenure.epoch,
            at: tenure.from,
            below,
        }
    }

    /// A walk of `tenure` from a partition checkpoint taken at number
    /// `at` of it (what came before is in the checkpoint).
    pub fn resume(tenure: &Tenure, at: u64, below: Option<u64>) -> Walk {
        debug_assert!(at >= tenure.from);
        Walk {
            epoch: tenure.epoch,
            at,
            below,
        }
    }

    /// The number to read next, or the end already known.
    pub fn next(&self) -> Result<u64, u64> {
        match self.below {
            Some(end) if self.at >= end => Err(end),
            _ => Ok(self.at),
        }
    }

    /// Takes what was found at [`Walk::next`].
    pub fn read(&mut self, found: Found) -> Step {
        match found {
            Found::Missing => Step::Open { at: self.at },
            Found::Object { epoch, releases } if epoch == self.epoch && !releases => {
                self.at += 1;
                Step::Count
            }
            Found::Object { .. } => Step::Ended { at: self.at },
        }
    }
}

/// Where a partition checkpoint stands: tenure `tenure`, below number
/// `number` of its log (every frame before it is in the checkpoint). The
/// newest checkpoint is the highest stand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stand {
    pub tenure: u64,
    pub number: u64,
}

/// One tenure in a log, as its writer's deletion bound looks at it: the
/// tenure's number, its first number, and its partition's newest
/// checkpoint.
#[derive(Clone, Copy, Debug)]
pub struct InLog {
    pub tenure: u64,
    pub from: u64,
    pub newest: Option<Stand>,
}

/// The number below which a log's writer may delete its objects: below
/// what it acknowledged, and below what some reader may still start from
/// for each tenure in the log (the partition's newest checkpoint's number
/// when that checkpoint is in the tenure, the tenure's first number when
/// the checkpoint is older or missing; nothing when it is newer).
pub fn deletion_bound(acknowledged: u64, tenures: impl IntoIterator<Item = InLog>) -> u64 {
    tenures
        .into_iter()
        .filter_map(|t| match t.newest {
            Some(c) if c.tenure > t.tenure => None,
            Some(c) if c.tenure == t.tenure => Some(c.number.max(t.from)),
            _ => Some(t.from),
        })
        .fold(acknowledged, u64::min)
}

#[cfg(test)]
mod tests;
