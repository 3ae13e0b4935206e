//! Transparent huge pages off, for the whole process (both binaries, first
//! thing in `main`).
//!
//! mimalloc (`shared::allocator`) asks the kernel for huge pages on its
//! large regions (`madvise(MADV_HUGEPAGE)`), and where the kernel grants
//! them (`madvise` mode, as on Debian and on this project's machines) a
//! region touched anywhere is resident in 2 MiB steps. A server that holds
//! tens of thousands of waiting readers of a few hundred bytes each, spread
//! over many such regions, then pays for huge pages it barely uses: a parked
//! long-poll measured 2.7 KiB of RSS with huge pages and 1.1 KiB without,
//! the same heap underneath (decision 0020; `ds-load conn-cost`). What the huge
//! pages would save (TLB misses) did not show: appends without them at
//! 107 % of the same binary with them (`ds-load compare-append --baseline`,
//! interleaved), and SSE fan-out at 1,000 readers × 100/s within the
//! noise of alternating runs (`loadtest/RESULTS.md`, 5 December 2026).
//! `DS_TRANSPARENT_HUGE_PAGES=keep` leaves them as the system has them.

/// Turns transparent huge pages off for this process and its children
/// (`prctl(PR_SET_THP_DISABLE)`), unless `DS_TRANSPARENT_HUGE_PAGES=keep`
/// is in the environment (then they stay as the system has them, as they
/// do when this fails).
pub fn disable() -> std::io::Result<()> {
    if std::env::var_os("DS_TRANSPARENT_HUGE_PAGES").is_some_and(|v| v == "keep") {
        return Ok(());
    }
    rustix::thread::disable_transparent_huge_pages(true)?;
    Ok(())
}
