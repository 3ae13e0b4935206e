//! JSON mode: what an append body becomes in the log.
//!
//! Each message is stored as its JSON text without insignificant whitespace,
//! followed by `\n`, so the log of a JSON stream *is* its NDJSON reading and a
//! byte offset always falls on or inside a message. A body that is an array
//! appends one message per element (one level of flattening). Key order and
//! number spelling are kept as the writer sent them: only whitespace outside
//! strings is removed.

use serde_json::value::RawValue;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    #[error("the body is not valid JSON: {0}")]
    Invalid(String),
    #[error("an empty JSON array appends nothing")]
    EmptyArray,
}

/// The NDJSON bytes a JSON body stores. `allow_empty_array` is true for the
/// initial body of a create, where `[]` means "no messages yet".
pub fn to_ndjson(body: &[u8], allow_empty_array: bool) -> Result<Vec<u8>, JsonError> {
    let whole: &RawValue =
        serde_json::from_slice(body).map_err(|e| JsonError::Invalid(e.to_string()))?;
    let text = whole.get();
    let mut out = Vec::with_capacity(body.len() + 1);
    if text.starts_with('[') {
        let items: Vec<&RawValue> =
            serde_json::from_str(text).map_err(|e| JsonError::Invalid(e.to_string()))?;
        if items.is_empty() && !allow_empty_array {
            return Err(JsonError::EmptyArray);
        }
        for item in items {
            push_compact(&mut out, item.get().as_bytes());
            out.push(b'\n');
        }
    } else {
        push_compact(&mut out, text.as_bytes());
        out.push(b'\n');
    }
    Ok(out)
}

/// Copies valid JSON text without whitespace outside strings.
fn push_compact(out: &mut Vec<u8>, json: &[u8]) {
    let mut in_string = false;
    let mut escaped = false;
    for &b in json {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            if b == b'"' {
                in_string = true;
            }
            out.push(b);
        }
    }
}

/// Turns whole NDJSON lines into one JSON array (`a\nb\n` → `[a,b]`), the
/// reading that upstream protocol clients expect.
pub fn ndjson_to_array(ndjson: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ndjson.len() + 2);
    out.push(b'[');
    let mut first = true;
    for line in ndjson.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(line);
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nd(s: &str) -> String {
        String::from_utf8(to_ndjson(s.as_bytes(), false).unwrap()).unwrap()
    }

    #[test]
    fn flattens_one_level() {
        assert_eq!(nd(r#"{"event": "created"}"#), "{\"event\":\"created\"}\n");
        assert_eq!(
            nd(r#"[{"event": "a"}, {"event": "b"}]"#),
            "{\"event\":\"a\"}\n{\"event\":\"b\"}\n"
        );
        assert_eq!(nd("[[1,2], [3,4]]"), "[1,2]\n[3,4]\n");
        assert_eq!(nd("[[[1,2,3]]]"), "[[1,2,3]]\n");
        assert_eq!(nd(" 42 "), "42\n");
        assert_eq!(nd(r#"{"b":1, "a":1.50}"#), "{\"b\":1,\"a\":1.50}\n");
    }

    #[test]
    fn keeps_string_contents() {
        assert_eq!(
            nd(r#"{"s": "a b\" \\ \n c"}"#),
            "{\"s\":\"a b\\\" \\\\ \\n c\"}\n"
        );
    }

    #[test]
    fn refuses() {
        assert_eq!(to_ndjson(b"[]", false), Err(JsonError::EmptyArray));
        assert_eq!(to_ndjson(b" [ ] ", true).unwrap(), b"");
        assert!(matches!(to_ndjson(b"{", false), Err(JsonError::Invalid(_))));
        assert!(matches!(to_ndjson(b"", false), Err(JsonError::Invalid(_))));
        assert!(matches!(
            to_ndjson(b"1 2", false),
            Err(JsonError::Invalid(_))
        ));
    }

    #[test]
    fn array_reading() {
        assert_eq!(ndjson_to_array(b"1\n{\"a\":2}\n"), b"[1,{\"a\":2}]");
        assert_eq!(ndjson_to_array(b""), b"[]");
    }

    proptest! {
        #[test]
        fn compact_is_equivalent(v in proptest::collection::vec(("[a-z \\\\\"]{0,8}", -1000i64..1000), 0..6)) {
            let obj: serde_json::Map<String, serde_json::Value> =
                v.iter().map(|(k, n)| (k.clone(), serde_json::Value::from(*n))).collect();
            let pretty = serde_json::to_string_pretty(&serde_json::Value::Object(obj.clone())).unwrap();
            let out = to_ndjson(pretty.as_bytes(), false).unwrap();
            let back: serde_json::Value = serde_json::from_slice(&out[..out.len() - 1]).unwrap();
            prop_assert_eq!(back, serde_json::Value::Object(obj));
            prop_assert!(!out[..out.len() - 1].contains(&b'\n'));
        }
    }
}
