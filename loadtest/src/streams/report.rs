//! The figures of one `ds-load streams` run and the table they print as:
//! what the streams cost the origin (memory and descriptors per stream), how
//! fast it took them, how long it took to come back, and whether every
//! stream read back as written.

use std::path::PathBuf;
use std::time::Duration;

use crate::pool::Tally;
use crate::procfs::mib;
use crate::stats::{count, number};

/// The origin's memory and open descriptors at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    pub rss: u64,
    pub fds: usize,
}

impl Snapshot {
    pub fn of(pid: u32) -> Snapshot {
        Snapshot {
            rss: crate::procfs::rss_bytes(pid),
            fds: crate::procfs::open_fds(pid),
        }
    }
}

/// One stop and start again on the same data.
#[derive(Debug)]
pub struct Restart {
    /// `SIGKILL` or `SIGTERM`.
    pub how: &'static str,
    /// From SIGTERM to exit (SIGKILL: none).
    pub stopped_in: Option<Duration>,
    /// From spawn to the first answer to a read of a stream, and its status;
    /// or why there was none.
    pub ready: Result<(Duration, u16), String>,
    /// The origin's own log line about its recovery.
    pub recovered: Option<String>,
    /// Once it answered.
    pub after: Snapshot,
    /// Through the reads.
    pub peak_fds: usize,
    /// Every stream read back; none if it never answered.
    pub verify: Option<Tally>,
}

impl Restart {
    pub fn failed(&self) -> bool {
        self.ready.is_err() || self.verify.as_ref().is_none_or(|v| v.failures() > 0)
    }
}

#[derive(Debug)]
pub struct Figures {
    pub command: String,
    pub origin: PathBuf,
    pub origin_args: Vec<String>,
    pub data: PathBuf,
    pub nofile: u64,
    pub streams: usize,
    pub connections: usize,
    pub body: usize,
    pub appends: usize,
    pub start: Snapshot,
    pub creates: Tally,
    pub appended: Tally,
    pub after: Snapshot,
    /// How the first origin had exited on its own before the kill, if it had.
    pub exited: Option<String>,
    pub peak_fds: usize,
    pub restarts: Vec<Restart>,
    /// Listing pages timed before the kill.
    pub listing: Option<super::listing::Pages>,
}

/// `12,345 creates/s (2,000 in 0.16 s; 0 failed)`.
fn rate(t: &Tally, what: &str) -> String {
    if t.items == 0 {
        return "none".into();
    }
    format!(
        "{} {what}/s ({} in {:.2} s; {} failed)",
        number(t.per_second()),
        count(t.items as u64),
        t.elapsed.as_secs_f64(),
        count(t.failures())
    )
}

impl Figures {
    /// What the origin's memory grew by per stream, creates and appends.
    pub fn bytes_per_stream(&self) -> f64 {
        (self.after.rss as f64 - self.start.rss as f64) / self.streams.max(1) as f64
    }

    /// A restart that did not come back, or a stream that did not read back.
    pub fn failed(&self) -> bool {
        self.restarts.is_empty()
            || self.restarts.iter().any(Restart::failed)
            || self.listing.as_ref().is_some_and(|l| l.failures > 0)
    }

    /// The report's text, line by line (long by design: one line per
    /// figure, in the order printed).
    pub fn render(&self) -> String {
        let extra = match self.origin_args.is_empty() {
            true => "none".to_string(),
            false => format!("`{}`", self.origin_args.join(" ")),
        };
        let mut out = format!(
            "## ds-load streams\n\n    {}\n\nOrigin `{}` (extra arguments: {extra}) under RLIMIT_NOFILE {} (soft and hard), \
             data in `{}`. {} streams over {} keep-alive connections, each created with a {} B body, then {} \
             append(s) of {} B each.\n\n| figure | value |\n|---|---|\n",
            self.command,
            self.origin.display(),
            self.nofile,
            self.data.display(),
            count(self.streams as u64),
            self.connections,
            self.body,
            self.appends,
            self.body,
        );
        let mut row = |figure: &str, value: String| {
            out.push_str(&format!("| {figure} | {value} |\n"));
        };
        row("creates", rate(&self.creates, "creates"));
        row("appends", rate(&self.appended, "appends"));
        match &self.exited {
            None => {
                row(
                    "RSS at start / after",
                    format!("{} / {}", mib(self.start.rss), mib(self.after.rss)),
                );
                row(
                    "RSS per stream",
                    format!("{} B", number(self.bytes_per_stream())),
                );
                row(
                    "open fds at start / after / peak",
                    format!(
                        "{} / {} / {}",
                        self.start.fds, self.after.fds, self.peak_fds
                    ),
                );
            }
            Some(status) => {
                row(
                    "RSS at start / after",
                    format!(
                        "{} / **the origin had exited** ({status})",
                        mib(self.start.rss)
                    ),
                );
                row(
                    "open fds at start / peak",
                    format!(
                        "{} / {} (sampled every 100 ms)",
                        self.start.fds, self.peak_fds
                    ),
                );
            }
        }
        if let Some(l) = &self.listing {
            row(
                &format!("listing page ({} streams, random cursor)", l.limit),
                format!(
                    "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} pages ({:.1} streams a page; {} failed)",
                    l.p50.as_secs_f64() * 1e3,
                    l.p99.as_secs_f64() * 1e3,
                    l.max.as_secs_f64() * 1e3,
                    l.pages,
                    l.mean_streams,
                    l.failures
                ),
            );
        }
        for r in &self.restarts {
            let how = r.how;
            if let Some(stop) = r.stopped_in {
                row(
                    &format!("{how}: exit"),
                    format!("{:.0} ms after the signal", stop.as_secs_f64() * 1e3),
                );
            }
            row(
                &format!("restart after {how}"),
                match &r.ready {
                    Ok((d, status)) => format!(
                        "{:.0} ms from spawn to the first answer (HTTP {status})",
                        d.as_secs_f64() * 1e3
                    ),
                    Err(e) => format!("**did not answer**: {e}"),
                },
            );
            row(
                &format!("recovery log after {how}"),
                r.recovered
                    .as_deref()
                    .map_or("(none printed)".into(), |l| format!("`{}`", l.trim())),
            );
            row(
                &format!("after {how}: RSS, fds (peak)"),
                format!("{}, {} ({})", mib(r.after.rss), r.after.fds, r.peak_fds),
            );
            row(
                &format!("read back after {how}"),
                match &r.verify {
                    Some(v) => format!(
                        "{}: {} mismatches, {} errors",
                        rate(v, "reads"),
                        count(v.mismatches),
                        count(v.errors)
                    ),
                    None => "not read".into(),
                },
            );
        }
        let firsts = vec![
            ("creating", self.creates.first_failure.as_ref()),
            ("appending", self.appended.first_failure.as_ref()),
        ];
        let mut firsts: Vec<(String, Option<&String>)> = firsts
            .into_iter()
            .map(|(what, f)| (what.to_string(), f))
            .collect();
        for r in &self.restarts {
            firsts.push((
                format!("reading back after {}", r.how),
                r.verify.as_ref().and_then(|v| v.first_failure.as_ref()),
            ));
        }
        let firsts: Vec<_> = firsts
            .into_iter()
            .filter_map(|(what, f)| f.map(|f| format!("- {what}: the first failure: {f}\n")))
            .collect();
        if !firsts.is_empty() {
            out.push_str("\nFailures:\n");
            out.extend(firsts);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(items: usize, secs: f64, mismatches: u64) -> Tally {
        Tally {
            items,
            errors: 0,
            mismatches,
            first_failure: (mismatches > 0).then(|| "item 7: 3 bytes read, 8 expected".into()),
            elapsed: Duration::from_secs_f64(secs),
        }
    }

    fn figures(verify_mismatches: u64) -> Figures {
        Figures {
            command: "ds-load streams --streams 2000".into(),
            origin: "target/release/origin".into(),
            origin_args: vec![],
            data: "/tmp/x/data".into(),
            nofile: 1024,
            streams: 2000,
            connections: 64,
            body: 100,
            appends: 1,
            start: Snapshot {
                rss: 10 << 20,
                fds: 12,
            },
            creates: tally(2000, 0.5, 0),
            appended: tally(2000, 0.25, 0),
            after: Snapshot {
                rss: 14 << 20,
                fds: 14,
            },
            exited: None,
            peak_fds: 80,
            listing: None,
            restarts: vec![Restart {
                how: "SIGKILL",
                stopped_in: None,
                ready: Ok((Duration::from_millis(45), 200)),
                recovered: Some("INFO origin: recovered streams=2000".into()),
                after: Snapshot {
                    rss: 12 << 20,
                    fds: 13,
                },
                peak_fds: 70,
                verify: Some(tally(2000, 0.1, verify_mismatches)),
            }],
        }
    }

    #[test]
    fn the_table_has_every_figure() {
        let f = figures(0);
        let table = f.render();
        for line in [
            "    ds-load streams --streams 2000\n",
            "| creates | 4,000 creates/s (2,000 in 0.50 s; 0 failed) |",
            "| appends | 8,000 appends/s (2,000 in 0.25 s; 0 failed) |",
            "| RSS at start / after | 10.0 MiB / 14.0 MiB |",
            "| RSS per stream | 2,097 B |",
            "| open fds at start / after / peak | 12 / 14 / 80 |",
            "| restart after SIGKILL | 45 ms from spawn to the first answer (HTTP 200) |",
            "| recovery log after SIGKILL | `INFO origin: recovered streams=2000` |",
            "| read back after SIGKILL | 20,000 reads/s (2,000 in 0.10 s; 0 failed): 0 mismatches, 0 errors |",
        ] {
            assert!(table.contains(line), "{line}\n{table}");
        }
        assert!(!table.contains("Failures"));
        assert!(!f.failed());
    }

    #[test]
    fn a_mismatch_fails_the_run_and_says_why() {
        let f = figures(1);
        assert!(f.failed());
        assert!(f.render().contains(
            "- reading back after SIGKILL: the first failure: item 7: 3 bytes read, 8 expected"
        ));
    }
}
