//! `ds read PATH`: catch up from an offset with plain reads until the
//! answer says `Stream-Up-To-Date`, then (`--follow`) tail: by Server-Sent
//! Events (the default) or by long-polls, reconnecting from the last
//! `Stream-Next-Offset` / `streamNextOffset` whenever a session ends.
//! Bytes are printed as they arrive; `--json` prints one object per answer
//! (catch-up, long-poll) or per data event (SSE) instead. A closed stream
//! ends the command (exit 0) once its last byte was printed.
//!
//! JSON streams are asked for NDJSON (`Accept: application/x-ndjson`),
//! which every server mode honours; `--raw` sends no `Accept` and prints
//! what the server's default is, and leaves binary SSE payloads in base64.

use std::time::Duration;

use base64::Engine;
use reqwest::{Method, Response};

use super::Ctx;
use crate::client::{flag, header, refused, required_header, send};
use crate::error::Failure;
use crate::output;
use crate::paths::{query_value, stream_path};
use crate::sse::{Control, Parser};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Live {
    Sse,
    LongPoll,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The stream path or bare name.
    pub path: String,
    /// Where to start: -1 (the start), now (the end), or an offset an answer gave.
    #[arg(long, short = 'o', default_value = "-1", allow_hyphen_values = true)]
    pub offset: String,
    /// Print at most this many bytes in all, then stop.
    #[arg(long)]
    pub max_bytes: Option<u64>,
    /// Once up to date, tail forever (until the stream closes or the command
    /// is stopped).
    #[arg(long, short = 'F')]
    pub follow: bool,
    /// How to tail (implies --follow).
    #[arg(long, value_enum)]
    pub live: Option<Live>,
    /// Print answers as the server shapes them by default (no Accept;
    /// SSE payloads of binary streams stay base64).
    #[arg(long)]
    pub raw: bool,
}

/// How long a long-poll waits at the server.
const LONG_POLL_MS: u64 = 30_000;
/// An SSE tail with no byte for this long (keepalives come every 15 s) is
/// taken for dead and opened again.
const SSE_IDLE: Duration = Duration::from_secs(60);
/// Failures in a row (5xx, 429, no connection) a tail rides out.
const TAIL_RETRIES: u32 = 10;

/// Where the reader stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub offset: String,
    pub cursor: Option<String>,
    /// Bytes it may still print (`--max-bytes`).
    pub budget: Option<u64>,
}

impl Position {
    /// Counts printed bytes; whether the budget is spent.
    pub fn spend(&mut self, n: usize) -> bool {
        match &mut self.budget {
            Some(b) => {
                *b = b.saturating_sub(n as u64);
                *b == 0
            }
            None => false,
        }
    }

    fn max_bytes(&self) -> String {
        self.budget
            .map(|b| format!("&max_bytes={b}"))
            .unwrap_or_default()
    }

    fn cursor(&self) -> String {
        self.cursor
            .as_deref()
            .map(|c| format!("&cursor={}", query_value(c)))
            .unwrap_or_default()
    }

    /// The path and query of a catch-up read.
    pub fn catch_up(&self, path: &str) -> String {
        format!(
            "{path}?offset={}{}",
            query_value(&self.offset),
            self.max_bytes()
        )
    }

    /// The path and query of a long-poll.
    pub fn long_poll(&self, path: &str) -> String {
        format!(
            "{path}?offset={}&live=long-poll&timeout_ms={LONG_POLL_MS}{}{}",
            query_value(&self.offset),
            self.cursor(),
            self.max_bytes()
        )
    }

    /// The path and query of an SSE tail.
    pub fn sse(&self, path: &str) -> String {
        format!(
            "{path}?offset={}&live=sse{}{}",
            query_value(&self.offset),
            self.cursor(),
            self.max_bytes()
        )
    }
}

/// One answer or data event as `--json` prints it.
pub fn chunk_json(
    offset: &str,
    next: &str,
    data: &[u8],
    up_to_date: bool,
    closed: bool,
) -> serde_json::Value {
    let mut v = serde_json::json!({
        "offset": offset,
        "next_offset": next,
        "up_to_date": up_to_date,
        "closed": closed,
    });
    match std::str::from_utf8(data) {
        Ok(text) => v["data"] = text.into(),
        Err(_) => {
            v["data_base64"] = base64::engine::general_purpose::STANDARD
                .encode(data)
                .into()
        }
    }
    v
}

/// Whether the read is over.
enum Step {
    More,
    Done,
}

pub async fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    let path = stream_path(&a.path)?;
    let mut at = Position {
        offset: a.offset.clone(),
        cursor: None,
        budget: a.max_bytes,
    };
    if at.budget == Some(0) {
        return Ok(());
    }
    let reader = Reader {
        ctx,
        path: &path,
        raw: a.raw,
        printed: std::cell::Cell::new(false),
    };
    loop {
        let resp = reader.get(&at.catch_up(&path), ctx.client.timeout).await?;
        let (step, up_to_date) = reader.answer(resp, &mut at).await?;
        if matches!(step, Step::Done) {
            return Ok(());
        }
        if up_to_date {
            break;
        }
    }
    if !(a.follow || a.live.is_some()) {
        return Ok(());
    }
    match a.live.unwrap_or(Live::Sse) {
        Live::LongPoll => reader.long_poll(&mut at).await,
        Live::Sse => reader.sse(&mut at).await,
    }
}

struct Reader<'a> {
    ctx: &'a Ctx,
    path: &'a str,
    raw: bool,
    /// Whether `--json` printed an object yet: a read with no bytes still
    /// prints one, naming where the stream ends.
    printed: std::cell::Cell<bool>,
}

impl Reader<'_> {
    fn accept(&self, sse: bool) -> Option<&'static str> {
        match (self.raw, sse) {
            (true, _) => None,
            (false, false) => Some("application/x-ndjson"),
            (false, true) => Some("text/event-stream, application/x-ndjson"),
        }
    }

    async fn get(&self, path_and_query: &str, timeout: Duration) -> Result<Response, Failure> {
        let mut r = self
            .ctx
            .client
            .live_request(Method::GET, path_and_query)
            .timeout(timeout);
        if let Some(accept) = self.accept(false) {
            r = r.header("accept", accept);
        }
        send(r).await
    }

    /// Prints a catch-up or long-poll answer and moves the position on;
    /// whether the read is over, and whether the answer reached the end.
    async fn answer(&self, resp: Response, at: &mut Position) -> Result<(Step, bool), Failure> {
        let mut resp = refused(resp).await?;
        let next = required_header(&resp, "stream-next-offset")?;
        let up_to_date = flag(&resp, "stream-up-to-date") || resp.status().as_u16() == 204;
        let closed = flag(&resp, "stream-closed");
        if let Some(c) = header(&resp, "stream-cursor") {
            at.cursor = Some(c);
        }
        let mut spent = false;
        if self.ctx.json {
            let body = resp.bytes().await?;
            if !body.is_empty() || closed || (up_to_date && !self.printed.get()) {
                output::json_line(&chunk_json(&at.offset, &next, &body, up_to_date, closed))?;
                self.printed.set(true);
            }
            spent = at.spend(body.len());
        } else {
            while let Some(chunk) = resp.chunk().await? {
                output::bytes(&chunk)?;
                spent |= at.spend(chunk.len());
            }
        }
        at.offset = next;
        let done = closed && up_to_date || spent;
        Ok((if done { Step::Done } else { Step::More }, up_to_date))
    }

    async fn long_poll(&self, at: &mut Position) -> Result<(), Failure> {
        let wait = Duration::from_millis(LONG_POLL_MS) + self.ctx.client.timeout;
        let mut failures = 0;
        loop {
            let outcome = match self.get(&at.long_poll(self.path), wait).await {
                Ok(resp) if passing(resp.status().as_u16()) => Err(refused(resp).await.err()),
                Ok(resp) => Ok(self.answer(resp, at).await?),
                Err(f @ Failure::Unreachable(_)) => Err(Some(f)),
                Err(f) => return Err(f),
            };
            match outcome {
                Ok((Step::Done, _)) => return Ok(()),
                Ok((Step::More, _)) => failures = 0,
                Err(f) => {
                    failures += 1;
                    if failures > TAIL_RETRIES {
                        return Err(f.unwrap_or_else(|| Failure::Protocol("a tail failed".into())));
                    }
                    tokio::time::sleep(backoff(failures)).await;
                }
            }
        }
    }

    async fn sse(&self, at: &mut Position) -> Result<(), Failure> {
        let mut failures = 0;
        loop {
            let mut r = self
                .ctx
                .client
                .live_request(Method::GET, &at.sse(self.path));
            if let Some(accept) = self.accept(true) {
                r = r.header("accept", accept);
            }
            let resp = match send(r).await {
                Ok(resp) if passing(resp.status().as_u16()) => Err(refused(resp).await.err()),
                Ok(resp) => Ok(refused(resp).await?),
                Err(f @ Failure::Unreachable(_)) => Err(Some(f)),
                Err(f) => return Err(f),
            };
            let resp = match resp {
                Ok(resp) => resp,
                Err(f) => {
                    failures += 1;
                    if failures > TAIL_RETRIES {
                        return Err(f.unwrap_or_else(|| Failure::Protocol("a tail failed".into())));
                    }
                    tokio::time::sleep(backoff(failures)).await;
                    continue;
                }
            };
            failures = 0;
            if let Step::Done = self.session(resp, at).await? {
                return Ok(());
            }
        }
    }

    /// One SSE session, until the server ends it (or it goes silent).
    async fn session(&self, mut resp: Response, at: &mut Position) -> Result<Step, Failure> {
        let base64 = header(&resp, "stream-sse-data-encoding").as_deref() == Some("base64");
        let mut parser = Parser::default();
        // A data event waits for its control event under --json, which
        // names where it ends.
        let mut held: Option<Vec<u8>> = None;
        loop {
            let chunk = match tokio::time::timeout(SSE_IDLE, resp.chunk()).await {
                Err(_) | Ok(Err(_)) | Ok(Ok(None)) => return Ok(Step::More),
                Ok(Ok(Some(chunk))) => chunk,
            };
            for event in parser.feed(&chunk) {
                match event.name.as_str() {
                    "data" => {
                        let payload = if base64 && !self.raw {
                            let text: String =
                                event.data.chars().filter(|c| !c.is_whitespace()).collect();
                            base64::engine::general_purpose::STANDARD
                                .decode(text)
                                .map_err(|e| {
                                    Failure::Protocol(format!("an SSE payload is not base64: {e}"))
                                })?
                        } else {
                            event.data.into_bytes()
                        };
                        if self.ctx.json {
                            held.get_or_insert_with(Vec::new)
                                .extend_from_slice(&payload);
                        } else {
                            output::bytes(&payload)?;
                        }
                        if at.spend(payload.len()) && !self.ctx.json {
                            return Ok(Step::Done);
                        }
                    }
                    "control" => {
                        let control: Control = serde_json::from_str(&event.data).map_err(|e| {
                            Failure::Protocol(format!("a control event that is not one: {e}"))
                        })?;
                        let data = held.take();
                        if self.ctx.json && (data.is_some() || control.stream_closed) {
                            output::json_line(&chunk_json(
                                &at.offset,
                                &control.stream_next_offset,
                                data.as_deref().unwrap_or_default(),
                                control.up_to_date,
                                control.stream_closed,
                            ))?;
                        }
                        at.offset = control.stream_next_offset;
                        at.cursor = control.stream_cursor.or(at.cursor.take());
                        if control.stream_closed || at.budget == Some(0) {
                            return Ok(Step::Done);
                        }
                    }
                    "credential-expired" => {
                        return Err(Failure::Http {
                            status: 401,
                            code: "CREDENTIAL_EXPIRED".into(),
                            message: format!(
                                "the token expired; read on from {} with a fresh one",
                                at.offset
                            ),
                        })
                    }
                    // `error`: the tail ended; the reconnect's answer decides.
                    "error" => return Ok(Step::More),
                    _ => {}
                }
            }
        }
    }
}

/// Refusals a tail rides out: they pass.
fn passing(status: u16) -> bool {
    status == 429 || status >= 500
}

fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100u64 << failures.min(6)).min(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_carry_offset_cursor_and_budget() {
        let mut at = Position {
            offset: "-1".into(),
            cursor: None,
            budget: None,
        };
        assert_eq!(at.catch_up("/s"), "/s?offset=-1");
        at.offset = "0000000000000010".into();
        at.cursor = Some("c 1".into());
        at.budget = Some(5);
        assert_eq!(
            at.long_poll("/s"),
            "/s?offset=0000000000000010&live=long-poll&timeout_ms=30000&cursor=c%201&max_bytes=5"
        );
        assert_eq!(
            at.sse("/s"),
            "/s?offset=0000000000000010&live=sse&cursor=c%201&max_bytes=5"
        );
    }

    #[test]
    fn the_budget_runs_out() {
        let mut at = Position {
            offset: "-1".into(),
            cursor: None,
            budget: Some(10),
        };
        assert!(!at.spend(4));
        assert!(at.spend(7));
        assert_eq!(at.budget, Some(0));
        let mut unbounded = Position { budget: None, ..at };
        assert!(!unbounded.spend(1 << 30));
    }

    #[test]
    fn chunks_print_text_or_base64() {
        let v = chunk_json("a", "b", b"{\"n\":1}\n", true, false);
        assert_eq!(v["data"], "{\"n\":1}\n");
        assert_eq!(v["next_offset"], "b");
        let v = chunk_json("a", "b", &[0xff, 0], false, true);
        assert_eq!(v["data_base64"], "/wA=");
        assert!(v.get("data").is_none());
        assert_eq!(v["closed"], true);
    }
}
