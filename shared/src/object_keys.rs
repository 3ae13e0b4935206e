//! The object-storage key of a sealed chunk, computed from the parts of its
//! URL alone, so an edge reading the origin's bucket finds what the origin
//! sealed:
//!
//! ```text
//! streams/{path-hash}/{incarnation}/chunks/{offset}
//! streams/{path-hash}/{incarnation}/snapshots/{offset}-{digest[..16]}
//! ```
//! `path-hash` is the first 16 bytes of SHA-256 of the stream's path, in hex;
//! `offset` the chunk's first byte (a multiple of the chunk size) in the
//! 16-hex-digit form. The origin's `objects::keys` turns these into object
//! paths; nothing else builds a key.

use sha2::{Digest, Sha256};

use crate::offset::Offset;

/// Everything of one incarnation of a stream lives under this prefix.
pub fn incarnation_prefix(stream_path: &str, incarnation: &str) -> String {
    let hash = Sha256::digest(stream_path.as_bytes());
    format!("streams/{}/{incarnation}", hex::encode(&hash[..16]))
}

/// The key of the sealed chunk of `stream_path` that starts at `start`.
pub fn chunk_key(stream_path: &str, incarnation: &str, start: Offset) -> String {
    format!(
        "{}/chunks/{start}",
        incarnation_prefix(stream_path, incarnation)
    )
}

/// A snapshot's key names its offset and (the first 64 bits of) its digest:
/// two blobs published at the same offset never share a key, so no two
/// writers race for one. Keys stay short: s3s-fs refuses keys much longer
/// than 130 bytes.
pub fn snapshot_key(stream_path: &str, incarnation: &str, offset: Offset, digest: &str) -> String {
    let short = &digest[..digest.len().min(16)];
    format!(
        "{}/snapshots/{offset}-{short}",
        incarnation_prefix(stream_path, incarnation)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let k = chunk_key("/v1/stream/a", "1-ab", Offset(4 * 1024 * 1024));
        assert!(k.starts_with("streams/"));
        assert!(k.ends_with("/1-ab/chunks/0000000000400000"));
        assert_eq!(k.len(), "streams/".len() + 32 + "/1-ab/chunks/".len() + 16);
        assert_ne!(
            k,
            chunk_key("/v1/stream/b", "1-ab", Offset(4 * 1024 * 1024))
        );
    }
}
