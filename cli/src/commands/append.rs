//! `ds append PATH [DATA]`: a body from the argument, a file or stdin; with
//! `--lines` one append per line, in order, each sent once its predecessor
//! was acknowledged; with `--producer` exactly once across reruns (see
//! `crate::producer` for the rule and the state file).
//!
//! A producer's answers ([`decide`]): `200` applied; `204` with
//! `Producer-Outcome: duplicate` applied before (a resent append); `403`
//! stale-epoch: a newer writer took over, stop; `409` sequence-gap: the
//! state does not match the server's count, stop and say so (`--new-epoch`
//! starts over); `400` refused. `429`, `503`, other `5xx` and lost answers
//! are sent again unchanged, which is safe with producer headers; a plain
//! append is never sent twice.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use reqwest::{Method, Response};

use super::{content_type_of, is_json, Ctx};
use crate::client::{header, refused, send, send_ok};
use crate::error::Failure;
use crate::output;
use crate::paths::stream_path;
use crate::producer::{self, Input, ProducerState};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The stream path or bare name.
    pub path: String,
    /// The body; without it and without --file, standard input.
    pub data: Option<String>,
    /// Read the body from this file.
    #[arg(long, short = 'f', conflicts_with = "data")]
    pub file: Option<PathBuf>,
    /// One append per line (each with its newline; blank lines of a JSON
    /// stream are skipped), sent in order.
    #[arg(long, short = 'l')]
    pub lines: bool,
    /// The body's content type (default: the stream's, from a HEAD).
    #[arg(long, short = 't')]
    pub content_type: Option<String>,
    /// Append exactly once as this producer (Producer-Id/-Epoch/-Seq), keeping
    /// its count in a state file so a rerun resumes where a crash stopped.
    #[arg(long, short = 'p')]
    pub producer: Option<String>,
    /// The producer's state file (default:
    /// $XDG_STATE_HOME/ds/producers/<digest of url, stream, producer>.json).
    #[arg(long, requires = "producer")]
    pub state: Option<PathBuf>,
    /// Start a new producer epoch at sequence 0 (after the state file was lost
    /// or the server forgot the producer), giving up an unfinished input.
    #[arg(long, requires = "producer")]
    pub new_epoch: bool,
    /// Append only if this Stream-Seq is above the stream's last (plain appends).
    #[arg(long, conflicts_with = "producer")]
    pub seq: Option<String>,
}

/// The appends of an input, one at a time (never the whole input in memory
/// with `--lines`, so `tail -f log | ds append --lines` appends as lines come).
struct Units {
    reader: Box<dyn BufRead>,
    lines: bool,
    done: bool,
}

impl Units {
    fn next(&mut self) -> Result<Option<Vec<u8>>, Failure> {
        if self.done {
            return Ok(None);
        }
        let mut unit = Vec::new();
        let failed = |e: std::io::Error| Failure::Local(format!("cannot read the input: {e}"));
        if self.lines {
            if self.reader.read_until(b'\n', &mut unit).map_err(failed)? == 0 {
                self.done = true;
                return Ok(None);
            }
            if unit.last() != Some(&b'\n') {
                unit.push(b'\n');
            }
        } else {
            self.reader.read_to_end(&mut unit).map_err(failed)?;
            self.done = true;
        }
        Ok(Some(unit))
    }
}

/// Where the input comes from, and its name for a producer's state.
fn open_input(a: &Args) -> Result<(Box<dyn BufRead>, Input), Failure> {
    if let Some(data) = &a.data {
        let bytes = data.clone().into_bytes();
        return Ok((
            Box::new(std::io::Cursor::new(bytes.clone())),
            Input::Argument(bytes),
        ));
    }
    if let Some(file) = &a.file {
        let failed = |e: std::io::Error| Failure::Local(format!("{}: {e}", file.display()));
        let f = std::fs::File::open(file).map_err(failed)?;
        let absolute = std::fs::canonicalize(file).map_err(failed)?;
        return Ok((
            Box::new(BufReader::with_capacity(64 * 1024, f)),
            Input::File(absolute),
        ));
    }
    Ok((Box::new(BufReader::new(std::io::stdin())), Input::Stdin))
}

pub async fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    let path = stream_path(&a.path)?;
    let content_type = match &a.content_type {
        Some(t) => t.clone(),
        None => content_type_of(ctx, &path).await?,
    };
    let (reader, input) = open_input(&a)?;
    let mut units = Units {
        reader,
        lines: a.lines,
        done: false,
    };
    let json = is_json(&content_type);
    let mut last_next = None;
    match &a.producer {
        None => {
            while let Some(unit) = units.next()? {
                if a.lines && json && is_blank(&unit) {
                    continue;
                }
                let mut request = ctx
                    .client
                    .request(Method::POST, &path)
                    .header("content-type", &content_type)
                    .body(unit);
                if let Some(seq) = &a.seq {
                    request = request.header("stream-seq", seq);
                }
                let resp = send_ok(request).await?;
                let next = header(&resp, "stream-next-offset");
                if ctx.json {
                    output::json_line(&serde_json::json!({
                        "stream": path, "outcome": "appended", "next_offset": next,
                    }))?;
                }
                last_next = next;
            }
        }
        Some(id) => {
            let url = ctx.client.url("");
            let state_path = match &a.state {
                Some(p) => p.clone(),
                None => producer::default_path(
                    std::env::var("XDG_STATE_HOME").ok().as_deref(),
                    std::env::var("HOME").ok().as_deref(),
                    &url,
                    &path,
                    id,
                )?,
            };
            let writer = Producer {
                ctx,
                path: &path,
                content_type: &content_type,
                id,
                state_path: &state_path,
            };
            last_next = writer
                .append_all(&url, &mut units, &input, json && a.lines, a.new_epoch)
                .await?;
        }
    }
    if !ctx.json {
        if let Some(next) = last_next {
            output::line(&next)?;
        }
    }
    Ok(())
}

fn is_blank(unit: &[u8]) -> bool {
    unit.iter().all(u8::is_ascii_whitespace)
}

/// An exactly-once writer of one run.
struct Producer<'a> {
    ctx: &'a Ctx,
    path: &'a str,
    content_type: &'a str,
    id: &'a str,
    state_path: &'a Path,
}

impl Producer<'_> {
    async fn append_all(
        &self,
        url: &str,
        units: &mut Units,
        input: &Input,
        skip_blank: bool,
        new_epoch: bool,
    ) -> Result<Option<String>, Failure> {
        let (mut state, mut fresh) = self.open_state(url, new_epoch)?;
        let start = state.begin(&input.name()).map_err(|u| {
            Failure::Usage(format!(
                "producer {} has an unfinished input ({}, next unit {}): rerun that command to finish it, or pass --new-epoch to give it up",
                self.id, u.input, u.next_unit
            ))
        })?;
        producer::save(self.state_path, &state)?;
        let mut unit_index = 0u64;
        while unit_index < start {
            if units.next()?.is_none() {
                return Err(Failure::Local(format!(
                    "the input ends before unit {start}, where the state {} says the last run stopped",
                    self.state_path.display()
                )));
            }
            unit_index += 1;
        }
        let mut last_next = None;
        while let Some(unit) = units.next()? {
            if skip_blank && is_blank(&unit) {
                state.skipped(unit_index);
            } else {
                last_next = self
                    .append_unit(&mut state, &mut fresh, unit_index, Bytes::from(unit))
                    .await?;
            }
            unit_index += 1;
        }
        state.finish();
        producer::save(self.state_path, &state)?;
        Ok(last_next)
    }

    /// This producer's saved state (a new one if none was written), and
    /// whether it is *fresh*: it never sent, so a duplicate or stale-epoch
    /// answer to its first append is someone else's count (see
    /// `crate::producer`), and the run moves to an epoch above the
    /// server's.
    fn open_state(&self, url: &str, new_epoch: bool) -> Result<(ProducerState, bool), Failure> {
        let loaded = producer::load(self.state_path)?;
        let mut fresh = loaded.is_none();
        let mut state = loaded.unwrap_or_else(|| ProducerState::new(url, self.path, self.id));
        if state.stream != self.path || state.producer != self.id {
            return Err(Failure::Usage(format!(
                "the state {} is producer {} of {}, not {} of {}",
                self.state_path.display(),
                state.producer,
                state.stream,
                self.id,
                self.path
            )));
        }
        if new_epoch {
            // The new epoch may be one the server saw already (from another
            // state of this producer): its first append's duplicate answer
            // says so, as a state never written (`fresh`).
            state.new_epoch(0);
            state.finish();
            fresh = true;
        }
        Ok((state, fresh))
    }

    /// Appends one unit exactly once, its acknowledgement saved in the
    /// state before it is printed; the stream's end after it.
    async fn append_unit(
        &self,
        state: &mut ProducerState,
        fresh: &mut bool,
        unit_index: u64,
        body: Bytes,
    ) -> Result<Option<String>, Failure> {
        loop {
            let resp = self.send_with_retries(state, body.clone()).await?;
            match decide(&resp) {
                Decision::Applied { duplicate } => {
                    if duplicate && *fresh {
                        self.move_above(&resp, state)?;
                        *fresh = false;
                        continue;
                    }
                    let next = header(&resp, "stream-next-offset");
                    let seq = state.next_seq;
                    // Recorded before anything is printed: a closed stdout
                    // must not leave the state behind.
                    state.acknowledged(unit_index);
                    producer::save(self.state_path, state)?;
                    *fresh = false;
                    if self.ctx.json {
                        output::json_line(&serde_json::json!({
                            "stream": self.path,
                            "unit": unit_index,
                            "outcome": if duplicate { "duplicate" } else { "accepted" },
                            "producer": self.id,
                            "epoch": state.epoch,
                            "seq": seq,
                            "offset": header(&resp, "stream-offset"),
                            "next_offset": next,
                        }))?;
                    }
                    return Ok(next);
                }
                Decision::Fenced if *fresh => {
                    // A state that never sent meets a newer epoch of
                    // someone else's: it moves above it.
                    self.move_above(&resp, state)?;
                    *fresh = false;
                }
                Decision::Fenced => {
                    return Err(failure_of(resp)
                        .await
                        .with_hint("a newer epoch of this producer took over; this writer stops"))
                }
                Decision::Gap { expected } => {
                    let hint = format!(
                        "the server expects Producer-Seq {expected}, the state {} says {}; pass --new-epoch to start a new epoch",
                        self.state_path.display(),
                        state.next_seq
                    );
                    return Err(failure_of(resp).await.with_hint(&hint));
                }
                Decision::Refused | Decision::Retry => {
                    // Not applied now, but it may have been by a run that
                    // crashed: the input stays where it is, so a rerun
                    // sends this unit again with the same seq.
                    let hint = format!(
                        "unit {unit_index} of this input is not appended; fix it and rerun the same command to go on, or pass --new-epoch to give the input up"
                    );
                    return Err(failure_of(resp).await.with_hint(&hint));
                }
            }
        }
    }

    /// A state that never sent met the server's record of a newer epoch (a
    /// duplicate, or a fence): it moves above it, saved before going on.
    fn move_above(&self, resp: &Response, state: &mut ProducerState) -> Result<(), Failure> {
        let server_epoch = header(resp, "producer-epoch")
            .and_then(|e| e.parse().ok())
            .unwrap_or(state.epoch);
        state.new_epoch(server_epoch);
        producer::save(self.state_path, state)
    }

    /// Sends the append until an answer other than a passing failure comes:
    /// resending is safe, the server answers a repeat as a duplicate.
    async fn send_with_retries(
        &self,
        state: &ProducerState,
        body: Bytes,
    ) -> Result<Response, Failure> {
        let mut wait = Duration::from_millis(100);
        let mut attempt = 1;
        loop {
            let request = self
                .ctx
                .client
                .request(Method::POST, self.path)
                .header("content-type", self.content_type)
                .header("producer-id", self.id)
                .header("producer-epoch", state.epoch)
                .header("producer-seq", state.next_seq)
                .body(body.clone());
            let outcome = send(request).await;
            let retry_after = match &outcome {
                Ok(resp) if decide(resp) == Decision::Retry => header(resp, "retry-after")
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .map(|s| Duration::from_secs(s.min(30))),
                Err(Failure::Unreachable(_)) => None,
                _ => return outcome,
            };
            if attempt >= RETRIES {
                return outcome;
            }
            tokio::time::sleep(retry_after.unwrap_or(wait)).await;
            wait = (wait * 2).min(Duration::from_secs(5));
            attempt += 1;
        }
    }
}

/// How often one producer append is sent before its failure is the run's.
const RETRIES: u32 = 8;

/// The failure an error answer names.
async fn failure_of(resp: Response) -> Failure {
    match refused(resp).await {
        Err(f) => f,
        Ok(r) => Failure::Protocol(format!("a {} answer taken for a refusal", r.status())),
    }
}

/// What a producer append's answer means for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Applied now (`200`) or before (`204`, `duplicate`).
    Applied { duplicate: bool },
    /// `403` stale-epoch: a newer writer took over.
    Fenced,
    /// `409` sequence-gap.
    Gap { expected: u64 },
    /// Passing: `429`, `503`, other `5xx`.
    Retry,
    /// Any other refusal.
    Refused,
}

/// Decides a producer append's answer by its status and producer headers.
pub fn decide(resp: &Response) -> Decision {
    decide_parts(
        resp.status().as_u16(),
        header(resp, "producer-outcome").as_deref(),
        header(resp, "producer-expected-seq").as_deref(),
    )
}

/// [`decide`] on plain values.
pub fn decide_parts(status: u16, outcome: Option<&str>, expected: Option<&str>) -> Decision {
    match (status, outcome) {
        (200..=299, Some("duplicate")) => Decision::Applied { duplicate: true },
        (200..=299, _) => Decision::Applied { duplicate: false },
        (403, Some("stale-epoch")) => Decision::Fenced,
        (409, Some("sequence-gap")) => match expected.and_then(|e| e.parse().ok()) {
            Some(expected) => Decision::Gap { expected },
            None => Decision::Refused,
        },
        (429 | 500..=599, _) => Decision::Retry,
        _ => Decision::Refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_answers_decide_the_run() {
        assert_eq!(
            decide_parts(200, Some("accepted"), None),
            Decision::Applied { duplicate: false }
        );
        assert_eq!(
            decide_parts(204, Some("duplicate"), None),
            Decision::Applied { duplicate: true }
        );
        assert_eq!(
            decide_parts(403, Some("stale-epoch"), None),
            Decision::Fenced
        );
        assert_eq!(decide_parts(403, None, None), Decision::Refused);
        assert_eq!(
            decide_parts(409, Some("sequence-gap"), Some("4")),
            Decision::Gap { expected: 4 }
        );
        assert_eq!(decide_parts(409, None, None), Decision::Refused);
        assert_eq!(decide_parts(400, Some("invalid"), None), Decision::Refused);
        assert_eq!(decide_parts(503, None, None), Decision::Retry);
        assert_eq!(decide_parts(429, None, None), Decision::Retry);
    }

    #[test]
    fn lines_keep_their_newline_and_the_last_gets_one() {
        let mut u = Units {
            reader: Box::new(std::io::Cursor::new(b"a\nb".to_vec())),
            lines: true,
            done: false,
        };
        assert_eq!(u.next().unwrap(), Some(b"a\n".to_vec()));
        assert_eq!(u.next().unwrap(), Some(b"b\n".to_vec()));
        assert_eq!(u.next().unwrap(), None);
        let mut whole = Units {
            reader: Box::new(std::io::Cursor::new(b"a\nb".to_vec())),
            lines: false,
            done: false,
        };
        assert_eq!(whole.next().unwrap(), Some(b"a\nb".to_vec()));
        assert_eq!(whole.next().unwrap(), None);
    }
}
