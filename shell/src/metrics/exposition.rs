//! One scrape's families, built up by the binary and written by the
//! library's text encoder.

use prometheus::core::Collector;
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};

/// The families of one scrape, in the order they are added.
#[derive(Default)]
pub struct Exposition {
    families: Vec<MetricFamily>,
}

pub(super) fn family(
    name: &str,
    help: &str,
    kind: MetricType,
    metrics: Vec<Metric>,
) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_owned());
    f.set_help(help.to_owned());
    f.set_field_type(kind);
    f.set_metric(metrics);
    f
}

pub(super) fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(name, value)| {
            let mut l = LabelPair::default();
            l.set_name((*name).to_owned());
            l.set_value((*value).to_owned());
            l
        })
        .collect()
}

fn counter_metric(pairs: &[(&str, &str)], value: f64) -> Metric {
    let mut c = Counter::default();
    c.set_value(value);
    let mut m = Metric::from_label(labels(pairs));
    m.set_counter(c);
    m
}

fn gauge_metric(pairs: &[(&str, &str)], value: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(value);
    let mut m = Metric::from_label(labels(pairs));
    m.set_gauge(g);
    m
}

impl Exposition {
    /// A family of `metrics`; no series, no family.
    fn push(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        metrics: Vec<Metric>,
    ) -> &mut Self {
        if !metrics.is_empty() {
            self.families.push(family(name, help, kind, metrics));
        }
        self
    }

    /// A counter without labels (`name` ends in `_total`).
    pub fn counter(&mut self, name: &str, help: &str, value: u64) -> &mut Self {
        self.counters(name, help, [(Vec::new(), value)])
    }

    /// A counter with one series per label set; no series, no family.
    pub fn counters<'a, L>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (L, u64)>,
    ) -> &mut Self
    where
        L: AsRef<[(&'a str, &'a str)]>,
    {
        let metrics = series
            .into_iter()
            .map(|(l, v)| counter_metric(l.as_ref(), v as f64))
            .collect();
        self.push(name, help, MetricType::COUNTER, metrics)
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) -> &mut Self {
        self.gauges(name, help, [(Vec::new(), value)])
    }

    /// A gauge with one series per label set.
    pub fn gauges<'a, L>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (L, f64)>,
    ) -> &mut Self
    where
        L: AsRef<[(&'a str, &'a str)]>,
    {
        let metrics = series
            .into_iter()
            .map(|(l, v)| gauge_metric(l.as_ref(), v))
            .collect();
        self.push(name, help, MetricType::GAUGE, metrics)
    }

    /// Whatever a library collector (a histogram, a vector of them, the
    /// process collector) holds now.
    pub fn collect(&mut self, collector: &dyn Collector) -> &mut Self {
        self.families_of(collector.collect())
    }

    /// Families made elsewhere (a sharded histogram's).
    pub fn families_of(&mut self, families: Vec<MetricFamily>) -> &mut Self {
        self.families
            .extend(families.into_iter().filter(|f| !f.get_metric().is_empty()));
        self
    }

    /// The process's own series (`process_*`) and `ds_build_info`.
    pub fn process(&mut self, role: &str) -> &mut Self {
        super::process::add(self, role);
        self
    }

    /// Repeats each family named `new` of `renamed` (new, old) under its
    /// old name, its help saying so (`crate::renamed`): dashboards and
    /// alerts on the old name keep working for one release.
    pub fn deprecated(&mut self, renamed: &[(&str, &str)]) -> &mut Self {
        let copies: Vec<MetricFamily> = self
            .families
            .iter()
            .filter_map(|f| {
                let (new, old) = renamed.iter().find(|(new, _)| *new == f.name())?;
                let mut copy = f.clone();
                copy.set_name((*old).to_owned());
                copy.set_help(format!("Deprecated: the same as {new}, which replaces it."));
                Some(copy)
            })
            .collect();
        self.families.extend(copies);
        self
    }

    /// The Prometheus text (format 0.0.4) of every family added.
    pub fn render(&self) -> String {
        prometheus::TextEncoder::new()
            .encode_to_string(&self.families)
            .expect("families built here always encode")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_help_and_type_and_labels_are_escaped() {
        let mut e = Exposition::default();
        e.counter("ds_x_total", "Things.", 3)
            .gauges("ds_y", "Levels.", [([("k", "a\"b")], 1.5)]);
        e.counters::<[(&str, &str); 0]>("ds_empty_total", "None.", []);
        let text = e.render();
        assert_eq!(
            text,
            "# HELP ds_x_total Things.\n# TYPE ds_x_total counter\nds_x_total 3\n\
             # HELP ds_y Levels.\n# TYPE ds_y gauge\nds_y{k=\"a\\\"b\"} 1.5\n"
        );
    }

    #[test]
    fn a_renamed_family_is_repeated_under_its_old_name() {
        let mut e = Exposition::default();
        e.counter("ds_new_total", "Things.", 3)
            .counter("ds_other_total", "Others.", 1)
            .deprecated(&[("ds_new_total", "ds_old_total"), ("ds_absent", "ds_gone")]);
        let text = e.render();
        assert!(text.contains("ds_new_total 3\n"), "{text}");
        assert!(
            text.contains("# HELP ds_old_total Deprecated: the same as ds_new_total"),
            "{text}"
        );
        assert!(text.contains("ds_old_total 3\n"), "{text}");
        assert!(!text.contains("ds_gone"), "{text}");
    }

    #[test]
    fn a_histogram_renders_buckets_sum_and_count() {
        let h = crate::metrics::histogram("ds_t_seconds", "Time.", &[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        let mut e = Exposition::default();
        e.collect(&h);
        let text = e.render();
        assert!(
            text.contains("ds_t_seconds_bucket{le=\"0.1\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("ds_t_seconds_bucket{le=\"+Inf\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("ds_t_seconds_count 2\n"), "{text}");
    }
}
