//! Server-Sent Events framing.
//!
//! A data event carries a range of the stream's bytes: as text on text and
//! JSON streams, as standard base64 on every other. `data:` lines are only
//! transport framing; a reader joins them with `\n` and gets the bytes back.
//! Each data event is followed by a control event that says where the reader
//! stands, so it can reconnect from there.

use base64::Engine;
use serde::Serialize;

/// Where the reader stands after the events sent so far.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Control {
    pub stream_next_offset: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_cursor: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub up_to_date: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream_closed: bool,
}

/// Frames `payload` as one `data` event. Text is split at line ends into
/// `data:` lines, which a reader joins back with `\n` (so a CR or CRLF in a
/// text stream reads back as LF: SSE cannot carry a bare CR).
pub fn data_event(payload: &[u8], base64: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload.len() / 3 + 32);
    out.extend_from_slice(b"event: data\n");
    if base64 {
        let text = base64::engine::general_purpose::STANDARD.encode(payload);
        // Lines of at most 1,024 characters keep every line short for proxies.
        if text.is_empty() {
            out.extend_from_slice(b"data:\n");
        }
        for line in text.as_bytes().chunks(1024) {
            out.extend_from_slice(b"data:");
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    } else {
        // Every line end (CRLF, CR or LF) starts a new `data:` line, so no byte
        // of the payload can end the event or forge another one.
        let mut rest = payload;
        loop {
            let end = rest
                .iter()
                .position(|&b| b == b'\n' || b == b'\r')
                .unwrap_or(rest.len());
            out.extend_from_slice(b"data:");
            // A parser drops one space after `data:`, so a line that starts
            // with a space gets one more.
            if end > 0 && rest[0] == b' ' {
                out.push(b' ');
            }
            out.extend_from_slice(&rest[..end]);
            out.push(b'\n');
            if end == rest.len() {
                break;
            }
            let skip = if rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n') {
                2
            } else {
                1
            };
            rest = &rest[end + skip..];
        }
    }
    out.push(b'\n');
    out
}

/// Frames a `control` event.
pub fn control_event(control: &Control) -> Vec<u8> {
    named_json_event(
        "control",
        &serde_json::to_string(control).expect("control serializes"),
    )
}

/// What an idle tail sends every `sse_keepalive`: a comment line (and the
/// blank line that ends a block), which every SSE parser skips. It carries
/// no event, so readers see exactly the events they would without it; it
/// only keeps the bytes flowing through proxies and CDNs that cut an answer
/// silent for longer than their read timeout (Fastly: 10 s by default,
/// CloudFront: 30 s).
pub const KEEPALIVE: &[u8] = b": keepalive\n\n";

/// Frames an event whose data is one line of JSON (`error`, `credential-expired`).
pub fn named_json_event(name: &str, json: &str) -> Vec<u8> {
    debug_assert!(!json.contains('\n'));
    format!("event: {name}\ndata:{json}\n\n").into_bytes()
}

/// The `error` event that ends a tail of a stream that was deleted.
pub fn deleted_event() -> Vec<u8> {
    let body =
        crate::error::ErrorBody::new(crate::error::ErrorCode::NotFound, "the stream was deleted");
    named_json_event("error", &body.to_json())
}

/// The `error` event that ends a tail of an incarnation a rollback
/// replaced: the origin's and every edge's alike.
pub fn rolled_back_event() -> Vec<u8> {
    let body = crate::error::ErrorBody::new(
        crate::error::ErrorCode::PreconditionFailed,
        "the stream was rolled back: its HEAD names the new incarnation and the offset below which what was read stays",
    );
    named_json_event("error", &body.to_json())
}

/// The longest prefix of `bytes` that ends on a UTF-8 character boundary, so a
/// text event never splits a character. Falls back to the whole slice when it
/// is not UTF-8 at all.
pub fn utf8_prefix_len(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => e.valid_up_to(),
        Err(_) => bytes.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Joins the data lines of one event the way an SSE parser does.
    fn parse_data(event: &[u8]) -> String {
        let text = std::str::from_utf8(event).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn text_round_trips_through_lines() {
        assert_eq!(
            parse_data(&data_event(b"a\r\n\r\nevent: x\rb", false)),
            "a\n\nevent: x\nb"
        );
        for payload in ["a", "a\nb", "{\"x\":1}\n{\"y\":2}\n", "", "\n\n"] {
            let ev = data_event(payload.as_bytes(), false);
            assert!(ev.starts_with(b"event: data\n"));
            assert!(ev.ends_with(b"\n\n"));
            assert_eq!(parse_data(&ev), payload);
        }
    }

    #[test]
    fn leading_spaces_survive_a_parser() {
        // A parser (unlike `parse_data`) drops one space after `data:`.
        let ev = String::from_utf8(data_event(b" a\n  b\nc", false)).unwrap();
        let lines: Vec<&str> = ev
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|v| v.strip_prefix(' ').unwrap_or(v))
            .collect();
        assert_eq!(lines.join("\n"), " a\n  b\nc");
    }

    #[test]
    fn base64_round_trips() {
        let payload: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
        let ev = data_event(&payload, true);
        let joined: String = parse_data(&ev).replace(['\n', '\r'], "");
        assert_eq!(joined.len() % 4, 0);
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(joined)
                .unwrap(),
            payload
        );
        assert_eq!(parse_data(&data_event(b"", true)), "");
    }

    #[test]
    fn control_fields() {
        let c = Control {
            stream_next_offset: "0000000000000001".into(),
            stream_cursor: Some("5".into()),
            up_to_date: true,
            stream_closed: false,
        };
        let ev = String::from_utf8(control_event(&c)).unwrap();
        assert_eq!(ev, "event: control\ndata:{\"streamNextOffset\":\"0000000000000001\",\"streamCursor\":\"5\",\"upToDate\":true}\n\n");
    }

    #[test]
    fn a_keepalive_is_a_comment_every_parser_skips() {
        let text = std::str::from_utf8(KEEPALIVE).unwrap();
        assert!(text.ends_with("\n\n"));
        assert!(text
            .lines()
            .filter(|l| !l.is_empty())
            .all(|l| l.starts_with(':')));
        assert_eq!(parse_data(KEEPALIVE), "");
    }

    #[test]
    fn utf8_cut() {
        let s = "aé".as_bytes(); // 'é' is two bytes
        assert_eq!(utf8_prefix_len(&s[..2]), 1);
        assert_eq!(utf8_prefix_len(s), 3);
    }
}
