//! Route strings of the edge's own endpoints, in one place.

pub const METRICS: &str = "/metrics";
pub const HEALTH: &str = "/healthz";
/// The origin's admin API: never through an edge (operators reach the
/// origin directly; the CDN refuses it too).
pub const ADMIN: &str = "/_admin";
