//! A Server-Sent Events parser, as the HTML standard says, fed with the
//! bytes of an answer as they arrive. No I/O: the tail in
//! `commands/read.rs` feeds it.
//!
//! The servers send `data` events (a range of the stream's bytes: its
//! `data:` lines joined with `\n`, base64 on binary streams), each followed
//! by a `control` event (JSON: `streamNextOffset`, `streamCursor`,
//! `upToDate`, `streamClosed`), and may send `error` and
//! `credential-expired` events; `: keepalive` comments are skipped.

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field; `message` when none.
    pub name: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Where the reader stands, from a `control` event.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Control {
    pub stream_next_offset: String,
    #[serde(default)]
    pub stream_cursor: Option<String>,
    #[serde(default)]
    pub up_to_date: bool,
    #[serde(default)]
    pub stream_closed: bool,
}

/// An incremental parser.
#[derive(Debug, Default)]
pub struct Parser {
    buffer: Vec<u8>,
    name: String,
    data: String,
    has_data: bool,
}

impl Parser {
    /// Takes more bytes; the events they complete, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Event> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        loop {
            let rest = &self.buffer[start..];
            let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') else {
                break;
            };
            // A CR last in the buffer may be the first half of a CRLF.
            if rest[end] == b'\r' && end + 1 == rest.len() {
                break;
            }
            let skip = if rest[end] == b'\r' && rest[end + 1] == b'\n' {
                2
            } else {
                1
            };
            let line = String::from_utf8_lossy(&rest[..end]).into_owned();
            start += end + skip;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.buffer.drain(..start);
        events
    }

    fn line(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            let name = std::mem::take(&mut self.name);
            let data = std::mem::take(&mut self.data);
            if !std::mem::replace(&mut self.has_data, false) {
                return None;
            }
            return Some(Event {
                name: if name.is_empty() {
                    "message".into()
                } else {
                    name
                },
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.name = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_lines_join_with_newlines_and_control_follows() {
        let mut p = Parser::default();
        let bytes = b"event: data\ndata:{\"a\":1}\ndata:{\"a\":2}\ndata:\n\nevent: control\ndata:{\"streamNextOffset\":\"0000000000000010\",\"upToDate\":true}\n\n";
        let events = p.feed(bytes);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].name, "data");
        assert_eq!(events[0].data, "{\"a\":1}\n{\"a\":2}\n");
        let control: Control = serde_json::from_str(&events[1].data).unwrap();
        assert_eq!(control.stream_next_offset, "0000000000000010");
        assert!(control.up_to_date);
        assert!(!control.stream_closed);
    }

    #[test]
    fn events_split_anywhere_across_feeds() {
        let bytes =
            b": keepalive\n\nevent: data\r\ndata:  two spaces\r\n\r\nevent: control\rdata:{}\r\r";
        for cut in 0..bytes.len() {
            let mut p = Parser::default();
            let mut events = p.feed(&bytes[..cut]);
            events.extend(p.feed(&bytes[cut..]));
            events.extend(p.feed(b"\n"));
            assert_eq!(
                events,
                vec![
                    Event {
                        name: "data".into(),
                        data: " two spaces".into()
                    },
                    Event {
                        name: "control".into(),
                        data: "{}".into()
                    },
                ],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn an_empty_data_event_is_an_event() {
        let mut p = Parser::default();
        let events = p.feed(b"event: data\ndata:\n\nevent: nothing\n\n");
        assert_eq!(
            events,
            vec![Event {
                name: "data".into(),
                data: String::new()
            }]
        );
    }
}
