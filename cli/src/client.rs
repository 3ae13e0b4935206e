//! The HTTP side: one client per command, the base URL, the credential,
//! and the step from an answer to a [`Failure`].

use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response};

use crate::error::Failure;

/// What every command's requests share.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
    /// The longest a request other than a live tail may take.
    pub timeout: Duration,
}

impl Client {
    /// A client of the server at `base` (already checked by
    /// [`crate::paths::base_url`]).
    pub fn new(base: String, key: Option<String>, timeout: Duration) -> Result<Self, Failure> {
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .user_agent(concat!("ds/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Failure::Local(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client {
            http,
            base,
            key: key.filter(|k| !k.is_empty()),
            timeout,
        })
    }

    /// The URL of a path (and query) on the server.
    pub fn url(&self, path_and_query: &str) -> String {
        format!("{}{}", self.base, path_and_query)
    }

    /// A request with the credential and the ordinary timeout.
    pub fn request(&self, method: Method, path_and_query: &str) -> RequestBuilder {
        self.live_request(method, path_and_query)
            .timeout(self.timeout)
    }

    /// A request with the credential and no overall timeout (a tail).
    pub fn live_request(&self, method: Method, path_and_query: &str) -> RequestBuilder {
        let r = self.http.request(method, self.url(path_and_query));
        match &self.key {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }

    /// The same request with another bearer credential (the admin token).
    pub fn request_as(
        &self,
        method: Method,
        path_and_query: &str,
        bearer: Option<&str>,
    ) -> RequestBuilder {
        let r = self
            .http
            .request(method, self.url(path_and_query))
            .timeout(self.timeout);
        match bearer.or(self.key.as_deref()) {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }
}

/// Sends a request; any answer, error statuses included.
pub async fn send(request: RequestBuilder) -> Result<Response, Failure> {
    Ok(request.send().await?)
}

/// Sends a request; a successful answer, or the failure an error answer
/// names.
pub async fn send_ok(request: RequestBuilder) -> Result<Response, Failure> {
    refused(send(request).await?).await
}

/// A successful answer as it is; an error answer as its failure.
pub async fn refused(resp: Response) -> Result<Response, Failure> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status().as_u16();
    let body = resp.bytes().await.unwrap_or_default();
    Err(Failure::from_answer(status, &body))
}

/// A header's value as text.
pub fn header(resp: &Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// A header the protocol promises on this answer.
pub fn required_header(resp: &Response, name: &str) -> Result<String, Failure> {
    header(resp, name).ok_or_else(|| {
        Failure::Protocol(format!(
            "a {} answer without {name}",
            resp.status().as_u16()
        ))
    })
}

/// Whether a header is `true`.
pub fn flag(resp: &Response, name: &str) -> bool {
    header(resp, name).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}
