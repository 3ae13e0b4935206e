//! One subscription's state and every decision about it (protocol §7),
//! pure: time, tails and fresh wake ids come in as arguments, and every
//! change comes out as [`Event`]s. The shell logs the events durably, then
//! applies them with [`Subscription::apply`]; recovery applies the same
//! events in the same order, so a subscription after a crash is the one
//! before it.
//!
//! The rules, in the protocol's words where it has them:
//! - a link's `acked` is the offset the next read starts at (acking offset
//!   N means the next read starts at N); a link has pending work while its
//!   stream's tail is past it. Acks never move a link back.
//! - a subscription with pending work and no wake in flight is woken: a
//!   new `generation` (one more than the last), a new `wake_id`, and the
//!   tails of its links at that moment (the wake's snapshot, which a
//!   `done` acks).
//! - a callback, ack or release must name the current generation and wake
//!   id; anything else is fenced (409 `FENCED`).
//! - a lease runs from a webhook's issue (from a pull-wake's claim), is
//!   extended by a callback or an ack without `done`, and when it runs out
//!   the wake ends: if work is pending, the next wake follows.
//! - a webhook that fails is retried with the same wake, backing off from
//!   1 s to 60 s with ±20 % jitter; while a retry is scheduled the lease
//!   does not run out (the receiver never had the wake) and `status` is
//!   `failed`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::config::Config;
use crate::core::Millis;

/// The first retry's delay and the longest one (protocol §7.1).
pub const RETRY_FIRST_MS: u64 = 1_000;
pub const RETRY_MAX_MS: u64 = 60_000;
/// The jitter's share of a retry's delay, in percent (±).
pub const RETRY_JITTER_PERCENT: u64 = 20;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Matched by the pattern.
    pub glob: bool,
    /// Named in `streams`.
    pub explicit: bool,
    /// Where the next read starts: everything before it is processed.
    pub acked: u64,
    /// The incarnation of the stream the link follows (empty: the stream
    /// did not exist when linked). A stream created again at the path is
    /// a new one, followed from its start.
    #[serde(default)]
    pub incarnation: String,
}

impl Link {
    /// `explicit` wins when both (protocol §6.1).
    pub fn link_type(&self) -> &'static str {
        if self.explicit {
            "explicit"
        } else {
            "glob"
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    pub id: String,
    pub generation: u64,
    /// Each linked stream's tail when the wake was issued.
    pub snapshot: BTreeMap<String, u64>,
    /// A pull-wake's worker, once one claimed it.
    pub holder: Option<String>,
    /// When the lease runs out; none for a pull-wake nobody claimed yet.
    pub lease_until: Option<Millis>,
    /// Whether the wake reached its workers: the webhook's receiver took
    /// it, or the pull-wake's events are in the wake stream. A wake not
    /// sent is sent (again) by whoever holds the subscription next, a
    /// restart included: at least once.
    #[serde(default)]
    pub sent: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retry {
    /// Failed deliveries of the current wake so far.
    pub attempt: u32,
    pub next_at: Millis,
}

/// A change, as logged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
pub enum Event {
    Created {
        id: String,
        config: Config,
        at: Millis,
        /// The server's URL as the creator reached it (callback URLs).
        #[serde(default)]
        base: String,
    },
    /// Sets the link's flags that are true; a new link starts at `acked`.
    /// A non-empty `incarnation` is recorded on a link that has none.
    Linked {
        path: String,
        glob: bool,
        explicit: bool,
        acked: u64,
        #[serde(default)]
        incarnation: String,
    },
    /// Clears the flags that are true; a link with neither is gone.
    Unlinked {
        path: String,
        glob: bool,
        explicit: bool,
    },
    Woke {
        wake_id: String,
        generation: u64,
        snapshot: BTreeMap<String, u64>,
        lease_until: Option<Millis>,
    },
    Claimed {
        holder: String,
        lease_until: Millis,
    },
    /// The wake reached its workers; a scheduled retry is over.
    Sent,
    /// The lease runs to `lease_until`.
    Leased {
        lease_until: Millis,
    },
    Acked {
        path: String,
        offset: u64,
    },
    /// The wake is over (done, released, or its lease ran out).
    Ended,
    Retrying {
        attempt: u32,
        next_at: Millis,
    },
    Deleted,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    pub id: String,
    pub config: Config,
    pub created_at: Millis,
    /// The server's URL as the creator reached it.
    #[serde(default)]
    pub base: String,
    pub links: BTreeMap<String, Link>,
    /// The last wake's generation (0: never woken).
    pub generation: u64,
    pub wake: Option<Wake>,
    pub retry: Option<Retry>,
    pub deleted: bool,
}

/// Why a callback, ack, release or claim is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 409 `FENCED`: not the current generation and wake.
    Fenced,
    /// 409 `ALREADY_CLAIMED`.
    AlreadyClaimed { holder: String, generation: u64 },
    /// 400: an ack names a stream the subscription does not link, or an
    /// offset past its tail.
    BadAck(String),
    /// A claim with nothing pending and no wake to take.
    NothingPending,
}

/// One acknowledgement of a callback or ack request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    pub stream: String,
    pub offset: u64,
}

/// A stream's state as a wake or a read reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkReport {
    pub path: String,
    pub link_type: &'static str,
    pub acked: u64,
    /// None when the stream does not exist (yet, or any more).
    pub tail: Option<u64>,
}

impl LinkReport {
    pub fn has_pending(&self) -> bool {
        self.tail.is_some_and(|t| t > self.acked)
    }
}

impl Subscription {
    /// The state a `Created` event starts.
    pub fn new(id: String, config: Config, at: Millis, base: String) -> Subscription {
        Subscription {
            id,
            config,
            created_at: at,
            base,
            links: BTreeMap::new(),
            generation: 0,
            wake: None,
            retry: None,
            deleted: false,
        }
    }

    /// What stands in until a subscription's `Created` event (which
    /// replaces all of it): a log read from its middle, a slot being made.
    pub fn unborn() -> Subscription {
        let config = Config {
            delivery: super::config::Delivery::PullWake {
                wake_stream: String::new(),
            },
            pattern: None,
            streams: Default::default(),
            lease_ttl_ms: 0,
            description: None,
        };
        Subscription::new(String::new(), config, 0, String::new())
    }

    /// Applies a logged event. Total: an event that no longer fits (a
    /// replay of a log written by a newer rule) changes what it can.
    /// One arm per event kind (long by design: the state machine in one
    /// place).
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::Created {
                id,
                config,
                at,
                base,
            } => {
                *self = Subscription::new(id.clone(), config.clone(), *at, base.clone());
            }
            Event::Linked {
                path,
                glob,
                explicit,
                acked,
                incarnation,
            } => {
                let link = self.links.entry(path.clone()).or_insert_with(|| Link {
                    acked: *acked,
                    ..Link::default()
                });
                link.glob |= glob;
                link.explicit |= explicit;
                if link.incarnation.is_empty() {
                    link.incarnation.clone_from(incarnation);
                }
            }
            Event::Unlinked {
                path,
                glob,
                explicit,
            } => {
                if let Some(link) = self.links.get_mut(path) {
                    link.glob &= !glob;
                    link.explicit &= !explicit;
                    if !link.glob && !link.explicit {
                        self.links.remove(path);
                    }
                }
            }
            Event::Woke {
                wake_id,
                generation,
                snapshot,
                lease_until,
            } => {
                self.generation = self.generation.max(*generation);
                self.wake = Some(Wake {
                    id: wake_id.clone(),
                    generation: *generation,
                    snapshot: snapshot.clone(),
                    holder: None,
                    lease_until: *lease_until,
                    sent: false,
                });
                self.retry = None;
            }
            Event::Sent => {
                if let Some(w) = &mut self.wake {
                    w.sent = true;
                }
                self.retry = None;
            }
            Event::Claimed {
                holder,
                lease_until,
            } => {
                if let Some(w) = &mut self.wake {
                    w.holder = Some(holder.clone());
                    w.lease_until = Some(*lease_until);
                }
                // A worker has the wake: announcing it is over.
                self.retry = None;
            }
            Event::Leased { lease_until } => {
                if let Some(w) = &mut self.wake {
                    w.lease_until = Some(*lease_until);
                }
            }
            Event::Acked { path, offset } => {
                if let Some(link) = self.links.get_mut(path) {
                    link.acked = link.acked.max(*offset);
                }
            }
            Event::Ended => {
                self.wake = None;
                self.retry = None;
            }
            Event::Retrying { attempt, next_at } => {
                self.retry = Some(Retry {
                    attempt: *attempt,
                    next_at: *next_at,
                });
            }
            Event::Deleted => {
                self.deleted = true;
                self.wake = None;
                self.retry = None;
            }
        }
    }

    /// Applies events in order.
    pub fn apply_all(&mut self, events: &[Event]) {
        for e in events {
            self.apply(e);
        }
    }

    /// Every link with its stream's tail.
    pub fn report(&self, tail: impl Fn(&str) -> Option<u64>) -> Vec<LinkReport> {
        self.links
            .iter()
            .map(|(path, link)| LinkReport {
                path: path.clone(),
                link_type: link.link_type(),
                acked: link.acked,
                tail: tail(path),
            })
            .collect()
    }

    /// Whether any link's stream is past its ack.
    pub fn has_pending(&self, tail: impl Fn(&str) -> Option<u64>) -> bool {
        self.links
            .iter()
            .any(|(path, link)| tail(path).is_some_and(|t| t > link.acked))
    }

    /// `active`, or `failed` while a webhook retry is scheduled.
    pub fn status(&self) -> &'static str {
        if self.retry.is_some() {
            "failed"
        } else {
            "active"
        }
    }

    /// The wake to issue now, if the subscription has pending work and
    /// none in flight: a new generation with the tails at this moment.
    pub fn wake_if_pending(
        &self,
        now: Millis,
        wake_id: impl FnOnce() -> String,
        tail: impl Fn(&str) -> Option<u64>,
    ) -> Option<Event> {
        if self.deleted || self.wake.is_some() || !self.has_pending(&tail) {
            return None;
        }
        // The pending links only: what `done` acks (a link with nothing
        // pending has nothing to ack), and a wake's line stays small.
        let snapshot = self
            .links
            .iter()
            .filter_map(|(p, l)| tail(p).filter(|t| *t > l.acked).map(|t| (p.clone(), t)))
            .collect();
        // A webhook's lease runs from its issue; a pull-wake's from its
        // claim.
        let lease_until = self
            .config
            .is_webhook()
            .then(|| now.saturating_add(self.config.lease_ttl_ms));
        Some(Event::Woke {
            wake_id: wake_id(),
            generation: self.generation + 1,
            snapshot,
            lease_until,
        })
    }

    /// The current wake, if `generation` and `wake_id` name it.
    fn current(&self, generation: u64, wake_id: &str) -> Result<&Wake, Refusal> {
        match &self.wake {
            Some(w) if !self.deleted && w.generation == generation && w.id == wake_id => Ok(w),
            _ => Err(Refusal::Fenced),
        }
    }

    /// A webhook's receiver answered `{"done": true}`: the snapshot's
    /// tails are acked and the wake ends.
    pub fn delivered_done(&self, generation: u64, wake_id: &str) -> Result<Vec<Event>, Refusal> {
        let wake = self.current(generation, wake_id)?;
        let mut events: Vec<Event> = wake
            .snapshot
            .iter()
            .filter(|(p, t)| self.links.get(*p).is_some_and(|l| **t > l.acked))
            .map(|(p, t)| Event::Acked {
                path: p.clone(),
                offset: *t,
            })
            .collect();
        events.push(Event::Ended);
        Ok(events)
    }

    /// The wake reached its workers: a webhook's receiver took it (2xx
    /// without `done`), or a pull-wake's events are in its wake stream.
    /// The lease runs from now; an unclaimed pull-wake lasts one lease,
    /// then ends and (work still pending) the next one is announced, so a
    /// worker that missed the event hears again.
    pub fn delivered(
        &self,
        now: Millis,
        generation: u64,
        wake_id: &str,
    ) -> Result<Vec<Event>, Refusal> {
        self.current(generation, wake_id)?;
        Ok(vec![
            Event::Sent,
            Event::Leased {
                lease_until: now.saturating_add(self.config.lease_ttl_ms),
            },
        ])
    }

    /// The wake to send now: one not sent yet (nor claimed) whose retry
    /// (if any) is due.
    pub fn to_send(&self, now: Millis) -> Option<&Wake> {
        let w = self
            .wake
            .as_ref()
            .filter(|w| !w.sent && w.holder.is_none() && !self.deleted)?;
        self.retry.is_none_or(|r| r.next_at <= now).then_some(w)
    }

    /// A delivery failed: the next attempt's time. `jitter` in
    /// [-1.0, 1.0] scales the ±20 %.
    pub fn delivery_failed(
        &self,
        now: Millis,
        generation: u64,
        wake_id: &str,
        jitter: f64,
    ) -> Result<Event, Refusal> {
        self.current(generation, wake_id)?;
        let attempt = self.retry.map_or(1, |r| r.attempt.saturating_add(1));
        Ok(Event::Retrying {
            attempt,
            next_at: now.saturating_add(retry_delay(attempt, jitter)),
        })
    }

    /// A callback (webhook) or ack (pull-wake): acks applied, and the wake
    /// ends with `done`, else its lease is extended. Answers the events
    /// and whether work is still pending after them (`next_wake`).
    pub fn acknowledge(
        &self,
        now: Millis,
        generation: u64,
        wake_id: &str,
        acks: &[Ack],
        done: bool,
        tail: impl Fn(&str) -> Option<u64>,
    ) -> Result<(Vec<Event>, bool), Refusal> {
        self.current(generation, wake_id)?;
        let mut events = Vec::new();
        let mut after = self.clone();
        for ack in acks {
            let Some(link) = self.links.get(&ack.stream) else {
                return Err(Refusal::BadAck(format!(
                    "the subscription does not link {:?}",
                    ack.stream
                )));
            };
            if tail(&ack.stream).is_none_or(|t| ack.offset > t) {
                return Err(Refusal::BadAck(format!(
                    "{:?} has no offset {:016x} yet",
                    ack.stream, ack.offset
                )));
            }
            if ack.offset > link.acked {
                let e = Event::Acked {
                    path: ack.stream.clone(),
                    offset: ack.offset,
                };
                after.apply(&e);
                events.push(e);
            }
        }
        events.push(if done {
            Event::Ended
        } else {
            Event::Leased {
                lease_until: now.saturating_add(self.config.lease_ttl_ms),
            }
        });
        Ok((events, after.has_pending(tail)))
    }

    /// A worker's claim of a pull-wake subscription: the wake in flight,
    /// or a new one when work is pending and none is.
    pub fn claim(
        &self,
        now: Millis,
        worker: &str,
        wake_id: impl FnOnce() -> String,
        tail: impl Fn(&str) -> Option<u64>,
    ) -> Result<Vec<Event>, Refusal> {
        let lease_until = now.saturating_add(self.config.lease_ttl_ms);
        let claimed = Event::Claimed {
            holder: worker.to_owned(),
            lease_until,
        };
        match &self.wake {
            Some(w) => match &w.holder {
                Some(h) if w.lease_until.is_some_and(|l| l > now) => Err(Refusal::AlreadyClaimed {
                    holder: h.clone(),
                    generation: w.generation,
                }),
                // Its holder's lease ran out (the sweep ends it soon): the
                // wake is over and the claim starts the next one.
                Some(_) => {
                    let mut after = self.clone();
                    after.apply(&Event::Ended);
                    let mut events = vec![Event::Ended];
                    events.extend(after.claim(now, worker, wake_id, tail)?);
                    Ok(events)
                }
                None => Ok(vec![claimed]),
            },
            None => {
                let woke = self
                    .wake_if_pending(now, wake_id, tail)
                    .ok_or(Refusal::NothingPending)?;
                Ok(vec![woke, claimed])
            }
        }
    }

    /// A worker lets its claim go without acking.
    pub fn release(&self, generation: u64, wake_id: &str) -> Result<Event, Refusal> {
        self.current(generation, wake_id)?;
        Ok(Event::Ended)
    }

    /// The wake's lease ran out. Never while a retry is scheduled, nor
    /// before the wake reached its workers (a webhook whose delivery is
    /// in flight: its outcome decides, within the webhook timeout).
    pub fn expire(&self, now: Millis) -> Option<Event> {
        let w = self.wake.as_ref()?;
        let reached = w.sent || w.holder.is_some();
        (self.retry.is_none() && reached && w.lease_until.is_some_and(|l| l <= now))
            .then_some(Event::Ended)
    }

    /// When the engine must next look at this subscription without a
    /// request: its lease's or retry's end, or at once while a wake waits
    /// to be sent (none when only an append or a request can move it).
    pub fn due_at(&self) -> Option<Millis> {
        if self.deleted {
            return None;
        }
        self.next_due().or_else(|| self.to_send(0).map(|_| 0))
    }

    /// When something is next due without any append: a retry, or a lease
    /// running out.
    pub fn next_due(&self) -> Option<Millis> {
        match (&self.retry, &self.wake) {
            (Some(r), _) => Some(r.next_at),
            (None, Some(w)) if w.sent || w.holder.is_some() => w.lease_until,
            _ => None,
        }
    }
}

/// The delay before retry number `attempt` (1-based): 1 s doubling to at
/// most 60 s, then ±20 % as `jitter` in [-1.0, 1.0] says.
pub fn retry_delay(attempt: u32, jitter: f64) -> u64 {
    let doublings = attempt.saturating_sub(1).min(16);
    let base = RETRY_FIRST_MS
        .saturating_mul(1u64 << doublings)
        .min(RETRY_MAX_MS);
    let spread = (base * RETRY_JITTER_PERCENT / 100) as f64 * jitter.clamp(-1.0, 1.0);
    (base as f64 + spread).max(0.0) as u64
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
