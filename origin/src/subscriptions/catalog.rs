//! The streams subscriptions follow, apart from the store that keeps their
//! journal: on one origin both are the same store; in a region the
//! streams are spread over partitions, and the origin that runs the
//! subscriptions (partition 0's owner) sees each partition through its own
//! store, where it owns the partition, or its replica of it (decision
//! 0024, "In a region").
//!
//! What a catalog answers may lag the streams' owners (a replica follows
//! its owner's commits a round behind). The engine only ever wakes later
//! for it: a link is pending when the stream's tail is past its ack, and a
//! lagging tail is reached at the next round. Where a lag would give a
//! wrong answer (a link made at a stream's tail, an ack past the tail the
//! catalog knows), the operation first [`Catalog::settle`]s: it waits
//! until the catalog holds everything acknowledged before it asked.
//!
//! [`Relay`] is how a region's many stores (each claim and each replica is
//! a store of its own, made and dropped as partitions move) tell whichever
//! subscriptions run now of their creates and appends.

use std::sync::{Arc, Weak};

use bytes::Bytes;
use futures::future::BoxFuture;
use parking_lot::RwLock;

use super::Subscriptions;
use crate::store::{AppendOutcome, Store, StreamView};

/// The streams as the subscriptions see them.
pub trait Catalog: Send + Sync + 'static {
    /// The stream at `path` (a full path), as far as this catalog knows.
    fn get(&self, path: &str) -> Option<Arc<StreamView>>;

    /// Every stream whose path starts with `prefix`, in path order.
    fn streams_under(&self, prefix: &str) -> Vec<Arc<StreamView>>;

    /// Appends `payload` to the stream at `path` as a plain append (a
    /// pull-wake's events); the error says why it was refused.
    fn append(&self, path: String, payload: Bytes) -> BoxFuture<'_, Result<(), String>>;

    /// Resolves once the catalog holds every append and create its owners
    /// acknowledged before the call; an error (answered `503` +
    /// `Retry-After`) when it cannot within its bound.
    fn settle(&self) -> BoxFuture<'_, Result<(), super::Error>>;
}

/// One origin: the store itself, exact at every moment.
impl Catalog for Store {
    fn get(&self, path: &str) -> Option<Arc<StreamView>> {
        Store::get(self, path)
    }

    fn streams_under(&self, prefix: &str) -> Vec<Arc<StreamView>> {
        Store::streams_under(self, prefix)
    }

    fn append(&self, path: String, payload: Bytes) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let Some(view) = Store::get(self, &path) else {
                return Err("it does not exist".to_owned());
            };
            let req = super::plain_append(&view, payload.len());
            match Store::append(self, view, None, req, payload).await {
                Ok(a) if matches!(a.outcome, AppendOutcome::Applied { .. }) => Ok(()),
                Ok(a) => Err(format!("{:?}", a.outcome)),
                Err(e) => Err(e.to_string()),
            }
        })
    }

    fn settle(&self) -> BoxFuture<'_, Result<(), super::Error>> {
        Box::pin(async { Ok(()) })
    }
}

/// Passes the creates and appends of every store it is given to the
/// subscriptions running now, if any; once per store, for the store's life.
#[derive(Default)]
pub struct Relay {
    target: RwLock<Option<Weak<Subscriptions>>>,
}

impl Relay {
    /// Whose subscriptions hear from now on.
    pub fn serve(&self, subscriptions: &Arc<Subscriptions>) {
        *self.target.write() = Some(Arc::downgrade(subscriptions));
    }

    /// Has the store at `store` tell this relay of what it publishes, and
    /// the subscriptions look at every stream again: whatever the store
    /// holds from before it was watched (a replica laid out, a partition
    /// claimed) was never told of.
    pub fn watch(self: &Arc<Self>, store: &Store) {
        let observer: Arc<dyn crate::store::publisher::Observer> = self.clone();
        store.observe(observer);
        if let Some(subs) = self.current() {
            subs.look_again();
        }
    }

    fn current(&self) -> Option<Arc<Subscriptions>> {
        self.target.read().as_ref()?.upgrade()
    }
}

impl crate::store::publisher::Observer for Relay {
    fn created(&self, path: &Arc<str>) {
        if let Some(subs) = self.current() {
            subs.created(path);
        }
    }

    fn appended(&self, path: &Arc<str>) {
        if let Some(subs) = self.current() {
            subs.appended(path);
        }
    }
}
