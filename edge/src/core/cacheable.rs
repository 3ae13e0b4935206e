//! Which origin answers the edge may keep forever.
//!
//! Only an answer the origin itself marks immutable: `200` with
//! `Stream-Immutable: true` (a chunk that reaches its 4 MiB boundary, or the
//! end of a closed stream; a snapshot). Its URL names the incarnation, so a
//! stream deleted and created again has other URLs, and no kept answer can
//! be mistaken for the new stream's bytes. A chunk at the open end of a
//! stream grows with the next append and is never kept.

use http::{HeaderMap, StatusCode};
use shared::headers::STREAM_IMMUTABLE;

pub fn is_immutable(status: StatusCode, headers: &HeaderMap) -> bool {
    status == StatusCode::OK
        && headers
            .get(STREAM_IMMUTABLE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_marked_200s() {
        let mut h = HeaderMap::new();
        assert!(!is_immutable(StatusCode::OK, &h));
        h.insert(STREAM_IMMUTABLE, "true".parse().unwrap());
        assert!(is_immutable(StatusCode::OK, &h));
        assert!(!is_immutable(StatusCode::NOT_MODIFIED, &h));
        assert!(!is_immutable(StatusCode::PRECONDITION_FAILED, &h));
    }
}
