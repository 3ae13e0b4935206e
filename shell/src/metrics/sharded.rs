//! Histograms written by many threads without sharing a cache line, at
//! the cost of two uncontended atomic adds per observation: each shard
//! counts its observations per bucket and adds up their sum, a thread
//! writing only its own shard, and a scrape adds the shards up and hands
//! the totals to the library as its histogram data (`proto::Histogram`),
//! which the library's encoder writes like any of its own (cumulative
//! buckets, `+Inf`, `_sum`, `_count`).
//!
//! Why not the library's `Histogram` per shard: its `observe` makes four
//! atomic writes (a hot/cold swap that keeps `_count` and the buckets
//! consistent under concurrent scrapes) and costs ~300 instructions; on
//! the append path, two of them were a measurable share of the metrics'
//! cost (decision 0021). A scrape here may see a bucket's count a moment
//! before its sum: Prometheus tolerates that skew, and it is gone by the
//! next scrape. One histogram observed by both runtime workers without
//! shards (its lines written by both cores) cost more than the whole rest
//! of the metrics.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use prometheus::proto::{Bucket, Histogram as HistogramProto, Metric, MetricFamily, MetricType};

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

/// Most bucket bounds a sharded histogram takes (the counts then fill
/// one 128-byte line with the count past every bound).
pub const MAX_BOUNDS: usize = 15;

/// One shard's observations of one series: a count per bucket (the last
/// for values past every bound) and the sum, inline on lines of their own
/// (no other shard's counts share them).
#[repr(align(128))]
struct Counts {
    buckets: [AtomicU64; MAX_BOUNDS + 1],
    /// The sum's `f64` bits.
    sum: AtomicU64,
}

impl Counts {
    fn new() -> Counts {
        Counts {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    fn observe(&self, bounds: &[f64], v: f64) {
        // A bucket counts the values at most its bound (a NaN none of
        // them: it lands past every bound, as in the library).
        let i = bounds.partition_point(|b| {
            v.partial_cmp(b) == Some(std::cmp::Ordering::Greater) || v.is_nan()
        });
        self.buckets[i].fetch_add(1, Relaxed);
        // Only this shard's threads add here: the exchange rarely retries.
        let _ = self.sum.fetch_update(Relaxed, Relaxed, |s| {
            Some((f64::from_bits(s) + v).to_bits())
        });
    }
}

/// The bucket bounds, and one series' counts per shard, added up.
struct Series {
    shards: Box<[Counts]>,
}

impl Series {
    fn new(bounds: &[f64]) -> Series {
        assert!(
            bounds.len() <= MAX_BOUNDS,
            "a sharded histogram takes at most {MAX_BOUNDS} bounds"
        );
        Series {
            shards: (0..SHARDS).map(|_| Counts::new()).collect(),
        }
    }

    /// The library's histogram data of every shard's observations; None
    /// when there were none, unless `always` (a labelled series never
    /// observed is not shown, as in the library; one without labels is).
    fn total(&self, bounds: &[f64], always: bool) -> Option<HistogramProto> {
        let mut counts = vec![0u64; bounds.len() + 1];
        let mut sum = 0f64;
        for shard in self.shards.iter() {
            for (c, b) in counts.iter_mut().zip(shard.buckets.iter()) {
                *c += b.load(Relaxed);
            }
            sum += f64::from_bits(shard.sum.load(Relaxed));
        }
        let count: u64 = counts.iter().sum();
        if count == 0 && !always {
            return None;
        }
        let mut h = HistogramProto::default();
        h.set_sample_count(count);
        h.set_sample_sum(sum);
        let mut below = 0;
        h.set_bucket(
            bounds
                .iter()
                .zip(&counts)
                .map(|(bound, n)| {
                    below += n;
                    let mut b = Bucket::default();
                    b.set_upper_bound(*bound);
                    b.set_cumulative_count(below);
                    b
                })
                .collect(),
        );
        Some(h)
    }
}

fn family(name: &str, help: &str, metrics: Vec<Metric>) -> MetricFamily {
    super::exposition::family(name, help, MetricType::HISTOGRAM, metrics)
}

/// A histogram (without labels) in shards.
pub struct ShardedHistogram {
    name: String,
    help: String,
    bounds: Box<[f64]>,
    series: Series,
}

impl ShardedHistogram {
    pub fn new(name: &str, help: &str, buckets: &[f64]) -> Self {
        ShardedHistogram {
            name: name.to_owned(),
            help: help.to_owned(),
            bounds: buckets.into(),
            series: Series::new(buckets),
        }
    }

    pub fn observe(&self, v: f64) {
        self.series.shards[shard_index()].observe(&self.bounds, v);
    }

    /// The one family of all shards (zeros before a first observation).
    pub fn families(&self) -> Vec<MetricFamily> {
        let Some(h) = self.series.total(&self.bounds, true) else {
            return Vec::new();
        };
        let mut m = Metric::default();
        m.set_histogram(h);
        vec![family(&self.name, &self.help, vec![m])]
    }
}

/// A histogram per value of a fixed list of label sets, in shards: the
/// label sets are known when it is made (routes and classes, kinds), so an
/// observation finds its series by index, with no lookup and no lock.
pub struct ShardedHistogramVec {
    name: String,
    help: String,
    bounds: Box<[f64]>,
    /// Each set's label pairs, sorted by name (as the library writes them).
    labels: Vec<Vec<prometheus::proto::LabelPair>>,
    series: Box<[Series]>,
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
        let pairs = sets
            .iter()
            .map(|values| {
                let named: Vec<_> = labels.iter().copied().zip(values.iter().copied()).collect();
                let mut pairs = super::exposition::labels(&named);
                pairs.sort_by(|a, b| a.name().cmp(b.name()));
                pairs
            })
            .collect();
        ShardedHistogramVec {
            name: name.to_owned(),
            help: help.to_owned(),
            bounds: buckets.into(),
            labels: pairs,
            series: sets.iter().map(|_| Series::new(buckets)).collect(),
        }
    }

    /// Observes `v` under the label set at `set`.
    pub fn observe(&self, set: usize, v: f64) {
        self.series[set].shards[shard_index()].observe(&self.bounds, v);
    }

    /// The one family of all shards, a series per label set observed.
    pub fn families(&self) -> Vec<MetricFamily> {
        let metrics: Vec<Metric> = self
            .series
            .iter()
            .zip(&self.labels)
            .filter_map(|(series, labels)| {
                let h = series.total(&self.bounds, false)?;
                let mut m = Metric::from_label(labels.clone());
                m.set_histogram(h);
                Some(m)
            })
            .collect();
        if metrics.is_empty() {
            return Vec::new();
        }
        vec![family(&self.name, &self.help, metrics)]
    }
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

    #[test]
    fn the_text_is_the_librarys_own_for_the_same_observations() {
        let buckets = [0.1, 1.0, 2.5];
        // A bound itself, values between, one past every bound, a zero.
        let values = [0.1, 0.05, 0.5, 1.0, 3.0, 0.0, 2.5, 7.25];
        let ours = ShardedHistogramVec::new(
            "ds_x_seconds",
            "Time by route and class.",
            &["route", "class"],
            &buckets,
            vec![
                vec!["append", "2xx"],
                vec!["read", "5xx"],
                vec!["head", "2xx"],
            ],
        );
        let library = crate::metrics::histogram_vec(
            "ds_x_seconds",
            "Time by route and class.",
            &["route", "class"],
            &buckets,
        );
        for (i, v) in values.iter().enumerate() {
            // Two of the three sets; the third is never observed.
            let set = i % 2;
            ours.observe(set, *v);
            let labels = [["append", "2xx"], ["read", "5xx"]][set];
            library.with_label_values(&labels).observe(*v);
        }
        let single = ShardedHistogram::new("ds_y", "Counts.", &buckets);
        let plain = crate::metrics::histogram("ds_y", "Counts.", &buckets);
        for v in values {
            single.observe(v);
            plain.observe(v);
        }
        let mut a = Exposition::default();
        a.families_of(ours.families())
            .families_of(single.families());
        let mut b = Exposition::default();
        b.collect(&library).collect(&plain);
        // The same lines (the library keeps its series in a hash map's
        // order, these in the sets' order).
        let lines = |e: &Exposition| {
            let mut l: Vec<String> = e.render().lines().map(str::to_owned).collect();
            l.sort();
            l
        };
        assert_eq!(lines(&a), lines(&b));
        assert!(a.render().contains("le=\"+Inf\""));
        assert!(
            !a.render().contains("head"),
            "a set never observed shows no series"
        );
        // Nothing observed yet: zeros without labels, as the library shows.
        let (empty, library) = (
            ShardedHistogram::new("ds_z", "Nothing yet.", &buckets),
            crate::metrics::histogram("ds_z", "Nothing yet.", &buckets),
        );
        let (mut a, mut b) = (Exposition::default(), Exposition::default());
        a.families_of(empty.families());
        b.collect(&library);
        assert_eq!(a.render(), b.render());
    }
}
