//! Asks the kernel to run the writer thread as soon as it wakes.
//!
//! Every append waits for the writer, and the writer needs a core only in
//! short bursts (take the batch, encode it, write it, sync it). With the
//! default time slice, a writer that woke while the runtime's threads (and,
//! on a shared machine, anything else) kept both cores busy waited for a core
//! for up to 5 ms (`perf sched timehist`, 500 closed-loop writers): the
//! whole load piled up behind it, and then every request waited on that one
//! batch with the cores idle. A short slice fixes that without privileges:
//! Linux's EEVDF scheduler (6.12 and later) gives a thread that asks for a
//! shorter slice an earlier deadline, so it runs promptly when it wakes
//! (`sched_setattr`'s `sched_runtime` on a normal thread). Measured with
//! `ds-load compare-append --baseline` (interleaved, 30 s): +5 % appends/s
//! with 500 writers, together with the batch rule in `writer::gather`. A
//! lower nice value or a real-time policy did as well but needs
//! `CAP_SYS_NICE`; older kernels ignore the request, and a thread that runs
//! under another policy (an operator's `chrt`) keeps it.
//!
//! One of the workspace's two `unsafe` modules (the allocator is the other):
//! `libc` has the system call but no safe wrapper, and neither has `rustix`.
#![allow(unsafe_code)]

use std::time::Duration;

/// The slice the writer asks for: the shortest the kernel grants.
pub const WRITER_SLICE: Duration = Duration::from_micros(100);

/// `struct sched_attr` (`SCHED_ATTR_SIZE_VER1`).
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// Asks for `slice` as the calling thread's time slice, keeping its policy
/// and nice value; returns what the kernel reports afterwards (`None` where
/// it cannot say, or the thread runs under a policy other than the normal
/// ones).
#[cfg(target_os = "linux")]
pub fn ask_for_slice(slice: Duration) -> Option<Duration> {
    let mut attr = current()?;
    if attr.policy != libc::SCHED_OTHER as u32 && attr.policy != libc::SCHED_BATCH as u32 {
        return None;
    }
    attr.runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    attr.size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: `attr` is a valid `sched_attr` of the size it names, borrowed
    // for the call only; pid 0 is the calling thread.
    let set = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if set != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "the kernel refused a shorter slice for the writer");
    }
    current().map(|a| Duration::from_nanos(a.runtime))
}

#[cfg(target_os = "linux")]
fn current() -> Option<SchedAttr> {
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: the kernel writes at most `size` bytes into `attr`, which is
    // that large and lives across the call; pid 0 is the calling thread.
    let got = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            size,
            0,
        )
    };
    (got == 0).then_some(attr)
}

#[cfg(not(target_os = "linux"))]
pub fn ask_for_slice(_slice: Duration) -> Option<Duration> {
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The kernel's release as (major, minor).
    fn kernel() -> (u32, u32) {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (next(), next())
    }

    #[test]
    fn a_thread_gets_the_slice_it_asks_for_on_kernels_with_eevdf_slices() {
        let granted = std::thread::spawn(|| ask_for_slice(WRITER_SLICE))
            .join()
            .expect("thread");
        if kernel() >= (6, 12) {
            assert_eq!(granted, Some(WRITER_SLICE));
        } else {
            // Older kernels keep their own slice; the call must not fail the
            // thread either way.
            assert!(granted.is_none_or(|s| s > Duration::ZERO));
        }
    }

    #[test]
    fn the_slice_is_the_calling_threads_own() {
        let before = current().map(|a| a.runtime);
        std::thread::spawn(|| ask_for_slice(WRITER_SLICE))
            .join()
            .expect("thread");
        assert_eq!(current().map(|a| a.runtime), before);
    }
}
