//! Route strings of the edge's own endpoints, in one place.

pub const METRICS: &str = "/metrics";
pub const HEALTH: &str = "/healthz";
