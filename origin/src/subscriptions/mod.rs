//! Subscriptions and webhooks (protocol §6–7), the shell around
//! `core::subscription`: the table of subscriptions, their journal
//! ([`journal`]), what wakes them (the store's appends and creates, and
//! time), and what they send (signed webhooks, pull-wake events).
//!
//! Every change to a subscription runs under its slot's lock: decide with
//! the pure state, log the events, apply them, answer. So changes to one
//! subscription are serial and durable before anyone sees them, while
//! subscriptions go on independently: a receiver that hangs holds its own
//! subscription's one delivery, never another's, nor any append.
//!
//! Per subscription, memory holds its state (configuration, one link per
//! linked stream, the wake in flight), an entry in the links index per
//! linked stream, and at most one delivery task. Every count a request can
//! grow is bounded in [`SubscriptionsConfig`].

pub(crate) mod catalog;
pub(crate) mod deliver;
pub(crate) mod engine;
pub(crate) mod flags;
pub(crate) mod guard;
pub(crate) mod journal;
pub(crate) mod keys;
pub(crate) mod operations;
pub(crate) mod render;
mod table;
pub(crate) mod token;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::{Notify, Semaphore};

use crate::core::subscription::address::UrlPolicy;
use crate::core::subscription::deadlines::Deadlines;
use crate::core::subscription::glob::Glob;
use crate::core::subscription::patterns::Patterns;
use crate::core::subscription::state::{Refusal, Subscription};
use crate::core::Millis;
use crate::store::{Store, StoreError};

/// The bounds and timings of subscriptions, one place for all of them.
#[derive(Clone, Debug)]
pub struct SubscriptionsConfig {
    /// Subscriptions on this server; one more answers 409
    /// `SUBSCRIPTION_LIMIT`.
    pub max_subscriptions: usize,
    /// Subscriptions of one account (the owner of the subscription's
    /// path); one more answers 409 `SUBSCRIPTION_LIMIT`.
    pub max_per_account: usize,
    /// Streams one subscription links (explicit and matched together): a
    /// declaration or addition past it answers 409 `SUBSCRIPTION_LIMIT`;
    /// a pattern's match past it is not linked (and logged).
    pub max_streams_per_subscription: usize,
    /// Links of all subscriptions together (each costs an index entry and
    /// its place in its subscription's state): as above at the limit.
    pub max_links: usize,
    /// Webhook deliveries in flight at once; a delivery past it waits for
    /// a slot (its subscription's wake waits with it).
    pub max_deliveries: usize,
    /// Deliveries in flight to one receiving host at once; past it, as
    /// above. The per-host table is as large as the hosts with a delivery
    /// in flight (at most `max_deliveries`).
    pub max_deliveries_per_host: usize,
    /// A delivery without a whole answer by then failed (and is retried).
    pub webhook_timeout: Duration,
    /// Bytes read of a receiver's answer; past them the answer counts as
    /// "taken, not done".
    pub webhook_answer_max: usize,
    /// Streams created or appended to that wait for the engine, at most;
    /// past it the engine forgets them and walks every stream instead.
    pub max_dirty: usize,
    /// Wake events one pull-wake wake writes (one per pending stream).
    pub max_wake_events: usize,
    /// How often leases and retries are checked.
    pub tick: Duration,
    /// Which webhook URLs may be called.
    pub url_policy: UrlPolicy,
    /// The server's public URL (`https://streams.example.com`), for
    /// callback and JWKS URLs; none: as each request reached the server
    /// (its `Host`, `X-Forwarded-Host`, `X-Forwarded-Proto`).
    pub public_url: Option<String>,
    /// The signing key is replaced after this long…
    pub key_rotation: Duration,
    /// …and a replaced key's public half stays published this long.
    pub key_retired_for: Duration,
    /// A new key is published this long before it signs: the JWK Set's
    /// cache lifetime (`max-age=300`), so no cached set lacks the signer.
    pub key_publish_ahead: Duration,
    /// The journal is rewritten past this many bytes.
    pub journal_compact_bytes: u64,
}

impl Default for SubscriptionsConfig {
    fn default() -> Self {
        SubscriptionsConfig {
            max_subscriptions: 10_000,
            max_per_account: 1_000,
            max_streams_per_subscription: 1_000,
            max_links: 1_000_000,
            max_deliveries: 1_024,
            max_deliveries_per_host: 64,
            webhook_timeout: Duration::from_secs(10),
            webhook_answer_max: 64 * 1024,
            max_dirty: 65_536,
            max_wake_events: 100,
            tick: Duration::from_millis(100),
            url_policy: UrlPolicy::default(),
            public_url: None,
            key_rotation: Duration::from_secs(30 * 24 * 3600),
            key_retired_for: Duration::from_secs(24 * 3600),
            key_publish_ahead: Duration::from_secs(300),
            journal_compact_bytes: 64 << 20,
        }
    }
}

/// A subscription's name: its stream root and id.
pub type Key = (String, String);

/// Why a subscription operation did not happen; `http::error` maps each
/// to its answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    UrlRejected(String),
    #[error("no such subscription")]
    NotFound,
    #[error("the subscription exists with another configuration")]
    Exists,
    #[error("{0}")]
    Limit(String),
    #[error("the token is not valid for this subscription")]
    TokenInvalid,
    #[error("the token expired")]
    TokenExpired,
    #[error("not the subscription's current generation and wake")]
    Fenced,
    #[error("another worker holds the subscription")]
    AlreadyClaimed { holder: String, generation: u64 },
    #[error("no linked stream has pending work")]
    NoPendingWork,
    #[error("{0}")]
    BadAck(String),
    #[error("the subscription journal: {0}")]
    Journal(String),
    /// This server keeps no subscriptions (a region without replicas).
    #[error("this server does not serve subscriptions")]
    Unserved,
    /// Not now: the subscriptions are being recovered (a region's
    /// partition 0 being claimed), or the region's replicas could not
    /// show everything acknowledged in time. Answered 503 + `Retry-After`.
    #[error("{0}")]
    Busy(&'static str),
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Fenced => Error::Fenced,
            Refusal::AlreadyClaimed { holder, generation } => {
                Error::AlreadyClaimed { holder, generation }
            }
            Refusal::BadAck(m) => Error::BadAck(m),
            Refusal::NothingPending => Error::NoPendingWork,
        }
    }
}

/// One subscription: the lock its changes run under, and its state (none
/// while being created, or once deleted).
pub struct Slot {
    op: Arc<tokio::sync::Mutex<()>>,
    state: Mutex<Option<Subscription>>,
    account: String,
}

impl Slot {
    /// Its lock, held by an owned guard.
    async fn op_owned(&self) -> tokio::sync::OwnedMutexGuard<()> {
        Arc::clone(&self.op).lock_owned().await
    }

    fn new(account: String) -> Slot {
        Slot {
            op: Arc::new(tokio::sync::Mutex::new(())),
            state: parking_lot::Mutex::new(None),
            account,
        }
    }
}

/// What the engine has yet to look at.
#[derive(Default)]
struct Dirty {
    /// Linked streams appended to (full paths; the engine finds their
    /// subscriptions, so the publishing thread only notes the path).
    paths: HashSet<Arc<str>>,
    /// Subscriptions to look at again.
    keys: HashSet<Key>,
    /// Streams created since (full paths), for the patterns.
    created: Vec<Arc<str>>,
    /// More came than `max_dirty`: walk everything.
    overflow: bool,
}

pub struct Subscriptions {
    pub config: SubscriptionsConfig,
    /// The store that keeps the journal (and the clock).
    store: Store,
    /// The streams subscriptions link: the same store on one origin,
    /// every partition's in a region.
    catalog: Arc<dyn catalog::Catalog>,
    pub keys: keys::Keys,
    journal: journal::Journal,
    table: RwLock<table::Table>,
    /// Full stream path → the subscriptions linking it.
    links: RwLock<HashMap<Arc<str>, Vec<Key>>>,
    /// `links`' size, read on every append (none: nothing to look up).
    linked: std::sync::atomic::AtomicUsize,
    /// Links of every subscription together (bounded by `max_links`).
    total_links: std::sync::atomic::AtomicUsize,
    /// The auth configuration's default prefix (whose streams are the
    /// default account's).
    default_prefix: String,
    /// Subscriptions with a pattern, by the path their streams lie under.
    patterns: RwLock<Patterns>,
    /// `patterns`' size, read on every create.
    patterned: std::sync::atomic::AtomicUsize,
    /// When each subscription is next due without a request.
    deadlines: Mutex<Deadlines>,
    dirty: Mutex<Dirty>,
    wake: Notify,
    client: reqwest13::Client,
    deliveries: Arc<Semaphore>,
    per_host: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Subscriptions with a delivery (or wake-event write) running.
    sending: Mutex<HashSet<Key>>,
    pub metrics: engine::Counters,
}

fn now_ms(store: &Store) -> Millis {
    store.clock().now_ms()
}

impl Subscriptions {
    /// Recovers the subscriptions from the journal in `store`, with the
    /// signing keys in `keys_dir` (none: in the journal, as a region keeps
    /// them). The caller has the stores of `catalog` tell them of creates
    /// and appends (`Store::observe`, or a [`catalog::Relay`]).
    pub async fn open(
        store: Store,
        catalog: Arc<dyn catalog::Catalog>,
        keys_dir: Option<&std::path::Path>,
        config: SubscriptionsConfig,
        default_prefix: String,
    ) -> Result<Arc<Subscriptions>, Error> {
        let ahead = u64::try_from(config.key_publish_ahead.as_millis()).unwrap_or(u64::MAX);
        let (journal, recovered) = journal::Journal::open(store.clone()).await?;
        let keys_failed = |e: std::io::Error| Error::Journal(format!("the signing keys: {e}"));
        let keys = match keys_dir {
            Some(dir) => keys::Keys::open(dir, now_ms(&store), ahead).map_err(keys_failed)?,
            None => {
                let (keys, made) = keys::Keys::from_state(recovered.keys, now_ms(&store), ahead)
                    .map_err(keys_failed)?;
                if let Some(made) = made {
                    journal.keys(&made).await?;
                }
                keys
            }
        };
        let client = reqwest13::Client::builder()
            .dns_resolver(Arc::new(guard::GuardedResolver {
                policy: Arc::new(config.url_policy.clone()),
            }))
            .redirect(reqwest13::redirect::Policy::none())
            .no_proxy()
            .timeout(config.webhook_timeout)
            .connect_timeout(config.webhook_timeout)
            .pool_max_idle_per_host(config.max_deliveries_per_host)
            .build()
            .map_err(|e| Error::Journal(format!("the webhook client: {e}")))?;
        let subs = Arc::new(Subscriptions {
            deliveries: Arc::new(Semaphore::new(config.max_deliveries.max(1))),
            config,
            store: store.clone(),
            catalog,
            keys,
            journal,
            table: RwLock::default(),
            links: RwLock::default(),
            linked: std::sync::atomic::AtomicUsize::new(0),
            total_links: std::sync::atomic::AtomicUsize::new(0),
            default_prefix,
            patterned: std::sync::atomic::AtomicUsize::new(0),
            patterns: RwLock::default(),
            deadlines: Mutex::default(),
            dirty: Mutex::default(),
            wake: Notify::new(),
            client,
            per_host: Mutex::default(),
            sending: Mutex::default(),
            metrics: engine::Counters::default(),
        });
        for (root, id, sub) in recovered.subscriptions {
            subs.total_links.fetch_add(sub.links.len(), Relaxed);
            let account = account_of(&root, &subs.default_prefix);
            let key = (root.clone(), id.clone());
            subs.index(&key, &sub);
            subs.deadlines.lock().set(&key, sub.due_at());
            let slot = Slot::new(account);
            *slot.state.lock() = Some(sub);
            subs.table.write().insert((root, id), Arc::new(slot));
        }
        // Everything recovered is looked at once: a wake that was in
        // flight is sent again, streams created while down are matched.
        subs.dirty.lock().overflow = true;
        Ok(subs)
    }

    /// Has the engine look at every stream and subscription again, as
    /// after a restart: what it was not told of (a store it did not
    /// watch yet) is found so, at least once.
    pub fn look_again(&self) {
        self.dirty.lock().overflow = true;
        self.wake.notify_one();
    }

    /// Whether `more` links fit under `max_links`.
    fn links_fit(&self, more: usize) -> Result<(), Error> {
        let now = self.total_links.load(Relaxed);
        if now.saturating_add(more) > self.config.max_links {
            return Err(Error::Limit(format!(
                "this server holds {now} links of subscriptions to streams, and at most {}",
                self.config.max_links
            )));
        }
        Ok(())
    }

    /// How many subscriptions this server holds.
    pub fn count(&self) -> usize {
        self.table.read().len()
    }

    /// The full path of a root-relative stream path.
    pub fn full_path(root: &str, rel: &str) -> String {
        format!("{root}/{rel}")
    }

    /// The tail of a root-relative stream, if it exists.
    fn tail_of(&self, root: &str, rel: &str) -> Option<u64> {
        self.catalog
            .get(&Self::full_path(root, rel))
            .map(|v| v.end().next)
    }

    fn slot(&self, key: &Key) -> Option<Arc<Slot>> {
        self.table.read().get(key).cloned()
    }

    /// Adds a subscription's links and pattern to the indexes.
    fn index(&self, key: &Key, sub: &Subscription) {
        self.index_links(key, sub.links.keys());
        if let Some(glob) = sub.config.glob() {
            self.add_pattern(key, glob);
        }
    }

    /// Adds links of a subscription to the links index.
    fn index_links<'a>(&self, key: &Key, rels: impl Iterator<Item = &'a String>) {
        let mut links = self.links.write();
        for rel in rels {
            let full: Arc<str> = Self::full_path(&key.0, rel).into();
            let keys = links.entry(full).or_default();
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        self.linked.store(links.len(), Relaxed);
    }

    fn add_pattern(&self, key: &Key, glob: Glob) {
        let mut patterns = self.patterns.write();
        patterns.insert(key, glob);
        self.patterned.store(patterns.len(), Relaxed);
    }

    fn remove_pattern(&self, key: &Key, glob: Option<Glob>) {
        let Some(glob) = glob else { return };
        let mut patterns = self.patterns.write();
        patterns.remove(key, &glob);
        self.patterned.store(patterns.len(), Relaxed);
    }

    /// The streams under `root` that `glob` may match: those at or under
    /// its literal prefix, found in the store's ordered index without
    /// walking the rest of the root.
    fn streams_for(&self, root: &str, glob: &Glob) -> Vec<Arc<crate::store::StreamView>> {
        let (literal, _) = glob.prefix();
        if literal.is_empty() {
            return self.catalog.streams_under(&format!("{root}/"));
        }
        let at = format!("{root}/{literal}");
        let mut found: Vec<_> = self.catalog.get(&at).into_iter().collect();
        found.extend(self.catalog.streams_under(&format!("{at}/")));
        found
    }

    /// Removes a link (or the whole subscription's) from the indexes.
    fn unindex_links<'a>(&self, key: &Key, rels: impl Iterator<Item = &'a String>) {
        let mut links = self.links.write();
        for rel in rels {
            let full = Self::full_path(&key.0, rel);
            if let Some(keys) = links.get_mut(full.as_str()) {
                keys.retain(|k| k != key);
                if keys.is_empty() {
                    links.remove(full.as_str());
                }
            }
        }
        self.linked
            .store(links.len(), std::sync::atomic::Ordering::Relaxed);
    }

    fn unindex(&self, key: &Key, sub: &Subscription) {
        self.unindex_links(key, sub.links.keys());
        self.remove_pattern(key, sub.config.glob());
    }

    /// Logs `events` for the subscription in `slot` and applies them (the
    /// caller holds the slot's lock).
    async fn log(
        &self,
        key: &Key,
        slot: &Slot,
        events: &[crate::core::subscription::state::Event],
    ) -> Result<(), Error> {
        if events.is_empty() {
            return Ok(());
        }
        self.journal
            .append(&key.0, &key.1, events, || {
                let mut state = slot.state.lock();
                let sub = state.get_or_insert_with(Subscription::unborn);
                let before = if sub.deleted { 0 } else { sub.links.len() };
                sub.apply_all(events);
                self.deadlines.lock().set(key, sub.due_at());
                let after = if sub.deleted { 0 } else { sub.links.len() };
                self.total_links
                    .fetch_add(after.wrapping_sub(before), Relaxed);
            })
            .await?;
        Ok(())
    }

    /// Has the engine look at a subscription now.
    fn mark(&self, key: Key) {
        self.note(key);
        self.wake.notify_one();
    }

    /// Has the engine look at a subscription at its next turn (a change
    /// that failed is tried again then, not in a tight loop).
    fn note(&self, key: Key) {
        let mut dirty = self.dirty.lock();
        if dirty.keys.len() >= self.config.max_dirty {
            dirty.overflow = true;
        } else {
            dirty.keys.insert(key);
        }
    }
}

/// A plain append of `len` bytes to `view` (no producer, no sequence):
/// what the journal and the wake streams are given.
fn plain_append(view: &crate::store::StreamView, len: usize) -> crate::core::stream::AppendRequest {
    crate::core::stream::AppendRequest {
        content_type: Some(view.config.content_type.to_string()),
        payload_len: len as u64,
        producer: None,
        stream_seq: None,
        close: false,
    }
}

/// The account a subscription under `root` belongs to (for its bound).
fn account_of(root: &str, default_prefix: &str) -> String {
    shared::auth::owner(
        &format!("{root}/{}", shared::paths::CONTROL_SEGMENT),
        default_prefix,
    )
    .account
    .to_owned()
}

impl crate::store::publisher::Observer for Subscriptions {
    fn created(&self, path: &Arc<str>) {
        use std::sync::atomic::Ordering::Relaxed;
        let linked = || self.linked.load(Relaxed) > 0 && self.links.read().contains_key(path);
        if self.patterned.load(Relaxed) == 0 && !linked() {
            return;
        }
        let mut dirty = self.dirty.lock();
        if dirty.created.len() >= self.config.max_dirty {
            dirty.overflow = true;
        } else {
            dirty.created.push(Arc::clone(path));
        }
        drop(dirty);
        self.wake.notify_one();
    }

    fn appended(&self, path: &Arc<str>) {
        if self.linked.load(std::sync::atomic::Ordering::Relaxed) == 0
            || !self.links.read().contains_key(path)
        {
            return;
        }
        let mut dirty = self.dirty.lock();
        if dirty.paths.len() >= self.config.max_dirty {
            dirty.overflow = true;
        } else if !dirty.paths.contains(path) {
            dirty.paths.insert(Arc::clone(path));
        }
        drop(dirty);
        self.wake.notify_one();
    }
}
