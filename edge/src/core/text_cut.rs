//! Where a data event of a text stream may end.
//!
//! A read answer is cut by bytes, so at its size limit it may end inside a
//! UTF-8 character; an SSE text event must carry whole characters. The edge
//! keeps the longest whole-character prefix and reads the rest again with
//! the next part.

use bytes::Bytes;

/// The part of `body` (which ends at stream offset `end`) to send as one
/// text event, and the offset it ends at. A body that is not UTF-8 at all
/// goes whole (the origin does the same).
pub fn cut_text(body: Bytes, end: u64) -> (Bytes, u64) {
    let keep = shared::sse::utf8_prefix_len(&body);
    if keep == body.len() || keep == 0 {
        return (body, end);
    }
    let dropped = (body.len() - keep) as u64;
    (body.slice(..keep), end - dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_whole_characters() {
        let s = "aé".as_bytes();
        let (b, end) = cut_text(Bytes::copy_from_slice(&s[..2]), 12);
        assert_eq!((&b[..], end), (&b"a"[..], 11));
        let (b, end) = cut_text(Bytes::copy_from_slice(s), 13);
        assert_eq!((b.len(), end), (3, 13));
    }
}
