//! Subscriptions (protocol §6–7), the decisions alone: a pattern's matches
//! ([`glob`]), a declaration's validity and hash ([`config`]), and one
//! subscription's state through wakes, acks, leases and retries
//! ([`state`]). The shell (`crate::subscriptions`) logs, delivers and
//! keeps time.

pub mod address;
pub(crate) mod config;
pub(crate) mod deadlines;
pub(crate) mod glob;
pub(crate) mod patterns;
pub(crate) mod state;
