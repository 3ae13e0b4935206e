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
//! the same heap underneath (issue 25; `ds-load conn-cost`). What the huge
//! pages would save (TLB misses) did not show in the append and forwarding
//! benchmarks (`loadtest/RESULTS.md`, 5 December 2026).

/// Turns transparent huge pages off for this process and its children
/// (`prctl(PR_SET_THP_DISABLE)`); an error means they stay as the system
/// has them.
pub fn disable() -> std::io::Result<()> {
    rustix::thread::disable_transparent_huge_pages(true)?;
    Ok(())
}
