//! A region origin's own metrics (object durability), kept across the
//! stores it serves in turn: each claim opens a store whose counters
//! start at zero, these do not.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use shell::metrics::Exposition;

#[derive(Default)]
pub struct RegionMetrics {
    /// Claims that made it the owner, and claims that did not.
    pub claims: AtomicU64,
    pub claim_failures: AtomicU64,
    /// Requests passed on to the owner, and those that could not reach it.
    pub forwarded: AtomicU64,
    pub forward_failed: AtomicU64,
    /// Requests refused for want of room under `--region-forwards`, and
    /// how many forwarded requests wait on an owner (set at each scrape).
    pub forwards_refused: AtomicU64,
    pub forwards_in_flight: AtomicI64,
    /// Origins this one sees alive (itself included).
    pub live_nodes: AtomicI64,
    /// Heartbeat renewals and membership reads that failed.
    pub heartbeat_failures: AtomicU64,
    /// Checkpoints published in the bucket, and builds that failed or gave
    /// up (`region::checkpoint`).
    pub checkpoints: AtomicU64,
    pub checkpoint_failures: AtomicU64,
    /// WAL objects (and older checkpoints' objects) deleted below them.
    pub checkpoint_deleted: AtomicU64,
    /// Objects of other origins' logs deleted (`origin_wal::collect_dead`).
    pub dead_log_deleted: AtomicU64,
    /// The newest checkpoint this origin published: its WAL number and
    /// its image's bytes.
    pub checkpoint_number: AtomicI64,
    pub checkpoint_bytes: AtomicI64,
    /// Partitions this origin let go of for the spread (cooperative
    /// hand-offs).
    pub releases: AtomicU64,
    /// The region's partition count.
    pub partitions: AtomicI64,
    /// Looks that saw another origin heartbeating under this one's
    /// `--node-id` (with another URL): an operator's mistake to fix.
    pub node_id_conflicts: AtomicU64,
    /// Forks made across partitions here (`server::region::across`), their
    /// pins deleted, and what the sweep removed after a crash.
    pub forks_across: AtomicU64,
    /// Requests of the region's own (for forks across partitions, the
    /// source's HEAD made with the client's credential included) passed on
    /// to another origin; `forwarded` counts the clients' only.
    pub peer_forwarded: AtomicU64,
    pub unpins: AtomicU64,
    pub swept: AtomicU64,
    /// Replicas of followed partitions (decision 0018): reads answered
    /// from them, WAL objects they applied, rebuilds from a checkpoint,
    /// failed rounds, and how many are open now.
    pub local_reads: AtomicU64,
    pub replica_objects: AtomicU64,
    pub replica_rebuilds: AtomicU64,
    pub replica_failures: AtomicU64,
    pub replicas: AtomicI64,
    /// Reads with `min_next_offset` forwarded to the owner because the
    /// replica did not reach the floor within its wait (decision 0025).
    pub floor_forwards: AtomicU64,
    /// The oldest of the open replicas' last catch-up, in milliseconds
    /// ago (set at each scrape).
    pub replica_lag_ms: AtomicI64,
}

impl RegionMetrics {
    /// With the origin's role, read from its state when scraped: how many
    /// partitions it serves (the highest epoch among them) and how many it
    /// forwards to another (the rest: joining, or replaying a claim).
    ///
    /// Long by design: one table row per series, read as the list of
    /// what a region origin exposes.
    pub fn expose(&self, e: &mut Exposition, serving: i64, following: i64, epoch: u64) {
        for (name, help, v) in [
            (
                "ds_origin_region_claims_total",
                "Claims that made this origin a partition's owner.",
                &self.claims,
            ),
            (
                "ds_origin_region_claim_failures_total",
                "Claims that did not.",
                &self.claim_failures,
            ),
            (
                "ds_origin_region_forwarded_total",
                "Client requests passed on to a partition's owner.",
                &self.forwarded,
            ),
            (
                "ds_origin_region_forward_failures_total",
                "Client requests that could not reach the owner.",
                &self.forward_failed,
            ),
            (
                "ds_origin_region_forwards_refused_total",
                "Requests refused (503) with --region-forwards requests already forwarded.",
                &self.forwards_refused,
            ),
            (
                "ds_origin_region_heartbeat_failures_total",
                "Heartbeat renewals and membership reads that failed.",
                &self.heartbeat_failures,
            ),
            (
                "ds_origin_region_checkpoints_total",
                "Checkpoints published in the bucket.",
                &self.checkpoints,
            ),
            (
                "ds_origin_region_checkpoint_failures_total",
                "Checkpoint builds that failed or gave up.",
                &self.checkpoint_failures,
            ),
            (
                "ds_origin_region_checkpoint_deleted_objects_total",
                "WAL and old checkpoint objects deleted below a checkpoint.",
                &self.checkpoint_deleted,
            ),
            (
                "ds_origin_region_dead_log_deleted_objects_total",
                "Objects of dead origins' logs deleted below what every partition needs.",
                &self.dead_log_deleted,
            ),
            (
                "ds_origin_region_releases_total",
                "Partitions handed off for the spread.",
                &self.releases,
            ),
            (
                "ds_origin_region_node_id_conflicts_total",
                "Looks that saw another origin heartbeating under this --node-id.",
                &self.node_id_conflicts,
            ),
            (
                "ds_origin_region_forks_across_total",
                "Forks made across partitions.",
                &self.forks_across,
            ),
            (
                "ds_origin_region_peer_forwarded_total",
                "The region's own requests passed on to another origin.",
                &self.peer_forwarded,
            ),
            (
                "ds_origin_region_fork_unpins_total",
                "Pins of forks across partitions deleted.",
                &self.unpins,
            ),
            (
                "ds_origin_region_fork_swept_total",
                "What the sweep of forks across partitions removed after a crash.",
                &self.swept,
            ),
            (
                "ds_origin_region_local_reads_total",
                "Reads of followed partitions answered from this origin's replica.",
                &self.local_reads,
            ),
            (
                "ds_origin_region_floor_forwards_total",
                "Reads with min_next_offset forwarded to the owner because the replica did not reach it in time.",
                &self.floor_forwards,
            ),
            (
                "ds_origin_region_replica_objects_total",
                "WAL objects the replicas here read and applied.",
                &self.replica_objects,
            ),
            (
                "ds_origin_region_replica_rebuilds_total",
                "Replicas built again from the newest checkpoint.",
                &self.replica_rebuilds,
            ),
            (
                "ds_origin_region_replica_failures_total",
                "Replica rounds that could not read the bucket.",
                &self.replica_failures,
            ),
        ] {
            e.counter(name, help, v.load(Relaxed));
        }
        for (name, help, v) in [
            (
                "ds_origin_region_serving",
                "Partitions this origin serves.",
                serving,
            ),
            (
                "ds_origin_region_following",
                "Partitions this origin forwards to another.",
                following,
            ),
            (
                "ds_origin_region_epoch",
                "The highest epoch among the partitions served.",
                epoch as i64,
            ),
            (
                "ds_origin_region_live_origins",
                "Origins seen alive, this one included.",
                self.live_nodes.load(Relaxed),
            ),
            (
                "ds_origin_region_partitions",
                "The region's partition count.",
                self.partitions.load(Relaxed),
            ),
            (
                "ds_origin_region_forwards_in_flight",
                "Requests forwarded to an owner and not yet answered to their end.",
                self.forwards_in_flight.load(Relaxed),
            ),
            (
                "ds_origin_region_replicas",
                "Replicas of followed partitions open here.",
                self.replicas.load(Relaxed),
            ),
            (
                "ds_origin_region_checkpoint_number",
                "WAL number of the newest checkpoint published here.",
                self.checkpoint_number.load(Relaxed),
            ),
            (
                "ds_origin_region_checkpoint_bytes",
                "Image bytes of the newest checkpoint published here.",
                self.checkpoint_bytes.load(Relaxed),
            ),
        ] {
            e.gauge(name, help, v as f64);
        }
        e.gauge(
            "ds_origin_region_replica_lag_seconds",
            "Since the least fresh replica here last read all its owner had acknowledged.",
            self.replica_lag_ms.load(Relaxed) as f64 / 1000.0,
        );
    }
}
