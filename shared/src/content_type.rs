//! Content types: how two are compared, and what a stream's type means for
//! storage (JSON mode) and for SSE (text or base64).

/// The media type without parameters, trimmed and lowercased:
/// `Application/JSON; charset=utf-8` → `application/json`.
pub fn media_type(content_type: &str) -> String {
    bare(content_type).to_ascii_lowercase()
}

/// The media type without parameters, trimmed, case kept. Comparisons use
/// this with `eq_ignore_ascii_case`: every append compares types, and a
/// lowercased copy per comparison was a measurable share of its allocations.
fn bare(content_type: &str) -> &str {
    // A byte scan: these strings are short, and `split` costs more to set up.
    let end = content_type
        .bytes()
        .position(|b| b == b';')
        .unwrap_or(content_type.len());
    content_type[..end].trim()
}

/// Whether a content type's media type is `media` (given in lowercase).
pub fn is_media_type(content_type: &str, media: &str) -> bool {
    bare(content_type).eq_ignore_ascii_case(media)
}

/// Whether an append's content type is the stream's. Media types compare
/// case-insensitively and parameters (a charset) are ignored, since clients add
/// and drop them freely while meaning the same type.
pub fn same_media_type(a: &str, b: &str) -> bool {
    // Most appends send exactly the stream's type: one comparison of bytes.
    a == b || bare(a).eq_ignore_ascii_case(bare(b))
}

/// Whether a syntactically valid media type (`type/subtype`) was given.
pub fn is_valid(content_type: &str) -> bool {
    let media = media_type(content_type);
    let mut parts = media.splitn(2, '/');
    let (Some(kind), Some(sub)) = (parts.next(), parts.next()) else {
        return false;
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b))
    };
    token(kind) && token(sub)
}

/// JSON mode: appends are validated and stored one message per line.
pub fn is_json(content_type: &str) -> bool {
    is_media_type(content_type, "application/json")
}

/// Streams whose bytes go into SSE data events as text.
pub fn is_text(content_type: &str) -> bool {
    bare(content_type)
        .get(..5)
        .is_some_and(|t| t.eq_ignore_ascii_case("text/"))
}

/// Streams whose SSE data events are base64 (neither text nor JSON).
pub fn sse_uses_base64(content_type: &str) -> bool {
    !is_text(content_type) && !is_json(content_type)
}

/// The media type of reads of a JSON stream in the default mode.
pub const NDJSON: &str = "application/x-ndjson";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_media_types() {
        assert!(same_media_type(
            "application/json",
            "Application/JSON; charset=utf-8"
        ));
        assert!(!same_media_type("text/plain", "text/html"));
        assert!(is_json("application/json;charset=UTF-8"));
        assert!(is_text("text/plain"));
        assert!(is_text(" Text/HTML; charset=utf-8"));
        assert!(!is_text("tex"));
        assert!(is_media_type("Application/X-NDJSON ", NDJSON));
        assert!(sse_uses_base64("application/octet-stream"));
        assert!(!sse_uses_base64("application/json"));
        assert!(is_valid("text/plain; charset=utf-8"));
        assert!(!is_valid("textplain"));
        assert!(!is_valid("/x"));
    }
}
