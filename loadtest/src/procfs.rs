//! What `/proc` says about a server process: CPU time, resident memory, open
//! file descriptors. The servers under test are child processes on this
//! machine, so their own accounting is the honest measure of what a workload
//! cost them (a server's metrics would be one more thing to trust). Linux
//! only, like the benchmarks; a process that is gone reads as zero.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// CPU seconds a process has used (user + system).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// Resident memory (`VmRSS` of `/proc/PID/status`), in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    vm_rss(&status)
}

fn vm_rss(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Open file descriptors: the entries of `/proc/PID/fd`.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `bytes` in MiB, one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// The most file descriptors a process held, sampled every `every` on a task
/// of its own until [`PeakFds::stop`]: a server that opens a file per stream
/// and closes it again shows up here, not in a count taken at the end.
pub struct PeakFds {
    peak: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl PeakFds {
    pub fn start(pid: u32, every: Duration) -> PeakFds {
        let peak = Arc::new(AtomicUsize::new(open_fds(pid)));
        let seen = peak.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                seen.fetch_max(open_fds(pid), Ordering::Relaxed);
            }
        });
        PeakFds { peak, task }
    }

    /// Takes one last sample and stops.
    pub fn stop(self, pid: u32) -> usize {
        self.task.abort();
        self.peak.fetch_max(open_fds(pid), Ordering::Relaxed);
        self.peak.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_is_read_in_kib() {
        let status = "Name:\torigin\nVmPeak:\t  9000 kB\nVmRSS:\t    1234 kB\nThreads:\t3\n";
        assert_eq!(vm_rss(status), 1234 * 1024);
        assert_eq!(vm_rss("Name:\tgone\n"), 0);
    }

    #[test]
    fn this_process_has_memory_and_open_files() {
        let me = std::process::id();
        assert!(rss_bytes(me) > 0);
        assert!(open_fds(me) >= 3);
        assert_eq!(open_fds(u32::MAX), 0);
    }

    #[tokio::test]
    async fn the_peak_counts_files_opened_and_closed_while_sampling() {
        let me = std::process::id();
        let sampler = PeakFds::start(me, Duration::from_millis(5));
        let files: Vec<_> = (0..20)
            .map(|_| std::fs::File::open("/proc/self/status").expect("open"))
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(files);
        // The last sample is taken after the files are closed: the peak is the task's.
        assert!(sampler.stop(me) >= 23);
    }
}
