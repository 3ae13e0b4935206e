//! Histograms written by many threads without sharing a cache line: one
//! library histogram per shard, a thread observing only into its own, and
//! the shards added up when scraped (bucket by bucket: the sum of
//! histograms with the same buckets is the histogram of all observations).
//!
//! Measured on the append path: one histogram observed by both runtime
//! workers (four atomic writes per observation, on lines both cores write)
//! cost more than the whole rest of the metrics.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

use prometheus::core::Collector;
use prometheus::proto::{Bucket, Histogram as HistogramProto, Metric, MetricFamily};

use super::{Histogram, HistogramVec};

/// Shards of every sharded metric; threads take them in turn.
pub const SHARDS: usize = 4;

/// This thread's shard.
pub fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Relaxed) % SHARDS;
    }
    INDEX.with(|i| *i)
}

/// A histogram (without labels) in shards.
pub struct ShardedHistogram {
    shards: Box<[Histogram]>,
}

impl ShardedHistogram {
    pub fn new(name: &str, help: &str, buckets: &[f64]) -> Self {
        ShardedHistogram {
            shards: (0..SHARDS)
                .map(|_| super::histogram(name, help, buckets))
                .collect(),
        }
    }

    pub fn observe(&self, v: f64) {
        self.shards[shard_index()].observe(v);
    }

    /// The one family of all shards.
    pub fn families(&self) -> Vec<MetricFamily> {
        merge(self.shards.iter().flat_map(|h| h.collect()))
    }
}

/// A histogram per value of a fixed list of label sets, in shards: the
/// label sets are known when it is made (routes and classes, kinds), so an
/// observation finds its histogram by index, with no lookup and no lock.
pub struct ShardedHistogramVec {
    vecs: Box<[HistogramVec]>,
    /// Per shard, one slot per label set, made on first use (a label set
    /// never observed makes no series).
    cached: Box<[OnceLock<Histogram>]>,
    sets: Vec<Vec<&'static str>>,
}

impl ShardedHistogramVec {
    /// `sets`: every label set it may observe, each in the order of
    /// `labels`; an observation names one by its index.
    pub fn new(
        name: &str,
        help: &str,
        labels: &[&str],
        buckets: &[f64],
        sets: Vec<Vec<&'static str>>,
    ) -> Self {
        ShardedHistogramVec {
            vecs: (0..SHARDS)
                .map(|_| super::histogram_vec(name, help, labels, buckets))
                .collect(),
            cached: (0..SHARDS * sets.len()).map(|_| OnceLock::new()).collect(),
            sets,
        }
    }

    /// Observes `v` under the label set at `set`.
    pub fn observe(&self, set: usize, v: f64) {
        let shard = shard_index();
        self.cached[shard * self.sets.len() + set]
            .get_or_init(|| self.vecs[shard].with_label_values(&self.sets[set]))
            .observe(v);
    }

    /// The one family of all shards.
    pub fn families(&self) -> Vec<MetricFamily> {
        merge(self.vecs.iter().flat_map(|h| h.collect()))
    }
}

/// Families of the same name, and their series of the same labels, added
/// up (histograms only: what the shards hold).
fn merge(families: impl IntoIterator<Item = MetricFamily>) -> Vec<MetricFamily> {
    let mut out: Vec<MetricFamily> = Vec::new();
    for mut f in families {
        let metrics = f.take_metric();
        let i = match out.iter().position(|o| o.name() == f.name()) {
            Some(i) => i,
            None => {
                out.push(f);
                out.len() - 1
            }
        };
        let into = out[i].mut_metric();
        for m in metrics {
            match into.iter_mut().find(|o| o.get_label() == m.get_label()) {
                Some(o) => add(o, &m),
                None => into.push(m),
            }
        }
    }
    out
}

fn add(into: &mut Metric, m: &Metric) {
    let (a, b) = (into.get_histogram(), m.get_histogram());
    let mut sum = HistogramProto::default();
    sum.set_sample_count(a.get_sample_count() + b.get_sample_count());
    sum.set_sample_sum(a.get_sample_sum() + b.get_sample_sum());
    sum.set_bucket(
        a.get_bucket()
            .iter()
            .zip(b.get_bucket())
            .map(|(x, y)| {
                let mut bucket = Bucket::default();
                bucket.set_upper_bound(x.upper_bound());
                bucket.set_cumulative_count(x.cumulative_count() + y.cumulative_count());
                bucket
            })
            .collect(),
    );
    into.set_histogram(sum);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Exposition;
    use std::sync::Arc;

    #[test]
    fn shards_written_by_many_threads_add_up_to_one_histogram() {
        let h = Arc::new(ShardedHistogram::new("ds_t_seconds", "Time.", &[0.1, 1.0]));
        let v = Arc::new(ShardedHistogramVec::new(
            "ds_v_seconds",
            "Time by kind.",
            &["kind"],
            &[0.1, 1.0],
            vec![vec!["a"], vec!["b"]],
        ));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let (h, v) = (Arc::clone(&h), Arc::clone(&v));
                std::thread::spawn(move || {
                    for i in 0..100 {
                        h.observe(if i % 2 == 0 { 0.0625 } else { 0.5 });
                        v.observe(t % 2, 0.05);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut e = Exposition::default();
        e.families_of(h.families()).families_of(v.families());
        let text = e.render();
        for line in [
            "ds_t_seconds_bucket{le=\"0.1\"} 300\n",
            "ds_t_seconds_bucket{le=\"1\"} 600\n",
            "ds_t_seconds_count 600\n",
            "ds_t_seconds_sum 168.75\n",
            "ds_v_seconds_count{kind=\"a\"} 300\n",
            "ds_v_seconds_count{kind=\"b\"} 300\n",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        assert_eq!(text.matches("# TYPE ds_v_seconds histogram").count(), 1);
    }
}
