//! What both binaries export at `GET /metrics`, rendered by the Prometheus
//! project's data model through the `prometheus` crate (TiKV's
//! rust-prometheus; see `docs/decisions/0021-metrics.md` for why this one).
//!
//! Each binary keeps its counters where its hot paths want them (sharded
//! atomics, per-store structs summed at scrape time) and hands them over
//! as families to an [`Exposition`] when scraped. Histograms that the hot
//! paths observe count per shard in atomics of their own
//! ([`ShardedHistogram`]) and become the crate's histogram data when
//! scraped; the rare ones (object-store requests) are the crate's own
//! histograms. The crate writes the text: HELP and TYPE for every family,
//! cumulative buckets, label escaping.
//!
//! Names: `ds_origin_*` and `ds_edge_*`, the process's own `process_*`
//! (the standard collector), and `ds_build_info{role,version,revision}`.

pub mod buckets;
mod exposition;
mod process;
mod requests;
mod sharded;

pub use exposition::Exposition;
pub use process::build_revision;
pub use requests::{status_class, Requests};
pub use sharded::{shard_index, ShardedHistogram, ShardedHistogramVec, SHARDS};

/// The content type of the text [`Exposition::render`] writes.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

pub use prometheus::{Histogram, HistogramVec};

/// A histogram named `name`, of `buckets` (seconds or a count).
pub fn histogram(name: &str, help: &str, buckets: &[f64]) -> Histogram {
    Histogram::with_opts(prometheus::HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        .expect("a valid histogram name and buckets")
}

/// A histogram per value of `labels`.
pub fn histogram_vec(name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    HistogramVec::new(
        prometheus::HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .expect("a valid histogram name, labels and buckets")
}

/// Seconds as a histogram takes them.
pub fn seconds(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}
