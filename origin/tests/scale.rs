//! Scale: a million streams in a real process, the store at scale
//! in this one.
//!
//! One test binary for several files (each a module below), so the
//! origin and its dependencies are linked once for all of them.

mod common;

#[path = "store_scale.rs"]
mod store_scale;

#[path = "many_streams.rs"]
mod many_streams;
