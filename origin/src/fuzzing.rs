//! Entry points for the fuzz targets in `fuzz/` (not an API): every parser
//! that a request or a file on disk reaches, each with the invariants a
//! fuzzer can check beyond "does not panic". Private parsers are reached
//! through here so that they stay private to everything else.

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
