//! How a follower keeps a replica of a partition it does not own: pure
//! decisions, no I/O (decision 0018). A replica claims nothing and puts
//! nothing; it reads the partition's WAL objects in number order by the
//! epoch rule, as a claim replays them, and shows what it read only at
//! the end of a *round* that these rules let stand.
//!
//! Why this shows nothing but what every later reader replays: an object,
//! once at a number, never changes, and a number is deleted only below a
//! published checkpoint. So a round that reads consecutive numbers, each
//! present, by the epoch rule from where the replica stands, reads what a
//! claim would replay there, unless a number was deleted and something
//! else then landed on it. That happens: a zombie owner's put may land on
//! a number a newer owner fenced and a checkpoint then deleted, and a
//! claim never meets it (it starts from that checkpoint) but a replica
//! behind the checkpoint would read it as data. So:
//!
//! - **A round stops at the first missing number.** It may be a put still
//!   in flight, or deleted; either way nothing past it is read.
//! - **A look after the round.** A checkpoint published past the round's
//!   first number while the round read may have had the numbers below it
//!   deleted, and a put may have landed on one before the round read it:
//!   such a checkpoint discards the round and the replica is rebuilt from
//!   the newest checkpoint. A checkpoint at or below the round's first
//!   number deleted nothing the round read. (This is the claim's and the
//!   build's last look, for the same race.)
//! - **Never behind the newest checkpoint.** A round starts with a look
//!   too; a replica whose next number is below the newest checkpoint is
//!   rebuilt from it, as a claim starts (its next reads would find the
//!   numbers deleted).
//!
//! What a replica shows may include a commit its owner has not yet
//! acknowledged (landed, its look not done): it is in the log for every
//! later reader all the same. The owner's *frontier* (the number below
//! which it acknowledged everything, in its heartbeat) bounds a round
//! only to spare reads of numbers not yet written; safety does not rest
//! on it.
//!
//! The model in `fence/tests.rs` runs replicas beside owners, their
//! zombies and their checkpoint builders, with and without a frontier,
//! and shows the look after a round needed.

use super::fence::EpochRule;
use super::format::WalHeader;

/// A replica's place in a partition's WAL: the next number it reads and
/// the epoch rule over everything it has read (from its checkpoint on).
#[derive(Clone, Debug)]
pub struct Follow {
    next: u64,
    rule: EpochRule,
}

/// What a replica does next, given a look at the newest checkpoint and the
/// owner's frontier: the model's schedule of rounds (`fence/tests.rs`).
/// The server's replica reads on to the first missing number instead
/// (`bucket::read_next`); both end each round with [`Follow::finish`],
/// where the safety of a round lies.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Its next number is below the newest checkpoint (or it has none):
    /// build the replica again from checkpoint `number`.
    Rebuild { number: u64 },
    /// Read from `from`, up to `below` at most, as one round.
    Read { from: u64, below: u64 },
    /// Nothing new below the frontier.
    Wait,
}

/// A round being read: the objects it admitted are kept aside and shown
/// only if the round stands.
#[derive(Clone, Debug)]
pub struct Round {
    from: u64,
    at: u64,
    below: u64,
    rule: EpochRule,
}

/// One object of a round, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Data the epoch rule replays: keep its frames for the round.
    Replay,
    /// A fence, or an older epoch's put after a newer one: skip it.
    Skip,
}

impl Follow {
    /// A replica built from the checkpoint at `number` whose objects' highest
    /// epoch was `epoch` (the partition's start: number 0, epoch 0).
    pub fn from_checkpoint(number: u64, epoch: u64) -> Follow {
        Follow {
            next: number,
            rule: EpochRule::after(epoch),
        }
    }

    /// The next number this replica reads.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// The next step, after a look found the newest checkpoint at `newest`
    /// (`None`: there is none) and the owner's heartbeat said `frontier`.
    #[cfg(test)]
    pub fn plan(&self, newest: Option<u64>, frontier: u64) -> Plan {
        match newest {
            Some(number) if number > self.next => Plan::Rebuild { number },
            _ if frontier > self.next => Plan::Read {
                from: self.next,
                below: frontier,
            },
            _ => Plan::Wait,
        }
    }

    /// Starts the round a [`Plan::Read`] named.
    pub fn round(&self, from: u64, below: u64) -> Round {
        Round {
            from,
            at: from,
            below,
            rule: self.rule.clone(),
        }
    }

    /// Ends a round (read through, or stopped at a missing number):
    /// `newest` is a look at the newest checkpoint taken after its last
    /// read. `true`: the round stands
    /// and the replica moves past it (its kept frames are to be shown);
    /// `false`: it is discarded and the replica must be rebuilt.
    pub fn finish(&mut self, round: Round, newest: Option<u64>) -> bool {
        if newest.is_some_and(|n| n > round.from) {
            return false;
        }
        self.next = round.at;
        self.rule = round.rule;
        true
    }
}

impl Round {
    /// The number to read next, or `None` once the round is read through.
    pub fn next(&self) -> Option<u64> {
        (self.at < self.below).then_some(self.at)
    }

    /// Takes the object read at [`Round::next`].
    pub fn read(&mut self, header: &WalHeader) -> Read {
        self.at += 1;
        if self.rule.replays(header) {
            Read::Replay
        } else {
            Read::Skip
        }
    }

    /// The number at [`Round::next`] is missing: the round ends before it.
    pub fn missing(&mut self) {
        self.below = self.at;
    }

    /// The round read as much as one round may: it ends before
    /// [`Round::next`] (the next round starts there).
    pub fn end(&mut self) {
        self.below = self.at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::format::Kind;

    fn header(kind: Kind, epoch: u64) -> WalHeader {
        WalHeader {
            kind,
            epoch,
            put_id: [0; 16],
        }
    }

    #[test]
    fn a_round_reads_below_the_frontier() {
        let f = Follow::from_checkpoint(0, 0);
        assert_eq!(f.plan(None, 0), Plan::Wait);
        assert_eq!(f.plan(None, 3), Plan::Read { from: 0, below: 3 });
        let f = Follow::from_checkpoint(5, 1);
        assert_eq!(f.plan(Some(5), 5), Plan::Wait);
        assert_eq!(f.plan(Some(5), 2), Plan::Wait);
    }

    #[test]
    fn a_replica_behind_the_newest_checkpoint_is_rebuilt() {
        let f = Follow::from_checkpoint(3, 1);
        assert_eq!(f.plan(Some(4), 9), Plan::Rebuild { number: 4 });
        assert_eq!(f.plan(Some(3), 9), Plan::Read { from: 3, below: 9 });
    }

    #[test]
    fn a_round_applies_the_epoch_rule_and_stands_only_without_a_newer_checkpoint() {
        let mut f = Follow::from_checkpoint(0, 0);
        let mut round = f.round(0, 3);
        assert_eq!(round.next(), Some(0));
        assert_eq!(round.read(&header(Kind::Data, 1)), Read::Replay);
        assert_eq!(round.read(&header(Kind::Fence, 2)), Read::Skip);
        // An older owner's put after a newer fence counts for nobody.
        assert_eq!(round.read(&header(Kind::Data, 1)), Read::Skip);
        assert_eq!(round.next(), None);
        let kept = round.clone();
        // A checkpoint past the round's first number: discarded, unmoved.
        assert!(!f.finish(round, Some(2)));
        assert_eq!(f.next(), 0);
        // At the round's first number: it deleted nothing the round read.
        assert!(f.finish(kept, Some(0)));
        assert_eq!(f.next(), 3);
        // A missing number ends a round there.
        let mut short = f.round(3, 9);
        assert_eq!(short.read(&header(Kind::Data, 2)), Read::Replay);
        short.missing();
        assert_eq!(short.next(), None);
        assert!(f.clone().finish(short, None));
        // The rule goes on from the round's: epoch 1 is now behind.
        let mut next = f.round(3, 4);
        assert_eq!(next.read(&header(Kind::Data, 1)), Read::Skip);
    }
}
