//! A region origin's one WAL (`--region-wal origin`, decision 0028): the
//! log every partition it serves writes to, opened at the first claim and
//! opened afresh after a takeover stopped it (a fence ends every tenure in
//! a log, so a stopped log serves nothing); a hand-off's release; the
//! partition checkpoints, built from the store's own image, and the log
//! deleted below them.

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinHandle;

use super::RegionOrigin;
use crate::core::Millis;
use crate::http::Shared;
use crate::region::checkpoint::{self, Built};
use crate::region::local::LocalLog;
use crate::region::origin_wal::{self, Imager, OriginWal, SharedLog, WriterConfig};
use crate::region::{Replay, WalError};
use crate::store::image;

/// How long the log's writer waits for more commits before a put: the
/// stores' writers gather their own batches first (`--commit-delay`), so
/// this only merges what several partitions commit together.
const LOG_COMMIT_DELAY: Duration = Duration::from_millis(2);

/// A round deleting dead origins' logs runs at most once every this many
/// `--region-checkpoint-interval`s (a minute by default): each lists every
/// log in the region, and a dead log's objects only cost storage.
const DEAD_LOG_ROUNDS: u32 = 6;

impl RegionOrigin {
    /// The log a claim makes its tenure in: this origin's, opened now if it
    /// has none or its last one stopped. None without one WAL per origin,
    /// or before the bucket is open.
    pub(super) fn origin_log(&self) -> Option<SharedLog> {
        if !self.one_wal() {
            return None;
        }
        let objects = self.objects.get()?;
        let mut log = self.log.lock();
        if log.as_ref().is_none_or(|l| l.is_stopped()) {
            let config = WriterConfig {
                window: crate::region::fence::WINDOW as usize,
                commit_delay: LOG_COMMIT_DELAY,
                ..WriterConfig::default()
            };
            // `--object-put-delay` reaches the log's puts too.
            let objects = crate::objects::faults::Faults::delaying_puts(
                Arc::clone(objects),
                self.store.object_put_delay,
            );
            *log = Some(Arc::new(OriginWal::open_counted(
                objects,
                &self.store.region.node,
                &self.store.region.url,
                config,
                Some(Arc::clone(&self.log_metrics)),
            )));
        }
        log.clone().map(SharedLog)
    }

    /// Whether this origin's log stopped (another origin fenced it): every
    /// partition served through it is to be stepped down from.
    pub(super) fn log_stopped(&self) -> bool {
        self.log.lock().as_ref().is_some_and(|l| l.is_stopped())
    }

    /// Ends this origin's tenure of `p` in its log once the store stopped
    /// (rule 2 of `tenure`): the next owner's claim then reads to the
    /// release and fences nothing.
    pub(super) async fn release_in_log(log: Option<Arc<OriginWal>>, p: u32) {
        let Some(log) = log else { return };
        match log.release(p).await {
            Ok(number) => tracing::info!(
                partition = p,
                number,
                "released the partition in this origin's log"
            ),
            Err(e) => {
                tracing::info!(partition = p, error = %e, "no release put: the next owner's claim fences this origin's log")
            }
        }
    }

    /// Deleting dead origins' logs (`origin_wal::collect_dead`), a round
    /// every [`DEAD_LOG_ROUNDS`] checkpoint intervals, from partition 0's
    /// owner (one origin at a time, usually: two at once only repeat
    /// deletes). With a WAL per partition there are no such logs.
    pub(super) fn tend_dead_logs(self: &Arc<Self>, t: &mut super::takeover::Tending) {
        if !self.one_wal() {
            return;
        }
        if t.dead_logs.as_ref().is_some_and(|d| !d.is_finished()) {
            return;
        }
        let now = tokio::time::Instant::now();
        if now < t.next_dead_logs {
            return;
        }
        t.next_dead_logs = now + self.store.region.checkpoint.interval * DEAD_LOG_ROUNDS;
        let Some(objects) = self.objects.get().map(Arc::clone) else {
            return;
        };
        let own = self.current_log().map(|l| l.log());
        // A log is collected only once its newest object is a round old
        // (and no partition's newest tenure names it): its origin is gone,
        // or idle and serving nothing (the collection's fence then stops
        // its log, and its next claim opens a new one).
        let quiet = self.store.region.checkpoint.interval * DEAD_LOG_ROUNDS;
        let me = Arc::clone(self);
        t.dead_logs = Some(tokio::spawn(async move {
            let round = origin_wal::collect_dead(
                &*objects,
                own.as_ref(),
                me.partitions,
                quiet,
                &me.builds_stop,
            );
            match round.await {
                Ok(done) => {
                    me.metrics.dead_log_deleted.fetch_add(done.deleted, Relaxed);
                    if done.deleted > 0 {
                        tracing::info!(
                            logs = done.logs,
                            deleted = done.deleted,
                            fences = done.fences,
                            "deleted other origins' logs below what every partition needs"
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not delete dead origins' logs; the next round tries again")
                }
            }
        }));
    }

    /// The log as it is now (for a release).
    pub(super) fn current_log(&self) -> Option<Arc<OriginWal>> {
        self.log.lock().clone()
    }

    /// Whether a build of the partition `state` serves may be due: not
    /// while this origin's last checkpoint of it (`stood`: its epoch and
    /// number) is of this tenure and the log went fewer than
    /// `--region-checkpoint-objects` numbers past it. The build decides
    /// from the bucket; this spares its reads every interval of an idle
    /// partition.
    pub(super) fn due_in_log(&self, state: &Shared, stood: Option<(u64, u64)>) -> bool {
        let (Some((epoch, number)), Some(log)) = (stood, self.current_log()) else {
            return true;
        };
        state.store.epoch() != Some(epoch)
            || log.acknowledged().saturating_sub(number) >= self.store.region.checkpoint.objects
    }

    /// Starts a checkpoint build of partition `p` in this origin's log, on
    /// a blocking thread, then deletes the log below what every partition
    /// still needs.
    pub(super) fn build_in_log(
        &self,
        p: u32,
        state: &Shared,
    ) -> Option<JoinHandle<Result<Built, WalError>>> {
        let log = self.current_log()?;
        // Tenure k is epoch k + 1 (`store::claim`).
        let tenure = state.store.epoch()?.checked_sub(1)?;
        let scratch =
            checkpoint::scratch_dir(&self.data, self.incarnations.fetch_add(1, Relaxed) + 1);
        let (now, config, stopping) = (
            self.clock.now_ms(),
            self.store.region.checkpoint.clone(),
            Arc::clone(&self.builds_stop),
        );
        let runtime = tokio::runtime::Handle::current();
        let metrics = Arc::clone(&self.metrics);
        Some(tokio::task::spawn_blocking(move || {
            let mut imager = StoreImager::new(scratch.clone(), now, config.part_bytes);
            let job = origin_wal::BuildJob {
                store: &**log.store(),
                partition: p,
                tenure,
                acknowledged: log.acknowledged(),
                min_objects: config.objects,
                stopping: &stopping,
            };
            let built = runtime.block_on(origin_wal::build(&job, &mut imager));
            imager.remove();
            let built = match built? {
                origin_wal::Built::NotYet => Built::NotYet,
                origin_wal::Built::GaveUp(why) => Built::GaveUp(why),
                origin_wal::Built::Published {
                    stand,
                    parts,
                    bytes,
                    deleted,
                } => {
                    let (_, collected) = runtime.block_on(log.collect())?;
                    metrics.checkpoints.fetch_add(1, Relaxed);
                    metrics
                        .checkpoint_number
                        .store(stand.number as i64, Relaxed);
                    metrics.checkpoint_bytes.store(bytes as i64, Relaxed);
                    metrics
                        .checkpoint_deleted
                        .fetch_add(deleted + collected, Relaxed);
                    Built::Published {
                        number: stand.number,
                        streams: imager.streams,
                        bytes,
                        parts,
                        deleted: deleted + collected,
                    }
                }
            };
            Ok(built)
        }))
    }
}

/// The image of a partition as the store exports it: the history laid
/// out as a local log in a scratch folder and recovered, its state
/// written as parts into a folder beside it, handed on one at a time.
struct StoreImager {
    scratch: PathBuf,
    parts_dir: PathBuf,
    now: Millis,
    part_bytes: usize,
    log: Option<LocalLog>,
    parts: Option<std::vec::IntoIter<PathBuf>>,
    streams: u64,
}

impl StoreImager {
    fn new(scratch: PathBuf, now: Millis, part_bytes: usize) -> StoreImager {
        StoreImager {
            parts_dir: scratch.with_extension("parts"),
            scratch,
            now,
            part_bytes,
            log: None,
            parts: None,
            streams: 0,
        }
    }

    /// Exports the laid-out state as part files.
    fn export(&mut self) -> std::io::Result<std::vec::IntoIter<PathBuf>> {
        if let Some(log) = self.log.take() {
            log.finish()?;
        } else {
            LocalLog::begin(&self.scratch)?.finish()?;
        }
        std::fs::create_dir_all(&self.parts_dir)?;
        let mut written = Vec::new();
        let stats = image::export(&self.scratch, self.now, self.part_bytes, &mut |part| {
            let path = self.parts_dir.join(format!("{:06}", written.len()));
            std::fs::write(&path, part)?;
            written.push(path);
            Ok(())
        })?;
        self.streams = stats.streams;
        Ok(written.into_iter())
    }

    fn remove(&self) {
        checkpoint::remove_scratch(&self.scratch);
        checkpoint::remove_scratch(&self.parts_dir);
    }
}

impl Imager for StoreImager {
    fn take(&mut self, replay: Replay) -> std::io::Result<()> {
        match replay {
            Replay::Begin => {
                self.log = Some(LocalLog::begin(&self.scratch)?);
                Ok(())
            }
            Replay::Frames(frames) => self
                .log
                .as_mut()
                .expect("a replay begins first")
                .push(&frames),
        }
    }

    fn next_part(&mut self) -> std::io::Result<Option<Bytes>> {
        if self.parts.is_none() {
            self.parts = Some(self.export()?);
        }
        match self.parts.as_mut().and_then(|p| p.next()) {
            Some(path) => {
                let bytes = std::fs::read(&path)?;
                std::fs::remove_file(&path)?;
                Ok(Some(Bytes::from(bytes)))
            }
            None => Ok(None),
        }
    }
}
