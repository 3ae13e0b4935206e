//! Requests by route and status, and their durations by route and status
//! class: the one request series both binaries export.
//!
//! Counts are kept per shard, a thread writing only its own: one counter
//! written by both runtime workers moved its cache line between the cores
//! on every append, a measurable share of the append path on a two-core
//! machine. Durations are the library's histograms, one per route and
//! status class, made on first use (a route never asked makes no series).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::sharded::{shard_index, ShardedHistogramVec, SHARDS};
use super::{buckets, Exposition};

/// Statuses 100..=599 each have a slot.
const STATUSES: usize = 500;

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The index in [`CLASSES`] of a status (anything out of range counts as
/// `5xx`).
fn class_index(status: u16) -> usize {
    match status {
        100..=199 => 0,
        200..=299 => 1,
        300..=399 => 2,
        400..=499 => 3,
        _ => 4,
    }
}

/// `2xx` for 204 and so on (anything out of range counts as `5xx`).
pub fn status_class(status: u16) -> &'static str {
    CLASSES[class_index(status)]
}

/// One shard: a slot per route and status, an allocation of its own (a
/// thread writes only its shard's).
struct Shard(Box<[AtomicU64]>);

/// The request series of one binary, for its fixed list of routes (an
/// unknown route counts as the last one).
pub struct Requests {
    prefix: &'static str,
    routes: &'static [&'static str],
    shards: Box<[Shard]>,
    /// One label set per route and class, `route * CLASSES.len() + class`.
    durations: ShardedHistogramVec,
}

impl Requests {
    /// Series named `{prefix}_requests_total` and
    /// `{prefix}_request_duration_seconds`.
    pub fn new(prefix: &'static str, routes: &'static [&'static str]) -> Requests {
        let slots = routes.len() * STATUSES;
        Requests {
            prefix,
            routes,
            shards: (0..SHARDS)
                .map(|_| Shard((0..slots).map(|_| AtomicU64::new(0)).collect()))
                .collect(),
            durations: ShardedHistogramVec::new(
                &format!("{prefix}_request_duration_seconds"),
                "Time from a request's arrival to its answer's head (a tail's \
                 head, not its end), by route and status class.",
                &["route", "class"],
                buckets::SECONDS,
                routes
                    .iter()
                    .flat_map(|r| CLASSES.iter().map(move |c| vec![*r, *c]))
                    .collect(),
            ),
        }
    }

    fn route_index(&self, route: &str) -> usize {
        self.routes
            .iter()
            .position(|x| *x == route)
            .unwrap_or(self.routes.len() - 1)
    }

    /// Counts one answered request and how long it took.
    pub fn answered(&self, route: &str, status: u16, took: Duration) {
        let r = self.route_index(route);
        let s = usize::from(status.clamp(100, 599) - 100);
        self.shards[shard_index()].0[r * STATUSES + s].fetch_add(1, Relaxed);
        self.durations
            .observe(r * CLASSES.len() + class_index(status), took.as_secs_f64());
    }

    /// The count of (route, status) so far.
    pub fn total(&self, route: &str, status: u16) -> u64 {
        let r = self.route_index(route);
        let s = usize::from(status.clamp(100, 599) - 100);
        self.shards
            .iter()
            .map(|sh| sh.0[r * STATUSES + s].load(Relaxed))
            .sum()
    }

    /// Adds both families, summing the counts of every `Requests` in
    /// `all` (a region origin's stores each have their own); durations
    /// are taken from `all[0]` (they are shared, see the binaries).
    pub fn expose(all: &[&Requests], e: &mut Exposition) {
        let Some(first) = all.first() else { return };
        let status_names: Vec<String> = (100..600).map(|s: u16| s.to_string()).collect();
        let mut series = Vec::new();
        for (r, route) in first.routes.iter().enumerate() {
            for (i, status) in status_names.iter().enumerate() {
                let n: u64 = all
                    .iter()
                    .flat_map(|q| q.shards.iter())
                    .map(|sh| sh.0[r * STATUSES + i].load(Relaxed))
                    .sum();
                if n > 0 {
                    series.push(([("route", *route), ("status", status.as_str())], n));
                }
            }
        }
        e.counters(
            &format!("{}_requests_total", first.prefix),
            "Requests answered, by route and status.",
            series,
        );
        e.families_of(first.durations.families());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const ROUTES: &[&str] = &["append", "read", "other"];

    #[test]
    fn counts_from_many_threads_add_up_and_durations_are_classed() {
        let q = Arc::new(Requests::new("ds_test", ROUTES));
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let q = Arc::clone(&q);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        q.answered("append", 204, Duration::from_micros(300));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        q.answered("nonsense", 404, Duration::from_millis(2));
        assert_eq!(q.total("append", 204), 6000);
        let mut e = Exposition::default();
        Requests::expose(&[&q, &q], &mut e);
        let text = e.render();
        assert!(
            text.contains("ds_test_requests_total{route=\"append\",status=\"204\"} 12000\n"),
            "{text}"
        );
        assert!(text.contains("ds_test_requests_total{route=\"other\",status=\"404\"} 2\n"));
        assert!(text.contains(
            "ds_test_request_duration_seconds_bucket{class=\"2xx\",route=\"append\",le=\"0.0005\"} 6000\n"
        ), "{text}");
        assert!(text
            .contains("ds_test_request_duration_seconds_count{class=\"4xx\",route=\"other\"} 1\n"));
    }

    #[test]
    fn status_classes() {
        assert_eq!(status_class(101), "1xx");
        assert_eq!(status_class(204), "2xx");
        assert_eq!(status_class(304), "3xx");
        assert_eq!(status_class(429), "4xx");
        assert_eq!(status_class(503), "5xx");
        assert_eq!(status_class(42), "5xx");
    }
}
