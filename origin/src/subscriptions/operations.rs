//! The subscription operations a request asks for (protocol §6–7), each
//! under its subscription's lock: decide with the pure state, log, apply,
//! answer. Access is the HTTP layer's; tokens are checked here.

use std::sync::Arc;

use serde::Deserialize;
use shared::offset::Offset;

use super::engine::new_wake_id;
use super::token::{self, Claims, TokenError};
use super::{account_of, render, Error, Key, Slot, Subscriptions};
use crate::core::subscription::config::{self, Config};
use crate::core::subscription::state::{Ack, Event, Subscription};

/// A callback's or ack's body (protocol §7.1, §7.2).
#[derive(Deserialize)]
struct AckBody {
    wake_id: String,
    generation: u64,
    #[serde(default)]
    acks: Vec<AckItem>,
    #[serde(default)]
    done: bool,
}

#[derive(Deserialize)]
struct AckItem {
    stream: Option<String>,
    path: Option<String>,
    offset: String,
}

#[derive(Deserialize)]
struct ReleaseBody {
    wake_id: String,
    generation: u64,
}

#[derive(Deserialize)]
struct ClaimBody {
    worker: String,
}

#[derive(Deserialize)]
struct StreamsBody {
    streams: Vec<String>,
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, Error> {
    serde_json::from_slice(body)
        .map_err(|e| Error::Invalid(format!("the body does not parse: {e}")))
}

/// What a `PUT` did.
pub enum Declared {
    Created(Subscription),
    Confirmed(Subscription),
}

impl Subscriptions {
    /// Creates a subscription, or confirms one with the same configuration.
    pub async fn declare(
        &self,
        root: &str,
        id: &str,
        body: &[u8],
        base: String,
    ) -> Result<Declared, Error> {
        let config = Config::parse(body, usize::MAX).map_err(|e| Error::Invalid(e.0))?;
        if config.streams.len() > self.config.max_streams_per_subscription {
            return Err(Error::Limit(format!(
                "a subscription links at most {} streams",
                self.config.max_streams_per_subscription
            )));
        }
        if let config::Delivery::Webhook { url } = &config.delivery {
            self.config
                .url_policy
                .check(url)
                .map_err(Error::UrlRejected)?;
        }
        let key: Key = (root.to_owned(), id.to_owned());
        // Links start at the tails: everything acknowledged before this
        // request is below them (in a region, once the replicas hold it).
        self.catalog.settle().await?;
        // A slot a delete took out of the table meanwhile is not this
        // subscription's any more: take the table's.
        let (slot, _op) = loop {
            let slot = self.slot_for_create(&key)?;
            let op = slot.op_owned().await;
            if self.slot(&key).is_some_and(|s| Arc::ptr_eq(&s, &slot)) {
                break (slot, op);
            }
        };
        let existing = slot.state.lock().clone().filter(|s| !s.deleted);
        if let Some(sub) = existing {
            // Compared by the normalized configuration's hash (§6.2).
            return if sub.config.hash() == config.hash() {
                Ok(Declared::Confirmed(sub))
            } else {
                Err(Error::Exists)
            };
        }
        let made = self.create(&key, &slot, config, base).await;
        if made.is_err() {
            // Nothing was logged (or the log failed): the slot goes.
            let mut table = self.table.write();
            if slot.state.lock().is_none() {
                table.remove_if(&key, &slot);
            }
        }
        made.map(Declared::Created)
    }

    /// The slot a new subscription goes in, within the bounds.
    fn slot_for_create(&self, key: &Key) -> Result<Arc<Slot>, Error> {
        let mut table = self.table.write();
        if let Some(slot) = table.get(key) {
            return Ok(Arc::clone(slot));
        }
        if table.len() >= self.config.max_subscriptions {
            return Err(Error::Limit(format!(
                "this server holds {} subscriptions, as many as it may",
                self.config.max_subscriptions
            )));
        }
        let account = account_of(&key.0, &self.default_prefix);
        let of_account = table.of_account(&account);
        if of_account >= self.config.max_per_account {
            return Err(Error::Limit(format!(
                "the account has {of_account} subscriptions, as many as it may"
            )));
        }
        let slot = Arc::new(Slot::new(account));
        table.insert(key.clone(), Arc::clone(&slot));
        Ok(slot)
    }

    async fn create(
        &self,
        key: &Key,
        slot: &Slot,
        config: Config,
        base: String,
    ) -> Result<Subscription, Error> {
        let now = self.now();
        let mut events = vec![Event::Created {
            id: key.1.clone(),
            config: config.clone(),
            at: now,
            base,
        }];
        // Named streams from their tail (or from their start, if they do
        // not exist yet).
        for rel in &config.streams {
            events.push(self.link_at_tail(&key.0, rel, false, true));
        }
        // The pattern is indexed before existing streams are walked, so a
        // stream created meanwhile is matched by the engine (from its
        // start) if the walk missed it.
        if let Some(glob) = config.glob() {
            self.add_pattern(key, glob.clone());
            let mut linked = config.streams.len();
            for view in self.streams_for(&key.0, &glob) {
                let rel = &view.path[key.0.len() + 1..];
                if !glob.matches(rel) || !config.may_link(rel) {
                    continue;
                }
                // A named stream the pattern matches too is both.
                if !config.streams.contains(rel) {
                    if linked >= self.config.max_streams_per_subscription {
                        tracing::warn!(subscription = %key.1, "the pattern matches more streams than a subscription links; the rest are not linked");
                        break;
                    }
                    linked += 1;
                }
                events.push(Event::Linked {
                    path: rel.to_owned(),
                    glob: true,
                    explicit: false,
                    acked: view.end().next,
                    incarnation: view.incarnation.to_string(),
                });
            }
        }
        let new_links = events
            .iter()
            .filter(|e| matches!(e, Event::Linked { .. }))
            .count();
        let logged = match self.links_fit(new_links) {
            Ok(()) => self.log(key, slot, &events).await,
            Err(e) => Err(e),
        };
        if let Err(e) = logged {
            self.remove_pattern(key, config.glob());
            return Err(e);
        }
        let sub = slot.state.lock().clone().ok_or(Error::NotFound)?;
        self.index(key, &sub);
        self.mark(key.clone());
        Ok(sub)
    }

    /// The subscription, if it exists.
    pub fn get(&self, key: &Key) -> Option<Subscription> {
        self.slot(key)?.state.lock().clone().filter(|s| !s.deleted)
    }

    /// The description a read answers; `base` is the server's URL as the
    /// request reached it (`--public-url` when set).
    pub fn describe(&self, key: &Key, sub: &Subscription, base: &str) -> serde_json::Value {
        let reports = sub.report(|rel| self.tail_of(&key.0, rel));
        render::describe(
            &key.0,
            sub,
            &reports,
            base,
            &self.keys.active_kid(self.now()),
        )
    }

    /// Runs `f` on the live subscription under its lock.
    async fn with<T>(
        &self,
        key: &Key,
        f: impl AsyncFnOnce(&Arc<Slot>, Subscription) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let slot = self.slot(key).ok_or(Error::NotFound)?;
        let _op = slot.op.lock().await;
        let sub = slot
            .state
            .lock()
            .clone()
            .filter(|s| !s.deleted)
            .ok_or(Error::NotFound)?;
        f(&slot, sub).await
    }

    /// Tombstones a subscription: its wake's callbacks fail from now on.
    pub async fn delete(&self, key: &Key) -> Result<(), Error> {
        self.with(key, async |slot, sub| {
            self.log(key, slot, &[Event::Deleted]).await?;
            self.unindex(key, &sub);
            self.table.write().remove_if(key, slot);
            Ok(())
        })
        .await
    }

    /// Links streams explicitly (from their tails; idempotent).
    pub async fn add_streams(&self, key: &Key, body: &[u8]) -> Result<(), Error> {
        let StreamsBody { streams } = parse(body)?;
        let streams = config::normalize_streams(streams, self.config.max_streams_per_subscription)
            .map_err(|e| Error::Invalid(e.0))?;
        self.catalog.settle().await?;
        self.with(key, async |slot, sub| {
            let new: Vec<&String> = streams
                .iter()
                .filter(|s| !sub.links.contains_key(*s))
                .collect();
            if sub.links.len() + new.len() > self.config.max_streams_per_subscription {
                return Err(Error::Limit(format!(
                    "a subscription links at most {} streams",
                    self.config.max_streams_per_subscription
                )));
            }
            self.links_fit(new.len())?;
            if streams.iter().any(|s| !sub.config.may_link(s)) {
                return Err(Error::Invalid("the wake stream cannot be linked".into()));
            }
            let events: Vec<Event> = streams
                .iter()
                .filter(|s| !sub.links.get(*s).is_some_and(|l| l.explicit))
                .map(|rel| self.link_at_tail(&key.0, rel, false, true))
                .collect();
            self.log(key, slot, &events).await?;
            self.index_links(key, streams.iter());
            Ok(())
        })
        .await?;
        // Appends between the tails read and the index: looked at now.
        self.mark(key.clone());
        Ok(())
    }

    /// A link at the stream's tail (at 0 if it does not exist yet).
    fn link_at_tail(&self, root: &str, rel: &str, glob: bool, explicit: bool) -> Event {
        let view = self.catalog.get(&Self::full_path(root, rel));
        Event::Linked {
            path: rel.to_owned(),
            glob,
            explicit,
            acked: view.as_ref().map_or(0, |v| v.end().next),
            incarnation: view.map(|v| v.incarnation.to_string()).unwrap_or_default(),
        }
    }

    /// Removes an explicit link (a glob link of the stream stays).
    pub async fn remove_stream(&self, key: &Key, rel: &str) -> Result<(), Error> {
        self.with(key, async |slot, sub| {
            if !sub.links.get(rel).is_some_and(|l| l.explicit) {
                return Ok(());
            }
            let event = Event::Unlinked {
                path: rel.to_owned(),
                glob: false,
                explicit: true,
            };
            self.log(key, slot, &[event]).await?;
            let gone = slot
                .state
                .lock()
                .as_ref()
                .is_some_and(|s| !s.links.contains_key(rel));
            if gone {
                self.unindex_links(key, std::iter::once(&rel.to_owned()));
            }
            Ok(())
        })
        .await
    }

    /// The token's claims, if it is this subscription's.
    fn claims(&self, key: &Key, bearer: Option<&str>) -> Result<Claims, Error> {
        let claims = token::check(&self.keys, bearer.ok_or(Error::TokenInvalid)?, self.now())
            .map_err(|e| match e {
                TokenError::Invalid => Error::TokenInvalid,
                TokenError::Expired => Error::TokenExpired,
            })?;
        if claims.root != key.0 || claims.id != key.1 {
            return Err(Error::TokenInvalid);
        }
        Ok(claims)
    }

    /// A webhook's callback or a pull-wake's ack: answers `next_wake`.
    pub async fn acknowledge(
        &self,
        key: &Key,
        bearer: Option<&str>,
        body: &[u8],
    ) -> Result<bool, Error> {
        let claims = self.claims(key, bearer)?;
        let b: AckBody = parse(body)?;
        let acks = b
            .acks
            .into_iter()
            .map(|a| {
                let stream = a
                    .stream
                    .or(a.path)
                    .ok_or_else(|| Error::Invalid("an ack names its stream".into()))?;
                let offset = Offset::parse(&a.offset).ok_or_else(|| {
                    Error::BadAck(format!("{:?} is not an offset of this server", a.offset))
                })?;
                Ok(Ack {
                    stream,
                    offset: offset.0,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        // An offset past the tail known here may be one the worker read
        // from a stream's owner before this origin's replica has it.
        if acks
            .iter()
            .any(|a| self.tail_of(&key.0, &a.stream).is_none_or(|t| a.offset > t))
        {
            self.catalog.settle().await?;
        }
        let next = self
            .with(key, async |slot, sub| {
                if claims.generation != b.generation || claims.wake_id != b.wake_id {
                    return Err(Error::Fenced);
                }
                let (events, next) =
                    sub.acknowledge(self.now(), b.generation, &b.wake_id, &acks, b.done, |rel| {
                        self.tail_of(&key.0, rel)
                    })?;
                self.log(key, slot, &events).await?;
                Ok(next)
            })
            .await?;
        if b.done {
            self.mark(key.clone());
        }
        Ok(next)
    }

    /// A worker lets its claim go.
    pub async fn release(&self, key: &Key, bearer: Option<&str>, body: &[u8]) -> Result<(), Error> {
        let claims = self.claims(key, bearer)?;
        let b: ReleaseBody = parse(body)?;
        self.with(key, async |slot, sub| {
            if claims.generation != b.generation || claims.wake_id != b.wake_id {
                return Err(Error::Fenced);
            }
            let e = sub.release(b.generation, &b.wake_id)?;
            self.log(key, slot, &[e]).await
        })
        .await?;
        self.mark(key.clone());
        Ok(())
    }

    /// A worker's claim of a pull-wake subscription: the answer's JSON.
    /// Nothing pending as far as the catalog knows is looked at again once
    /// it settled: the worker may claim right after an append that a
    /// region's replica does not hold yet.
    pub async fn claim(&self, key: &Key, body: &[u8]) -> Result<serde_json::Value, Error> {
        let ClaimBody { worker } = parse(body)?;
        if worker.is_empty() || worker.len() > config::MAX_ID {
            return Err(Error::Invalid("worker is 1 to 128 bytes".into()));
        }
        match self.claim_now(key, &worker).await {
            Err(Error::NoPendingWork) => {
                self.catalog.settle().await?;
                self.claim_now(key, &worker).await
            }
            answer => answer,
        }
    }

    async fn claim_now(&self, key: &Key, worker: &str) -> Result<serde_json::Value, Error> {
        self.with(key, async |slot, sub| {
            if sub.config.is_webhook() {
                return Err(Error::Invalid(
                    "a webhook subscription is not claimed".into(),
                ));
            }
            let now = self.now();
            let tail = |rel: &str| self.tail_of(&key.0, rel);
            let events = sub.claim(now, worker, new_wake_id, tail)?;
            self.log(key, slot, &events).await?;
            let after = slot.state.lock().clone().ok_or(Error::NotFound)?;
            let wake = after.wake.clone().ok_or(Error::NoPendingWork)?;
            let token = token::for_wake(&self.keys, key, wake.generation, &wake.id, now);
            let reports = after.report(tail);
            Ok(serde_json::json!({
                "wake_id": wake.id,
                "generation": wake.generation,
                "token": token,
                "streams": render::wake_streams(&reports),
                "lease_ttl_ms": after.config.lease_ttl_ms,
            }))
        })
        .await
    }

    /// The signing keys' JWK Set.
    pub fn jwks(&self) -> serde_json::Value {
        self.keys.jwks()
    }

    /// The root-relative paths a declaration may reach, to check access
    /// against: each named stream and the wake stream (exact paths), and
    /// the pattern's literal prefix (`true`: every stream under it).
    pub fn reach(body: &[u8]) -> Vec<(String, bool)> {
        let Ok(config) = Config::parse(body, usize::MAX) else {
            return Vec::new();
        };
        let mut reach: Vec<(String, bool)> =
            config.streams.iter().map(|s| (s.clone(), false)).collect();
        if let Some(glob) = config.glob() {
            reach.push((glob.prefix().0, true));
        }
        if let config::Delivery::PullWake { wake_stream } = &config.delivery {
            reach.push((wake_stream.clone(), false));
        }
        reach
    }
}
