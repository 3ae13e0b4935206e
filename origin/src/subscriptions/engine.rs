//! What moves subscriptions without a request: appends and creates on
//! linked or matching streams (noted by the store's publisher, see
//! `Observer`), leases that run out and retries that come due (a sweep
//! every `tick`), and sending each wake: a webhook delivery, or a
//! pull-wake's events appended to its wake stream.
//!
//! One engine task looks at what changed; each send runs as its own task,
//! at most one per subscription (`sending`), under the bounds on
//! deliveries in flight in total and per receiving host. A send's outcome
//! comes back as the subscription's next event (done: acked; taken: the
//! lease runs; failed: a retry, backing off), and the subscription is
//! looked at again, so pending work that arrived meanwhile wakes it anew.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::deliver::{deliver, Outcome};
use super::token;
use super::{render, Key, Subscriptions};
use crate::core::subscription::config::Delivery;
use crate::core::subscription::state::{Event, Subscription, Wake};

/// What the engine did, for `/metrics`.
#[derive(Default)]
pub struct Counters {
    pub wakes: AtomicU64,
    pub deliveries: AtomicU64,
    pub delivery_failures: AtomicU64,
    pub wake_events: AtomicU64,
    pub acks: AtomicU64,
}

/// Subscriptions the engine looks at at once.
const CONCURRENT: usize = 256;

impl Counters {
    /// The counters and the subscription count as Prometheus families.
    pub fn expose(&self, subscriptions: usize, e: &mut shell::metrics::Exposition) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        e.gauge(
            "ds_origin_subscriptions",
            "Subscriptions on this origin.",
            subscriptions as f64,
        )
        .counter(
            "ds_origin_subscription_wakes_total",
            "Wakes issued (new generations).",
            get(&self.wakes),
        )
        .counter(
            "ds_origin_webhook_deliveries_total",
            "Webhook deliveries attempted.",
            get(&self.deliveries),
        )
        .counter(
            "ds_origin_webhook_delivery_failures_total",
            "Webhook deliveries (and wake-event writes) that failed and are retried.",
            get(&self.delivery_failures),
        )
        .counter(
            "ds_origin_subscription_wake_events_total",
            "Pull-wake events written to wake streams.",
            get(&self.wake_events),
        )
        .counter(
            "ds_origin_webhook_done_total",
            "Webhook deliveries answered done (snapshot acked).",
            get(&self.acks),
        );
    }
}

/// A fresh wake id: 128 random bits.
pub fn new_wake_id() -> String {
    format!("w_{:032x}", rand::random::<u128>())
}

impl Subscriptions {
    /// Runs until `closing` turns true.
    pub async fn run(self: Arc<Self>, mut closing: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.config.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closed = std::pin::pin!(async move {
            let _ = closing.wait_for(|c| *c).await;
        });
        loop {
            tokio::select! {
                () = self.wake.notified() => {}
                _ = tick.tick() => self.sweep().await,
                () = &mut closed => return,
            }
            self.drain().await;
        }
    }

    /// Looks at what the store's publisher noted.
    async fn drain(self: &Arc<Self>) {
        let dirty = std::mem::take(&mut *self.dirty.lock());
        let mut keys: Vec<Key> = dirty.keys.into_iter().collect();
        if dirty.overflow {
            self.match_existing().await;
            keys = self.table.read().keys().cloned().collect();
        } else {
            {
                let links = self.links.read();
                for path in &dirty.paths {
                    keys.extend(links.get(path).into_iter().flatten().cloned());
                }
            }
            for path in dirty.created {
                keys.extend(self.match_created(&path).await);
            }
        }
        keys.sort();
        keys.dedup();
        self.evaluate_all(keys).await;
    }

    /// Looks at each subscription, [`CONCURRENT`] at a time: each may log
    /// (one durable append), and the store commits concurrent appends
    /// together, so a thousand wakes cost a few commits, not a thousand.
    async fn evaluate_all(self: &Arc<Self>, keys: Vec<Key>) {
        use futures::StreamExt;
        futures::stream::iter(keys)
            .for_each_concurrent(CONCURRENT, |key| async move { self.evaluate(&key).await })
            .await;
    }

    /// Leases and retries that came due (the deadlines' due ones only),
    /// key rotation, the journal's size.
    async fn sweep(self: &Arc<Self>) {
        let now = self.now();
        let due = self.deadlines.lock().due(now);
        // A wake whose send is running waits for its outcome, not a tick.
        let due = {
            let sending = self.sending.lock();
            due.into_iter().filter(|k| !sending.contains(k)).collect()
        };
        self.evaluate_all(due).await;
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        if let Err(e) = self
            .rotate(
                now,
                ms(self.config.key_rotation),
                ms(self.config.key_retired_for),
            )
            .await
        {
            tracing::warn!(error = %e, "the webhook signing keys could not be rotated; the current key signs on");
        }
        if self
            .journal
            .rewrite_due(self.config.journal_compact_bytes)
            .await
        {
            let table = &self.table;
            let keys = self.keys.in_journal().then(|| self.keys.state());
            let rewritten = self
                .journal
                .rewrite(keys, || {
                    table
                        .read()
                        .iter()
                        .filter_map(|((root, id), slot)| {
                            let s = slot.state.lock().clone()?;
                            (!s.deleted).then(|| (root.clone(), id.clone(), s))
                        })
                        .collect()
                })
                .await;
            if let Err(e) = rewritten {
                tracing::warn!(error = %e, "the subscription journal could not be rewritten; it goes on growing");
            }
        }
    }

    /// Rotates the signing keys if due: the new state kept (its file, or
    /// the journal) before any key of it is published or signs.
    async fn rotate(&self, now: u64, every: u64, retired_for: u64) -> Result<(), super::Error> {
        let io = |e: std::io::Error| super::Error::Journal(e.to_string());
        let Some(next) = self.keys.rotation(now, every, retired_for).map_err(io)? else {
            return Ok(());
        };
        if self.keys.in_journal() {
            self.journal.keys(&next).await?;
        }
        self.keys.install(next).map_err(io)
    }

    pub(super) fn now(&self) -> u64 {
        super::now_ms(&self.store)
    }

    /// Links a new stream to the subscriptions that name it or whose
    /// pattern matches it, from its first byte: a stream created after a
    /// subscription is pending from its start. Answers the subscriptions.
    async fn match_created(self: &Arc<Self>, path: &str) -> Vec<Key> {
        let Some(view) = self.catalog.get(path) else {
            return Vec::new();
        };
        let mut wanted: Vec<(Key, String, bool)> = self
            .patterns
            .read()
            .matching(path)
            .into_iter()
            .map(|(key, rel)| (key, rel, true))
            .collect();
        if let Some(keys) = self.links.read().get(path) {
            for key in keys {
                if let Some(rel) = path
                    .strip_prefix(key.0.as_str())
                    .and_then(|r| r.strip_prefix('/'))
                {
                    wanted.push((key.clone(), rel.to_owned(), false));
                }
            }
        }
        let mut touched = Vec::new();
        for (key, rel, glob) in wanted {
            if self
                .link_incarnation(&key, &rel, glob, &view.incarnation, view.restored_from())
                .await
            {
                touched.push(key);
            }
        }
        touched
    }

    /// Links `rel`, an existing stream of `incarnation`: from its start if
    /// the subscription did not follow it (a new stream, or one created
    /// again at that path), and as it is if it does already (a late or
    /// repeated notice changes nothing).
    /// A stream a rollback made (`restored`: the incarnation it replaced
    /// and the point) keeps its link to the one it replaced, its
    /// acknowledged offset pulled back to the point when past it: the one
    /// place an ack moves back, since those bytes are no longer the
    /// stream's.
    async fn link_incarnation(
        &self,
        key: &Key,
        rel: &str,
        glob: bool,
        incarnation: &str,
        restored: Option<(&str, u64)>,
    ) -> bool {
        let Some(slot) = self.slot(key) else {
            return false;
        };
        let _op = slot.op.lock().await;
        let Some(sub) = slot.state.lock().clone() else {
            return false;
        };
        if sub.deleted || !sub.config.may_link(rel) {
            return false;
        }
        let linked = |glob: bool, explicit: bool, acked: u64| Event::Linked {
            path: rel.to_owned(),
            glob,
            explicit,
            acked,
            incarnation: incarnation.to_owned(),
        };
        let events = match sub.links.get(rel) {
            Some(link) if link.incarnation == incarnation => {
                if link.glob || !glob {
                    return true;
                }
                vec![linked(true, false, link.acked)]
            }
            // Linked before the stream existed (at 0): now it is known.
            Some(link) if link.incarnation.is_empty() => vec![linked(glob, false, link.acked)],
            Some(link) if restored.is_some_and(|(previous, _)| previous == link.incarnation) => {
                let at = restored.map_or(0, |(_, at)| at);
                vec![
                    Event::Unlinked {
                        path: rel.to_owned(),
                        glob: link.glob,
                        explicit: link.explicit,
                    },
                    linked(link.glob || glob, link.explicit, link.acked.min(at)),
                ]
            }
            Some(link) => vec![
                Event::Unlinked {
                    path: rel.to_owned(),
                    glob: link.glob,
                    explicit: link.explicit,
                },
                linked(link.glob || glob, link.explicit, 0),
            ],
            None if sub.links.len() >= self.config.max_streams_per_subscription
                || self.links_fit(1).is_err() =>
            {
                tracing::warn!(subscription = %key.1, stream = %rel, "a matching stream is not linked: the subscription links as many streams as it may");
                return false;
            }
            None => vec![linked(glob, false, 0)],
        };
        if let Err(e) = self.log(key, &slot, &events).await {
            tracing::warn!(error = %e, subscription = %key.1, "a new stream could not be linked");
            return false;
        }
        self.index_links(key, std::iter::once(&rel.to_owned()));
        true
    }

    /// After a restart or an overflow: every stream under a root with
    /// patterns is matched again (a stream already followed is left as
    /// it is; one the subscription does not follow is linked from its
    /// start: at least once).
    async fn match_existing(self: &Arc<Self>) {
        let roots: Vec<String> = self.patterns.read().roots().cloned().collect();
        for root in roots {
            for view in self.catalog.streams_under(&format!("{root}/")) {
                self.match_created(&view.path).await;
            }
        }
        // Named streams outside every pattern (one made again while the
        // notices were lost is followed from its start).
        let linked: Vec<Arc<str>> = self.links.read().keys().cloned().collect();
        for path in linked {
            self.match_created(&path).await;
        }
    }

    /// Ends a lease that ran out, wakes pending work, sends what is to
    /// be sent.
    pub(super) async fn evaluate(self: &Arc<Self>, key: &Key) {
        let Some(slot) = self.slot(key) else { return };
        let _op = slot.op.lock().await;
        let Some(sub) = slot.state.lock().clone() else {
            return;
        };
        if sub.deleted {
            return;
        }
        let now = self.now();
        let tail = |rel: &str| self.tail_of(&key.0, rel);
        let mut after = sub;
        let mut events = Vec::new();
        if let Some(e) = after.expire(now) {
            after.apply(&e);
            events.push(e);
        }
        if let Some(e) = after.wake_if_pending(now, new_wake_id, tail) {
            after.apply(&e);
            events.push(e);
            self.metrics.wakes.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(e) = self.log(key, &slot, &events).await {
            tracing::warn!(error = %e, subscription = %key.1, "a subscription's wake could not be logged; it is tried again");
            self.note(key.clone());
            return;
        }
        let Some(wake) = after.to_send(now).cloned() else {
            return;
        };
        if !self.sending.lock().insert(key.clone()) {
            return;
        }
        let me = Arc::clone(self);
        let key = key.clone();
        tokio::spawn(async move {
            me.send(&key, after, wake).await;
            me.sending.lock().remove(&key);
            me.mark(key);
        });
    }

    /// Sends one wake and logs what became of it.
    async fn send(self: &Arc<Self>, key: &Key, sub: Subscription, wake: Wake) {
        let outcome = match &sub.config.delivery {
            Delivery::Webhook { url } => self.post(key, &sub, &wake, url).await,
            Delivery::PullWake { wake_stream } => {
                self.announce(key, &sub, &wake, wake_stream).await
            }
        };
        let Some(slot) = self.slot(key) else { return };
        let _op = slot.op.lock().await;
        let Some(current) = slot.state.lock().clone() else {
            return;
        };
        let now = self.now();
        let events = match &outcome {
            Outcome::Done => current.delivered_done(wake.generation, &wake.id),
            Outcome::Taken => current.delivered(now, wake.generation, &wake.id),
            Outcome::Failed(why) => {
                self.metrics
                    .delivery_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(subscription = %key.1, generation = wake.generation, reason = %why, "a wake was not delivered; it is retried");
                let jitter = rand::random::<f64>() * 2.0 - 1.0;
                current
                    .delivery_failed(now, wake.generation, &wake.id, jitter)
                    .map(|e| vec![e])
            }
        };
        // Fenced: the wake ended meanwhile (deleted, expired); nothing to log.
        if let Ok(events) = events {
            if matches!(outcome, Outcome::Done) {
                self.metrics.acks.fetch_add(1, Ordering::Relaxed);
            }
            if let Err(e) = self.log(key, &slot, &events).await {
                tracing::warn!(error = %e, subscription = %key.1, "a delivery's outcome could not be logged; the wake is sent again");
                self.note(key.clone());
            }
        }
    }

    /// A webhook delivery, under the bounds on deliveries in flight.
    async fn post(&self, key: &Key, sub: &Subscription, wake: &Wake, url: &str) -> Outcome {
        // Checked again before each delivery: a literal address is not
        // resolved, so the resolver never sees it.
        let host = match self.config.url_policy.check(url) {
            Ok(callable) => callable.host,
            Err(why) => return Outcome::Failed(format!("the URL may not be called: {why}")),
        };
        // The host's permit first: deliveries waiting for a slow host hold
        // none of the slots other hosts' deliveries need.
        let per_host = {
            let mut table = self.per_host.lock();
            Arc::clone(table.entry(host.clone()).or_insert_with(|| {
                Arc::new(tokio::sync::Semaphore::new(
                    self.config.max_deliveries_per_host.max(1),
                ))
            }))
        };
        let permit = Arc::clone(&per_host).acquire_owned().await;
        let Ok(_total) = Arc::clone(&self.deliveries).acquire_owned().await else {
            return Outcome::Failed("the server is stopping".into());
        };
        let now = self.now();
        let base = self.base_of(sub);
        let token = token::for_wake(&self.keys, key, wake.generation, &wake.id, now);
        // The wake's streams as its snapshot saw them.
        let reports = sub.report(|p| wake.snapshot.get(p).copied());
        let body = render::webhook_body(&key.0, sub, wake, &reports, &base, &token);
        self.metrics.deliveries.fetch_add(1, Ordering::Relaxed);
        let outcome = deliver(
            &self.client,
            &self.keys,
            url,
            body,
            now,
            self.config.webhook_answer_max,
        )
        .await;
        drop(permit);
        // The host's entry goes once no delivery to it is in flight.
        let mut table = self.per_host.lock();
        if Arc::strong_count(&per_host) == 2 {
            table.remove(&host);
        }
        outcome
    }

    /// A pull-wake's events, one per pending stream (at most
    /// `max_wake_events`), appended to its wake stream.
    async fn announce(
        &self,
        key: &Key,
        sub: &Subscription,
        wake: &Wake,
        wake_stream: &str,
    ) -> Outcome {
        let full = Self::full_path(&key.0, wake_stream);
        let now = self.now();
        let events: Vec<serde_json::Value> = wake
            .snapshot
            .iter()
            .filter(|(p, t)| sub.links.get(*p).is_some_and(|l| **t > l.acked))
            .take(self.config.max_wake_events.max(1))
            .map(|(p, _)| {
                serde_json::json!({
                    "type": "wake", "subscription_id": sub.id, "stream": p,
                    "generation": wake.generation, "ts": now,
                })
            })
            .collect();
        // One JSON message a line: a JSON stream keeps its messages so
        // (`core::json`), and any other reads them as NDJSON.
        let mut payload = Vec::new();
        for e in &events {
            serde_json::to_writer(&mut payload, e).expect("wake events serialize");
            payload.push(b'\n');
        }
        match self.catalog.append(full, Bytes::from(payload)).await {
            Ok(()) => {
                self.metrics
                    .wake_events
                    .fetch_add(events.len() as u64, Ordering::Relaxed);
                Outcome::Taken
            }
            Err(e) => Outcome::Failed(format!(
                "the wake stream {wake_stream} refused the wake: {e}"
            )),
        }
    }

    /// The server's URL for a subscription's callback and JWKS URLs.
    pub(super) fn base_of(&self, sub: &Subscription) -> String {
        self.config
            .public_url
            .clone()
            .unwrap_or_else(|| sub.base.clone())
    }
}
