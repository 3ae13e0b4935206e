//! The serving shell both binaries run in, written once: how connections
//! are accepted, bounded, timed out and drained, how a process logs and
//! stops, and how an object-store URL is opened. Origin and edge hand it a
//! function from request to answer; everything here is what the open
//! internet does to a server before a request reaches that function.
//!
//! The project's words, one meaning each: `docs/glossary.md`.
//!
//! - [`accept`]: the accept loop, a semaphore capping connections
//!   (mini-redis's model) and the per-request [`Client`] extension;
//! - [`connection`]: one connection, HTTP/1.1 or HTTP/2, with the
//!   header-read / keep-alive timeout;
//! - [`light_path`]: HTTP/1.1 live reads (long-polls, SSE) served without
//!   hyper once their head is read, so a waiting reader costs only its own
//!   state;
//! - [`detached`]: an SSE reader's connection handed over to whoever writes its
//!   body (the edge's SSE hub), so it needs no task of its own;
//! - `lot`: HTTP/1.1 answers that wait (long-polls), held with no task
//!   each; [`wakes`]: wakers that say which entry woke;
//! - [`body`]: request bodies that go silent for too long end in an error;
//! - [`drain`] and [`signal`]: graceful shutdown on SIGTERM;
//! - [`periodic`]: the once-a-second work of a running server;
//! - [`keepalive`]: when an idle SSE reader gets its keepalive comment;
//! - [`sse_body`]: the body of an SSE reader's answer, a small queue its task fills;
//! - [`sse_out`]: where an SSE reader's task writes (that queue, or its
//!   detached connection);
//! - [`config`]: every limit above, with its default, in one struct;
//! - [`clock`]: time from tokio's clock, so paused-clock tests drive it;
//! - [`proxy`]: what passing a request on to another server drops;
//! - [`metrics`]: `/metrics` text, request series, process metrics;
//! - [`ready`] and [`recovering`]: `/readyz`, and what a server answers
//!   before it serves;
//! - [`request_id`]: each request's id, echoed, logged and passed on;
//! - [`flags_doc`]: a binary's flags as the configuration reference's table;
//! - [`renamed`]: flags, variables and metric series under their old names
//!   for one release.

pub(crate) mod accept;
pub(crate) mod body;
pub mod clock;
pub(crate) mod config;
pub(crate) mod connection;
pub mod descriptors;
pub mod detached;
pub(crate) mod drain;
pub mod flags_doc;
pub mod huge_pages;
pub(crate) mod idle;
pub mod keepalive;
pub mod light_path;
pub mod logging;
mod lot;
pub mod metrics;
pub mod objects;
pub mod peer;
pub mod periodic;
pub mod proxy;
pub mod ready;
pub mod recovering;
pub mod renamed;
pub(crate) mod request_body;
pub mod request_id;
pub mod shards;
pub mod signal;
pub mod sse_body;
pub mod sse_out;
pub mod waker_set;
pub mod wakes;

pub use accept::{serve, Client, Http1};
pub use body::{BodyIdle, IdleBody};
pub use config::ServeConfig;
pub use request_body::RequestBody;
