//! The durable-streams origin.
//!
//! The project's words, one meaning each: `docs/glossary.md`.
//!
//! Module map:
//! - [`core`]: the pure decisions about a stream (append rule, producers,
//!   JSON mode, expiry). No I/O, no clock.
//! - [`store`]: the crash-safe local log around the core: WAL with group
//!   commit, per-stream files, checkpoints, recovery.
//! - [`http`]: the protocol over HTTP, one file per operation.
//! - [`server`]: wiring: the store, its periodic work and the serving shell
//!   (`shell`: connections, their limits, graceful shutdown);
//!   [`config`]: the command line.
//! - [`objects`]: object storage for sealed chunks and snapshots.
//! - [`region`]: object durability: the WAL in the bucket, fenced by
//!   conditional writes (the first part of a region of origins).
//! - [`subscriptions`]: subscriptions and webhooks (protocol §6–7) around
//!   `core::subscription`, durable in a journal stream of the store.
//! - [`metrics`], [`clock`]: what is measured, and injected time.

pub mod auth;
pub mod clock;
pub mod config;
pub mod core;
// The fuzz targets: for `fuzz/` (the `fuzzing` feature) and the corpus
// replay among the unit tests; not part of the origin otherwise.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod metrics;
pub mod objects;
pub mod region;
pub mod server;
pub mod store;
pub mod subscriptions;
