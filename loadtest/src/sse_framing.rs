//! The two byte-level decoders of the lean SSE reader (`lean_sse`), pure so
//! they are tested apart from sockets: HTTP/1.1 chunked transfer coding,
//! and the `data:` lines of an event stream that hold a number (a writer's
//! microsecond stamp). Both take input in pieces of any size.

/// Where a chunked body's decoder stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dechunk {
    /// Before a chunk's size.
    #[default]
    Start,
    /// Reading a chunk's size in hex: the value so far.
    Size(usize),
    /// Skipping a chunk extension up to the line's end.
    Extension(usize),
    /// Inside a chunk's data, with this many bytes to go.
    Data(usize),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// The last chunk came: nothing more is data.
    End,
}

impl Dechunk {
    /// Decodes `input`, handing every piece of data to `data`.
    pub fn feed(&mut self, mut input: &[u8], mut data: impl FnMut(&[u8])) -> Result<(), String> {
        while let Some((&b, rest)) = input.split_first() {
            match *self {
                Dechunk::Start | Dechunk::Size(_) => {
                    let size = match *self {
                        Dechunk::Size(n) => Some(n),
                        _ => None,
                    };
                    if let Some(digit) = (b as char).to_digit(16) {
                        let n = size
                            .unwrap_or(0)
                            .checked_mul(16)
                            .and_then(|n| n.checked_add(digit as usize))
                            .ok_or("chunk size overflows")?;
                        *self = Dechunk::Size(n);
                    } else if b == b'\r' || b == b' ' || b == b'\t' {
                        // Before the line feed (or an extension).
                    } else if let (b';', Some(n)) = (b, size) {
                        *self = Dechunk::Extension(n);
                    } else if let (b'\n', Some(n)) = (b, size) {
                        *self = Dechunk::after_size(n);
                    } else {
                        return Err(format!("bad chunk size byte {b:#04x}"));
                    }
                    input = rest;
                }
                Dechunk::Extension(n) => {
                    if b == b'\n' {
                        *self = Dechunk::after_size(n);
                    }
                    input = rest;
                }
                Dechunk::Data(n) => {
                    let take = n.min(input.len());
                    data(&input[..take]);
                    input = &input[take..];
                    *self = match n - take {
                        0 => Dechunk::DataEnd,
                        left => Dechunk::Data(left),
                    };
                }
                Dechunk::DataEnd => {
                    match b {
                        b'\r' => {}
                        b'\n' => *self = Dechunk::Start,
                        _ => return Err(format!("no CRLF after a chunk: {b:#04x}")),
                    }
                    input = rest;
                }
                Dechunk::End => return Ok(()),
            }
        }
        Ok(())
    }

    fn after_size(n: usize) -> Dechunk {
        if n == 0 {
            Dechunk::End
        } else {
            Dechunk::Data(n)
        }
    }
}

/// Splits an event stream into lines and hands on the number of each
/// `data:` line that holds one (optional spaces around it, LF or CRLF).
/// A line over 4 KiB is cut there: stamps are short.
#[derive(Debug, Default)]
pub struct Lines {
    line: Vec<u8>,
}

const LINE_MAX: usize = 4096;

impl Lines {
    pub fn feed(&mut self, input: &[u8], mut stamp: impl FnMut(u64)) {
        let mut rest = input;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            let piece = &rest[..at];
            if self.line.is_empty() {
                if let Some(n) = data_number(piece) {
                    stamp(n);
                }
            } else {
                self.push(piece);
                if let Some(n) = data_number(&self.line) {
                    stamp(n);
                }
                self.line.clear();
            }
            rest = &rest[at + 1..];
        }
        self.push(rest);
    }

    fn push(&mut self, piece: &[u8]) {
        let room = LINE_MAX.saturating_sub(self.line.len());
        self.line.extend_from_slice(&piece[..piece.len().min(room)]);
    }
}

fn data_number(line: &[u8]) -> Option<u64> {
    let value = line.strip_prefix(b"data:")?;
    let text = std::str::from_utf8(value).ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dechunk_in_pieces(wire: &[u8], piece: usize) -> Result<(Vec<u8>, Dechunk), String> {
        let mut d = Dechunk::default();
        let mut out = Vec::new();
        for p in wire.chunks(piece) {
            d.feed(p, |data| out.extend_from_slice(data))?;
        }
        Ok((out, d))
    }

    #[test]
    fn chunked_bodies_decode_in_pieces_of_any_size() {
        let wire = b"5\r\nhello\r\n1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n";
        for piece in 1..wire.len() {
            let (out, state) = dechunk_in_pieces(wire, piece).unwrap();
            assert_eq!(out, b"helloabcdefghijklmnopqrstuvwxyz", "pieces of {piece}");
            assert_eq!(state, Dechunk::End);
        }
    }

    #[test]
    fn bad_chunk_framing_is_an_error() {
        assert!(dechunk_in_pieces(b"zz\r\n", 4).is_err());
        assert!(
            dechunk_in_pieces(b"2\r\nabX", 8).is_err(),
            "no CRLF after data"
        );
        assert!(dechunk_in_pieces(b"ffffffffffffffffff\r\n", 32).is_err());
    }

    #[test]
    fn numbered_data_lines_are_stamps_and_the_rest_is_skipped() {
        let stream = b"event: control\ndata: {\"streamNextOffset\":\"7\"}\n\n: keepalive\n\nevent: data\ndata: 123\ndata:456 \r\n\nid: 9\ndata: 12x\n\n";
        for piece in 1..stream.len() {
            let mut lines = Lines::default();
            let mut got = Vec::new();
            for p in stream.chunks(piece) {
                lines.feed(p, |n| got.push(n));
            }
            assert_eq!(got, [123, 456], "pieces of {piece}");
        }
    }

    #[test]
    fn a_long_line_is_cut_not_grown() {
        let mut lines = Lines::default();
        let mut got = Vec::new();
        lines.feed(&vec![b'x'; 10 * LINE_MAX], |n| got.push(n));
        assert_eq!(lines.line.len(), LINE_MAX);
        lines.feed(b"\ndata: 5\n", |n| got.push(n));
        assert_eq!(got, [5]);
    }
}
