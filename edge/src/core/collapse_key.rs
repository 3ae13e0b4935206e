//! Which long-poll readers may share one upstream answer.
//!
//! Two readers may share exactly when the origin would answer them the same:
//! the same stream path, the same query (offset, cursor, `max_bytes`,
//! `timeout_ms`, ... every parameter, in any order), and the same request
//! headers that change an answer (`If-None-Match` makes a `304`,
//! `Stream-Incarnation` a `412`, credentials what may be read), and the same
//! shape of a JSON stream's answer (`Accept`, reduced to what it chooses:
//! arrays, NDJSON or the origin's default; `shared::negotiate`). Everything
//! else a reader sends (user agent, the rest of `Accept`) does not change
//! the answer.

use http::{HeaderMap, HeaderValue};
use shared::negotiate::JsonPreference;

/// Request headers that change a read's answer.
pub const ANSWER_HEADERS: [&str; 3] = ["if-none-match", "stream-incarnation", "authorization"];

/// The key of the collapse table.
pub fn long_poll_key(path: &str, query: Option<&str>, headers: &HeaderMap) -> String {
    let mut pairs: Vec<&str> = query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .collect();
    pairs.sort_unstable();
    let mut key = String::with_capacity(path.len() + 64);
    key.push_str(path);
    key.push('?');
    key.push_str(&pairs.join("&"));
    for name in ANSWER_HEADERS {
        for v in headers.get_all(name) {
            key.push('\n');
            key.push_str(name);
            key.push(':');
            key.push_str(&String::from_utf8_lossy(v.as_bytes()));
        }
    }
    if let Some(accept) = canonical_accept(headers) {
        key.push_str("\naccept:");
        key.push_str(accept);
    }
    key
}

/// The `Accept` the upstream request carries for a reader: only what
/// chooses a JSON stream's shape.
pub fn canonical_accept(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    JsonPreference::of(accept).canonical_accept()
}

/// The headers the shared upstream request carries: those in the key.
pub fn answer_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in ANSWER_HEADERS {
        for v in headers.get_all(name) {
            out.append(name, v.clone());
        }
    }
    if let Some(accept) = canonical_accept(headers) {
        out.insert(http::header::ACCEPT, HeaderValue::from_static(accept));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_order_does_not_matter_but_values_do() {
        let h = HeaderMap::new();
        let a = long_poll_key("/s", Some("offset=1&live=long-poll&cursor=5"), &h);
        let b = long_poll_key("/s", Some("cursor=5&offset=1&live=long-poll"), &h);
        assert_eq!(a, b);
        assert_ne!(
            a,
            long_poll_key("/s", Some("cursor=6&offset=1&live=long-poll"), &h)
        );
        assert_ne!(
            a,
            long_poll_key(
                "/s",
                Some("cursor=5&offset=1&live=long-poll&max_bytes=10"),
                &h
            )
        );
        assert_ne!(
            a,
            long_poll_key("/t", Some("offset=1&live=long-poll&cursor=5"), &h)
        );
    }

    #[test]
    fn answer_changing_headers_split_readers() {
        let q = Some("offset=1&live=long-poll");
        let plain = long_poll_key("/s", q, &HeaderMap::new());
        let mut h = HeaderMap::new();
        h.insert("user-agent", "x".parse().unwrap());
        assert_eq!(plain, long_poll_key("/s", q, &h));
        h.insert("if-none-match", "\"t\"".parse().unwrap());
        assert_ne!(plain, long_poll_key("/s", q, &h));
        assert_eq!(answer_headers(&h).len(), 1);
    }

    #[test]
    fn readers_split_by_the_shape_they_accept() {
        let q = Some("offset=1&live=long-poll");
        let with = |accept: &str| {
            let mut h = HeaderMap::new();
            h.insert("accept", accept.parse().unwrap());
            h
        };
        let plain = long_poll_key("/s", q, &HeaderMap::new());
        assert_eq!(plain, long_poll_key("/s", q, &with("*/*")));
        let arrays = long_poll_key("/s", q, &with("application/json"));
        assert_ne!(plain, arrays);
        assert_eq!(
            arrays,
            long_poll_key("/s", q, &with("text/plain, application/json;q=0.9"))
        );
        assert_ne!(
            arrays,
            long_poll_key("/s", q, &with("application/x-ndjson"))
        );
        assert_eq!(
            answer_headers(&with("application/json, */*"))
                .get("accept")
                .unwrap(),
            "application/json"
        );
        assert!(answer_headers(&with("*/*")).get("accept").is_none());
    }
}
