//! Subscriptions (protocol §6–7), the decisions alone: a pattern's matches
//! ([`glob`]), a declaration's validity and hash ([`config`]), and one
//! subscription's state through wakes, acks, leases and retries
//! ([`state`]). The shell (`crate::subscriptions`) logs, delivers and
//! keeps time.

pub mod address;
pub mod config;
pub mod deadlines;
pub mod glob;
pub mod patterns;
pub mod state;
