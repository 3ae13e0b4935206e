//! The protocol as a client sees it, against a real origin on loopback: every
//! row and refusal of the product spec's append page and read/tail/HEAD page
//! that this origin implements, in the default NDJSON mode unless a test says
//! otherwise. The public conformance suite covers the upstream protocol in
//! JSON-array mode; these tests cover what it does not: exact error codes and
//! bodies, our headers, limits, NDJSON reads, `max_bytes`, `timeout_ms`,
//! incarnations, reserved paths and the SSE session bound.
//!
//! One test binary, one module per operation.

use crate::common;
#[path = "protocol/append.rs"]
mod append;
#[path = "protocol/chunks.rs"]
mod chunks;
#[path = "protocol/connections.rs"]
mod connections;
#[path = "protocol/create.rs"]
mod create;
#[path = "protocol/errors.rs"]
mod errors;
#[path = "protocol/head.rs"]
mod head;
#[path = "protocol/ingress.rs"]
mod ingress;
#[path = "protocol/invalidations.rs"]
mod invalidations;
#[path = "protocol/lifecycle.rs"]
mod lifecycle;
#[path = "protocol/limits.rs"]
mod limits;
#[path = "protocol/listing.rs"]
mod listing;
#[path = "protocol/long_poll.rs"]
mod long_poll;
#[path = "protocol/negotiation.rs"]
mod negotiation;
#[path = "protocol/producers.rs"]
mod producers;
#[path = "protocol/read_origin.rs"]
mod read_origin;
#[path = "protocol/reads.rs"]
mod reads;
#[path = "protocol/snapshots.rs"]
mod snapshots;
#[path = "protocol/snapshots_staging.rs"]
mod snapshots_staging;
#[path = "protocol/sse.rs"]
mod sse;
#[path = "protocol/ttl.rs"]
mod ttl;
