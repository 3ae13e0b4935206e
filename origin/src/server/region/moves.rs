//! A partition's moves on this origin: a claim started and served, the
//! owner followed, the partition released for the spread or stepped down
//! from, and the end of answers forwarded under a state left behind. Each
//! move changes the partition's `Current` and raises its generation.

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use futures::FutureExt;

use super::{remove_later, Claiming, Current, RegionOrigin};
use crate::http::Shared;
use crate::region::liveness::Released;

impl RegionOrigin {
    /// Starts a claim of partition `p`: a new store in a folder of its
    /// own, replayed from the bucket on a blocking thread.
    pub(super) fn claim(&self, p: u32) -> Claiming {
        self.step_down(p, Current::Joining);
        let n = self.incarnations.fetch_add(1, Relaxed) + 1;
        let dir = self.data.join("region").join(n.to_string());
        let mut config = self.partition_config(p, dir.clone());
        // The partition's feed has one name for every owner (the region's
        // peer key tells regions apart), so edges go on across a takeover.
        config.region.feed = self
            .peer_key
            .get()
            .map(|key| format!("feed-p{p}-{:016x}", shared::invalidation::stream_id(key)));
        debug_assert!(config.region.feed.is_some(), "claims wait for the peer key");
        // With one WAL per origin, the tenure goes in this origin's log.
        config.region.origin_wal = self.origin_log();
        // Its writer shares threads with the other partitions' (one WAL
        // per origin: their commits go to one log anyway).
        if config.region.origin_wal.is_some() {
            config.writers = Some(Arc::clone(&self.writers));
        }
        let no_log = self.one_wal() && config.region.origin_wal.is_none();
        tracing::info!(partition = p, folder = %dir.display(), "claiming the partition");
        let (keys, open) = (self.fetch_keys(), self.opener(config));
        let task = tokio::spawn(async move {
            if no_log {
                return Err(std::io::Error::other(
                    "the bucket is not open: no log to claim in",
                ));
            }
            keys.await?;
            tokio::task::spawn_blocking(open)
                .await
                .map_err(std::io::Error::other)?
        });
        (p, dir, task)
    }

    /// Serves what a claim of partition `p` opened; false if it failed.
    pub(super) fn claimed(
        &self,
        p: u32,
        dir: PathBuf,
        outcome: Result<std::io::Result<Shared>, tokio::task::JoinError>,
    ) -> bool {
        match outcome {
            Ok(Ok(state)) => {
                let epoch = state.store.epoch().unwrap_or(0);
                self.metrics.claims.fetch_add(1, Relaxed);
                tracing::info!(
                    partition = p,
                    epoch,
                    streams = state.store.stream_count(),
                    "serving the partition"
                );
                self.released.lock().retain(|(r, _)| r.partition != p);
                // This origin's own store answers from now on.
                self.drop_replica(p);
                self.relay.watch(&state.store);
                *self.parts[p as usize].current.write() = Current::Serving {
                    state,
                    epoch,
                    dir: dir.into(),
                };
                // If a newer claim came meanwhile, the next look sees it.
                if *self.closing.borrow() {
                    if let Current::Serving { state, .. } = self.current(p) {
                        let _ = state.closing.send(true);
                    }
                }
                true
            }
            Ok(Err(e)) => {
                self.metrics.claim_failures.fetch_add(1, Relaxed);
                tracing::warn!(partition = p, error = %e, "the claim did not make this origin the owner");
                remove_later(dir);
                false
            }
            Err(e) => {
                self.metrics.claim_failures.fetch_add(1, Relaxed);
                tracing::error!(partition = p, error = %e, "the claim's task failed");
                remove_later(dir);
                false
            }
        }
    }

    /// Forwards partition `p`'s requests to `url` from now on; a store
    /// this origin served (of an older epoch, fenced) stops in the background.
    pub(super) fn follow(self: &Arc<Self>, p: u32, url: String) {
        self.keep_replica(p);
        if matches!(&*self.parts[p as usize].current.read(), Current::Following { url: u } if **u == *url)
        {
            return;
        }
        tracing::info!(partition = p, owner = %url, "following the partition's owner");
        self.step_down(
            p,
            Current::Following {
                url: url.as_str().into(),
            },
        );
    }

    /// Lets go of partition `p` for the origin the spread gives it to: its
    /// store stops (what is in flight is settled first), and only then
    /// does the heartbeat list the release, so the next owner's claim
    /// rarely fences a commit in flight (and is safe if it does).
    pub(super) fn release(&self, p: u32) {
        let previous = self.leave(p, Current::Joining);
        let Current::Serving { state, dir, epoch } = previous else {
            return;
        };
        self.metrics.releases.fetch_add(1, Relaxed);
        tracing::info!(
            partition = p,
            epoch,
            "handing the partition to the origin the spread gives it to"
        );
        let _ = state.closing.send(true);
        let released = Released {
            partition: p,
            epoch,
        };
        self.released.lock().push((released, false));
        let list = Arc::clone(&self.released);
        let log = self.current_log();
        tokio::spawn(async move {
            state.store.shutdown().await;
            drop(state);
            // Every put of its commits settled: the release goes after them.
            Self::release_in_log(log, p).await;
            // Listed in the heartbeat from now on (unless already claimed
            // back, or taken by a newer claim).
            for (r, stopped) in list.lock().iter_mut() {
                if *r == released {
                    *stopped = true;
                }
            }
            remove_later(dir.to_path_buf());
        });
    }

    /// Moves partition `p` to `next`; a store this origin served stops in
    /// the background (its live reads end, its folder goes), and answers
    /// forwarded under the state left behind end.
    /// Moves partition `p` to `next` and returns the state it left; its
    /// generation moves on (answers forwarded under the old state end). A
    /// store's counts so far stay in `/metrics` (folded into `retired`
    /// under the scrape lock, so no scrape sees them twice or not at all;
    /// what its last commits add while it stops is not counted).
    pub(super) fn leave(&self, p: u32, next: Current) -> Current {
        let part = &self.parts[p as usize];
        let previous = {
            let _scrape = self.scrape.lock();
            let previous = std::mem::replace(&mut *part.current.write(), next);
            if let Current::Serving { state, .. } = &previous {
                self.retired.absorb(&state.metrics);
            }
            previous
        };
        part.generation.send_modify(|g| *g += 1);
        previous
    }

    pub(super) fn step_down(&self, p: u32, next: Current) {
        let previous = self.leave(p, next);
        if let Current::Serving { state, dir, .. } = previous {
            tracing::warn!(
                partition = p,
                "this origin no longer serves the partition; its store stops"
            );
            let _ = state.closing.send(true);
            // With one WAL per origin, the log stops serving the partition
            // too (else a claim of it here later would be refused): a
            // release after the store stopped, as in a hand-off. A newer
            // tenure names where this one ended, so a release past that
            // end is never read; a stopped log puts none.
            let log = self.current_log();
            tokio::spawn(async move {
                state.store.shutdown().await;
                drop(state);
                Self::release_in_log(log, p).await;
                remove_later(dir.to_path_buf());
            });
        }
    }

    /// Resolves when this origin starts to stop or partition `p` leaves
    /// the state it is in now (a forwarded answer to an owner it no longer
    /// follows ends).
    pub(super) fn ended(&self, p: u32) -> futures::future::BoxFuture<'static, ()> {
        let mut closing = self.closing.subscribe();
        let mut generation = self.parts[p as usize].generation.subscribe();
        let now = *generation.borrow_and_update();
        async move {
            tokio::select! {
                _ = closing.wait_for(|c| *c) => {}
                _ = generation.wait_for(|g| *g != now) => {}
            }
        }
        .boxed()
    }
}
