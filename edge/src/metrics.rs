//! Every metric the edge exports, named in one place and rendered as
//! Prometheus text at `GET /metrics`. Names start with `edge_` so one
//! scrape config can take origin and edge side by side.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Routes counted in `edge_requests_total`.
pub const ROUTES: [&str; 12] = [
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
    "other",
];

/// What the edge asks the origin, counted in `edge_upstream_requests_total`.
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

const UPSTREAM: [(Upstream, &str); 7] = [
    (Upstream::Forward, "forward"),
    (Upstream::LongPoll, "long_poll"),
    (Upstream::Chunk, "chunk"),
    (Upstream::Tail, "tail"),
    (Upstream::SseRead, "sse_read"),
    (Upstream::Object, "object"),
    (Upstream::Feed, "feed"),
];

/// Request counters by route and status, lock-free: statuses 100..=599 each
/// have a slot.
struct RequestCounts([[AtomicU64; 500]; ROUTES.len()]);

impl Default for RequestCounts {
    fn default() -> Self {
        RequestCounts(std::array::from_fn(|_| {
            std::array::from_fn(|_| AtomicU64::new(0))
        }))
    }
}

#[derive(Default)]
pub struct Metrics {
    requests: RequestCounts,
    upstream: [AtomicU64; UPSTREAM.len()],
    upstream_errors: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    cache_fill_bytes: AtomicU64,
    cache_served_bytes: AtomicU64,
    bytes_served: AtomicU64,
    collapsed_waiters: AtomicU64,
    long_polls_waiting: AtomicI64,
    long_poll_flights: AtomicI64,
    sse_open: AtomicI64,
    sse_dropped_slow: AtomicU64,
    sse_feeds_over_budget: AtomicU64,
    upstream_tails: AtomicI64,
    /// Partitions whose invalidation feeds are tailed (a region's count).
    feed_partitions_followed: AtomicI64,
    invalidations: AtomicU64,
    feed_losses: AtomicU64,
    not_vouched: AtomicU64,
}

/// Numbers `/metrics` reads from elsewhere at render time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sampled {
    pub cache_weighted_bytes: u64,
    pub cache_entries: u64,
    /// The invalidation feed is caught up and answering.
    pub feed_live: bool,
}

impl Metrics {
    pub fn request(&self, route: &'static str, status: u16) {
        let r = ROUTES
            .iter()
            .position(|x| *x == route)
            .unwrap_or(ROUTES.len() - 1);
        let s = usize::from(status.clamp(100, 599) - 100);
        self.requests.0[r][s].fetch_add(1, Relaxed);
    }

    pub fn upstream(&self, kind: Upstream) {
        let i = UPSTREAM
            .iter()
            .position(|(k, _)| *k == kind)
            .expect("every kind is listed");
        self.upstream[i].fetch_add(1, Relaxed);
    }

    pub fn upstream_error(&self) {
        self.upstream_errors.fetch_add(1, Relaxed);
    }

    pub fn cache_hit(&self, bytes: usize) {
        self.cache_hits.fetch_add(1, Relaxed);
        self.cache_served_bytes.fetch_add(bytes as u64, Relaxed);
    }

    pub fn cache_miss(&self, filled_bytes: usize) {
        self.cache_misses.fetch_add(1, Relaxed);
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

    /// An event of the origin's invalidation feed.
    pub fn invalidation(&self) {
        self.invalidations.fetch_add(1, Relaxed);
    }

    /// The feed was lost (an error, a gap, a restart of the origin).
    /// The feed now tails this many partitions' feeds.
    pub fn feed_partitions(&self, count: u32) {
        self.feed_partitions_followed
            .store(i64::from(count), Relaxed);
    }

    pub fn feed_lost(&self) {
        self.feed_losses.fetch_add(1, Relaxed);
    }

    /// Something kept was not served: the feed no longer vouched for it.
    pub fn not_vouched(&self) {
        self.not_vouched.fetch_add(1, Relaxed);
    }

    pub fn sse_dropped_slow(&self) {
        self.sse_dropped_slow.fetch_add(1, Relaxed);
    }

    pub fn sse_feed_over_budget(&self) {
        self.sse_feeds_over_budget.fetch_add(1, Relaxed);
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

    /// Counts a stream's shared upstream tail for as long as the guard lives.
    pub fn tail_guard(self: &Arc<Self>) -> Gauge {
        Gauge::new(Arc::clone(self), |m| &m.upstream_tails)
    }

    pub fn render(&self, sampled: Sampled) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# TYPE edge_requests_total counter");
        for (route, counts) in ROUTES.iter().zip(&self.requests.0) {
            for (i, n) in counts.iter().enumerate() {
                let n = n.load(Relaxed);
                if n > 0 {
                    let status = i + 100;
                    let _ = writeln!(
                        out,
                        "edge_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                    );
                }
            }
        }
        let _ = writeln!(out, "# TYPE edge_upstream_requests_total counter");
        for ((_, kind), n) in UPSTREAM.iter().zip(&self.upstream) {
            let _ = writeln!(
                out,
                "edge_upstream_requests_total{{kind=\"{kind}\"}} {}",
                n.load(Relaxed)
            );
        }
        let counters = [
            ("edge_upstream_errors_total", &self.upstream_errors),
            ("edge_cache_hits_total", &self.cache_hits),
            ("edge_cache_misses_total", &self.cache_misses),
            ("edge_cache_fill_bytes_total", &self.cache_fill_bytes),
            ("edge_cache_served_bytes_total", &self.cache_served_bytes),
            ("edge_bytes_served_total", &self.bytes_served),
            ("edge_collapsed_waiters_total", &self.collapsed_waiters),
            ("edge_sse_dropped_slow_total", &self.sse_dropped_slow),
            (
                "edge_sse_feeds_over_budget_total",
                &self.sse_feeds_over_budget,
            ),
            ("edge_invalidations_total", &self.invalidations),
            ("edge_feed_losses_total", &self.feed_losses),
            ("edge_not_vouched_total", &self.not_vouched),
        ];
        for (name, v) in counters {
            let _ = writeln!(out, "# TYPE {name} counter\n{name} {}", v.load(Relaxed));
        }
        let gauges = [
            ("edge_long_polls_waiting", &self.long_polls_waiting),
            ("edge_long_poll_flights", &self.long_poll_flights),
            ("edge_sse_open", &self.sse_open),
            ("edge_upstream_tails", &self.upstream_tails),
            ("edge_feed_partitions", &self.feed_partitions_followed),
        ];
        for (name, v) in gauges {
            let _ = writeln!(out, "# TYPE {name} gauge\n{name} {}", v.load(Relaxed));
        }
        let _ = writeln!(
            out,
            "# TYPE edge_cache_bytes gauge\nedge_cache_bytes {}",
            sampled.cache_weighted_bytes
        );
        let _ = writeln!(
            out,
            "# TYPE edge_cache_entries gauge\nedge_cache_entries {}",
            sampled.cache_entries
        );
        let _ = writeln!(
            out,
            "# TYPE edge_feed_live gauge\nedge_feed_live {}",
            u8::from(sampled.feed_live)
        );
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
    fn renders_counters_and_gauges() {
        let m = Arc::new(Metrics::default());
        m.request("chunk", 200);
        m.upstream(Upstream::LongPoll);
        let g = m.waiter_guard();
        let text = m.render(Sampled::default());
        assert!(text.contains("edge_requests_total{route=\"chunk\",status=\"200\"} 1"));
        assert!(text.contains("edge_upstream_requests_total{kind=\"long_poll\"} 1"));
        assert!(text.contains("edge_long_polls_waiting 1"));
        drop(g);
        assert!(m
            .render(Sampled::default())
            .contains("edge_long_polls_waiting 0"));
    }
}
