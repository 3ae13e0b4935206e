//! The edge's decisions, without I/O, without a clock: which readers may
//! share one upstream long-poll, where an SSE reader stands against the
//! shared feed, which answers may be kept forever, where a text event may
//! end, which protocol an origin's waiting requests take. The shells in
//! `collapse`, `fanout`, `chunk_cache`, `upstream` and `http` act on them.

pub(crate) mod cacheable;
pub(crate) mod catch_up;
pub(crate) mod collapse_key;
pub(crate) mod cover;
pub(crate) mod splice;
pub(crate) mod text_cut;
pub mod upstream_protocol;
