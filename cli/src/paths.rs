//! Stream paths as the command line names them, and the URLs they become.
//!
//! A path that starts with `/` is used as written (`/v1/stream/chat-1`,
//! `/acme/s.events`); anything else is a bare name under the default
//! prefix (`chat-1` → `/v1/stream/chat-1`), the prefix the servers give the
//! account `default`. Paths are sent as written, never percent-encoded: the
//! servers use them as sent.

use crate::error::Failure;

/// Where bare names live.
pub const DEFAULT_PREFIX: &str = "/v1/stream/";

/// The stream path a command-line argument names.
pub fn stream_path(arg: &str) -> Result<String, Failure> {
    if arg.is_empty() || arg == "/" {
        return Err(Failure::Usage("a stream path or name is needed".into()));
    }
    if let Some(bad) = arg
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || *c == '?' || *c == '#')
    {
        return Err(Failure::Usage(format!(
            "{arg:?} cannot be a stream path (it holds {bad:?})"
        )));
    }
    if arg.starts_with('/') {
        Ok(arg.to_owned())
    } else {
        Ok(format!("{DEFAULT_PREFIX}{arg}"))
    }
}

/// The base URL without its trailing slashes; only `http://` is spoken
/// (this build has no TLS).
pub fn base_url(url: &str) -> Result<String, Failure> {
    let url = url.trim_end_matches('/');
    if url.starts_with("https://") {
        return Err(Failure::Usage(format!(
            "{url}: https is not supported by this build of ds (no TLS); use http:// or a local TLS-terminating proxy"
        )));
    }
    match url.strip_prefix("http://") {
        Some(rest) if !rest.is_empty() && !rest.contains(['?', '#']) => Ok(url.to_owned()),
        _ => Err(Failure::Usage(format!(
            "{url:?} is no http:// URL (e.g. http://127.0.0.1:4437)"
        ))),
    }
}

/// A query component's value, percent-encoded where it must be.
pub fn query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A duration as people write it: `30s`, `500ms`, `2m`, `1h`, or bare seconds.
pub fn duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is no duration (e.g. 30s, 500ms, 2m)"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        u => return Err(format!("{u:?} is no unit of time (ms, s, m, h)")),
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("{text:?}: a duration above zero is needed"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_names_go_under_the_default_prefix() {
        assert_eq!(stream_path("chat-1").unwrap(), "/v1/stream/chat-1");
        assert_eq!(stream_path("a/b").unwrap(), "/v1/stream/a/b");
        assert_eq!(stream_path("/acme/s.events").unwrap(), "/acme/s.events");
        assert!(stream_path("").is_err());
        assert!(stream_path("a b").is_err());
        assert!(stream_path("a?offset=1").is_err());
    }

    #[test]
    fn base_urls_are_http_without_a_trailing_slash() {
        assert_eq!(
            base_url("http://127.0.0.1:4437/").unwrap(),
            "http://127.0.0.1:4437"
        );
        let https = base_url("https://example.com").unwrap_err();
        assert!(https.to_string().contains("https is not supported"));
        assert!(base_url("127.0.0.1:4437").is_err());
    }

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(query_value("/v1/stream/a b&c"), "/v1/stream/a%20b%26c");
    }

    #[test]
    fn durations_read_as_people_write_them() {
        use std::time::Duration;
        assert_eq!(duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(duration("5").unwrap(), Duration::from_secs(5));
        assert!(duration("0s").is_err());
        assert!(duration("5 days").is_err());
    }
}
