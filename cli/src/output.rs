//! What commands print on stdout: a human line, or (`--json`) one JSON
//! object per line. Errors go to stderr in `main.rs`, never here.

use std::io::Write;

use crate::error::Failure;

/// Prints one JSON object on its own line and flushes, so a reader of a
/// pipe sees it at once.
pub fn json_line(value: &serde_json::Value) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value).map_err(|e| Failure::Local(e.to_string()))?;
    out.write_all(b"\n").map_err(stdout_failed)?;
    out.flush().map_err(stdout_failed)
}

/// Prints a line for people.
pub fn line(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).map_err(stdout_failed)?;
    out.write_all(b"\n").map_err(stdout_failed)?;
    out.flush().map_err(stdout_failed)
}

/// Writes bytes as they are and flushes.
pub fn bytes(data: &[u8]) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(data).map_err(stdout_failed)?;
    out.flush().map_err(stdout_failed)
}

/// A value as JSON for people (indented) or machines (one line).
pub fn value(value: &serde_json::Value, json: bool) -> Result<(), Failure> {
    if json {
        json_line(value)
    } else {
        line(&serde_json::to_string_pretty(value).map_err(|e| Failure::Local(e.to_string()))?)
    }
}

fn stdout_failed(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Failure::StdoutClosed;
    }
    Failure::Local(format!("cannot write to stdout: {e}"))
}
