//! Every metric the origin exports, named in one place and rendered as
//! Prometheus text at `GET /metrics`.
//!
//! The counters every request moves are kept per shard, a thread writing
//! only its own: one counter written by both runtime workers (and a
//! neighbour written by the writer thread) moved its cache line between the
//! cores on every append, a measurable share of the append path on this
//! two-core machine. `render` adds the shards up.

pub mod merge;

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Routes counted in `ds_requests_total`.
pub const ROUTES: [&str; 15] = [
    "create",
    "append",
    "delete",
    "head",
    "read",
    "long_poll",
    "sse",
    "chunk",
    "preflight",
    "reserved",
    "other",
    "snapshot",
    "refused",
    "token",
    "admin",
];

/// Statuses 100..=599.
const STATUSES: usize = 500;

/// Request counters by route and status, lock-free on the request path:
/// statuses 100..=599 each have a slot.
struct RequestCounts([[AtomicU64; STATUSES]; ROUTES.len()]);

impl Default for RequestCounts {
    fn default() -> Self {
        RequestCounts(std::array::from_fn(|_| {
            std::array::from_fn(|_| AtomicU64::new(0))
        }))
    }
}

/// Shards of the per-request counters; threads take them in turn.
const SHARDS: usize = 4;

/// What one thread counts per request, on cache lines of its own.
#[derive(Default)]
#[repr(align(128))]
struct Shard {
    requests: RequestCounts,
    bytes_served: AtomicU64,
    bytes_appended: AtomicU64,
}

/// This thread's shard.
fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Relaxed) % SHARDS;
    }
    INDEX.with(|i| *i)
}

/// The shards, on the heap (each holds 60 KiB of request counters).
struct Shards(Box<[Shard]>);

impl Default for Shards {
    fn default() -> Self {
        Shards((0..SHARDS).map(|_| Shard::default()).collect())
    }
}

impl std::ops::Deref for Shards {
    type Target = [Shard];
    fn deref(&self) -> &[Shard] {
        &self.0
    }
}

#[derive(Default)]
pub struct Metrics {
    shards: Shards,
    wal_syncs: AtomicU64,
    wal_bytes: AtomicU64,
    wal_commands: AtomicU64,
    wal_sync_micros: AtomicU64,
    checkpoints: AtomicU64,
    checkpoint_micros: AtomicU64,
    chunks_sealed: AtomicU64,
    sealed_bytes: AtomicU64,
    seal_errors: AtomicU64,
    chunk_cache_hits: AtomicU64,
    chunk_cache_misses: AtomicU64,
    dropped_bytes: AtomicU64,
    promotions: AtomicU64,
    promoted_bytes: AtomicU64,
    promotion_errors: AtomicU64,
    /// Writes refused for want of room in the log (a full disk).
    log_full: AtomicU64,
    unsealed_bytes: AtomicI64,
    snapshots_published: AtomicU64,
    /// Disk staged snapshot parts take (whole blocks), and their uploads.
    staged_bytes: AtomicI64,
    staged_uploads: AtomicI64,
    long_polls_waiting: AtomicI64,
    sse_open: AtomicI64,
    /// The region's WAL in object storage (`--durability object`).
    pub object_wal_puts: AtomicU64,
    pub object_wal_bytes: AtomicU64,
    pub object_wal_put_micros: AtomicU64,
    /// Tries of a WAL put that failed for a passing reason and were made again.
    pub object_wal_retries: AtomicU64,
    /// 1 once a newer owner fenced this origin's partition (it no longer writes).
    pub object_wal_fenced: AtomicI64,
}

impl Metrics {
    pub fn request(&self, route: &'static str, status: u16) {
        let r = ROUTES
            .iter()
            .position(|x| *x == route)
            .unwrap_or(ROUTES.len() - 1);
        let s = usize::from(status.clamp(100, 599) - 100);
        self.shard().requests.0[r][s].fetch_add(1, Relaxed);
    }

    fn shard(&self) -> &Shard {
        &self.shards[shard_index()]
    }

    pub fn wal_sync(&self, bytes: u64, commands: u64, took: Duration) {
        self.wal_syncs.fetch_add(1, Relaxed);
        self.wal_bytes.fetch_add(bytes, Relaxed);
        self.wal_commands.fetch_add(commands, Relaxed);
        self.wal_sync_micros
            .fetch_add(took.as_micros() as u64, Relaxed);
    }

    pub fn checkpoint(&self, took: Duration) {
        self.checkpoints.fetch_add(1, Relaxed);
        self.checkpoint_micros
            .fetch_add(took.as_micros() as u64, Relaxed);
    }

    pub fn sealed(&self, bytes: usize) {
        self.chunks_sealed.fetch_add(1, Relaxed);
        self.sealed_bytes.fetch_add(bytes as u64, Relaxed);
    }

    pub fn seal_error(&self) {
        self.seal_errors.fetch_add(1, Relaxed);
    }

    pub fn chunk_cache(&self, hit: bool) {
        if hit {
            self.chunk_cache_hits.fetch_add(1, Relaxed);
        } else {
            self.chunk_cache_misses.fetch_add(1, Relaxed);
        }
    }

    /// Sealed bytes removed from local stream files.
    pub fn dropped(&self, bytes: u64) {
        self.dropped_bytes.fetch_add(bytes, Relaxed);
    }

    /// A stream's log-only bytes were copied into its own file.
    pub fn promoted(&self, bytes: u64) {
        self.promotions.fetch_add(1, Relaxed);
        self.promoted_bytes.fetch_add(bytes, Relaxed);
    }

    pub fn log_full(&self) {
        self.log_full.fetch_add(1, Relaxed);
    }

    pub fn promotion_failed(&self) {
        self.promotion_errors.fetch_add(1, Relaxed);
    }

    /// Complete chunks waiting to be sealed, in bytes (the writer sets it).
    pub fn set_unsealed(&self, bytes: u64) {
        self.unsealed_bytes.store(bytes as i64, Relaxed);
    }

    pub fn snapshot_published(&self) {
        self.snapshots_published.fetch_add(1, Relaxed);
    }

    /// The staging ledger's totals (see `core::staging`).
    pub fn set_staged(&self, bytes: u64, uploads: usize) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.staged_bytes.store(gauge(bytes), Relaxed);
        self.staged_uploads.store(gauge(uploads as u64), Relaxed);
    }

    pub fn served(&self, bytes: usize) {
        self.shard().bytes_served.fetch_add(bytes as u64, Relaxed);
    }

    pub fn appended(&self, bytes: usize) {
        self.shard().bytes_appended.fetch_add(bytes as u64, Relaxed);
    }

    /// Counts a waiting long-poll for as long as the guard lives.
    pub fn long_poll_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.long_polls_waiting)
    }

    /// Counts an open SSE tail for as long as the guard lives.
    pub fn sse_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.sse_open)
    }

    pub fn render(&self, streams: usize) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# TYPE ds_requests_total counter");
        for (r, route) in ROUTES.iter().enumerate() {
            for i in 0..STATUSES {
                let n: u64 = self
                    .shards
                    .iter()
                    .map(|s| s.requests.0[r][i].load(Relaxed))
                    .sum();
                if n > 0 {
                    let status = i + 100;
                    let _ = writeln!(
                        out,
                        "ds_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                    );
                }
            }
        }
        let sum = |f: fn(&Shard) -> &AtomicU64| -> u64 {
            self.shards.iter().map(|s| f(s).load(Relaxed)).sum()
        };
        for (name, v) in [
            ("ds_bytes_served_total", sum(|s| &s.bytes_served)),
            ("ds_bytes_appended_total", sum(|s| &s.bytes_appended)),
        ] {
            let _ = writeln!(out, "# TYPE {name} counter\n{name} {v}");
        }
        let counters = [
            ("ds_wal_syncs_total", &self.wal_syncs),
            ("ds_wal_bytes_total", &self.wal_bytes),
            ("ds_wal_commands_total", &self.wal_commands),
            ("ds_wal_sync_micros_total", &self.wal_sync_micros),
            ("ds_checkpoints_total", &self.checkpoints),
            ("ds_checkpoint_micros_total", &self.checkpoint_micros),
            ("ds_chunks_sealed_total", &self.chunks_sealed),
            ("ds_sealed_bytes_total", &self.sealed_bytes),
            ("ds_seal_errors_total", &self.seal_errors),
            ("ds_chunk_cache_hits_total", &self.chunk_cache_hits),
            ("ds_chunk_cache_misses_total", &self.chunk_cache_misses),
            ("ds_local_dropped_bytes_total", &self.dropped_bytes),
            ("ds_promotions_total", &self.promotions),
            ("ds_promoted_bytes_total", &self.promoted_bytes),
            ("ds_promotion_errors_total", &self.promotion_errors),
            ("ds_log_full_refusals_total", &self.log_full),
            ("ds_snapshots_published_total", &self.snapshots_published),
            ("ds_object_wal_puts_total", &self.object_wal_puts),
            ("ds_object_wal_bytes_total", &self.object_wal_bytes),
            (
                "ds_object_wal_put_micros_total",
                &self.object_wal_put_micros,
            ),
            ("ds_object_wal_retries_total", &self.object_wal_retries),
        ];
        for (name, v) in counters {
            let _ = writeln!(out, "# TYPE {name} counter\n{name} {}", v.load(Relaxed));
        }
        let gauges = [
            ("ds_long_polls_waiting", &self.long_polls_waiting),
            ("ds_sse_open", &self.sse_open),
            ("ds_unsealed_bytes", &self.unsealed_bytes),
            ("ds_snapshot_staged_bytes", &self.staged_bytes),
            ("ds_snapshot_staged_uploads", &self.staged_uploads),
            ("ds_object_wal_fenced", &self.object_wal_fenced),
        ];
        for (name, v) in gauges {
            let _ = writeln!(out, "# TYPE {name} gauge\n{name} {}", v.load(Relaxed));
        }
        let _ = writeln!(out, "# TYPE ds_streams gauge\nds_streams {streams}");
        out
    }
}

/// Decrements its gauge when dropped.
pub struct Gauge {
    metrics: Arc<Metrics>,
    which: fn(&Metrics) -> &AtomicI64,
}

impl Gauge {
    fn new(metrics: Arc<Metrics>, which: fn(&Metrics) -> &AtomicI64) -> Self {
        which(&metrics).fetch_add(1, Relaxed);
        Gauge { metrics, which }
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        (self.which)(&self.metrics).fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up() {
        let m = Arc::new(Metrics::default());
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        m.request("append", 204);
                        m.appended(3);
                        m.served(2);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        m.request("read", 200);
        let out = m.render(0);
        let line = |name: &str| out.lines().find(|l| l.starts_with(name)).map(str::to_owned);
        assert_eq!(
            line("ds_requests_total{route=\"append\",status=\"204\"}").as_deref(),
            Some("ds_requests_total{route=\"append\",status=\"204\"} 6000")
        );
        assert_eq!(
            line("ds_requests_total{route=\"read\"").as_deref(),
            Some("ds_requests_total{route=\"read\",status=\"200\"} 1")
        );
        assert_eq!(
            line("ds_bytes_appended_total ").as_deref(),
            Some("ds_bytes_appended_total 18000")
        );
        assert_eq!(
            line("ds_bytes_served_total ").as_deref(),
            Some("ds_bytes_served_total 12000")
        );
    }
}

/// A region origin's own metrics (object durability), kept across the
/// stores it serves in turn: each claim opens a store with fresh
/// [`Metrics`], so those restart at every takeover, these do not.
#[derive(Default)]
pub struct RegionMetrics {
    /// Claims that made it the owner, and claims that did not.
    pub claims: AtomicU64,
    pub claim_failures: AtomicU64,
    /// Requests passed on to the owner, and those that could not reach it.
    pub forwarded: AtomicU64,
    pub forward_failed: AtomicU64,
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
}

impl RegionMetrics {
    /// With the origin's role, read from its state when rendered: how many
    /// partitions it serves (the highest epoch among them) and how many it
    /// forwards to another (the rest: joining, or replaying a claim).
    pub fn render_into(&self, out: &mut String, serving: i64, following: i64, epoch: u64) {
        for (name, v) in [
            ("ds_region_claims_total", &self.claims),
            ("ds_region_claim_failures_total", &self.claim_failures),
            ("ds_region_forwarded_total", &self.forwarded),
            ("ds_region_forward_failures_total", &self.forward_failed),
            (
                "ds_region_heartbeat_failures_total",
                &self.heartbeat_failures,
            ),
            ("ds_region_checkpoints_total", &self.checkpoints),
            (
                "ds_region_checkpoint_failures_total",
                &self.checkpoint_failures,
            ),
            (
                "ds_region_checkpoint_deleted_objects_total",
                &self.checkpoint_deleted,
            ),
            ("ds_region_releases_total", &self.releases),
            ("ds_region_node_id_conflicts_total", &self.node_id_conflicts),
            ("ds_region_forks_across_total", &self.forks_across),
            ("ds_region_peer_forwarded_total", &self.peer_forwarded),
            ("ds_region_fork_unpins_total", &self.unpins),
            ("ds_region_fork_swept_total", &self.swept),
        ] {
            let _ = writeln!(out, "# TYPE {name} counter\n{name} {}", v.load(Relaxed));
        }
        for (name, v) in [
            ("ds_region_serving", serving),
            ("ds_region_following", following),
            ("ds_region_epoch", epoch as i64),
            ("ds_region_live_origins", self.live_nodes.load(Relaxed)),
            ("ds_region_partitions", self.partitions.load(Relaxed)),
            (
                "ds_region_checkpoint_number",
                self.checkpoint_number.load(Relaxed),
            ),
            (
                "ds_region_checkpoint_bytes",
                self.checkpoint_bytes.load(Relaxed),
            ),
        ] {
            let _ = writeln!(out, "# TYPE {name} gauge\n{name} {v}");
        }
    }
}
