//! An SSE answer read block by block and event by event, parsed as the
//! HTML standard says (comment lines skipped, one space after the colon
//! dropped, `data` lines joined with `\n`), with the waits and assertions
//! the tests need.

use std::time::Duration;

/// One Server-Sent Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    /// The `data:` lines joined with `\n`, as an SSE parser gives them.
    pub data: String,
}

impl SseEvent {
    /// The event's data as JSON; panics when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("{} event is not JSON ({e}): {:?}", self.event, self.data))
    }

    /// The bytes of a base64 data event.
    pub fn base64(&self) -> Vec<u8> {
        use base64::Engine;
        let text: String = self
            .data
            .chars()
            .filter(|c| *c != '\n' && *c != '\r')
            .collect();
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .expect("base64 data event")
    }
}

/// An SSE answer being read; every wait is bounded by `wait`.
pub struct Sse {
    pub resp: reqwest::Response,
    wait: Duration,
    buf: Vec<u8>,
    ended: bool,
}

impl Sse {
    /// An answer that must end cleanly, between events: a broken body,
    /// or one that ends inside an event, panics.
    pub fn new(resp: reqwest::Response, wait: Duration) -> Self {
        Sse {
            resp,
            wait,
            buf: Vec::new(),
            ended: false,
        }
    }

    /// The next event, or `None` once the answer ended. Panics when
    /// nothing arrives within the wait.
    pub async fn next(&mut self) -> Option<SseEvent> {
        tokio::time::timeout(self.wait, self.next_event())
            .await
            .expect("an SSE event or the end within the wait")
    }

    /// The next event, which must exist and be of kind `event`.
    pub async fn expect(&mut self, event: &str) -> SseEvent {
        let e = self
            .next()
            .await
            .unwrap_or_else(|| panic!("expected a {event} event, the answer ended"));
        assert_eq!(e.event, event, "event kind of {e:?}");
        e
    }

    /// Asserts that the server ends the answer with no further event.
    pub async fn expect_end(&mut self) {
        let e = self.next().await;
        assert_eq!(e, None, "the answer should end here");
    }

    /// Reads the next block, which must be a comment (a keepalive): panics
    /// on an event or the end, or when none arrives within the wait.
    pub async fn expect_comment(&mut self) -> String {
        let block = tokio::time::timeout(self.wait, self.next_block())
            .await
            .expect("a comment within the wait")
            .expect("a comment, not the end of the answer");
        let text = String::from_utf8(block).expect("SSE is UTF-8");
        assert!(
            text.lines().all(|l| l.starts_with(':')),
            "a comment, not {text:?}"
        );
        text
    }

    /// Data bytes until a control event says `next`; panics on an event
    /// other than `data` and `control`, or on the end before it.
    pub async fn read_until(&mut self, next: &str) -> Vec<u8> {
        let mut data = Vec::new();
        loop {
            let e = self
                .next()
                .await
                .unwrap_or_else(|| panic!("the answer ended before {next}"));
            match e.event.as_str() {
                "data" => data.extend_from_slice(e.data.as_bytes()),
                "control" => {
                    if e.json()["streamNextOffset"] == next {
                        return data;
                    }
                }
                other => panic!("unexpected {other} event: {e:?}"),
            }
        }
    }

    async fn next_event(&mut self) -> Option<SseEvent> {
        while let Some(block) = self.next_block().await {
            if let Some(e) = parse_event(&block) {
                return Some(e);
            }
        }
        None
    }

    /// The next block of lines up to a blank line (without it), or `None`
    /// at the end of the answer.
    async fn next_block(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let mut block: Vec<u8> = self.buf.drain(..at + 2).collect();
                block.truncate(at);
                return Some(block);
            }
            if self.ended {
                assert!(
                    self.buf.is_empty(),
                    "the answer ended inside an event: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                return None;
            }
            match self.resp.chunk().await {
                Ok(Some(c)) => self.buf.extend_from_slice(&c),
                Ok(None) => self.ended = true,
                Err(e) => panic!("SSE body: {e}"),
            }
        }
    }
}

/// The event a block of lines makes, or `None` for a block without data
/// (comments only).
fn parse_event(block: &[u8]) -> Option<SseEvent> {
    let text = std::str::from_utf8(block).expect("SSE is UTF-8");
    let mut event = None;
    let mut data: Option<String> = None;
    for line in text.split('\n') {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_owned()),
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    data.map(|data| SseEvent {
        event: event.unwrap_or_else(|| "message".into()),
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_event;

    #[test]
    fn a_block_of_comments_is_no_event_and_data_lines_join() {
        assert_eq!(parse_event(b": keepalive"), None);
        let e = parse_event(b"event: data\n: note\ndata: a\ndata:b").unwrap();
        assert_eq!((e.event.as_str(), e.data.as_str()), ("data", "a\nb"));
        assert_eq!(parse_event(b"data").unwrap().event, "message");
    }
}
