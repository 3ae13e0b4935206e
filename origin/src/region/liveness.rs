//! Who in the region is alive, and what this origin does about the
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
//! newest epoch claim; while it lives the others follow it (forward to its
//! URL). Once it is dead the live non-owners claim in name order, the
//! `rank`-th waiting `rank × stagger` longer, so usually one claims and
//! the rest follow it.

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
}

impl Heartbeat {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a heartbeat serializes")
    }

    pub fn decode(bytes: &[u8]) -> Option<Heartbeat> {
        serde_json::from_slice(bytes).ok()
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
            });
            if seen.seq != Some(beat.seq) || seen.leaving != beat.leaving {
                seen.seq = Some(beat.seq);
                seen.changed = now;
            }
            seen.leaving = beat.leaving;
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

    /// Notes that `node` was named (as owner) at `now`, heartbeat or not:
    /// an owner that never wrote one is dead a lease after it was first named.
    pub fn note(&mut self, node: &str, now: Duration) {
        // Only the newest owner is kept without a heartbeat.
        self.seen.retain(|n, seen| seen.seq.is_some() || n == node);
        if !self.seen.contains_key(node) && self.seen.len() < self.max_nodes {
            self.seen.insert(
                node.to_owned(),
                Seen {
                    seq: None,
                    changed: now,
                    leaving: false,
                },
            );
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

/// What this origin does next about the partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Keep serving the epoch it holds.
    Serve,
    /// Claim the partition now.
    Claim,
    /// Answer by forwarding to the owner at this URL (stopping its own
    /// serving first if it serves an older epoch).
    Follow { url: String },
}

/// The decision of origin `me`, serving `serving` (its epoch) or nothing,
/// with `owner` the newest claim, at `now`.
pub fn decide(
    me: &str,
    serving: Option<u64>,
    owner: Option<&Owner>,
    liveness: &Liveness,
    stagger: Duration,
    now: Duration,
) -> Decision {
    let owner = match (serving, owner) {
        // A newer claim: this origin's writes are fenced already.
        (Some(epoch), Some(owner)) if owner.epoch > epoch => {
            return Decision::Follow {
                url: owner.url.clone(),
            }
        }
        // Its own epoch is the newest it knows of (a listing may lag).
        (Some(_), _) => return Decision::Serve,
        // Nobody ever claimed it.
        (None, None) => return Decision::Claim,
        (None, Some(owner)) => owner,
    };
    if owner.node == me {
        // Its own claim from before a restart: nobody else holds it.
        return Decision::Claim;
    }
    let Some(dead) = liveness.dead_for(&owner.node, now) else {
        return Decision::Follow {
            url: owner.url.clone(),
        };
    };
    let rank = liveness
        .live(now)
        .filter(|n| *n != owner.node)
        .take_while(|n| *n != me)
        .count();
    let wait = stagger.saturating_mul(u32::try_from(rank).unwrap_or(u32::MAX));
    if dead >= wait {
        Decision::Claim
    } else {
        Decision::Follow {
            url: owner.url.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
