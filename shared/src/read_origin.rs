//! `Stream-Read-Origin` (extensions 4.4): another origin that serves the
//! cacheable reads of a stream (chunk and snapshot URLs), e.g. the CDN in
//! front of a region's edges. Origin and edge send it on their stream
//! reads and `HEAD` when `--read-origin` is set; a client may ignore it,
//! and sends only cacheable reads there.
//!
//! Its value is an origin in the web's sense: `scheme://host[:port]`,
//! nothing after it, since a client joins the chunk URLs it already has
//! (absolute paths) to it.

use http::{HeaderMap, HeaderValue, StatusCode, Uri};

use crate::headers::STREAM_READ_ORIGIN;

/// `--read-origin`, checked: an `http://` or `https://` URL with a host, no
/// user, no path but `/`, no query; answered as `scheme://host[:port]`.
pub fn parse(url: &str) -> Result<HeaderValue, String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("--read-origin {url:?}: {e}"))?;
    let scheme = uri.scheme_str().map(str::to_ascii_lowercase);
    let fits = matches!(scheme.as_deref(), Some("http" | "https"))
        && uri
            .authority()
            .is_some_and(|a| !a.as_str().contains('@') && !a.host().is_empty())
        && matches!(uri.path(), "" | "/")
        && uri.query().is_none();
    if !fits {
        return Err(format!(
            "--read-origin must be http(s)://host[:port] with nothing after it, not {url:?}"
        ));
    }
    let authority = uri.authority().map(|a| a.as_str().to_ascii_lowercase());
    let origin = format!(
        "{}://{}",
        scheme.unwrap_or_default(),
        authority.unwrap_or_default()
    );
    HeaderValue::from_str(&origin).map_err(|e| format!("--read-origin {url:?}: {e}"))
}

/// Names `origin` on a successful stream read or `HEAD` (`status` 2xx),
/// in place of any the answer had; refusals name none.
pub fn apply(status: StatusCode, headers: &mut HeaderMap, origin: Option<&HeaderValue>) {
    if let Some(origin) = origin.filter(|_| status.is_success()) {
        headers.insert(STREAM_READ_ORIGIN, origin.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_scheme_host_and_port_alone() {
        assert_eq!(
            parse("https://CDN.example.com/").unwrap(),
            "https://cdn.example.com"
        );
        assert_eq!(
            parse("http://10.0.0.1:8080").unwrap(),
            "http://10.0.0.1:8080"
        );
        for bad in [
            "cdn.example.com",
            "ftp://cdn.example.com",
            "https://cdn.example.com/v1",
            "https://cdn.example.com/?a=1",
            "https://user@cdn.example.com",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} taken");
        }
    }

    #[test]
    fn only_a_successful_answer_names_it_and_it_replaces_another() {
        let v = parse("https://cdn.example.com").unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            STREAM_READ_ORIGIN,
            HeaderValue::from_static("https://other.example"),
        );
        apply(StatusCode::OK, &mut h, Some(&v));
        assert_eq!(h[STREAM_READ_ORIGIN], "https://cdn.example.com");
        let mut refused = HeaderMap::new();
        apply(StatusCode::NOT_FOUND, &mut refused, Some(&v));
        assert!(refused.is_empty());
        let mut none = HeaderMap::new();
        apply(StatusCode::NO_CONTENT, &mut none, None);
        assert!(none.is_empty());
    }
}
