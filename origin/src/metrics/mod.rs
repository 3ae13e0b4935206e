//! Every metric the origin exports, named in one place and handed to the
//! shell's [`Exposition`] at `GET /metrics` (names `ds_origin_*`; see
//! `docs/decisions/0021-metrics.md`).
//!
//! Two kinds of holder: [`Metrics`], one per store (a region origin runs a
//! store per partition it serves, and `/metrics` shows their sums), whose
//! counters the stores' threads move; and [`Timings`], one per process and
//! shared by its stores, holding the request series and every histogram
//! (which therefore never restart at a takeover).
//!
//! The per-request byte counters are kept per shard, a thread writing only
//! its own: one counter written by both runtime workers moved its cache
//! line between the cores on every append.

mod region;
mod timings;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

pub use region::RegionMetrics;
pub use shell::metrics::Exposition;
use shell::metrics::{shard_index, SHARDS};
pub use timings::{Timings, FEED, LONG_POLL, SSE};

/// Routes counted in `ds_origin_requests_total`.
pub const ROUTES: &[&str] = &[
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
    "snapshot",
    "refused",
    "token",
    "admin",
    "metrics",
    "forwarded",
    "region",
    "subscriptions",
    "list",
    "other",
];

/// What one thread counts per request, on a cache line of its own.
#[derive(Default)]
#[repr(align(128))]
struct Shard {
    bytes_served: AtomicU64,
    bytes_appended: AtomicU64,
}

/// One store's counters and gauges (and the process's [`Timings`]).
#[derive(Default)]
pub struct Metrics {
    pub timings: Arc<Timings>,
    shards: [Shard; SHARDS],
    wal_bytes: AtomicU64,
    wal_commands: AtomicU64,
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
    /// Tries of a WAL put that failed for a passing reason and were made again.
    pub object_wal_retries: AtomicU64,
    /// 1 once a newer owner fenced this origin's partition (it no longer writes).
    pub object_wal_fenced: AtomicI64,
    /// Checks in flight: batches that answer without log records, waiting
    /// for the bucket to vouch for their answers (`region::vouch`; at most
    /// `store::writer::object_commit::CHECKS_MAX`).
    pub object_wal_checks: AtomicI64,
    /// The store's data directory (its disk's room is read at a scrape)
    /// and its bound on bytes waiting to be sealed.
    store: std::sync::OnceLock<(std::path::PathBuf, u64)>,
}

impl Metrics {
    /// A store's metrics whose request series and histograms are `timings`
    /// (the default made and dropped here: once per store opened).
    pub fn with_timings(timings: Arc<Timings>) -> Metrics {
        Metrics {
            timings,
            ..Metrics::default()
        }
    }

    /// Adds `other`'s counters to these (not its gauges): a region origin
    /// keeps what a store it let go of counted, so the process's
    /// `_total` series never go back (Prometheus would read a reset).
    pub fn absorb(&self, other: &Metrics) {
        let add = |to: &AtomicU64, from: &AtomicU64| {
            to.fetch_add(from.load(Relaxed), Relaxed);
        };
        let (to, from) = (self.shard(), other);
        for s in &from.shards {
            add(&to.bytes_served, &s.bytes_served);
            add(&to.bytes_appended, &s.bytes_appended);
        }
        for (_, _, f) in COUNTERS {
            add(f(self), f(other));
        }
    }

    /// Names the store's data directory and its `--max-unsealed`.
    pub fn describe_store(&self, data: &std::path::Path, max_unsealed: u64) {
        let _ = self.store.set((data.to_owned(), max_unsealed));
    }

    /// Counts one answered request and its duration.
    pub fn request(&self, route: &'static str, status: u16, took: Duration) {
        self.timings.requests.answered(route, status, took);
    }

    fn shard(&self) -> &Shard {
        &self.shards[shard_index()]
    }

    /// One group commit made durable: its bytes, its commands (appends and
    /// the rest) and how long the sync took.
    pub fn wal_sync(&self, bytes: u64, commands: u64, took: Duration) {
        self.wal_bytes.fetch_add(bytes, Relaxed);
        self.wal_commands.fetch_add(commands, Relaxed);
        self.timings.wal_sync.observe(took.as_secs_f64());
        self.timings.commit_commands.observe(commands as f64);
    }

    pub fn checkpoint(&self, took: Duration) {
        self.timings.checkpoint.observe(took.as_secs_f64());
    }

    /// A chunk sealed into the bucket, and how long its put and read-back
    /// took.
    pub fn sealed(&self, bytes: usize, took: Duration) {
        self.chunks_sealed.fetch_add(1, Relaxed);
        self.sealed_bytes.fetch_add(bytes as u64, Relaxed);
        self.timings.seal.observe(took.as_secs_f64());
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

    /// Payload applied by an append or a create.
    pub fn appended(&self, bytes: usize) {
        self.shard().bytes_appended.fetch_add(bytes as u64, Relaxed);
    }

    /// How long the store took to make an append durable and answer it
    /// (its acknowledgement latency).
    pub fn append_acknowledged(&self, took: Duration) {
        self.timings.append_ack.observe(took.as_secs_f64());
    }

    /// A tail ([`timings::SSE`]) or parked long-poll
    /// ([`timings::LONG_POLL`]) was handed bytes `lag` after their append
    /// was published.
    pub fn delivered(&self, kind: usize, lag: Duration) {
        self.timings.delivery.observe(kind, lag.as_secs_f64());
    }

    /// Counts a waiting long-poll for as long as the guard lives.
    pub fn long_poll_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.long_polls_waiting)
    }

    /// Counts an open SSE tail for as long as the guard lives.
    pub fn sse_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.sse_open)
    }

    /// Adds the sums of `stores` (each with its stream count; none, for a
    /// region origin that serves nothing yet) and the process's `timings`.
    ///
    /// Long by design: one table row per series, read as the list of
    /// what the origin exposes.
    pub fn expose(stores: &[(&Metrics, usize)], timings: &Timings, e: &mut Exposition) {
        shell::metrics::Requests::expose(&[&timings.requests], e);
        let shards = |f: fn(&Shard) -> &AtomicU64| -> u64 {
            stores
                .iter()
                .flat_map(|(m, _)| m.shards.iter())
                .map(|s| f(s).load(Relaxed))
                .sum()
        };
        e.counter(
            "ds_origin_served_bytes_total",
            "Stream bytes written into answers (reads, tails, chunks, snapshots).",
            shards(|s| &s.bytes_served),
        )
        .counter(
            "ds_origin_appended_bytes_total",
            "Payload bytes of applied appends and creates.",
            shards(|s| &s.bytes_appended),
        );
        for (name, help, f) in COUNTERS {
            let v: u64 = stores.iter().map(|(m, _)| f(m).load(Relaxed)).sum();
            e.counter(name, help, v);
        }
        let gauges: [Field<AtomicI64>; 7] = [
            (
                "ds_origin_long_polls_waiting",
                "Long-polls parked now.",
                |m| &m.long_polls_waiting,
            ),
            ("ds_origin_sse_open", "SSE tails open now.", |m| &m.sse_open),
            (
                "ds_origin_unsealed_bytes",
                "Bytes of complete chunks waiting to be sealed.",
                |m| &m.unsealed_bytes,
            ),
            (
                "ds_origin_snapshot_staged_bytes",
                "Disk taken by staged snapshot parts.",
                |m| &m.staged_bytes,
            ),
            (
                "ds_origin_snapshot_staged_uploads",
                "Staged snapshot uploads open.",
                |m| &m.staged_uploads,
            ),
            (
                "ds_origin_object_wal_fenced",
                "Stores whose partition a newer owner fenced (they no longer write).",
                |m| &m.object_wal_fenced,
            ),
            (
                "ds_origin_object_wal_checks",
                "Answers without log records waiting for the bucket to vouch that no newer owner exists.",
                |m| &m.object_wal_checks,
            ),
        ];
        for (name, help, f) in gauges {
            let v: i64 = stores.iter().map(|(m, _)| f(m).load(Relaxed)).sum();
            e.gauge(name, help, v as f64);
        }
        let streams: usize = stores.iter().map(|(_, n)| n).sum();
        e.gauge("ds_origin_streams", "Streams held.", streams as f64);
        // Each store of a region origin has its own bound: the fullest
        // one is the one whose appends are refused first.
        let fullest = stores
            .iter()
            .filter_map(|(m, _)| {
                let (_, max) = m.store.get()?;
                Some(m.unsealed_bytes.load(Relaxed).max(0) as f64 / (*max).max(1) as f64)
            })
            .reduce(f64::max);
        if let Some(fullest) = fullest {
            e.gauge(
                "ds_origin_unsealed_ratio",
                "The largest share of --max-unsealed waiting to be sealed in any one store (at 1 its appends answer 503).",
                fullest,
            );
        }
        if let Some((data, max_unsealed)) = stores.iter().find_map(|(m, _)| m.store.get()) {
            // Every store of a region origin is under one data directory.
            e.gauge(
                "ds_origin_max_unsealed_bytes",
                "The bound on bytes waiting to be sealed (--max-unsealed), per store.",
                *max_unsealed as f64,
            );
            if let Ok(fs) = rustix::fs::statvfs(data) {
                let free = fs.f_bavail.saturating_mul(fs.f_frsize);
                let size = fs.f_blocks.saturating_mul(fs.f_frsize);
                e.gauge(
                    "ds_origin_data_disk_free_bytes",
                    "Bytes free for the origin on the data directory's disk.",
                    free as f64,
                )
                .gauge(
                    "ds_origin_data_disk_size_bytes",
                    "Size of the data directory's disk.",
                    size as f64,
                );
            }
        }
        timings.expose(e);
    }
}

/// A series read from one field of every store: name, help, field.
type Field<T> = (&'static str, &'static str, fn(&Metrics) -> &T);

/// The counters each store keeps (beside its per-thread shards), with
/// their series: summed over the stores at a scrape, and what a store
/// let go of hands on (`Metrics::absorb`).
const COUNTERS: [Field<AtomicU64>; 16] = [
    (
        "ds_origin_wal_bytes_total",
        "Bytes written to the local write-ahead log.",
        |m| &m.wal_bytes,
    ),
    (
        "ds_origin_wal_commands_total",
        "Commands (appends and the rest) made durable by group commits.",
        |m| &m.wal_commands,
    ),
    (
        "ds_origin_chunks_sealed_total",
        "Chunks sealed into object storage.",
        |m| &m.chunks_sealed,
    ),
    (
        "ds_origin_sealed_bytes_total",
        "Bytes sealed into object storage.",
        |m| &m.sealed_bytes,
    ),
    (
        "ds_origin_seal_errors_total",
        "Seal attempts that failed and will be retried.",
        |m| &m.seal_errors,
    ),
    (
        "ds_origin_chunk_cache_hits_total",
        "Sealed chunk reads answered from the local chunk cache.",
        |m| &m.chunk_cache_hits,
    ),
    (
        "ds_origin_chunk_cache_misses_total",
        "Sealed chunk reads that fetched the chunk from object storage.",
        |m| &m.chunk_cache_misses,
    ),
    (
        "ds_origin_local_dropped_bytes_total",
        "Sealed bytes removed from local stream files.",
        |m| &m.dropped_bytes,
    ),
    (
        "ds_origin_promotions_total",
        "Streams whose log-only bytes were copied into a file of their own.",
        |m| &m.promotions,
    ),
    (
        "ds_origin_promoted_bytes_total",
        "Bytes copied by promotions.",
        |m| &m.promoted_bytes,
    ),
    (
        "ds_origin_promotion_errors_total",
        "Promotions that failed.",
        |m| &m.promotion_errors,
    ),
    (
        "ds_origin_log_full_refusals_total",
        "Writes refused for want of room in the log (a full disk).",
        |m| &m.log_full,
    ),
    (
        "ds_origin_snapshots_published_total",
        "Snapshots published.",
        |m| &m.snapshots_published,
    ),
    (
        "ds_origin_object_wal_puts_total",
        "Group commits put into the region's WAL in object storage.",
        |m| &m.object_wal_puts,
    ),
    (
        "ds_origin_object_wal_bytes_total",
        "Bytes put into the region's WAL in object storage.",
        |m| &m.object_wal_bytes,
    ),
    (
        "ds_origin_object_wal_retries_total",
        "WAL puts tried again after a passing failure.",
        |m| &m.object_wal_retries,
    ),
];

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
    fn counts_from_many_threads_add_up_and_stores_are_summed() {
        let timings = Arc::new(Timings::default());
        let a = Arc::new(Metrics::with_timings(Arc::clone(&timings)));
        let b = Metrics::with_timings(timings);
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let m = Arc::clone(&a);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        m.request("append", 204, Duration::from_micros(100));
                        m.appended(3);
                        m.append_acknowledged(Duration::from_micros(80));
                        m.served(2);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        b.served(5);
        let _tail = a.sse_guard();
        let mut e = Exposition::default();
        Metrics::expose(&[(&a, 2), (&b, 3)], &a.timings, &mut e);
        let text = e.render();
        for line in [
            "ds_origin_requests_total{route=\"append\",status=\"204\"} 6000\n",
            "ds_origin_appended_bytes_total 18000\n",
            "ds_origin_served_bytes_total 12005\n",
            "ds_origin_append_ack_duration_seconds_count 6000\n",
            "ds_origin_sse_open 1\n",
            "ds_origin_streams 5\n",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
    }

    #[test]
    fn a_store_let_go_of_keeps_its_counts_but_not_its_gauges() {
        let timings = Arc::new(Timings::default());
        let retired = Metrics::with_timings(Arc::clone(&timings));
        let gone = Arc::new(Metrics::with_timings(Arc::clone(&timings)));
        gone.appended(7);
        gone.served(3);
        gone.sealed(100, Duration::from_millis(1));
        gone.set_unsealed(50);
        let _tail = gone.sse_guard();
        retired.absorb(&gone);
        let mut e = Exposition::default();
        Metrics::expose(&[(&retired, 0)], &timings, &mut e);
        let text = e.render();
        for line in [
            "ds_origin_appended_bytes_total 7\n",
            "ds_origin_served_bytes_total 3\n",
            "ds_origin_sealed_bytes_total 100\n",
            "ds_origin_unsealed_bytes 0\n",
            "ds_origin_sse_open 0\n",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
    }
}
