//! Content negotiation of JSON streams' reads: NDJSON or JSON arrays.
//!
//! Our protocol reads a JSON stream as NDJSON (one message per line, the
//! bytes as stored); the upstream protocol's clients expect a JSON array of
//! the messages. One deployment serves both: a read, long-poll or SSE tail
//! whose `Accept` prefers `application/json` gets arrays, one that prefers
//! `application/x-ndjson` gets NDJSON, and one that prefers neither (no
//! `Accept`, `*/*`, `text/event-stream`, a tie) gets the server's default
//! (`--json-reads`). Only these two exact media ranges count: a wildcard
//! says nothing about which of the two a client can parse.
//!
//! Answers that depend on it carry `Vary: Accept`, and their entity tags
//! name the shape ([`crate::etag`]), so a cache never hands one shape to a
//! client that asked for the other. Chunk URLs are not negotiated: they are
//! the stored bytes (NDJSON), one immutable object per URL.

/// How reads of JSON streams are shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonReads {
    /// `application/x-ndjson`, one message per line (our protocol).
    Ndjson,
    /// `application/json` arrays (the upstream protocol's clients).
    Array,
}

/// What a request's `Accept` asks of a JSON stream's read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonPreference {
    /// Prefers `application/json`: arrays.
    Array,
    /// Prefers `application/x-ndjson`: NDJSON.
    Ndjson,
    /// Neither: the server's default.
    Either,
}

/// The media type of JSON arrays, as `Accept` names it.
pub const JSON: &str = "application/json";

/// The longest `Accept` header read; the rest is ignored (one request
/// cannot make the server scan more than this).
pub const MAX_ACCEPT_LEN: usize = 4096;

impl JsonPreference {
    /// The preference an `Accept` header value expresses.
    pub fn of(accept: Option<&str>) -> JsonPreference {
        let Some(accept) = accept else {
            return JsonPreference::Either;
        };
        let mut cut = accept.len().min(MAX_ACCEPT_LEN);
        while !accept.is_char_boundary(cut) {
            cut -= 1;
        }
        let accept = &accept[..cut];
        let (mut json, mut ndjson) = (None::<u16>, None::<u16>);
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim();
            let slot = if media.eq_ignore_ascii_case(JSON) {
                &mut json
            } else if media.eq_ignore_ascii_case(crate::content_type::NDJSON) {
                &mut ndjson
            } else {
                continue;
            };
            let Some(q) = quality(parts) else { continue };
            *slot = Some(slot.map_or(q, |old| old.max(q)));
        }
        let (j, n) = (json.unwrap_or(0), ndjson.unwrap_or(0));
        match j.cmp(&n) {
            std::cmp::Ordering::Greater => JsonPreference::Array,
            std::cmp::Ordering::Less => JsonPreference::Ndjson,
            // `q=0` refuses a type: refusing one and not naming the other
            // asks for the other.
            std::cmp::Ordering::Equal => match (json, ndjson) {
                (Some(0), None) => JsonPreference::Ndjson,
                (None, Some(0)) => JsonPreference::Array,
                _ => JsonPreference::Either,
            },
        }
    }

    /// The shape a server whose default is `default` answers with.
    pub fn resolve(self, default: JsonReads) -> JsonReads {
        match self {
            JsonPreference::Array => JsonReads::Array,
            JsonPreference::Ndjson => JsonReads::Ndjson,
            JsonPreference::Either => default,
        }
    }

    /// The `Accept` a proxy sends upstream for this preference (`None`: no
    /// `Accept`, the upstream's default). Readers with the same canonical
    /// value get the same answer, whatever else their `Accept` said.
    pub fn canonical_accept(self) -> Option<&'static str> {
        match self {
            JsonPreference::Array => Some(JSON),
            JsonPreference::Ndjson => Some(crate::content_type::NDJSON),
            JsonPreference::Either => None,
        }
    }
}

/// The `q` of one media range in thousandths (1000 when absent); `None`
/// for a malformed `q`, which drops the range.
fn quality<'a>(params: impl Iterator<Item = &'a str>) -> Option<u16> {
    for p in params {
        let Some((name, value)) = p.split_once('=') else {
            continue;
        };
        if !name.trim().eq_ignore_ascii_case("q") {
            continue;
        }
        return parse_q(value.trim());
    }
    Some(1000)
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )` (RFC 9110).
fn parse_q(v: &str) -> Option<u16> {
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut thousandths: u16 = 0;
    for (i, b) in frac.bytes().enumerate() {
        thousandths += u16::from(b - b'0') * [100, 10, 1][i];
    }
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::JsonPreference as P;
    use super::*;

    #[test]
    fn plain_preferences() {
        assert_eq!(P::of(None), P::Either);
        assert_eq!(P::of(Some("*/*")), P::Either);
        assert_eq!(P::of(Some("text/event-stream")), P::Either);
        assert_eq!(P::of(Some("application/*")), P::Either);
        assert_eq!(P::of(Some("application/json")), P::Array);
        assert_eq!(P::of(Some("Application/JSON; charset=utf-8")), P::Array);
        assert_eq!(P::of(Some("application/x-ndjson")), P::Ndjson);
        assert_eq!(P::of(Some("text/event-stream, application/json")), P::Array);
    }

    #[test]
    fn quality_decides() {
        assert_eq!(
            P::of(Some("application/x-ndjson;q=0.5, application/json")),
            P::Array
        );
        assert_eq!(
            P::of(Some("application/json;q=0.4, application/x-ndjson;q=0.9")),
            P::Ndjson
        );
        assert_eq!(
            P::of(Some("application/json, application/x-ndjson")),
            P::Either
        );
        assert_eq!(P::of(Some("application/json;q=0")), P::Ndjson);
        assert_eq!(P::of(Some("application/x-ndjson;q=0")), P::Array);
        assert_eq!(
            P::of(Some("application/json;q=0, application/x-ndjson;q=0")),
            P::Either
        );
        // A malformed q drops its range.
        assert_eq!(P::of(Some("application/json;q=2")), P::Either);
        assert_eq!(P::of(Some("application/json;q=0.1234")), P::Either);
        assert_eq!(P::of(Some("application/json;q=abc")), P::Either);
        assert_eq!(P::of(Some("application/json;q=1.000")), P::Array);
    }

    #[test]
    fn resolves_against_the_default() {
        assert_eq!(P::Either.resolve(JsonReads::Array), JsonReads::Array);
        assert_eq!(P::Either.resolve(JsonReads::Ndjson), JsonReads::Ndjson);
        assert_eq!(P::Array.resolve(JsonReads::Ndjson), JsonReads::Array);
        assert_eq!(P::Ndjson.resolve(JsonReads::Array), JsonReads::Ndjson);
        assert_eq!(P::Either.canonical_accept(), None);
        assert_eq!(P::Array.canonical_accept(), Some("application/json"));
    }

    proptest::proptest! {
        #[test]
        fn any_header_is_safe(s in ".{0,200}") {
            let p = P::of(Some(&s));
            // The canonical form means the same.
            proptest::prop_assert_eq!(P::of(p.canonical_accept()), p);
        }
    }
}
