//! How a request path names a stream or one of its reserved sub-resources.
//!
//! A stream lives at any path. Four forms below a stream are reserved:
//! `{stream}/incarnation/{token}/chunk/{offset}`,
//! `{stream}/incarnation/{token}/snapshot/{offset}`,
//! `{stream}/incarnation/{token}/restore` (a rollback of that incarnation)
//! and `{stream}/snapshot…`.
//! They can never be mistaken for a stream because no segment of a stream's
//! path may be `incarnation` or begin with `snapshot`: creating such a stream
//! is refused. So is a segment `__ds`: `{root}/__ds/…` holds the protocol's
//! control APIs (subscriptions, their signing keys; protocol §6), where
//! `{root}` is the stream root the paths in their bodies are relative to. Paths whose first segment begins with `_` are kept for the
//! servers' own endpoints (`/_admin`, ...), as are `/metrics`, `/healthz` and
//! `/readyz`.

/// What a request path addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    Stream(&'a str),
    Chunk {
        stream: &'a str,
        token: &'a str,
        offset: &'a str,
    },
    IncarnationSnapshot {
        stream: &'a str,
        token: &'a str,
        offset: &'a str,
    },
    Snapshot {
        stream: &'a str,
        rest: &'a str,
    },
    /// `{stream}/incarnation/{token}/restore`: rolls incarnation `token`
    /// of the stream back.
    Restore {
        stream: &'a str,
        token: &'a str,
    },
    /// `{root}/__ds/{rest}`: a control API of the streams under `root`
    /// (which is empty for the server's root).
    Control {
        root: &'a str,
        rest: &'a str,
    },
    /// A path no stream may have and no sub-resource matches.
    Reserved,
}

/// The segment that begins a control path (protocol §6).
pub const CONTROL_SEGMENT: &str = "__ds";

/// Longest stream path accepted, in bytes.
pub const MAX_STREAM_PATH: usize = 1024;

fn reserved_segment(seg: &str) -> bool {
    seg == "incarnation" || seg.starts_with("snapshot") || seg == CONTROL_SEGMENT
}

/// Splits a (percent-decoded) request path.
pub fn classify(path: &str) -> Target<'_> {
    if is_server_path(path) {
        return Target::Reserved;
    }
    let Some(at) = find_reserved(path) else {
        return Target::Stream(path);
    };
    let stream = &path[..at];
    let rest = &path[at + 1..];
    if let Some(rest) = rest.strip_prefix(CONTROL_SEGMENT) {
        return match rest.strip_prefix('/') {
            Some(rest) if !rest.is_empty() => Target::Control { root: stream, rest },
            _ => Target::Reserved,
        };
    }
    if stream.is_empty() || stream == "/" {
        return Target::Reserved;
    }
    let mut parts = rest.split('/');
    match (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) {
        (Some("incarnation"), Some(token), Some("chunk"), Some(offset), None) => Target::Chunk {
            stream,
            token,
            offset,
        },
        (Some("incarnation"), Some(token), Some("snapshot"), Some(offset), None) => {
            Target::IncarnationSnapshot {
                stream,
                token,
                offset,
            }
        }
        (Some("incarnation"), Some(token), Some("restore"), None, None) => {
            Target::Restore { stream, token }
        }
        (Some(first), ..) if first.starts_with("snapshot") => Target::Snapshot { stream, rest },
        _ => Target::Reserved,
    }
}

/// Byte index of the `/` before the first reserved segment. (A byte scan:
/// every request is classified, and `split` cost more to set up than the
/// usual short path takes to scan.)
fn find_reserved(path: &str) -> Option<usize> {
    let bytes = path.as_bytes();
    let mut start = 0;
    loop {
        let end = bytes[start..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(bytes.len(), |p| start + p);
        if reserved_segment(&path[start..end]) {
            return start.checked_sub(1);
        }
        if end == bytes.len() {
            return None;
        }
        start = end + 1;
    }
}

fn is_server_path(path: &str) -> bool {
    path == "/metrics" || path == "/healthz" || path == "/readyz" || path.starts_with("/_")
}

/// Why a path cannot name a new stream, if it cannot.
pub fn validate_stream_path(path: &str) -> Result<(), &'static str> {
    if !path.starts_with('/') || path.len() < 2 {
        return Err("a stream path starts with / and names something");
    }
    if path.len() > MAX_STREAM_PATH {
        return Err("the stream path is longer than 1024 bytes");
    }
    if path.ends_with('/') || path.contains("//") {
        return Err("a stream path has no empty segments");
    }
    if path.split('/').any(|s| s == "." || s == "..") {
        return Err("a stream path has no . or .. segments");
    }
    if path.chars().any(char::is_control) {
        return Err("a stream path has no control characters");
    }
    if is_server_path(path) || find_reserved(path).is_some() {
        return Err("the path is reserved: no segment may be `incarnation` or `__ds` or begin with `snapshot`, and the first may not begin with `_`");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_and_sub_resources() {
        assert_eq!(classify("/v1/stream/a"), Target::Stream("/v1/stream/a"));
        assert_eq!(
            classify("/acct/s.x/incarnation/tok/chunk/0000000000400000"),
            Target::Chunk {
                stream: "/acct/s.x",
                token: "tok",
                offset: "0000000000400000"
            }
        );
        assert_eq!(
            classify("/a/incarnation/t/snapshot/0000000000000010"),
            Target::IncarnationSnapshot {
                stream: "/a",
                token: "t",
                offset: "0000000000000010"
            }
        );
        assert_eq!(
            classify("/a/snapshot"),
            Target::Snapshot {
                stream: "/a",
                rest: "snapshot"
            }
        );
        assert_eq!(classify("/a/incarnation/t/other/x"), Target::Reserved);
        assert_eq!(
            classify("/a/b/incarnation/t/restore"),
            Target::Restore {
                stream: "/a/b",
                token: "t"
            }
        );
        assert_eq!(classify("/a/incarnation/t/restore/x"), Target::Reserved);
        assert_eq!(
            classify("/v1/stream/__ds/subscriptions/s-1"),
            Target::Control {
                root: "/v1/stream",
                rest: "subscriptions/s-1"
            }
        );
        assert_eq!(
            classify("/a/__ds/jwks.json"),
            Target::Control {
                root: "/a",
                rest: "jwks.json"
            }
        );
        // Paths beginning `/_` are the server's own: no streams at the
        // root means no control APIs there.
        assert_eq!(classify("/__ds/jwks.json"), Target::Reserved);
        assert_eq!(classify("/v1/__ds"), Target::Reserved);
        assert!(validate_stream_path("/v1/stream/__ds/x").is_err());
        assert_eq!(classify("/metrics"), Target::Reserved);
        assert_eq!(classify("/_admin/keys"), Target::Reserved);
    }

    #[test]
    fn reserved_paths_cannot_be_streams() {
        assert!(validate_stream_path("/v1/stream/chat-1").is_ok());
        assert!(validate_stream_path("/acct-7/s.events").is_ok());
        assert!(validate_stream_path("/a/snapshots").is_err());
        assert!(validate_stream_path("/a/incarnation").is_err());
        assert!(validate_stream_path("/a//b").is_err());
        assert!(validate_stream_path("/a/../b").is_err());
        assert!(validate_stream_path("/_x").is_err());
        assert!(validate_stream_path("/").is_err());
        // Every valid stream path classifies as itself.
        for p in ["/v1/stream/x", "/a/b.c/d", "/incarnations/x", "/x/snap"] {
            assert!(validate_stream_path(p).is_ok(), "{p}");
            assert_eq!(classify(p), Target::Stream(p));
        }
    }
}
