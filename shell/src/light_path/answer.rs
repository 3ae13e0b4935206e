//! The bytes of an answer on the light path, as hyper would write them:
//! the status line, the handler's headers, `date` when it set none, the
//! body's framing, and `connection: close` when the connection ends after
//! it. Pure: the date comes in as an argument.

use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{HeaderMap, StatusCode};

/// How the body is delimited on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body may follow (1xx, 204, 304).
    None,
    /// Exactly this many bytes follow.
    Length(u64),
    /// Chunks, the last one empty.
    Chunked,
}

/// The framing of an answer: none where the status allows no body, the
/// handler's `content-length` when it gave one, else the body's exact
/// size when known (nothing to come: 0), else chunks.
pub fn framing(status: StatusCode, headers: &HeaderMap, exact: Option<u64>) -> Framing {
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Framing::None;
    }
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared.or(exact) {
        Some(n) => Framing::Length(n),
        None => Framing::Chunked,
    }
}

/// Whether the handler's headers close the connection after the answer.
pub fn closes(headers: &HeaderMap) -> bool {
    headers.get_all(CONNECTION).iter().any(|v| {
        v.to_str()
            .unwrap_or("")
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("close"))
    })
}

/// The answer's head.
pub fn head(
    status: StatusCode,
    headers: &HeaderMap,
    framing: Framing,
    close: bool,
    date: &str,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        // The framing is the light path's own, written below.
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            continue;
        }
        line(&mut out, name.as_str(), value.as_bytes());
    }
    if !headers.contains_key(DATE) {
        line(&mut out, "date", date.as_bytes());
    }
    match framing {
        Framing::None => {}
        Framing::Length(n) => line(&mut out, "content-length", n.to_string().as_bytes()),
        Framing::Chunked => line(&mut out, "transfer-encoding", b"chunked"),
    }
    if close && !closes(headers) {
        line(&mut out, "connection", b"close");
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn line(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The size line of a chunk of `len` bytes (`{len:x}\r\n`), in a fixed
/// buffer: no allocation per chunk.
pub fn chunk_size(len: usize) -> ([u8; 18], usize) {
    let mut buf = [0u8; 18];
    let digits = if len == 0 {
        1
    } else {
        (usize::BITS - len.leading_zeros()).div_ceil(4) as usize
    };
    for (i, digit) in buf[..digits].iter_mut().enumerate() {
        let nibble = (len >> (4 * (digits - 1 - i))) & 0xf;
        *digit = b"0123456789abcdef"[nibble];
    }
    buf[digits] = b'\r';
    buf[digits + 1] = b'\n';
    (buf, digits + 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const DATE_NOW: &str = "Fri, 04 Dec 2026 22:00:00 GMT";

    fn text(status: StatusCode, headers: &HeaderMap, framing: Framing, close: bool) -> String {
        String::from_utf8(head(status, headers, framing, close, DATE_NOW)).unwrap()
    }

    #[test]
    fn a_streamed_answer_is_chunked_and_dated() {
        let mut h = HeaderMap::new();
        h.insert(
            "content-type",
            HeaderValue::from_static("text/event-stream"),
        );
        assert_eq!(framing(StatusCode::OK, &h, None), Framing::Chunked);
        assert_eq!(
            text(StatusCode::OK, &h, Framing::Chunked, false),
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
             date: Fri, 04 Dec 2026 22:00:00 GMT\r\ntransfer-encoding: chunked\r\n\r\n"
        );
    }

    #[test]
    fn a_sized_answer_says_its_length_once() {
        let mut h = HeaderMap::new();
        h.insert("content-length", HeaderValue::from_static("5"));
        h.insert("date", HeaderValue::from_static("then"));
        assert_eq!(framing(StatusCode::OK, &h, None), Framing::Length(5));
        assert_eq!(
            text(StatusCode::OK, &h, Framing::Length(5), true),
            "HTTP/1.1 200 OK\r\ndate: then\r\ncontent-length: 5\r\nconnection: close\r\n\r\n"
        );
        assert_eq!(
            framing(StatusCode::OK, &HeaderMap::new(), Some(0)),
            Framing::Length(0)
        );
    }

    #[test]
    fn no_content_has_no_framing() {
        let h = HeaderMap::new();
        assert_eq!(framing(StatusCode::NO_CONTENT, &h, Some(0)), Framing::None);
        assert_eq!(framing(StatusCode::NOT_MODIFIED, &h, None), Framing::None);
        assert_eq!(
            text(StatusCode::NO_CONTENT, &h, Framing::None, false),
            format!("HTTP/1.1 204 No Content\r\ndate: {DATE_NOW}\r\n\r\n")
        );
    }

    #[test]
    fn a_close_the_handler_asked_for_is_not_repeated() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("Close"));
        assert!(closes(&h));
        let t = text(StatusCode::OK, &h, Framing::Length(0), true);
        assert_eq!(t.matches("onnection").count(), 1);
    }

    #[test]
    fn chunk_sizes_are_hex() {
        for (len, want) in [
            (0usize, "0\r\n"),
            (1, "1\r\n"),
            (15, "f\r\n"),
            (16, "10\r\n"),
            (4096, "1000\r\n"),
            (usize::MAX, "ffffffffffffffff\r\n"),
        ] {
            let (buf, n) = chunk_size(len);
            assert_eq!(std::str::from_utf8(&buf[..n]).unwrap(), want);
        }
    }
}
