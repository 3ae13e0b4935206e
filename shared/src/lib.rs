//! What origin and edge both speak, with no I/O and no async runtime.
//!
//! The project's words, one meaning each: `docs/glossary.md`.
//!
//! Module map:
//! - `allocator` (feature `mimalloc`): the binaries' global allocator.
//! - [`auth`]: accounts, grants, API key and token formats, the access rule.
//! - [`limits`]: per-account request rate and open tails.
//! - [`object_keys`]: the object-storage key of a sealed chunk, from a chunk URL's parts.
//! - [`offset`]: the fixed-width offset tokens readers pass back, and the chunk grid on them.
//! - [`headers`]: every protocol header name, in one place.
//! - [`error`]: the error codes and the JSON error body every refusal carries.
//! - [`cursor`]: the long-poll cursor rule that keeps caches from replaying an empty answer.
//! - [`etag`]: entity tags for reads, which change when a stream closes.
//! - [`content_type`]: media-type comparison and the JSON / text / binary split.
//! - [`negotiate`]: NDJSON or JSON arrays for a JSON stream's read, by `Accept`.
//! - [`sse`]: Server-Sent Events framing for data and control events.
//! - [`invalidation`]: the origin's feed of deletes, creates, retention and replaced snapshots for edges.
//! - [`listing`]: listing streams (`/_streams`): the query, the page, the merge of partitions' pages.
//! - [`paths`]: how a request path splits into a stream and a reserved sub-resource.
//! - [`partition`]: which partition of a region a stream (or request path) belongs to.
//! - [`params`]: parsing of the read query (`offset`, `live`, `max_bytes`, ...).
//! - [`read_origin`]: `Stream-Read-Origin`, where a stream's cacheable reads may go.
//! - [`units`]: human sizes and durations on command lines.

#[cfg(feature = "mimalloc")]
pub mod allocator;
pub mod auth;
pub mod content_type;
pub mod cursor;
pub mod error;
pub mod etag;
pub mod headers;
pub mod invalidation;
pub mod limits;
pub mod listing;
pub mod negotiate;
pub mod object_keys;
pub mod offset;
pub mod params;
pub mod partition;
pub mod paths;
pub mod read_origin;
pub mod sse;
pub mod units;
