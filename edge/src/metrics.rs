//! Every metric the edge exports, named in one place and handed to the
//! shell's [`Exposition`] at `GET /metrics`. Names start with `ds_edge_`
//! (the origin's with `ds_origin_`), so one scrape config takes both side
//! by side (`docs/decisions/0021-metrics.md`).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::core::upstream_protocol::Protocol;
use shell::metrics::{buckets, Exposition, Requests, ShardedHistogram, ShardedHistogramVec};

/// Routes counted in `ds_edge_requests_total`.
pub const ROUTES: &[&str] = &[
    "create",
    "append",
    "delete",
    "head",
    "read",
    "long_poll",
    "sse",
    "chunk",
    "snapshot",
    "preflight",
    "metrics",
    "forward",
    "refused",
    "admin",
    "control",
    "list",
    "other",
];

/// What the edge asks the origin, counted in
/// `ds_edge_upstream_requests_total` and timed in
/// `ds_edge_upstream_request_duration_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// A request passed through unchanged (writes, HEAD, reads).
    Forward,
    /// One shared long-poll for every collapsed waiter.
    LongPoll,
    /// A chunk or snapshot cache miss.
    Chunk,
    /// A long-poll of a stream's shared SSE tail.
    Tail,
    /// A catch-up read of one SSE reader.
    SseRead,
    /// A sealed chunk read from the bucket.
    Object,
    /// A long-poll of the origin's invalidation feed.
    Feed,
}

impl Upstream {
    /// Whether requests of this kind wait at the origin for what comes
    /// (sent over HTTP/2, many to a connection: `upstream::multiplexed`).
    pub fn waits(self) -> bool {
        matches!(self, Upstream::LongPoll | Upstream::Tail | Upstream::Feed)
    }
}

/// The kinds' label values, in the enum's order (a kind is its index).
const UPSTREAM: [&str; 7] = [
    "forward",
    "long_poll",
    "chunk",
    "tail",
    "sse_read",
    "object",
    "feed",
];

/// What the edge keeps: sealed chunks and snapshots (`chunk_cache`) and
/// streams' recent states (`http::stream_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    Chunk,
    Snapshot,
    State,
}

/// The kinds' label values, in the enum's order (a kind is its index).
const KEPT: [&str; 3] = ["chunk", "snapshot", "state"];

/// The label sets of the delivery lag.
pub const SSE: usize = 0;
pub const LONG_POLL: usize = 1;

pub struct Metrics {
    requests: Requests,
    upstream: [AtomicU64; UPSTREAM.len()],
    /// One label set per [`UPSTREAM`] kind, in its order.
    upstream_durations: ShardedHistogramVec,
    upstream_errors: AtomicU64,
    cache_hits: [AtomicU64; KEPT.len()],
    cache_misses: [AtomicU64; KEPT.len()],
    cache_fill_bytes: AtomicU64,
    cache_served_bytes: AtomicU64,
    bytes_served: AtomicU64,
    collapsed_waiters: AtomicU64,
    sse_reads_collapsed: AtomicU64,
    /// Waiters one upstream long-poll answered.
    flight_waiters: ShardedHistogram,
    /// From a frame's arrival from the origin to its write to a reader:
    /// [`SSE`], [`LONG_POLL`].
    delivery: ShardedHistogramVec,
    long_polls_waiting: AtomicI64,
    long_poll_flights: AtomicI64,
    sse_open: AtomicI64,
    sse_dropped_slow: AtomicU64,
    sse_writer_behind: AtomicU64,
    sse_joins_overran: AtomicU64,
    sse_rings_over_budget: AtomicU64,
    upstream_live_reads: AtomicI64,
    /// HTTP/2 connections to the origins open now, and waiting requests
    /// on them (`upstream::multiplexed`).
    multiplexed_connections: AtomicI64,
    multiplexed_streams: AtomicI64,
    /// Waiting requests in flight over HTTP/1.1 (to origins without
    /// HTTP/2: `upstream::waiting`).
    http1_waiting: AtomicI64,
    /// Each origin's protocol for waiting requests (`None`: not found out
    /// yet), by its `scheme://authority`; set when it changes.
    upstream_protocols: parking_lot::Mutex<Vec<(Arc<str>, Option<Protocol>)>>,
    /// Partitions whose invalidation feeds are tailed (a region's count).
    feed_partitions_followed: AtomicI64,
    invalidations: AtomicU64,
    feed_losses: AtomicU64,
    not_covered: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Requests::new("ds_edge", ROUTES),
            upstream: Default::default(),
            upstream_durations: ShardedHistogramVec::new(
                "ds_edge_upstream_request_duration_seconds",
                "Time from sending a request to the origin (or the bucket) to its answer's head, by kind.",
                &["kind"],
                buckets::SECONDS,
                UPSTREAM.iter().map(|k| vec![*k]).collect(),
            ),
            upstream_errors: AtomicU64::new(0),
            cache_hits: Default::default(),
            cache_misses: Default::default(),
            cache_fill_bytes: AtomicU64::new(0),
            cache_served_bytes: AtomicU64::new(0),
            bytes_served: AtomicU64::new(0),
            collapsed_waiters: AtomicU64::new(0),
            sse_reads_collapsed: AtomicU64::new(0),
            flight_waiters: ShardedHistogram::new(
                "ds_edge_long_poll_flight_waiters",
                "Readers one shared upstream long-poll answered (the collapse).",
                buckets::COUNT,
            ),
            delivery: ShardedHistogramVec::new(
                "ds_edge_delivery_lag_seconds",
                "Time from bytes arriving from the origin to their write to a reader, by kind (sse, long_poll).",
                &["kind"],
                buckets::LAG_SECONDS,
                vec![vec!["sse"], vec!["long_poll"]],
            ),
            long_polls_waiting: AtomicI64::new(0),
            long_poll_flights: AtomicI64::new(0),
            sse_open: AtomicI64::new(0),
            sse_dropped_slow: AtomicU64::new(0),
            sse_writer_behind: AtomicU64::new(0),
            sse_joins_overran: AtomicU64::new(0),
            sse_rings_over_budget: AtomicU64::new(0),
            upstream_live_reads: AtomicI64::new(0),
            multiplexed_connections: AtomicI64::new(0),
            multiplexed_streams: AtomicI64::new(0),
            http1_waiting: AtomicI64::new(0),
            upstream_protocols: Default::default(),
            feed_partitions_followed: AtomicI64::new(0),
            invalidations: AtomicU64::new(0),
            feed_losses: AtomicU64::new(0),
            not_covered: AtomicU64::new(0),
        }
    }
}

/// Numbers `/metrics` reads from elsewhere at scrape time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sampled {
    pub cache_weighted_bytes: u64,
    pub cache_entries: u64,
    /// The invalidation feed is caught up and answering.
    pub feed_live: bool,
}

impl Metrics {
    /// Counts one answered request and how long it took.
    pub fn request(&self, route: &'static str, status: u16, took: Duration) {
        self.requests.answered(route, status, took);
    }

    pub fn upstream(&self, kind: Upstream) {
        self.upstream[kind as usize].fetch_add(1, Relaxed);
    }

    /// How long one upstream request took to answer (or fail).
    pub fn upstream_took(&self, kind: Upstream, took: Duration) {
        self.upstream_durations
            .observe(kind as usize, took.as_secs_f64());
    }

    pub fn upstream_error(&self) {
        self.upstream_errors.fetch_add(1, Relaxed);
    }

    pub fn cache_hit(&self, kind: Kept, bytes: usize) {
        self.cache_hits[kind as usize].fetch_add(1, Relaxed);
        self.cache_served_bytes.fetch_add(bytes as u64, Relaxed);
    }

    pub fn cache_miss(&self, kind: Kept, filled_bytes: usize) {
        self.cache_misses[kind as usize].fetch_add(1, Relaxed);
        self.cache_fill_bytes
            .fetch_add(filled_bytes as u64, Relaxed);
    }

    pub fn served(&self, bytes: usize) {
        self.bytes_served.fetch_add(bytes as u64, Relaxed);
    }

    /// A long-poll waiter joined a shared upstream wait someone else started.
    pub fn collapsed(&self) {
        self.collapsed_waiters.fetch_add(1, Relaxed);
    }

    /// An SSE reader's catch-up read joined one in flight for the same range.
    pub fn sse_read_collapsed(&self) {
        self.sse_reads_collapsed.fetch_add(1, Relaxed);
    }

    /// Long-poll waiters and SSE reads that joined a flight, for tests.
    #[cfg(test)]
    pub fn collapsed_counts(&self) -> (u64, u64) {
        (
            self.collapsed_waiters.load(Relaxed),
            self.sse_reads_collapsed.load(Relaxed),
        )
    }

    /// A shared upstream long-poll landed with `waiters` readers on it.
    pub fn flight_landed(&self, waiters: usize) {
        self.flight_waiters.observe(waiters as f64);
    }

    /// Bytes that arrived from the origin `lag` ago were written to a
    /// reader ([`SSE`]) or answered a parked long-poll ([`LONG_POLL`]).
    pub fn delivered(&self, kind: usize, lag: Duration) {
        self.delivery.observe(kind, lag.as_secs_f64());
    }

    /// An event of the origin's invalidation feed.
    pub fn invalidation(&self) {
        self.invalidations.fetch_add(1, Relaxed);
    }

    /// The feed now tails this many partitions' feeds.
    pub fn feed_partitions(&self, count: u32) {
        self.feed_partitions_followed
            .store(i64::from(count), Relaxed);
    }

    /// The feed was lost (an error, a gap, a restart of the origin).
    pub fn feed_lost(&self) {
        self.feed_losses.fetch_add(1, Relaxed);
    }

    /// Something kept was not served: the feed no longer covered it.
    pub fn not_covered(&self) {
        self.not_covered.fetch_add(1, Relaxed);
    }

    pub fn sse_dropped_slow(&self) {
        self.sse_dropped_slow.fetch_add(1, Relaxed);
    }

    /// A hub's writer fell behind its feed (its readers caught up on their
    /// own: `fanout::writer`).
    pub fn sse_writer_behind(&self) {
        self.sse_writer_behind.fetch_add(1, Relaxed);
    }

    /// A reader's own subscription overran on its way to a writer (it
    /// caught up on its own and joined again: `fanout::writer`).
    pub fn sse_join_overran(&self) {
        self.sse_joins_overran.fetch_add(1, Relaxed);
    }

    pub fn sse_ring_over_budget(&self) {
        self.sse_rings_over_budget.fetch_add(1, Relaxed);
    }

    /// Counts a waiting long-poller for as long as the guard lives.
    pub fn waiter_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.long_polls_waiting)
    }

    /// Counts one shared upstream long-poll for as long as the guard lives.
    pub fn flight_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.long_poll_flights)
    }

    /// Counts an open SSE reader for as long as the guard lives.
    pub fn sse_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.sse_open)
    }

    /// Counts a stream's shared upstream SSE read for as long as the guard lives.
    pub fn upstream_live_read_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.upstream_live_reads)
    }

    /// Counts an HTTP/2 connection to an origin for as long as the guard
    /// lives (`upstream::multiplexed`).
    pub fn multiplexed_connection_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.multiplexed_connections)
    }

    /// Counts a waiting request on one of them for as long as the guard
    /// lives.
    pub fn multiplexed_stream_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.multiplexed_streams)
    }

    /// Counts a waiting request over HTTP/1.1 for as long as the guard
    /// lives.
    pub fn http1_waiting_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.http1_waiting)
    }

    /// Origin `origin`'s protocol for waiting requests is now `protocol`.
    pub fn set_upstream_protocol(&self, origin: &Arc<str>, protocol: Option<Protocol>) {
        let mut all = self.upstream_protocols.lock();
        match all.iter_mut().find(|(o, _)| o == origin) {
            Some((_, p)) => *p = protocol,
            None => all.push((Arc::clone(origin), protocol)),
        }
    }

    /// Every family, with the numbers read at scrape time.
    /// Long by design: one table row per series, read as the list of
    /// what the edge exposes (splitting it would scatter that list).
    pub fn expose(&self, sampled: Sampled, e: &mut Exposition) {
        Requests::expose(&[&self.requests], e);
        e.counters(
            "ds_edge_upstream_requests_total",
            "Requests the edge sent to the origin or the bucket, by kind.",
            UPSTREAM
                .iter()
                .zip(&self.upstream)
                .map(|(kind, n)| ([("kind", *kind)], n.load(Relaxed))),
        );
        e.counters(
            "ds_edge_cache_hits_total",
            "Answers served from what the edge keeps, by kind.",
            KEPT.iter()
                .zip(&self.cache_hits)
                .map(|(kind, n)| ([("kind", *kind)], n.load(Relaxed))),
        );
        e.counters(
            "ds_edge_cache_misses_total",
            "Lookups that asked the origin, by kind.",
            KEPT.iter()
                .zip(&self.cache_misses)
                .map(|(kind, n)| ([("kind", *kind)], n.load(Relaxed))),
        );
        for (name, help, v) in [
            (
                "ds_edge_upstream_errors_total",
                "Upstream requests that failed (no answer, or an unreadable one).",
                &self.upstream_errors,
            ),
            (
                "ds_edge_cache_fill_bytes_total",
                "Bytes put into the chunk cache.",
                &self.cache_fill_bytes,
            ),
            (
                "ds_edge_cache_served_bytes_total",
                "Bytes served from the chunk cache.",
                &self.cache_served_bytes,
            ),
            (
                "ds_edge_served_bytes_total",
                "Stream bytes written into answers.",
                &self.bytes_served,
            ),
            (
                "ds_edge_collapsed_waiters_total",
                "Long-poll waiters that joined a shared upstream wait.",
                &self.collapsed_waiters,
            ),
            (
                "ds_edge_sse_reads_collapsed_total",
                "SSE readers' catch-up reads that joined one in flight for the same range.",
                &self.sse_reads_collapsed,
            ),
            (
                "ds_edge_sse_dropped_slow_total",
                "SSE readers ended for not draining their socket.",
                &self.sse_dropped_slow,
            ),
            (
                "ds_edge_sse_writers_behind_total",
                "Times a hub's writer fell behind its feed (its readers caught up on their own).",
                &self.sse_writer_behind,
            ),
            (
                "ds_edge_sse_joins_overran_total",
                "SSE readers whose own subscription overran on their way to a hub's writer (they caught up on their own).",
                &self.sse_joins_overran,
            ),
            (
                "ds_edge_sse_rings_over_budget_total",
                "Fan-out rings ended for want of room in sse_ring_bytes.",
                &self.sse_rings_over_budget,
            ),
            (
                "ds_edge_invalidations_total",
                "Events of the origin's invalidation feed.",
                &self.invalidations,
            ),
            (
                "ds_edge_feed_losses_total",
                "Times the invalidation feed was lost (everything kept was voided).",
                &self.feed_losses,
            ),
            (
                "ds_edge_not_covered_total",
                "Kept answers not served because the invalidation feed no longer covered them.",
                &self.not_covered,
            ),
        ] {
            e.counter(name, help, v.load(Relaxed));
        }
        for (name, help, v) in [
            (
                "ds_edge_long_polls_waiting",
                "Long-poll readers parked now.",
                &self.long_polls_waiting,
            ),
            (
                "ds_edge_long_poll_flights",
                "Shared upstream long-polls in flight.",
                &self.long_poll_flights,
            ),
            ("ds_edge_sse_open", "SSE readers open now.", &self.sse_open),
            (
                "ds_edge_upstream_live_reads",
                "Shared upstream SSE reads open now (one per tailed stream).",
                &self.upstream_live_reads,
            ),
            (
                "ds_edge_feed_partitions",
                "Partitions whose invalidation feeds are tailed.",
                &self.feed_partitions_followed,
            ),
            (
                "ds_edge_upstream_h2_connections",
                "HTTP/2 connections to the origins that waiting requests (tails, long-polls, the feed) share, open now.",
                &self.multiplexed_connections,
            ),
            (
                "ds_edge_upstream_h2_streams",
                "Waiting requests in flight on those connections now.",
                &self.multiplexed_streams,
            ),
            (
                "ds_edge_upstream_http1_waiting",
                "Waiting requests in flight over HTTP/1.1, a connection each, to origins that do not speak HTTP/2 now.",
                &self.http1_waiting,
            ),
        ] {
            e.gauge(name, help, v.load(Relaxed) as f64);
        }
        {
            let protocols = self.upstream_protocols.lock();
            e.gauges(
                "ds_edge_upstream_protocol",
                "1 for the protocol each origin's waiting requests take now (h2: many to a connection; http1: a connection each); 0 for the other, and for both while not found out yet.",
                protocols.iter().flat_map(|(origin, now)| {
                    [Protocol::H2, Protocol::Http1].map(|p| {
                        (
                            [("origin", &**origin), ("protocol", p.label())],
                            f64::from(u8::from(*now == Some(p))),
                        )
                    })
                }),
            );
        }
        e.gauge(
            "ds_edge_cache_bytes",
            "Weighted bytes the chunk cache holds.",
            sampled.cache_weighted_bytes as f64,
        )
        .gauge(
            "ds_edge_cache_entries",
            "Entries the chunk cache holds.",
            sampled.cache_entries as f64,
        )
        .gauge(
            "ds_edge_feed_live",
            "1 while the invalidation feed is caught up and answering.",
            f64::from(u8::from(sampled.feed_live)),
        );
        e.families_of(self.upstream_durations.families())
            .families_of(self.flight_waiters.families())
            .families_of(self.delivery.families());
        e.deprecated(RENAMED);
    }
}

/// Series renamed for one vocabulary (`docs/glossary.md`), also exposed
/// under their old names for one release (`shell::renamed`): (new, old).
pub const RENAMED: &[(&str, &str)] = &[
    (
        "ds_edge_sse_rings_over_budget_total",
        "ds_edge_sse_feeds_over_budget_total",
    ),
    ("ds_edge_not_covered_total", "ds_edge_not_vouched_total"),
    ("ds_edge_upstream_live_reads", "ds_edge_upstream_tails"),
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

    fn render(m: &Metrics) -> String {
        let mut e = Exposition::default();
        m.expose(Sampled::default(), &mut e);
        e.render()
    }

    #[test]
    fn renders_counters_gauges_and_histograms() {
        let m = Arc::new(Metrics::default());
        m.request("chunk", 200, Duration::from_millis(1));
        m.upstream(Upstream::LongPoll);
        m.upstream_took(Upstream::LongPoll, Duration::from_millis(3));
        m.cache_hit(Kept::Snapshot, 10);
        m.flight_landed(3);
        let g = m.waiter_guard();
        let text = render(&m);
        for line in [
            "ds_edge_requests_total{route=\"chunk\",status=\"200\"} 1\n",
            "ds_edge_upstream_requests_total{kind=\"long_poll\"} 1\n",
            "ds_edge_cache_hits_total{kind=\"snapshot\"} 1\n",
            "ds_edge_cache_hits_total{kind=\"chunk\"} 0\n",
            "ds_edge_long_polls_waiting 1\n",
            "ds_edge_upstream_request_duration_seconds_count{kind=\"long_poll\"} 1\n",
            "ds_edge_long_poll_flight_waiters_sum 3\n",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        drop(g);
        assert!(render(&m).contains("ds_edge_long_polls_waiting 0\n"));
    }
}
