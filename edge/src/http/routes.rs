//! Route strings of the edge's own endpoints, in one place.

pub use shell::ready::{HEALTH, METRICS, READY};
/// The origin's admin API: never through an edge (operators reach the
/// origin directly; the CDN refuses it too).
pub const ADMIN: &str = "/_admin";
