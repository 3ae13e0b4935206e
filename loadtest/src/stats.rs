//! Latency summaries, and how the reports write numbers.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Summary {
    pub requests: u64,
    pub errors: u64,
    pub elapsed: Duration,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// What the first failed request got, to say why there were errors.
    pub first_error: Option<String>,
}

/// What one load task measured: latencies (µs), failures, the first one.
pub type TaskResult = (Vec<u32>, u64, Option<String>);

/// Runs a load's window: `warmup`, then `seconds` with `measuring` set,
/// then `stop` set; gathers its tasks into one summary.
pub async fn measure_window(
    tasks: Vec<tokio::task::JoinHandle<TaskResult>>,
    measuring: &std::sync::atomic::AtomicBool,
    stop: &std::sync::atomic::AtomicBool,
    warmup: Duration,
    seconds: Duration,
) -> anyhow::Result<Summary> {
    measure_marked(tasks, measuring, stop, warmup, seconds, || {}).await
}

/// [`measure_window`], calling `mark` as the window opens and as it
/// closes (to read a server's counters over exactly the window).
pub async fn measure_marked(
    tasks: Vec<tokio::task::JoinHandle<TaskResult>>,
    measuring: &std::sync::atomic::AtomicBool,
    stop: &std::sync::atomic::AtomicBool,
    warmup: Duration,
    seconds: Duration,
    mut mark: impl FnMut(),
) -> anyhow::Result<Summary> {
    use std::sync::atomic::Ordering;
    tokio::time::sleep(warmup).await;
    mark();
    measuring.store(true, Ordering::Relaxed);
    let started = std::time::Instant::now();
    tokio::time::sleep(seconds).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    mark();
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let (mut errors, mut first_error) = (0, None);
    for t in tasks {
        let (lat, e, first) = t.await?;
        all.extend(lat);
        errors += e;
        first_error = first_error.or(first);
    }
    let mut summary = Summary::from_latencies(all, errors, elapsed);
    summary.first_error = first_error;
    Ok(summary)
}

impl Summary {
    pub fn from_latencies(mut lat_us: Vec<u32>, errors: u64, elapsed: Duration) -> Self {
        lat_us.sort_unstable();
        let pick = |q: f64| -> u64 {
            if lat_us.is_empty() {
                return 0;
            }
            let i = ((lat_us.len() as f64 - 1.0) * q).round() as usize;
            lat_us[i] as u64
        };
        Summary {
            requests: lat_us.len() as u64,
            errors,
            elapsed,
            p50_us: pick(0.50),
            p99_us: pick(0.99),
            max_us: lat_us.last().copied().unwrap_or(0) as u64,
            first_error: None,
        }
    }

    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    pub fn line(&self, label: &str) -> String {
        let why = match (&self.first_error, self.errors) {
            (Some(e), n) if n > 0 => format!("; first error: {e}"),
            _ => String::new(),
        };
        format!(
            "{label}: {:.0} req/s  p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({} requests, {} errors{why}, {:.1} s)",
            self.rps(),
            self.p50_us as f64 / 1000.0,
            self.p99_us as f64 / 1000.0,
            self.max_us as f64 / 1000.0,
            self.requests,
            self.errors,
            self.elapsed.as_secs_f64()
        )
    }
}

/// `x` with thousands separated (as in the README's tables) from 100 up,
/// with one decimal below.
pub fn number(x: f64) -> String {
    if x <= -100.0 {
        format!("-{}", number(-x))
    } else if x >= 100.0 {
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

/// A count with thousands separated: `1,000,000`, `10`.
pub fn count(n: u64) -> String {
    match n {
        0..=99 => n.to_string(),
        _ => number(n as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(number(1_234_567.4), "1,234,567");
        assert_eq!(number(999.0), "999");
        assert_eq!(number(42.24), "42.2");
        assert_eq!(number(-1234.0), "-1,234");
        assert_eq!(count(10), "10");
        assert_eq!(count(1_000_000), "1,000,000");
    }
}
