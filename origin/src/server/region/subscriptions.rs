//! Subscriptions in a region (decision 0024, "In a region"). The owner of
//! partition 0 runs them: every control path (`{root}/__ds/…`) is in
//! partition 0, so its requests reach that owner from any origin (served
//! or forwarded like any other), and their journal is a stream of
//! partition 0's store, so it is in the bucket and moves with the
//! partition: whoever claims partition 0 next (a hand-off, or a takeover
//! after `kill -9`) recovers every subscription, its acked offsets, the
//! wake in flight and the signing keys (kept in the journal too), and
//! sends again what was not sent.
//!
//! The subscriptions see each partition through this origin's own store
//! where it owns the partition and its replica of it where it follows
//! ([`RegionCatalog`]); every such store tells them of its creates and
//! appends through the origin's [`Relay`]. A stream of another partition
//! therefore wakes its subscriptions a replica round after its append
//! (`--region-replica-interval`), and the wake stream of a pull-wake
//! subscription in another partition is appended to through its owner.
//!
//! A region with `--region-replicas false` has no view of the partitions
//! it follows: there the subscriptions are not served (`404
//! SUBSCRIPTION_NOT_FOUND`, "this server does not serve subscriptions").

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::http::{HeaderValue, Method};
use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::{across, Current, RegionOrigin};
use crate::http::Shared;
use crate::store::StreamView;
use crate::subscriptions::catalog::Catalog;
use crate::subscriptions::{Error, Subscriptions};

/// How long a declaration, an addition or an ack past the known tail
/// waits for the replicas to show everything acknowledged before it
/// (a round of each, `--region-replica-interval` apart); past it, `503` +
/// `Retry-After`.
pub const SETTLE_WAIT: Duration = Duration::from_secs(5);

/// Every partition as the origin running the subscriptions sees it.
pub(super) struct RegionCatalog {
    origin: Weak<RegionOrigin>,
}

impl RegionOrigin {
    /// What answers for partition `p` here: this origin's store while it
    /// serves `p`, else its replica's (if one is open).
    fn seen(&self, p: u32) -> Option<Shared> {
        match self.current(p) {
            Current::Serving { state, .. } => Some(state),
            _ => self.replica_state(p),
        }
    }

    /// Opens the subscriptions on partition 0's store, just claimed here,
    /// and runs them until that store stops (a release, a step down, the
    /// origin's stop). A failed recovery is tried again meanwhile; until
    /// one succeeds their requests answer `503` + `Retry-After`.
    pub(super) fn start_subscriptions(self: &Arc<Self>) {
        if !self.store.region.replicas {
            return;
        }
        let Current::Serving { state, .. } = self.current(0) else {
            return;
        };
        state.subscriptions_opening.store(true, Ordering::Release);
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let mut closing = state.closing.subscribe();
            let mut failures = 0u32;
            loop {
                let catalog = Arc::new(RegionCatalog {
                    origin: Arc::downgrade(&me),
                });
                let opened = Subscriptions::open(
                    state.store.clone(),
                    catalog,
                    None,
                    state.config.subscriptions.clone(),
                    state.config.auth.default_prefix.clone(),
                )
                .await;
                match opened {
                    Ok(subs) => {
                        tracing::info!(
                            subscriptions = subs.count(),
                            "running the region's subscriptions"
                        );
                        me.relay.serve(&subs);
                        let _ = state.subscriptions.set(Arc::clone(&subs));
                        state.subscriptions_opening.store(false, Ordering::Release);
                        subs.run(closing).await;
                        return;
                    }
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        tracing::warn!(error = %e, "could not recover the region's subscriptions; trying again");
                        let wait = Duration::from_millis(250)
                            .saturating_mul(1 << failures.min(7))
                            .min(Duration::from_secs(30));
                        tokio::select! {
                            () = tokio::time::sleep(wait) => {}
                            _ = closing.wait_for(|c| *c) => return,
                        }
                    }
                }
            }
        });
    }
}

impl Catalog for RegionCatalog {
    fn get(&self, path: &str) -> Option<Arc<StreamView>> {
        let me = self.origin.upgrade()?;
        let p = shared::partition::of_stream(path, me.partitions);
        me.seen(p)?.store.get(path)
    }

    fn streams_under(&self, prefix: &str) -> Vec<Arc<StreamView>> {
        let Some(me) = self.origin.upgrade() else {
            return Vec::new();
        };
        let mut all: Vec<Arc<StreamView>> = (0..me.partitions)
            .filter_map(|p| me.seen(p))
            .flat_map(|s| s.store.streams_under(prefix))
            .collect();
        all.sort_by(|a, b| a.path.cmp(&b.path));
        all
    }

    /// Through this origin's router: its own store, or the owner's.
    fn append(&self, path: String, payload: Bytes) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let me = self
                .origin
                .upgrade()
                .ok_or_else(|| "this origin is stopping".to_owned())?;
            let view = self
                .get(&path)
                .ok_or_else(|| "it does not exist".to_owned())?;
            let mut req = across::peer(&me, Method::POST, &path);
            // A JSON stream takes its messages as one array (each line a
            // message); any other stream the lines as they are.
            let body = if view.is_json() {
                let lines: Vec<&[u8]> = payload
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .collect();
                let mut array = b"[".to_vec();
                array.extend(lines.join(&b","[..]));
                array.push(b']');
                Bytes::from(array)
            } else {
                payload
            };
            if let Ok(v) = HeaderValue::from_str(&view.config.content_type) {
                req.headers_mut()
                    .insert(axum::http::header::CONTENT_TYPE, v);
            }
            *req.body_mut() = axum::body::Body::from(body);
            let answer = across::send(&me, req).await;
            if answer.status().is_success() {
                Ok(())
            } else {
                Err(format!("its owner answered {}", answer.status()))
            }
        })
    }

    /// Waits until every partition followed here has a replica round that
    /// began after this call and read all its owner had acknowledged (the
    /// partitions served here are exact already).
    fn settle(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let me = self
                .origin
                .upgrade()
                .ok_or(Error::Busy("this origin is stopping; retry shortly"))?;
            let since = Instant::now();
            let deadline = since + SETTLE_WAIT;
            let behind = Error::Busy(
                "the region's replicas could not show every acknowledged append in time; retry shortly",
            );
            // Every replica is asked for a round with a look now, so the
            // waits overlap (an idle one otherwise looks every few seconds).
            for p in 0..me.partitions {
                let _ = me.replica_progress(p, true);
            }
            for p in 0..me.partitions {
                loop {
                    if matches!(me.current(p), Current::Serving { .. }) {
                        break;
                    }
                    let Some((caught_up, mut changed)) = me.replica_progress(p, false) else {
                        return Err(behind);
                    };
                    if caught_up.is_some_and(|c| c >= since) {
                        break;
                    }
                    tokio::select! {
                        r = changed.changed() => if r.is_err() { return Err(behind) },
                        () = tokio::time::sleep_until(deadline) => return Err(behind),
                    }
                }
            }
            Ok(())
        })
    }
}
