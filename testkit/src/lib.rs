//! Test support shared by the origin's and the edge's integration tests
//! (and the load generator): readers of what the servers answer, written
//! once so both suites hold the servers to the same reading of the
//! protocol, and the connections open on this machine.

pub mod bucket;
pub mod sse;
pub mod tcp;
