//! Who in the region is alive, and what this origin does about each
//! partition: pure rules, no I/O, no clock (times are an injected monotonic
//! clock's readings, as `Duration`s since some start).
//!
//! Liveness only, never safety: ownership is the newest epoch claim
//! (`fence`), and a claim fences whoever held the partition before, alive
//! or not. So a wrong guess here costs availability for a moment (two
//! origins claim in turn; the older stops acknowledging at its next put),
//! never an acknowledged append.
//!
//! Each origin overwrites its heartbeat object every `renew` with a higher
//! sequence number. Another origin never compares wall clocks: it notes on
//! its own monotonic clock when it last saw a node's sequence change, and
//! counts the node dead once that is `lease` ago (or at once when the node
//! said it is leaving, on a clean stop). The owner is whoever wrote the
//! newest epoch claim of a partition; while it lives (and has not released
//! the partition) the others follow it (forward to its URL). Once the
//! partition is vacant, the origin the spread gives it to
//! (`assignment`) claims at once and every other live one, in name order,
//! `stagger` times its rank plus one later, so usually one claims and the
//! rest follow it. An owner holding more than its share lets go of a
//! partition the spread gives to another (`Release`): a cooperative
//! hand-off, listed in its heartbeat, which the target claims at once.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One origin's heartbeat object (JSON, so an operator can read it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub node: String,
    /// Where it answers.
    pub url: String,
    /// Raised by every renewal; a change is what proves it alive.
    pub seq: u64,
    /// Written on a clean stop: the others take over at once.
    #[serde(default)]
    pub leaving: bool,
    /// Partitions (and the epochs) this origin stopped serving so that the
    /// origin the spread gives them to takes them at once (a cooperative
    /// hand-off); each stays listed until a newer claim is seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<Released>,
    /// Partitions (and the epochs) this origin serves: the others read
    /// owners from here rather than look at each partition's claims every
    /// renewal (`membership`). Only a hint: a claim is what owns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub serving: Vec<Served>,
}

/// A partition its owner serves at `epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Served {
    pub partition: u32,
    pub epoch: u64,
}

/// A partition its owner let go of at `epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Released {
    pub partition: u32,
    pub epoch: u64,
}

impl Heartbeat {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a heartbeat serializes")
    }

    /// The heartbeat in `bytes`; None if it is not one. Releases and
    /// partitions served past
    /// [`MAX_PARTITIONS`](shared::partition::MAX_PARTITIONS) are dropped.
    pub fn decode(bytes: &[u8]) -> Option<Heartbeat> {
        let mut beat: Heartbeat = serde_json::from_slice(bytes).ok()?;
        beat.released
            .truncate(shared::partition::MAX_PARTITIONS as usize);
        beat.serving
            .truncate(shared::partition::MAX_PARTITIONS as usize);
        Some(beat)
    }
}

/// What one origin last saw of another.
#[derive(Clone, Debug)]
struct Seen {
    /// None: named as owner but no heartbeat of it seen yet.
    seq: Option<u64>,
    /// When `seq` last changed (or the node was first noted).
    changed: Duration,
    leaving: bool,
    /// Its releases, each with when it was first seen.
    released: BTreeMap<Released, Duration>,
}

/// The region's origins as one origin observes them.
#[derive(Debug)]
pub struct Liveness {
    lease: Duration,
    /// At most `max_nodes`: heartbeats past it are not observed (logged by
    /// the caller), so a bucket full of junk cannot grow this map.
    max_nodes: usize,
    seen: BTreeMap<String, Seen>,
}

impl Liveness {
    pub fn new(lease: Duration, max_nodes: usize) -> Liveness {
        Liveness {
            lease,
            max_nodes,
            seen: BTreeMap::new(),
        }
    }

    /// Takes in one listing of heartbeats at `now`: nodes whose heartbeat
    /// is gone are forgotten. Returns whether the listing fit `max_nodes`.
    pub fn observe(&mut self, beats: &[Heartbeat], now: Duration) -> bool {
        // A node named but never seen keeps its first-noted time.
        self.seen
            .retain(|node, seen| seen.seq.is_none() || beats.iter().any(|b| &b.node == node));
        let mut fit = true;
        for beat in beats {
            if !self.seen.contains_key(&beat.node) && self.seen.len() >= self.max_nodes {
                fit = false;
                continue;
            }
            let seen = self.seen.entry(beat.node.clone()).or_insert(Seen {
                seq: None,
                changed: now,
                leaving: false,
                released: BTreeMap::new(),
            });
            if seen.seq != Some(beat.seq) || seen.leaving != beat.leaving {
                seen.seq = Some(beat.seq);
                seen.changed = now;
            }
            seen.leaving = beat.leaving;
            seen.released.retain(|r, _| beat.released.contains(r));
            for r in &beat.released {
                seen.released.entry(*r).or_insert(now);
            }
        }
        fit
    }

    /// This origin could not read the heartbeats for a while (its own
    /// requests to the bucket failed): what it saw before says nothing
    /// about the time it was blind, so every node starts a lease afresh
    /// at `now` rather than being taken over for the outage.
    pub fn after_blind(&mut self, now: Duration) {
        for seen in self.seen.values_mut() {
            if !seen.leaving {
                seen.changed = now;
            }
        }
    }

    /// Notes that `nodes` are named (as owners) at `now`, heartbeat or not:
    /// an owner that never wrote one is dead a lease after it was first
    /// named. Only owners named now are kept without a heartbeat.
    pub fn note<'a>(&mut self, nodes: impl IntoIterator<Item = &'a str> + Clone, now: Duration) {
        self.seen
            .retain(|n, seen| seen.seq.is_some() || nodes.clone().into_iter().any(|m| m == n));
        for node in nodes {
            if !self.seen.contains_key(node) && self.seen.len() < self.max_nodes {
                self.seen.insert(
                    node.to_owned(),
                    Seen {
                        seq: None,
                        changed: now,
                        leaving: false,
                        released: BTreeMap::new(),
                    },
                );
            }
        }
    }

    /// How long `node` has been dead at `now`; None while it lives.
    pub fn dead_for(&self, node: &str, now: Duration) -> Option<Duration> {
        let Some(seen) = self.seen.get(node) else {
            // Never noted: nothing proves it alive.
            return Some(Duration::MAX);
        };
        if seen.leaving {
            return Some(now.saturating_sub(seen.changed));
        }
        let expires = seen.changed.saturating_add(self.lease);
        (now >= expires).then(|| now - expires)
    }

    /// How long ago `node` was first seen releasing `partition` at `epoch`;
    /// None if it is not releasing it.
    pub fn released_for(&self, node: &str, released: Released, now: Duration) -> Option<Duration> {
        let since = self.seen.get(node)?.released.get(&released)?;
        Some(now.saturating_sub(*since))
    }

    /// How long partition `p` has had no owner serving it at `now`, as
    /// origin `me` sees it: since `unclaimed` (when it was first seen with
    /// no claim), since its owner died, or since its owner released it;
    /// None while its owner serves it. Its own claim (`me` restarted, or
    /// its store stopped) is vacant from the start.
    pub fn vacant_for(
        &self,
        me: &str,
        p: u32,
        owner: Option<&Owner>,
        unclaimed: Option<Duration>,
        now: Duration,
    ) -> Option<Duration> {
        let Some(o) = owner else {
            return unclaimed.map(|since| now.saturating_sub(since));
        };
        let released = Released {
            partition: p,
            epoch: o.epoch,
        };
        if o.node == me {
            return Some(
                self.released_for(me, released, now)
                    .unwrap_or(Duration::ZERO),
            );
        }
        self.dead_for(&o.node, now)
            .or_else(|| self.released_for(&o.node, released, now))
    }

    /// The live nodes at `now`, in name order.
    pub fn live(&self, now: Duration) -> impl Iterator<Item = &str> {
        self.seen
            .keys()
            .map(String::as_str)
            .filter(move |n| self.dead_for(n, now).is_none())
    }
}

/// The newest epoch claim, as far as the decision needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub epoch: u64,
    pub node: String,
    pub url: String,
}

/// What this origin does next about a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Keep serving the epoch it holds.
    Serve,
    /// Stop serving it, so that the origin the spread gives it to claims
    /// it (a cooperative hand-off; the claim fences this origin all the
    /// same).
    Release,
    /// Claim the partition now.
    Claim,
    /// Answer by forwarding to the owner at this URL (stopping its own
    /// serving first if it serves an older epoch).
    Follow { url: String },
    /// Nobody to follow and not this origin's turn to claim: answer 503.
    Wait,
}

/// One partition as origin `me` sees it.
#[derive(Clone, Debug)]
pub struct Situation<'a> {
    pub me: &'a str,
    /// The epoch `me` serves the partition at, if it does.
    pub serving: Option<u64>,
    /// The newest claim.
    pub owner: Option<&'a Owner>,
    /// Whom the spread (`assignment`) gives the partition to.
    pub target: Option<&'a str>,
    /// How long the partition has had no owner serving it (never claimed,
    /// its owner dead, or released); None while its owner serves it.
    pub vacant_for: Option<Duration>,
    /// Whether the vacancy is `me`'s own release.
    pub released_by_me: bool,
    /// How long `me` has served it while the spread gives it to another
    /// live origin.
    pub misplaced_for: Option<Duration>,
}

/// The decision about one partition at `now`.
///
/// A vacant partition is claimed at once by its target, and by each other
/// live origin (in name order, the owner and the target skipped) after
/// `stagger` times its rank plus one, should the target not act. A
/// misplaced one is released after `stagger`, so a view of the live set
/// that is off for a moment moves nothing.
pub fn decide(s: &Situation, liveness: &Liveness, stagger: Duration, now: Duration) -> Decision {
    if let Some(epoch) = s.serving {
        return match s.owner {
            // A newer claim: this origin's writes are fenced already.
            Some(owner) if owner.epoch > epoch => Decision::Follow {
                url: owner.url.clone(),
            },
            _ if s.misplaced_for.is_some_and(|m| m >= stagger) => Decision::Release,
            // Its own epoch is the newest it knows of (a listing may lag).
            _ => Decision::Serve,
        };
    }
    let follow = || match s.owner {
        // Its own release: nobody to forward to until the next claim.
        Some(owner) if owner.node != s.me => Decision::Follow {
            url: owner.url.clone(),
        },
        _ => Decision::Wait,
    };
    let Some(vacant) = s.vacant_for else {
        return follow();
    };
    if s.owner.is_some_and(|o| o.node == s.me) && !s.released_by_me {
        // Its own claim from before a restart: nobody else holds it.
        return Decision::Claim;
    }
    if s.target == Some(s.me) {
        return Decision::Claim;
    }
    let owner = s.owner.map(|o| o.node.as_str());
    let rank = liveness
        .live(now)
        .filter(|n| Some(*n) != owner && Some(*n) != s.target)
        .take_while(|n| *n != s.me)
        .count();
    let rank = u32::try_from(rank).unwrap_or(u32::MAX).saturating_add(1);
    if vacant >= stagger.saturating_mul(rank) {
        Decision::Claim
    } else {
        follow()
    }
}

#[cfg(test)]
mod tests;
