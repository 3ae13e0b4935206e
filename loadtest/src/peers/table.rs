//! The one table: a row per workload and system, with each row's share of
//! the best peer in its durability class (durable numbers are only compared
//! with durable ones) and of the ceiling.

use super::systems::{Class, System};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Append,
    AppendProducer,
    CatchUp,
    LongPoll,
    Sse,
}

impl Workload {
    pub const ALL: [Workload; 5] = [
        Workload::Append,
        Workload::AppendProducer,
        Workload::CatchUp,
        Workload::LongPoll,
        Workload::Sse,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Append => "append",
            Workload::AppendProducer => "append-producer",
            Workload::CatchUp => "catch-up",
            Workload::LongPoll => "long-poll",
            Workload::Sse => "sse",
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Workload::Append | Workload::AppendProducer => "appends/s",
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
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

fn number(x: f64) -> String {
    if x >= 100.0 {
        // Thousands separated, as in the README's tables.
        let s = format!("{:.0}", x);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else {
        format!("{x:.1}")
    }
}

fn ratio(x: f64, of: Option<f64>) -> String {
    match of {
        Some(best) if best > 0.0 => format!("{:.2}×", x / best),
        _ => "–".into(),
    }
}

/// The best throughput of a peer (not the ceiling) in the row's workload and
/// durability class.
fn best_peer(rows: &[Row], row: &Row) -> Option<f64> {
    if row.system.class == Class::Ceiling {
        return None;
    }
    rows.iter()
        .filter(|r| r.workload == row.workload && r.system.class == row.system.class)
        .map(|r| r.throughput)
        .reduce(f64::max)
}

fn ceiling(rows: &[Row], row: &Row) -> Option<f64> {
    rows.iter()
        .find(|r| r.workload == row.workload && r.system.class == Class::Ceiling)
        .map(|r| r.throughput)
}

/// A Markdown table, grouped by workload, in the order the rows came.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::from(
        "| workload | system | durability | throughput | p50 | p99 | vs best peer | vs ceiling | server CPU | errors |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for w in Workload::ALL {
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
        }
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

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(number(1_234_567.4), "1,234,567");
        assert_eq!(number(999.0), "999");
        assert_eq!(number(42.24), "42.2");
    }
}
