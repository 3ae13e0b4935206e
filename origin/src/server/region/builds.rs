//! A region origin's checkpoint builds (`region::checkpoint`): started for
//! each partition it serves every `--region-checkpoint-interval`, on a
//! blocking thread, and their outcomes counted and logged.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use tokio::task::JoinHandle;

use super::RegionOrigin;
use crate::http::Shared;
use crate::region::checkpoint::{self, Built};
use crate::region::WalError;

impl RegionOrigin {
    /// Starts a checkpoint build of partition `p`, which this origin
    /// serves, on a blocking thread (`region::checkpoint`). A build that
    /// outlives the serving is safe to finish: its looks and the model say so.
    pub(super) fn build_checkpoint(
        &self,
        p: u32,
        state: &Shared,
    ) -> Option<JoinHandle<Result<Built, WalError>>> {
        let epoch = state.store.epoch()?;
        let acknowledged = state.store.acknowledged_below()?;
        let job = checkpoint::BuildJob {
            store: Arc::clone(self.objects.get()?),
            partition: p,
            epoch,
            acknowledged,
            scratch: checkpoint::scratch_dir(
                &self.data,
                self.incarnations.fetch_add(1, Relaxed) + 1,
            ),
            now: self.clock.now_ms(),
            config: self.store.region.checkpoint.clone(),
            metrics: Arc::clone(&self.metrics),
            stopping: Arc::clone(&self.builds_stop),
        };
        Some(tokio::task::spawn_blocking(move || checkpoint::build(&job)))
    }

    /// Counts and logs what a checkpoint build of partition `p` did.
    pub(super) fn built(
        &self,
        p: u32,
        outcome: Result<Result<Built, WalError>, tokio::task::JoinError>,
    ) {
        match outcome {
            Ok(Ok(Built::NotYet)) => {}
            Ok(Ok(Built::Published {
                number,
                streams,
                bytes,
                parts,
                deleted,
            })) => {
                tracing::info!(
                    partition = p,
                    number,
                    streams,
                    bytes,
                    parts,
                    deleted,
                    "checkpointed the partition in the bucket"
                );
            }
            Ok(Ok(Built::GaveUp(why))) => {
                self.metrics.checkpoint_failures.fetch_add(1, Relaxed);
                tracing::info!(partition = p, why, "a checkpoint build gave up");
            }
            Ok(Err(e)) => {
                self.metrics.checkpoint_failures.fetch_add(1, Relaxed);
                tracing::warn!(partition = p, error = %e, "a checkpoint build failed; the next one tries again");
            }
            Err(e) => {
                self.metrics.checkpoint_failures.fetch_add(1, Relaxed);
                tracing::error!(partition = p, error = %e, "a checkpoint build's task failed");
            }
        }
    }
}
