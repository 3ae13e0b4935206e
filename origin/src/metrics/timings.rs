//! The origin's request series and histograms, one set per process (a
//! region origin's stores share it, so nothing here restarts at a
//! takeover).

use shell::metrics::{
    buckets, histogram_vec, Exposition, HistogramVec, Requests, ShardedHistogram,
    ShardedHistogramVec,
};

pub struct Timings {
    /// `ds_origin_requests_total` and `ds_origin_request_duration_seconds`.
    pub requests: Requests,
    /// From an append's arrival at the store to its acknowledgement.
    pub append_ack: ShardedHistogram,
    /// One group commit's `fdatasync` (or its object put, in object
    /// durability the put is `object_store{operation="wal_put"}`).
    pub wal_sync: ShardedHistogram,
    /// Commands per group commit.
    pub commit_commands: ShardedHistogram,
    pub checkpoint: ShardedHistogram,
    /// One chunk's put and read-back.
    pub seal: ShardedHistogram,
    /// Object-store requests by operation and outcome (a few a second:
    /// one histogram, its series made as they are named).
    pub object_store: HistogramVec,
    /// From an append's commit to its frame written to a tail (`sse`) or
    /// to a parked long-poll's answer (`long_poll`): [`SSE`], [`LONG_POLL`].
    pub delivery: ShardedHistogramVec,
}

/// The label sets of `delivery`.
pub const SSE: usize = 0;
pub const LONG_POLL: usize = 1;
/// From a change's event added to the invalidation feed to its answer to
/// an edge reading the feed.
pub const FEED: usize = 2;

impl Default for Timings {
    fn default() -> Self {
        Timings {
            requests: Requests::new("ds_origin", super::ROUTES),
            append_ack: ShardedHistogram::new(
                "ds_origin_append_ack_duration_seconds",
                "Time from an append reaching the store to its acknowledgement (durable).",
                buckets::SECONDS,
            ),
            wal_sync: ShardedHistogram::new(
                "ds_origin_wal_sync_duration_seconds",
                "Time one group commit's sync of the local log took.",
                buckets::SECONDS,
            ),
            commit_commands: ShardedHistogram::new(
                "ds_origin_wal_commit_commands",
                "Commands (appends and the rest) made durable by one group commit.",
                buckets::COUNT,
            ),
            checkpoint: ShardedHistogram::new(
                "ds_origin_checkpoint_duration_seconds",
                "Time one local checkpoint took to write.",
                buckets::SECONDS,
            ),
            seal: ShardedHistogram::new(
                "ds_origin_seal_duration_seconds",
                "Time sealing one chunk into object storage took (put and read-back).",
                buckets::SECONDS,
            ),
            object_store: histogram_vec(
                "ds_origin_object_store_request_duration_seconds",
                "Object-store requests by operation and outcome (ok, exists, not_found, error, fenced).",
                &["operation", "outcome"],
                buckets::SECONDS,
            ),
            delivery: ShardedHistogramVec::new(
                "ds_origin_delivery_lag_seconds",
                "Time from an append's commit to its bytes written to a tail or a parked long-poll (kind sse, long_poll), or from a change's commit to its invalidation event answered to an edge (kind feed).",
                &["kind"],
                buckets::LAG_SECONDS,
                vec![vec!["sse"], vec!["long_poll"], vec!["feed"]],
            ),
        }
    }
}

impl Timings {
    /// Times one object-store request.
    pub fn object_request(&self, operation: &str, outcome: &str, took: std::time::Duration) {
        self.object_store
            .with_label_values(&[operation, outcome])
            .observe(took.as_secs_f64());
    }

    pub(super) fn expose(&self, e: &mut Exposition) {
        e.families_of(self.append_ack.families())
            .families_of(self.wal_sync.families())
            .families_of(self.commit_commands.families())
            .families_of(self.checkpoint.families())
            .families_of(self.seal.families())
            .collect(&self.object_store)
            .families_of(self.delivery.families());
    }
}
