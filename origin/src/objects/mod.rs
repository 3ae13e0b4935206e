//! Object storage for sealed chunks and snapshots.
//!
//! Everything goes through the `object_store` crate so that the default (a
//! folder on the local filesystem) and S3 or an S3-compatible server behave
//! the same. Wrappers stack as the house style asks: [`instrumented`] counts
//! every call; retries are `object_store`'s own (`RetryConfig`) for S3.
//! Every key comes from [`keys`].

pub mod faults;
pub mod instrumented;
pub mod keys;

/// Opening a URL is the shell's (one opener for origin and edge).
pub use shell::objects::{open, open_with, OpenError};
