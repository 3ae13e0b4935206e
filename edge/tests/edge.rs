//! The edge as a client sees it: a real origin and a real edge on loopback.
//! The public conformance suite (run by `scripts/test` against the release
//! binaries) covers the protocol through the edge; these tests cover what
//! the edge adds: answers identical to the origin's, long-poll collapsing,
//! the chunk cache, SSE fan-out, access control at the edge, the edge's own
//! refusals and its shutdown.
//!
//! One test binary, one module per concern.

mod common;

#[path = "edge/access.rs"]
mod access;
#[path = "edge/chunks.rs"]
mod chunks;
#[path = "edge/connections.rs"]
mod connections;
#[path = "edge/detached.rs"]
mod detached;
#[path = "edge/differential.rs"]
mod differential;
#[path = "edge/failover.rs"]
mod failover;
#[path = "edge/forward.rs"]
mod forward;
#[path = "edge/http1_hop.rs"]
mod http1_hop;
#[path = "edge/http2_readers.rs"]
mod http2_readers;
#[path = "edge/invalidation.rs"]
mod invalidation;
#[path = "edge/long_poll.rs"]
mod long_poll;
#[path = "edge/multiplexed.rs"]
mod multiplexed;
#[path = "edge/negotiation.rs"]
mod negotiation;
#[path = "edge/process.rs"]
mod process;
#[path = "edge/read_origin.rs"]
mod read_origin;
#[path = "edge/read_your_writes.rs"]
mod read_your_writes;
#[path = "edge/ready.rs"]
mod ready;
#[path = "edge/restart.rs"]
mod restart;
#[path = "edge/snapshots.rs"]
mod snapshots;
#[path = "edge/sse.rs"]
mod sse;
