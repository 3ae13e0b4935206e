//! Whether the head a connection's next request opens with is a tail the
//! light path serves, and the request it makes. Pure: bytes in, a request
//! or "not mine" out.
//!
//! The light path takes only what it can serve exactly as hyper would: a
//! whole `GET` head of HTTP/1.1 whose query asks for a live read
//! (`live=long-poll` or `live=sse`), with no body, no `Expect` and no
//! upgrade. Everything else (another request, a head not all arrived in
//! one peek, a longer one than the peek holds, HTTP/1.0, a malformed head)
//! is left to hyper, which then serves the connection to its end.

use http::{HeaderName, HeaderValue, Method, Request, Version};
use shared::params::{parse_read_query, Live};

/// The most header lines a light head may have (more: hyper serves it).
pub const MAX_HEADERS: usize = 64;

/// What the peeked bytes are.
#[derive(Debug)]
pub enum Peeked {
    /// A whole head of a bodiless live read: the request, the head's
    /// length in bytes, and whether the client asked to close after it.
    Tail {
        request: Box<Request<()>>,
        len: usize,
        close: bool,
    },
    /// The client closed the connection.
    Closed,
    /// Anything else: hyper serves the connection from here.
    Other,
}

/// Reads `bytes`, the start of what the client sent.
pub fn parse(bytes: &[u8]) -> Peeked {
    if bytes.is_empty() {
        return Peeked::Closed;
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let len = match head.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        _ => return Peeked::Other,
    };
    let (Some("GET"), Some(1), Some(target)) = (head.method, head.version, head.path) else {
        return Peeked::Other;
    };
    if !asks_live(target) {
        return Peeked::Other;
    }
    let Ok(mut request) = Request::builder()
        .method(Method::GET)
        .uri(target)
        .version(Version::HTTP_11)
        .body(())
    else {
        return Peeked::Other;
    };
    let mut close = false;
    for line in head.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(line.name.as_bytes()) else {
            return Peeked::Other;
        };
        let Ok(value) = HeaderValue::from_bytes(line.value) else {
            return Peeked::Other;
        };
        match name {
            http::header::CONTENT_LENGTH
            | http::header::TRANSFER_ENCODING
            | http::header::EXPECT
            | http::header::UPGRADE => return Peeked::Other,
            http::header::CONNECTION => {
                let v = value.to_str().unwrap_or("");
                for token in v.split(',').map(str::trim) {
                    if token.eq_ignore_ascii_case("close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case("upgrade") {
                        return Peeked::Other;
                    }
                }
            }
            _ => {}
        }
        request.headers_mut().append(name, value);
    }
    Peeked::Tail {
        request: Box::new(request),
        len,
        close,
    }
}

/// Whether the request target's query asks for a live read.
fn asks_live(target: &str) -> bool {
    let Some((_, query)) = target.split_once('?') else {
        return false;
    };
    // A quick look first: most queries name no `live` at all.
    query.contains("live=") && parse_read_query(Some(query)).is_ok_and(|p| p.live != Live::No)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail(bytes: &[u8]) -> (Request<()>, usize, bool) {
        match parse(bytes) {
            Peeked::Tail {
                request,
                len,
                close,
            } => (*request, len, close),
            other => panic!("not a tail: {other:?}"),
        }
    }

    fn other(bytes: &[u8]) -> bool {
        matches!(parse(bytes), Peeked::Other)
    }

    #[test]
    fn a_long_poll_or_an_sse_read_is_a_tail() {
        let head =
            b"GET /v1/stream/a?offset=-1&live=long-poll HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
        let (req, len, close) = tail(head);
        assert_eq!(len, head.len());
        assert!(!close);
        assert_eq!(req.uri().path(), "/v1/stream/a");
        assert_eq!(req.uri().query(), Some("offset=-1&live=long-poll"));
        assert_eq!(req.headers()["host"], "x");
        assert_eq!(req.headers()["accept"], "*/*");
        let (_, _, close) =
            tail(b"GET /s?offset=now&live=sse HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n");
        assert!(close);
    }

    #[test]
    fn the_head_ends_where_the_next_request_begins() {
        let first = b"GET /s?offset=now&live=sse HTTP/1.1\r\n\r\n";
        let mut both = first.to_vec();
        both.extend_from_slice(b"POST /s HTTP/1.1\r\n");
        assert_eq!(tail(&both).1, first.len());
    }

    #[test]
    fn repeated_headers_are_kept() {
        let (req, _, _) = tail(b"GET /s?offset=-1&live=sse HTTP/1.1\r\nX-A: 1\r\nX-A: 2\r\n\r\n");
        let all: Vec<_> = req.headers().get_all("x-a").iter().collect();
        assert_eq!(all, ["1", "2"]);
    }

    #[test]
    fn everything_else_is_left_to_hyper() {
        // Not a live read.
        assert!(other(b"GET /s?offset=0 HTTP/1.1\r\n\r\n"));
        assert!(other(b"GET /s HTTP/1.1\r\n\r\n"));
        assert!(other(b"GET /s?offset=0&live=poll HTTP/1.1\r\n\r\n"));
        assert!(other(b"GET /s?offset=0&live=sse&live=sse HTTP/1.1\r\n\r\n"));
        assert!(other(b"POST /s?offset=0&live=sse HTTP/1.1\r\n\r\n"));
        assert!(other(b"HEAD /s?offset=0&live=sse HTTP/1.1\r\n\r\n"));
        // Not all there, or not HTTP/1.1.
        assert!(other(b"GET /s?offset=0&live=sse HTTP/1.1\r\nHost: x\r\n"));
        assert!(other(b"GET /s?offset=0&live=sse HTTP/1.0\r\n\r\n"));
        assert!(other(b"GET /s?offset=0&live=sse HTTP/1.1\nbroken\r\n\r\n"));
        // A body, or a protocol switch.
        for h in [
            "Content-Length: 0",
            "Transfer-Encoding: chunked",
            "Expect: 100-continue",
            "Upgrade: websocket",
            "Connection: upgrade",
        ] {
            let head = format!("GET /s?offset=0&live=sse HTTP/1.1\r\n{h}\r\n\r\n");
            assert!(other(head.as_bytes()), "{h}");
        }
        // More header lines than it keeps.
        let mut many = b"GET /s?offset=0&live=sse HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert!(other(&many));
    }

    #[test]
    fn nothing_is_a_close() {
        assert!(matches!(parse(b""), Peeked::Closed));
    }
}
