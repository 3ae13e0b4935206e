//! Entity tags of read answers.
//!
//! An answer is named by the stream's incarnation, the byte range it carries,
//! and whether the stream was closed when it was made: the same range of the
//! same incarnation is the same bytes forever (the log is append-only), and the
//! close marker makes the tag change when a stream closes, so a `304` never
//! hides the end of a stream.

use crate::offset::Offset;

/// Names one read answer.
pub fn read_etag(incarnation: &str, start: Offset, end: Offset, closed: bool) -> String {
    tag(incarnation, start, end, closed, "")
}

/// Names one read answer of a JSON stream shaped as a JSON array: the
/// same range as NDJSON is another representation, so another tag.
pub fn array_read_etag(incarnation: &str, start: Offset, end: Offset, closed: bool) -> String {
    tag(incarnation, start, end, closed, ":a")
}

fn tag(incarnation: &str, start: Offset, end: Offset, closed: bool, shape: &str) -> String {
    let closed = if closed { ":c" } else { "" };
    format!("\"{incarnation}:{start}:{end}{closed}{shape}\"")
}

/// Whether an `If-None-Match` header value names `etag` (strong or weak
/// comparison is the same here: our tags are strong).
pub fn if_none_match_hits(header: &str, etag: &str) -> bool {
    header
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag == etag || tag.strip_prefix("W/") == Some(etag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_changes_on_close() {
        let open = read_etag("i1", Offset(0), Offset(5), false);
        let closed = read_etag("i1", Offset(0), Offset(5), true);
        assert_ne!(open, closed);
        assert_eq!(open, "\"i1:0000000000000000:0000000000000005\"");
        assert_ne!(open, array_read_etag("i1", Offset(0), Offset(5), false));
    }

    #[test]
    fn matching() {
        let tag = read_etag("i", Offset(1), Offset(2), false);
        assert!(if_none_match_hits(&tag, &tag));
        assert!(if_none_match_hits(&format!("\"x\", {tag}"), &tag));
        assert!(if_none_match_hits(&format!("W/{tag}"), &tag));
        assert!(if_none_match_hits("*", &tag));
        assert!(!if_none_match_hits("\"other\"", &tag));
    }
}
