//! Why a command failed, the one line it prints, and the exit code it ends
//! with. Every failure of every command goes through [`Failure`], so the
//! exit codes documented in the crate root hold everywhere.

use std::fmt;

/// Exit codes (also in the crate doc and `cli/README.md`).
pub mod exit {
    /// Done.
    pub const OK: i32 = 0;
    /// The command line is wrong (unknown flag, a path that is no stream path…).
    pub const USAGE: i32 = 1;
    /// The server refused the request with a 4xx other than 404.
    pub const REFUSED: i32 = 2;
    /// The server failed (5xx), could not be reached, timed out, or answered
    /// something this client does not understand.
    pub const SERVER: i32 = 3;
    /// The server answered 404: no such stream, key or subscription.
    pub const NOT_FOUND: i32 = 4;
    /// A local failure: a file could not be read, the producer state could
    /// not be written.
    pub const LOCAL: i32 = 5;
}

/// A failed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A wrong command line.
    Usage(String),
    /// The server answered with an error status.
    Http {
        status: u16,
        code: String,
        message: String,
    },
    /// No answer: refused connection, timeout, broken answer.
    Unreachable(String),
    /// An answer that breaks the protocol (a missing header…).
    Protocol(String),
    /// A local file or the producer state.
    Local(String),
    /// Standard output was closed by its reader (`ds read … | head`): the
    /// command ends quietly, as done.
    StdoutClosed,
}

impl Failure {
    /// The process's exit code for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Usage(_) => exit::USAGE,
            Failure::Http { status: 404, .. } => exit::NOT_FOUND,
            Failure::Http { status, .. } if (400..500).contains(status) => exit::REFUSED,
            Failure::Http { .. } | Failure::Unreachable(_) | Failure::Protocol(_) => exit::SERVER,
            Failure::Local(_) => exit::LOCAL,
            Failure::StdoutClosed => exit::OK,
        }
    }

    /// A failure from an error answer's status and body: the server's
    /// `{"error":{"code","message"}}` when the body is one, else the
    /// status's reason and whatever text the body holds.
    pub fn from_answer(status: u16, body: &[u8]) -> Failure {
        let parsed = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| {
                let e = v.get("error")?;
                Some((
                    e.get("code")?.as_str()?.to_owned(),
                    e.get("message")
                        .and_then(|m| m.as_str())
                        .unwrap_or("")
                        .to_owned(),
                ))
            });
        let (code, message) = parsed.unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            (
                reason(status).to_owned(),
                text.lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(200)
                    .collect(),
            )
        });
        Failure::Http {
            status,
            code,
            message,
        }
    }

    /// Adds a hint for the reader after the message.
    pub fn with_hint(self, hint: &str) -> Failure {
        match self {
            Failure::Http {
                status,
                code,
                message,
            } => Failure::Http {
                status,
                code,
                message: format!("{message} ({hint})"),
            },
            other => other,
        }
    }
}

/// A status's name where the body names no error code.
fn reason(status: u16) -> &'static str {
    match status {
        400 => "BAD_REQUEST",
        401 => "UNAUTHORIZED",
        403 => "FORBIDDEN",
        404 => "NOT_FOUND",
        405 => "METHOD_NOT_ALLOWED",
        409 => "CONFLICT",
        410 => "GONE",
        412 => "PRECONDITION_FAILED",
        413 => "PAYLOAD_TOO_LARGE",
        416 => "RANGE_NOT_SATISFIABLE",
        429 => "RATE_LIMITED",
        500 => "INTERNAL",
        502 => "BAD_GATEWAY",
        503 => "UNAVAILABLE",
        504 => "GATEWAY_TIMEOUT",
        _ => "HTTP_ERROR",
    }
}

impl fmt::Display for Failure {
    /// The one line printed on stderr, after `ds: `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m) => write!(f, "usage: {m}"),
            Failure::Http {
                status,
                code,
                message,
            } if message.is_empty() => write!(f, "{status} {code}"),
            Failure::Http {
                status,
                code,
                message,
            } => write!(f, "{status} {code}: {message}"),
            Failure::Unreachable(m) => write!(f, "unreachable: {m}"),
            Failure::Protocol(m) => write!(f, "unexpected answer: {m}"),
            Failure::Local(m) => write!(f, "{m}"),
            Failure::StdoutClosed => write!(f, "stdout closed"),
        }
    }
}

impl From<reqwest::Error> for Failure {
    fn from(e: reqwest::Error) -> Self {
        // The chain holds the reason (refused, timed out…); the top error
        // alone says only "error sending request".
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        Failure::Unreachable(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_names_code_and_message() {
        let f = Failure::from_answer(
            409,
            br#"{"error":{"code":"STREAM_CLOSED","message":"the stream is closed","request_id":"r1"}}"#,
        );
        assert_eq!(f.to_string(), "409 STREAM_CLOSED: the stream is closed");
        assert_eq!(f.exit_code(), exit::REFUSED);
    }

    #[test]
    fn a_body_that_is_no_error_object_falls_back_to_the_status() {
        let f = Failure::from_answer(502, b"upstream went away\nmore");
        assert_eq!(f.to_string(), "502 BAD_GATEWAY: upstream went away");
        assert_eq!(f.exit_code(), exit::SERVER);
        assert_eq!(Failure::from_answer(404, b"").to_string(), "404 NOT_FOUND");
        assert_eq!(Failure::from_answer(404, b"").exit_code(), exit::NOT_FOUND);
    }

    #[test]
    fn exit_codes_by_kind() {
        assert_eq!(Failure::Usage("x".into()).exit_code(), 1);
        assert_eq!(Failure::Unreachable("x".into()).exit_code(), 3);
        assert_eq!(Failure::Local("x".into()).exit_code(), 5);
        assert_eq!(Failure::from_answer(410, b"").exit_code(), 2);
    }
}
