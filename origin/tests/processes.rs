//! Real `origin` processes: `kill -9` at every point of a write,
//! a clean stop, a full disk, no descriptor left.
//!
//! One test binary for several files (each a module below), so the
//! origin and its dependencies are linked once for all of them.

mod common;

#[path = "crash.rs"]
mod crash;

#[path = "drain.rs"]
mod drain;

#[path = "disk_full.rs"]
mod disk_full;

#[path = "fd_exhaustion.rs"]
mod fd_exhaustion;
