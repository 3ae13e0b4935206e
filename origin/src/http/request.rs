//! Parsing of the request headers the protocol defines.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use shared::headers as h;

use super::error::ApiError;
use crate::core::config::Expiry;
use crate::core::producer::{ProducerClaim, MAX_PRODUCER_ID_BYTES, MAX_PRODUCER_NUMBER};

/// A header's value as text; a header that is not visible ASCII is refused.
pub fn text<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Result<Option<&'a str>, ApiError> {
    value_text(headers.get(name), name)
}

/// A header's value found already, as text (as [`text`]).
pub fn value_text<'a>(
    value: Option<&'a HeaderValue>,
    name: &HeaderName,
) -> Result<Option<&'a str>, ApiError> {
    match value {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(Some)
            .map_err(|_| ApiError::bad(format!("the {name} header is not text"))),
    }
}

/// Which of an append's optional protocol headers a request carries, and
/// its `Content-Type`, found in one pass: most appends carry none of the
/// former, and every lookup by name hashes the name again (measured: a
/// tenth of the append handler's work).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Carried<'a> {
    pub closed: bool,
    /// Any of the three producer headers.
    pub producer: bool,
    pub stream_seq: bool,
    pub incarnation: bool,
    /// The first `Content-Type` (as a look-up finds).
    pub content_type: Option<&'a HeaderValue>,
}

impl<'a> Carried<'a> {
    pub fn scan(headers: &'a HeaderMap) -> Carried<'a> {
        let mut c = Carried::default();
        for (name, value) in headers {
            if name == http::header::CONTENT_TYPE {
                c.content_type = c.content_type.or(Some(value));
            } else if name == h::STREAM_CLOSED {
                c.closed = true;
            } else if name == h::PRODUCER_ID || name == h::PRODUCER_EPOCH || name == h::PRODUCER_SEQ
            {
                c.producer = true;
            } else if name == h::STREAM_SEQ {
                c.stream_seq = true;
            } else if name == h::STREAM_INCARNATION {
                c.incarnation = true;
            }
        }
        c
    }
}

/// `Stream-Closed: true` (any case) closes; any other value is as if absent.
pub fn stream_closed(headers: &HeaderMap) -> bool {
    headers
        .get(h::STREAM_CLOSED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// `Stream-Incarnation`, when the request names the incarnation it expects.
pub fn incarnation(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    Ok(text(headers, &h::STREAM_INCARNATION)?.map(str::to_owned))
}

/// A non-negative decimal integer without sign, leading zeros or exponent.
pub fn strict_uint(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

/// The three producer headers, all or none.
pub fn producer(headers: &HeaderMap) -> Result<Option<ProducerClaim>, ApiError> {
    let id = text(headers, &h::PRODUCER_ID)?;
    let epoch = text(headers, &h::PRODUCER_EPOCH)?;
    let seq = text(headers, &h::PRODUCER_SEQ)?;
    match (id, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(seq)) => {
            if id.is_empty() {
                return Err(ApiError::bad("Producer-Id must not be empty"));
            }
            if id.len() > MAX_PRODUCER_ID_BYTES {
                return Err(ApiError::bad(format!(
                    "Producer-Id is at most {MAX_PRODUCER_ID_BYTES} bytes"
                )));
            }
            let number = |name: &str, v: &str| {
                strict_uint(v)
                    .filter(|n| *n <= MAX_PRODUCER_NUMBER)
                    .ok_or_else(|| {
                        ApiError::bad(format!(
                            "{name} must be an integer from 0 to 2^53-1, not {v:?}"
                        ))
                    })
            };
            Ok(Some(ProducerClaim {
                id: id.to_owned(),
                epoch: number("Producer-Epoch", epoch)?,
                seq: number("Producer-Seq", seq)?,
            }))
        }
        _ => Err(ApiError::bad(
            "Producer-Id, Producer-Epoch and Producer-Seq go together",
        )),
    }
}

/// `Stream-TTL` / `Stream-Expires-At` of a create (at most one of them).
pub fn expiry(headers: &HeaderMap) -> Result<Expiry, ApiError> {
    let ttl = text(headers, &h::STREAM_TTL)?;
    let at = text(headers, &h::STREAM_EXPIRES_AT)?;
    match (ttl, at) {
        (Some(_), Some(_)) => Err(ApiError::bad(
            "send Stream-TTL or Stream-Expires-At, not both",
        )),
        (Some(ttl), None) => strict_uint(ttl).map(Expiry::IdleSecs).ok_or_else(|| {
            ApiError::bad(format!(
                "Stream-TTL must be whole seconds without sign or leading zeros, not {ttl:?}"
            ))
        }),
        (None, Some(at)) => {
            let t = time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
                .map_err(|_| {
                    ApiError::bad(format!(
                        "Stream-Expires-At must be an RFC 3339 time, not {at:?}"
                    ))
                })?;
            let ms = t.unix_timestamp_nanos() / 1_000_000;
            if ms < 0 {
                return Err(ApiError::bad("Stream-Expires-At is before 1970"));
            }
            Ok(Expiry::At(ms as u64))
        }
        (None, None) => Ok(Expiry::Never),
    }
}

/// An instant as RFC 3339 UTC with milliseconds.
pub fn rfc3339(ms: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let base = t
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    // Rfc3339 prints nanoseconds only when present; normalise to milliseconds.
    match base.split_once('.') {
        Some((whole, _)) => format!("{whole}.{:03}Z", ms % 1000),
        None => format!("{}.{:03}Z", base.trim_end_matches('Z'), ms % 1000),
    }
}

/// Reads a `Stream-Seq` (an empty value is as if absent).
pub fn stream_seq(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    Ok(text(headers, &h::STREAM_SEQ)?
        .filter(|s| !s.is_empty())
        .map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn carried_finds_each_protocol_header() {
        let plain = headers(&[("content-type", "text/plain"), ("host", "x")]);
        assert_eq!(
            Carried::scan(&plain),
            Carried {
                content_type: plain.get("content-type"),
                ..Carried::default()
            }
        );
        let every = headers(&[
            ("stream-closed", "true"),
            ("producer-seq", "1"),
            ("stream-seq", "a"),
            ("stream-incarnation", "i"),
        ]);
        let all = Carried::scan(&every);
        assert_eq!(
            all,
            Carried {
                closed: true,
                producer: true,
                stream_seq: true,
                incarnation: true,
                content_type: None,
            }
        );
        let id_only = headers(&[("producer-id", "p")]);
        let id_only = Carried::scan(&id_only);
        assert!(id_only.producer);
    }

    #[test]
    fn ttl_grammar() {
        for bad in ["00060", "+60", "60.5", "1e3", "abc", "-1", ""] {
            assert!(expiry(&headers(&[("stream-ttl", bad)])).is_err(), "{bad}");
        }
        assert_eq!(
            expiry(&headers(&[("stream-ttl", "0")])).unwrap(),
            Expiry::IdleSecs(0)
        );
        assert_eq!(
            expiry(&headers(&[("stream-ttl", "3600")])).unwrap(),
            Expiry::IdleSecs(3600)
        );
        assert!(expiry(&headers(&[
            ("stream-ttl", "1"),
            ("stream-expires-at", "2030-01-01T00:00:00Z")
        ]))
        .is_err());
    }

    #[test]
    fn expires_at_forms() {
        let z = expiry(&headers(&[(
            "stream-expires-at",
            "2025-11-30T10:47:00.123Z",
        )]))
        .unwrap();
        let off = expiry(&headers(&[(
            "stream-expires-at",
            "2025-11-30T10:47:00.123+00:00",
        )]))
        .unwrap();
        assert_eq!(z, off);
        assert!(expiry(&headers(&[("stream-expires-at", "not-a-timestamp")])).is_err());
        let Expiry::At(ms) = z else { panic!() };
        assert_eq!(rfc3339(ms), "2025-11-30T10:47:00.123Z");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn producer_headers() {
        assert_eq!(producer(&HeaderMap::new()).unwrap(), None);
        let ok = producer(&headers(&[
            ("producer-id", "p"),
            ("producer-epoch", "1"),
            ("producer-seq", "0"),
        ]))
        .unwrap();
        assert_eq!(
            ok,
            Some(ProducerClaim {
                id: "p".into(),
                epoch: 1,
                seq: 0
            })
        );
        for (e, s) in [
            ("0xyz", "0"),
            ("0", "1abc"),
            ("1e3", "0"),
            ("-1", "0"),
            ("9007199254740992", "0"),
        ] {
            assert!(producer(&headers(&[
                ("producer-id", "p"),
                ("producer-epoch", e),
                ("producer-seq", s)
            ]))
            .is_err());
        }
        assert!(producer(&headers(&[("producer-id", "p")])).is_err());
        assert!(producer(&headers(&[
            ("producer-id", ""),
            ("producer-epoch", "0"),
            ("producer-seq", "0")
        ]))
        .is_err());
    }

    #[test]
    fn closed_flag() {
        assert!(stream_closed(&headers(&[("stream-closed", "TRUE")])));
        assert!(!stream_closed(&headers(&[("stream-closed", "yes")])));
        assert!(!stream_closed(&HeaderMap::new()));
    }
}
