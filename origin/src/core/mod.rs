//! The decisions about a stream, with no I/O and no clock.
//!
//! Everything here is a plain value that the store's writer loop owns and
//! drives: it asks [`stream::StreamCore::decide_append`] whether an append may
//! apply, logs the resulting [`stream::AppendEffect`] durably, and only then
//! applies it. Recovery replays the same effects through the same `apply`, so
//! a stream after a crash is the stream before it.

pub mod config;
pub(crate) mod fork;
pub(crate) mod invalidation_log;
pub(crate) mod json;
pub(crate) mod producer;
pub(crate) mod restore;
pub(crate) mod seal;
pub(crate) mod snapshot;
pub(crate) mod staging;
pub mod stream;
pub mod subscription;

/// Milliseconds since the Unix epoch. Time is always passed in.
pub type Millis = u64;
