//! Entry points for the fuzz targets in `fuzz/` (not an API): every parser
//! that a request or a file on disk reaches, each with the invariants a
//! fuzzer can check beyond "does not panic". Private parsers are reached
//! through here so that they stay private to everything else. Each target
//! is one function of the input's bytes ([`TARGETS`]), so that the
//! committed corpora are replayed by a plain test too
//! (`fuzzing/corpus_replay.rs`, a unit test) on the stable compiler,
//! without libFuzzer. Compiled only for tests and under the `fuzzing`
//! feature, which `fuzz/` turns on.

use std::path::Path;

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::http::snapshot::{wanted_range, Wanted};
use crate::store::checkpoint::{codec, format, legacy};
use crate::store::record;

/// A WAL segment: frames decode until a clean end or an error, never past
/// the buffer, and a decoded record encodes to the bytes it came from.
pub fn log_records(buf: &[u8]) {
    let mut at = 0;
    while at < buf.len() {
        match record::decode(&buf[at..]) {
            Ok(Some((rec, used))) => {
                assert!(used > 0 && at + used <= buf.len());
                let mut again = Vec::new();
                record::encode(&rec, &mut again);
                assert_eq!(again, buf[at..at + used], "a record re-encodes as read");
                at += used;
            }
            Ok(None) | Err(_) => return,
        }
    }
}

/// A checkpoint stream record, base and delta files, and the legacy JSON
/// checkpoint: refused or decoded, and a decoded record round-trips.
pub fn checkpoints(buf: &[u8]) {
    if let Ok(s) = codec::decode(buf) {
        let mut out = Vec::new();
        codec::encode(&s, &mut out);
        assert_eq!(codec::decode(&out).expect("re-decodes"), s);
    }
    let file = Path::new("fuzz");
    for kind in [format::Kind::Base, format::Kind::Delta] {
        if let Ok(view) = format::parse(buf, kind, file) {
            for r in &view.records {
                let _ = codec::decode(r.bytes);
            }
        }
    }
    let _ = legacy::decode(buf);
}

/// `keys.json` as the key store reads it.
pub fn keys_file(buf: &[u8]) {
    let _ = serde_json::from_slice::<Vec<crate::auth::keys::KeyRecord>>(buf);
}

/// A target: one input's bytes in, a panic on a broken invariant.
pub type Target = fn(&[u8]);

/// Every target, by the name of its folder under `fuzz/corpus/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("log_records", log_records),
    ("checkpoints", checkpoints),
    ("keys_file", keys_file),
    ("request_headers", request_headers_bytes),
    ("snapshot_range", snapshot_range_bytes),
    ("json_body", json_body),
    ("offsets_and_query", offsets_and_query),
    ("paths_and_types", paths_and_types),
    ("sse_framing", sse_framing),
    ("tokens", tokens),
];

/// [`snapshot_range`] with the snapshot's length in the first 8 bytes
/// (little-endian) and the header after them.
pub fn snapshot_range_bytes(data: &[u8]) {
    let Some((len, header)) = data.split_first_chunk::<8>() else {
        return;
    };
    if let Ok(header) = std::str::from_utf8(header) {
        snapshot_range(header, u64::from_le_bytes(*len));
    }
}

/// A snapshot read's `Range` against a snapshot of `len` bytes: a part is
/// never empty and never past the end.
pub fn snapshot_range(header: &str, len: u64) {
    if let Wanted::Part(r) = wanted_range(Some(header), len) {
        assert!(
            r.start < r.end && r.end <= len,
            "{header:?} of {len}: {r:?}"
        );
    }
}

/// [`request_headers`] of input that is UTF-8.
pub fn request_headers_bytes(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        request_headers(s);
    }
}

/// The protocol's request headers, as the handlers parse them: name/value
/// pairs from the input (`\n` between pairs, `:` between name and value).
pub fn request_headers(input: &str) {
    let mut headers = HeaderMap::new();
    for line in input.split('\n') {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value.trim()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    use crate::http::request;
    let _ = request::expiry(&headers);
    let _ = request::producer(&headers);
    let _ = request::incarnation(&headers);
    let _ = request::stream_closed(&headers);
    let expiry = request::expiry(&headers).unwrap_or(crate::core::config::Expiry::Never);
    let ct = request::text(&headers, &axum::http::header::CONTENT_TYPE)
        .ok()
        .flatten();
    let _ = crate::http::fork::request(&headers, ct, expiry);
    if let Ok(Some(claim)) = request::producer(&headers) {
        assert!(
            !claim.id.is_empty() && claim.id.len() <= crate::core::producer::MAX_PRODUCER_ID_BYTES
        );
    }
}

/// A JSON append body: refused, or flattened into lines that each are one
/// JSON value by the grammar (numbers as written: `1e400` is valid JSON
/// that no `f64` holds, and it is stored as sent).
pub fn json_body(buf: &[u8]) {
    for allow_empty in [false, true] {
        if let Ok(ndjson) = crate::core::json::to_ndjson(buf, allow_empty) {
            for line in ndjson.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                assert!(
                    serde_json::from_slice::<Box<serde_json::value::RawValue>>(line).is_ok(),
                    "a flattened message is one JSON value"
                );
            }
        }
    }
}

/// Offsets and read queries: an offset that parses prints as it was
/// written and its next chunk boundary is not before it.
pub fn offsets_and_query(data: &[u8]) {
    use shared::offset::{Offset, ReadFrom};
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(o) = Offset::parse(s) {
        assert_eq!(o.to_string(), s);
        assert!(o.next_chunk_boundary() >= o);
    }
    let _ = ReadFrom::parse(s);
    let _ = shared::params::parse_read_query(Some(s));
}

/// Paths, content types, `Accept` and `If-None-Match`: a path that
/// validates as a stream's is classified as one.
pub fn paths_and_types(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = shared::paths::classify(s);
    if shared::paths::validate_stream_path(s).is_ok() {
        assert!(matches!(
            shared::paths::classify(s),
            shared::paths::Target::Stream(_)
        ));
    }
    let _ = shared::content_type::is_valid(s);
    let _ = shared::content_type::media_type(s);
    let _ = shared::content_type::is_json(s);
    let _ = shared::negotiate::JsonPreference::of(Some(s));
    let _ = shared::etag::if_none_match_hits(s, "\"abc\"");
}

/// SSE framing of any bytes: one event, ended by a blank line, whose every
/// line is a field (no stray line break or carriage return inside).
pub fn sse_framing(data: &[u8]) {
    for base64 in [false, true] {
        let event = shared::sse::data_event(data, base64);
        assert!(event.ends_with(b"\n\n"));
        let body = &event[..event.len() - 2];
        for line in body.split(|b| *b == b'\n') {
            assert!(
                line.starts_with(b"event:") || line.starts_with(b"data:"),
                "{line:?}"
            );
            assert!(!line.contains(&b'\r'));
        }
    }
}

/// Tokens: a verifier refuses any text that is not a token it signed, and
/// never panics on one.
pub fn tokens(data: &[u8]) {
    use std::sync::OnceLock;
    static VERIFIER: OnceLock<shared::auth::Verifier> = OnceLock::new();
    let verifier = VERIFIER
        .get_or_init(|| shared::auth::Verifier::from_hex(&"ab".repeat(32)).expect("a 32-byte key"));
    if let Ok(s) = std::str::from_utf8(data) {
        assert!(verifier.verify(s, 1_700_000_000).is_err());
    }
}

#[cfg(test)]
mod corpus_replay;
