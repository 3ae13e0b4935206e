//! The one table: a row per workload and system, with each row's share of
//! the best peer in its durability class (durable numbers are only compared
//! with durable ones) and of the ceiling. The pooled rows (a row per system
//! and stream count `N`) have figures of their own (creates/s, memory), so
//! they follow as a second part of the table, compared at equal `N`.

use super::systems::{Class, System};
use crate::stats::{count, number};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Append,
    AppendProducer,
    CatchUp,
    LongPoll,
    Sse,
    /// A fixed pool of connections appending round-robin across N streams.
    Pooled,
}

impl Workload {
    pub const ALL: [Workload; 6] = [
        Workload::Append,
        Workload::AppendProducer,
        Workload::CatchUp,
        Workload::LongPoll,
        Workload::Sse,
        Workload::Pooled,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Append => "append",
            Workload::AppendProducer => "append-producer",
            Workload::CatchUp => "catch-up",
            Workload::LongPoll => "long-poll",
            Workload::Sse => "sse",
            Workload::Pooled => "pooled",
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Workload::Append | Workload::AppendProducer | Workload::Pooled => "appends/s",
            Workload::CatchUp => "MB/s",
            Workload::LongPoll | Workload::Sse => "events/s",
        }
    }

    /// Tails need a server that holds a request until data arrives; the
    /// ceiling answers at once, so it has no tail figure.
    pub fn runs_on_ceiling(self) -> bool {
        !matches!(self, Workload::LongPoll | Workload::Sse)
    }
}

#[derive(Clone, Debug)]
pub struct Row {
    pub workload: Workload,
    pub system: &'static System,
    /// In the workload's unit.
    pub throughput: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub errors: u64,
    /// Server CPU over the workload, in cores (1.0 = one core busy).
    pub server_cores: f64,
    /// What the first failed request got, when one failed.
    pub first_error: Option<String>,
    /// The pooled workload's own figures; `None` for the other workloads.
    pub pool: Option<PoolFigures>,
}

/// What a pooled row measured besides the appends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolFigures {
    /// `N`: the streams the pool appended to.
    pub streams: usize,
    /// Creating the `N` streams over the pool (not part of the appends).
    pub creates_per_s: f64,
    /// The server's resident memory just started (nothing created yet).
    pub rss_start_bytes: u64,
    /// The server's resident memory once the `N` streams exist (all its
    /// processes: the edge and the origin behind it for edge-sync).
    pub rss_bytes: u64,
}

impl Row {
    fn streams(&self) -> Option<usize> {
        self.pool.map(|p| p.streams)
    }
}

impl PoolFigures {
    /// What the server's memory grew by per stream created.
    pub fn rss_per_stream(&self) -> f64 {
        (self.rss_bytes as f64 - self.rss_start_bytes as f64) / self.streams.max(1) as f64
    }
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

fn ratio(x: f64, of: Option<f64>) -> String {
    match of {
        Some(best) if best > 0.0 => format!("{:.2}×", x / best),
        _ => "–".into(),
    }
}

/// Rows measured the same way: one workload, and for pooled rows one `N`.
fn comparable(a: &Row, b: &Row) -> bool {
    a.workload == b.workload && a.streams() == b.streams()
}

/// The best throughput of a peer (not the ceiling) in the row's workload and
/// durability class.
fn best_peer(rows: &[Row], row: &Row) -> Option<f64> {
    if row.system.class == Class::Ceiling {
        return None;
    }
    rows.iter()
        .filter(|r| comparable(r, row) && r.system.class == row.system.class)
        .map(|r| r.throughput)
        .reduce(f64::max)
}

fn ceiling(rows: &[Row], row: &Row) -> Option<f64> {
    rows.iter()
        .find(|r| comparable(r, row) && r.system.class == Class::Ceiling)
        .map(|r| r.throughput)
}

/// A Markdown table, grouped by workload, in the order the rows came.
pub fn render(rows: &[Row]) -> String {
    if !rows.is_empty() && rows.iter().all(|r| r.pool.is_some()) {
        return render_pooled(rows).trim_start().to_string();
    }
    let mut out = String::from(
        "| workload | system | durability | throughput | p50 | p99 | vs best peer | vs ceiling | server CPU | errors |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for w in Workload::ALL {
        if w == Workload::Pooled {
            continue;
        }
        for r in rows.iter().filter(|r| r.workload == w) {
            out.push_str(&format!(
                "| {} | {} | {} | {} {} | {} | {} | {} | {} | {:.0} % | {} |\n",
                w.name(),
                r.system.name,
                r.system.class.label(),
                number(r.throughput),
                w.unit(),
                ms(r.p50_us),
                ms(r.p99_us),
                ratio(r.throughput, best_peer(rows, r)),
                ratio(r.throughput, ceiling(rows, r)),
                r.server_cores * 100.0,
                r.errors,
            ));
        }
    }
    out.push_str(&render_pooled(rows));
    out
}

/// The pooled rows, by `N` (in the order the `N`s came), then as they came.
fn render_pooled(rows: &[Row]) -> String {
    let pooled: Vec<&Row> = rows.iter().filter(|r| r.pool.is_some()).collect();
    if pooled.is_empty() {
        return String::new();
    }
    let mut ns: Vec<usize> = Vec::new();
    for n in pooled.iter().filter_map(|r| r.streams()) {
        if !ns.contains(&n) {
            ns.push(n);
        }
    }
    let mut out = String::from(
        "\nPooled appends (a fixed pool of connections, round-robin across N streams):\n\n\
         | N streams | system | durability | appends/s | p50 | p99 | vs best peer | vs ceiling | creates/s | RSS after creates | RSS per stream | server CPU | errors |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for n in ns {
        for r in pooled.iter().filter(|r| r.streams() == Some(n)) {
            let p = r.pool.expect("a pooled row");
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} B | {:.0} % | {} |\n",
                count(n as u64),
                r.system.name,
                r.system.class.label(),
                number(r.throughput),
                ms(r.p50_us),
                ms(r.p99_us),
                ratio(r.throughput, best_peer(rows, r)),
                ratio(r.throughput, ceiling(rows, r)),
                number(p.creates_per_s),
                crate::procfs::mib(p.rss_bytes),
                number(p.rss_per_stream()),
                r.server_cores * 100.0,
                r.errors,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::systems::SYSTEMS;
    use super::*;

    fn row(workload: Workload, name: &str, throughput: f64) -> Row {
        Row {
            workload,
            system: SYSTEMS.iter().find(|s| s.name == name).expect("system"),
            throughput,
            p50_us: 1500,
            p99_us: 12_000,
            errors: 0,
            server_cores: 0.5,
            first_error: None,
            pool: None,
        }
    }

    fn pooled(name: &str, streams: usize, throughput: f64) -> Row {
        Row {
            pool: Some(PoolFigures {
                streams,
                creates_per_s: 12_345.0,
                rss_start_bytes: 16 << 20,
                rss_bytes: 64 << 20,
            }),
            ..row(Workload::Pooled, name, throughput)
        }
    }

    #[test]
    fn pooled_rows_show_n_and_compare_only_at_equal_n() {
        let rows = vec![
            row(Workload::Append, "origin-sync", 20_000.0),
            pooled("ceiling", 1000, 40_000.0),
            pooled("origin-sync", 1000, 10_000.0),
            pooled("electric", 1000, 20_000.0),
            pooled("ceiling", 1_000_000, 30_000.0),
            pooled("origin-sync", 1_000_000, 3_000.0),
        ];
        let table = render(&rows);
        assert!(!table.contains("| pooled |"), "not in the first part");
        assert!(table.contains(
            "| 1,000 | origin-sync | durable | 10,000 | 1.50 ms | 12.00 ms | 0.50× | 0.25× | 12,345 | 64.0 MiB | 50,332 B | 50 % | 0 |"
        ));
        assert!(table.contains(
            "| 1,000 | electric | durable | 20,000 | 1.50 ms | 12.00 ms | 1.00× | 0.50× |"
        ));
        assert!(table.contains(
            "| 1,000,000 | origin-sync | durable | 3,000 | 1.50 ms | 12.00 ms | 1.00× | 0.10× |"
        ));
        let thousand = table.find("| 1,000 | ceiling").expect("row");
        let million = table.find("| 1,000,000 | ceiling").expect("row");
        assert!(thousand < million);
    }

    #[test]
    fn ratios_compare_within_a_durability_class_and_with_the_ceiling() {
        let rows = vec![
            row(Workload::Append, "ceiling", 40_000.0),
            row(Workload::Append, "origin-sync", 20_000.0),
            row(Workload::Append, "node-file", 4_000.0),
            row(Workload::Append, "ursula-memory", 30_000.0),
            row(Workload::Append, "origin-async", 24_000.0),
        ];
        let table = render(&rows);
        assert!(table.contains("| append | origin-sync | durable | 20,000 appends/s | 1.50 ms | 12.00 ms | 1.00× | 0.50× |"));
        assert!(table.contains("| append | node-file | durable | 4,000 appends/s | 1.50 ms | 12.00 ms | 0.20× | 0.10× |"));
        assert!(table.contains("| append | origin-async | memory | 24,000 appends/s | 1.50 ms | 12.00 ms | 0.80× | 0.60× |"));
        assert!(table.contains(
            "| append | ceiling | none | 40,000 appends/s | 1.50 ms | 12.00 ms | – | 1.00× |"
        ));
    }

    #[test]
    fn a_workload_without_a_ceiling_row_has_no_ceiling_ratio() {
        let rows = vec![row(Workload::LongPoll, "origin-sync", 2_000.0)];
        assert!(render(&rows).contains("| 1.00× | – |"));
    }
}
