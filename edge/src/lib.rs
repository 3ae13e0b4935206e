//! The durable-streams edge: a cache-first read proxy in front of the
//! origin, many edges per origin, behind a CDN.
//!
//! The project's words, one meaning each: `docs/glossary.md`.
//!
//! Module map:
//! - [`core`]: the pure decisions (collapse keys, what may be kept, where an
//!   SSE reader joins the shared feed, text cuts). No I/O, no clock.
//! - [`collapse`]: long-poll collapsing, one upstream long-poll per key.
//! - [`fanout`]: SSE fan-out, one upstream tail per stream.
//! - [`chunk_cache`]: immutable chunks in memory, weighted by bytes, with
//!   single-flight misses.
//! - [`invalidations`]: the origin's feed of deletes, creates, retention and replaced snapshots,
//!   which covers everything served from memory.
//! - [`upstream`], [`answer`]: the way to the origin, and its answers held
//!   in memory; [`objects`]: the origin's bucket, read directly.
//! - [`http`]: one file per operation; [`server`]: wiring and shutdown;
//!   [`config`]: the command line and every limit; [`metrics`]: `/metrics`.

pub(crate) mod access;
pub(crate) mod answer;
pub(crate) mod chunk_cache;
pub(crate) mod collapse;
pub mod config;
pub mod core;
pub(crate) mod fanout;
pub mod http;
pub(crate) mod invalidations;
pub mod metrics;
pub(crate) mod objects;
pub mod server;
pub mod upstream;
