//! Test support shared by the origin's and the edge's integration tests:
//! readers of what the servers answer, written once so both suites hold
//! the servers to the same reading of the protocol.

pub mod sse;
