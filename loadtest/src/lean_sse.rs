//! A lean SSE reader for fan-out benchmarks: thousands of HTTP/1.1 SSE
//! responses read on a few threads with `mio`, with no task, HTTP client or
//! body channel per reader.
//!
//! Why: the load client shares this machine's two cores with the server it
//! measures. With hyper's client (a connection task and a body channel per
//! reader, two task wake-ups per event) `perf` put 47 % of the machine in the
//! client and 50 % in the edge while 16,000 readers took 10 events a second:
//! the client's own work delayed the deliveries it timed. Here an event costs
//! the client one `read` and a scan of its bytes.
//!
//! A reader records `(sent, received)` for every `data:` line that holds a
//! number (the writer's microsecond stamp), `received` read from the shared
//! clock as its bytes arrive. Other lines (control events, comments,
//! keepalives) are skipped, so every server's framing reads the same.
//! A reader that has its expected count hangs up.

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use crate::sse_framing::{Dechunk, Lines};

/// The clock readers read as bytes arrive, the writer's own: an `Instant`
/// in this process, or the wall clock from a base both processes were given
/// (the floor's writer is a process of its own, for descriptors).
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    Since(Instant),
    Wall { base_us: u64 },
}

impl Clock {
    /// Microseconds since the base (saturating at `u32::MAX`, 71 minutes).
    pub fn now_us(self) -> u32 {
        let us = match self {
            Clock::Since(start) => start.elapsed().as_micros() as u64,
            Clock::Wall { base_us } => wall_us().saturating_sub(base_us),
        };
        us.min(u64::from(u32::MAX)) as u32
    }
}

/// Microseconds since the Unix epoch.
pub fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One reader: where it connects, and the HTTP/1.1 request it sends
/// (`None`: a raw stream of SSE bytes, no HTTP, as the fan-out floor
/// writes).
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    pub request: Option<Vec<u8>>,
}

impl Target {
    /// An SSE GET of `path_and_query` at `addr`.
    pub fn get(addr: SocketAddr, path_and_query: &str) -> Target {
        let request = format!(
            "GET {path_and_query} HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\r\n"
        );
        Target {
            addr,
            request: Some(request.into_bytes()),
        }
    }
}

/// What one reader got: `(sent, received)` microseconds since the shared
/// clock, in arrival order, and why it stopped early, if it did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub got: Vec<(u32, u32)>,
    pub error: Option<String>,
}

/// Readers at work on their threads.
pub struct Readers {
    opened: Arc<AtomicUsize>,
    failures: Arc<Failures>,
    threads: Vec<JoinHandle<Vec<(usize, Outcome)>>>,
    count: usize,
}

/// Opens every target on `threads` threads; each reader stops after
/// `expected` stamps, at end of stream, on error, or at `deadline`.
pub fn open(
    targets: Vec<Target>,
    expected: usize,
    threads: usize,
    clock: Clock,
    deadline: Instant,
) -> Readers {
    let threads = threads.max(1);
    let count = targets.len();
    let opened = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Failures::default());
    let mut shares: Vec<Vec<(usize, Target)>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, t) in targets.into_iter().enumerate() {
        shares[i % threads].push((i, t));
    }
    let threads = shares
        .into_iter()
        .map(|share| {
            let (opened, failures) = (opened.clone(), failures.clone());
            std::thread::spawn(move || {
                read_all(share, expected, clock, deadline, &opened, &failures)
            })
        })
        .collect();
    Readers {
        opened,
        failures,
        threads,
        count,
    }
}

impl Readers {
    /// Readers whose answer's head said 200 (raw readers: connected).
    pub fn opened(&self) -> usize {
        self.opened.load(Ordering::Relaxed)
    }

    /// How many readers stopped early so far, and the first one's reason.
    pub fn failed(&self) -> (usize, Option<String>) {
        (
            self.failures.count.load(Ordering::Relaxed),
            self.failures.first.lock().ok().and_then(|f| f.clone()),
        )
    }

    /// Waits until all `count` readers are open; fails at `deadline`, or
    /// once one reader failed (it would never open).
    pub async fn all_open(&self, count: usize, deadline: Instant) -> anyhow::Result<()> {
        while self.opened() < count {
            let (failed, why) = self.failed();
            anyhow::ensure!(
                Instant::now() < deadline && failed == 0,
                "{} of {count} readers opened, {failed} failed (first: {})",
                self.opened(),
                why.unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Waits for every reader to stop; outcomes in the targets' order.
    pub fn finish(self) -> Vec<Outcome> {
        let mut all: Vec<Option<Outcome>> = (0..self.count).map(|_| None).collect();
        for t in self.threads {
            for (i, o) in t.join().unwrap_or_default() {
                all[i] = Some(o);
            }
        }
        all.into_iter()
            .map(|o| {
                o.unwrap_or_else(|| Outcome {
                    got: Vec::new(),
                    error: Some("its reader thread panicked".into()),
                })
            })
            .collect()
    }
}

/// Readers that stopped early, and the first one's reason.
#[derive(Default)]
struct Failures {
    count: AtomicUsize,
    first: std::sync::Mutex<Option<String>>,
}

impl Failures {
    fn note(&self, why: &str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut first) = self.first.lock() {
            first.get_or_insert_with(|| why.to_owned());
        }
    }
}

enum Phase {
    /// Writing the request; `usize` bytes are out.
    Sending(usize),
    /// Reading the answer's head.
    Head,
    /// Reading SSE bytes, de-chunked when the answer is chunked.
    Body(Option<Dechunk>),
    Done,
}

struct Reader {
    stream: TcpStream,
    request: Vec<u8>,
    phase: Phase,
    head: Vec<u8>,
    lines: Lines,
    outcome: Outcome,
    /// Whether it counts as open: its answer's head said 200 (raw: it
    /// connected).
    open: bool,
}

/// A reader's place on its thread: where it connects until it does, the
/// reader while it reads, then what it got.
struct Slot {
    index: usize,
    target: Option<Target>,
    reader: Option<Reader>,
    outcome: Option<Outcome>,
}

/// Connections a thread has begun and not yet seen answered: thousands of
/// connects at once overflow a server's accept queue and wait out SYN
/// retransmissions (or are cut by a server's header timeout).
const OPENING_MAX: usize = 128;

/// One parsing loop over the sockets' bytes, its state local to it (long
/// by design: split, each piece would take all of that state).
fn read_all(
    share: Vec<(usize, Target)>,
    expected: usize,
    clock: Clock,
    deadline: Instant,
    opened: &AtomicUsize,
    failures: &Failures,
) -> Vec<(usize, Outcome)> {
    let Ok(mut poll) = Poll::new() else {
        return share
            .into_iter()
            .map(|(i, _)| (i, failed("no poll instance".into())))
            .collect();
    };
    let mut slots: Vec<Slot> = share
        .into_iter()
        .map(|(index, t)| Slot {
            index,
            target: Some(t),
            reader: None,
            outcome: None,
        })
        .collect();
    let (mut live, mut next, mut opening) = (slots.len(), 0, 0);
    let mut events = Events::with_capacity(1024);
    let mut scratch = vec![0u8; 64 * 1024];
    while live > 0 && Instant::now() < deadline {
        while opening < OPENING_MAX && next < slots.len() {
            let slot = &mut slots[next];
            let t = slot.target.take().expect("not connected yet");
            let stream = TcpStream::connect(t.addr).and_then(|mut stream| {
                poll.registry().register(
                    &mut stream,
                    Token(next),
                    Interest::READABLE | Interest::WRITABLE,
                )?;
                Ok(stream)
            });
            match stream {
                Ok(stream) => {
                    slot.reader = Some(Reader::new(stream, t.request, expected));
                    opening += 1;
                }
                Err(e) => {
                    let why = format!("connect: {e}");
                    failures.note(&why);
                    slot.outcome = Some(failed(why));
                    live -= 1;
                }
            }
            next += 1;
        }
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(50))) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        for event in events.iter() {
            let slot = &mut slots[event.token().0];
            let Some(r) = slot.reader.as_mut() else {
                continue;
            };
            let was_open = r.open;
            if event.is_writable() {
                r.on_writable(opened);
            }
            if event.is_readable() || event.is_read_closed() || event.is_error() {
                r.on_readable(&mut scratch, expected, clock, opened);
            }
            let done = matches!(r.phase, Phase::Done);
            if !was_open && (r.open || done) {
                opening -= 1;
            }
            if done {
                if let Some(why) = &r.outcome.error {
                    failures.note(why);
                }
                let _ = poll.registry().deregister(&mut r.stream);
                live -= 1;
                // The socket closes as the reader drops.
                slot.outcome = slot.reader.take().map(|r| r.outcome);
            }
        }
    }
    slots
        .into_iter()
        .map(|s| {
            let outcome = match (s.outcome, s.reader) {
                (Some(o), _) => o,
                (None, Some(mut r)) => {
                    r.outcome.error = Some(format!(
                        "deadline: {} of {expected} events",
                        r.outcome.got.len()
                    ));
                    r.outcome
                }
                (None, None) => failed("not connected before the deadline".into()),
            };
            (s.index, outcome)
        })
        .collect()
}

fn failed(why: String) -> Outcome {
    Outcome {
        got: Vec::new(),
        error: Some(why),
    }
}

impl Reader {
    fn new(stream: TcpStream, request: Option<Vec<u8>>, expected: usize) -> Reader {
        let phase = match request {
            Some(_) => Phase::Sending(0),
            None => Phase::Body(None),
        };
        Reader {
            stream,
            request: request.unwrap_or_default(),
            phase,
            head: Vec::new(),
            lines: Lines::default(),
            outcome: Outcome {
                got: Vec::with_capacity(expected),
                error: None,
            },
            open: false,
        }
    }

    fn fail(&mut self, why: String) {
        self.outcome.error.get_or_insert(why);
        self.phase = Phase::Done;
    }

    /// Connected: a raw reader counts as open; an HTTP one sends its
    /// request.
    fn on_writable(&mut self, opened: &AtomicUsize) {
        if !self.open && self.request.is_empty() {
            // A failed connect is writable too: open only once connected.
            match self.stream.take_error() {
                Ok(None) if self.stream.peer_addr().is_ok() => {}
                Ok(None) => return,
                Ok(Some(e)) | Err(e) => return self.fail(format!("connect: {e}")),
            }
            self.open = true;
            opened.fetch_add(1, Ordering::Relaxed);
        }
        let Phase::Sending(mut out) = self.phase else {
            return;
        };
        while out < self.request.len() {
            match self.stream.write(&self.request[out..]) {
                Ok(n) => out += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return self.fail(format!("send: {e}")),
            }
        }
        self.phase = if out == self.request.len() {
            Phase::Head
        } else {
            Phase::Sending(out)
        };
    }

    fn on_readable(
        &mut self,
        scratch: &mut [u8],
        expected: usize,
        clock: Clock,
        opened: &AtomicUsize,
    ) {
        loop {
            if matches!(self.phase, Phase::Done | Phase::Sending(_)) {
                return;
            }
            let n = match self.stream.read(scratch) {
                Ok(0) => {
                    let got = self.outcome.got.len();
                    return self.fail(format!("closed after {got} of {expected} events"));
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return self.fail(format!("read: {e}")),
            };
            let now = clock.now_us();
            let mut bytes = &scratch[..n];
            if matches!(self.phase, Phase::Head) {
                self.head.extend_from_slice(bytes);
                let Some(end) = self.head.windows(4).position(|w| w == b"\r\n\r\n") else {
                    continue;
                };
                let body_start = end + 4;
                match answer_head(&self.head[..body_start]) {
                    Ok(chunked) => {
                        self.open = true;
                        opened.fetch_add(1, Ordering::Relaxed);
                        self.phase = Phase::Body(chunked.then(Dechunk::default));
                    }
                    Err(why) => return self.fail(why),
                }
                let rest = self.head.split_off(body_start);
                self.head = Vec::new();
                if let Err(why) = self.body(&rest, now, expected) {
                    return self.fail(why);
                }
                bytes = &[];
            }
            if let Err(why) = self.body(bytes, now, expected) {
                return self.fail(why);
            }
            let got = self.outcome.got.len();
            if got >= expected {
                self.phase = Phase::Done;
            } else if matches!(self.phase, Phase::Body(Some(Dechunk::End))) {
                return self.fail(format!("answer ended after {got} of {expected} events"));
            }
        }
    }

    fn body(&mut self, bytes: &[u8], now: u32, expected: usize) -> Result<(), String> {
        let Phase::Body(dechunk) = &mut self.phase else {
            return Ok(());
        };
        let (lines, got) = (&mut self.lines, &mut self.outcome.got);
        let mut each = |stamp: u64| {
            if got.len() < expected {
                got.push((stamp.min(u64::from(u32::MAX)) as u32, now));
            }
        };
        match dechunk {
            Some(d) => d.feed(bytes, |data| lines.feed(data, &mut each))?,
            None => lines.feed(bytes, &mut each),
        }
        Ok(())
    }
}

/// Whether an answer's head is a 200 with a chunked body.
fn answer_head(head: &[u8]) -> Result<bool, String> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if status.split(' ').nth(1) != Some("200") {
        return Err(format!("answer: {status}"));
    }
    Ok(lines.any(|l| {
        l.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("transfer-encoding")
                && value.trim().eq_ignore_ascii_case("chunked")
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::net::TcpListener;

    /// A one-shot HTTP/1.1 server: for each connection, reads the request's
    /// head and writes `answer`.
    fn serve(answers: Vec<Vec<u8>>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for answer in answers {
                let (mut s, _) = listener.accept().unwrap();
                let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
                    line.clear();
                }
                // In pieces, so events and chunks straddle the reads.
                for piece in answer.chunks(7) {
                    s.write_all(piece).unwrap();
                    s.flush().unwrap();
                }
            }
        });
        addr
    }

    fn chunked(events: &str) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for part in events.as_bytes().chunks(10) {
            out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
            out.extend_from_slice(part);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    #[test]
    fn a_reader_takes_every_stamp_of_a_chunked_answer_then_hangs_up() {
        let events = "event: control\ndata: {\"streamNextOffset\":\"0\"}\n\n: keepalive\n\nevent: data\ndata: 11\ndata: 12\n\nevent: data\ndata: 13\n\n";
        let addr = serve(vec![chunked(events)]);
        let deadline = Instant::now() + Duration::from_secs(30);
        let readers = open(
            vec![Target::get(addr, "/s?offset=-1&live=sse")],
            3,
            1,
            Clock::Since(Instant::now()),
            deadline,
        );
        let outcomes = readers.finish();
        assert_eq!(outcomes.len(), 1);
        let stamps: Vec<u32> = outcomes[0].got.iter().map(|g| g.0).collect();
        assert_eq!(stamps, [11, 12, 13]);
        assert_eq!(outcomes[0].error, None);
    }

    #[test]
    fn an_answer_that_is_not_200_or_ends_short_is_an_error() {
        let refused = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n".to_vec();
        let short = chunked("event: data\ndata: 1\n\n");
        let addr = serve(vec![refused, short]);
        let deadline = Instant::now() + Duration::from_secs(30);
        let target = Target::get(addr, "/s?offset=-1&live=sse");
        // One thread: the server answers the connections in order.
        let first = open(
            vec![target.clone()],
            2,
            1,
            Clock::Since(Instant::now()),
            deadline,
        );
        let refused = first.finish();
        assert!(refused[0].error.as_deref().unwrap().contains("503"));
        let second = open(vec![target], 2, 1, Clock::Since(Instant::now()), deadline);
        let short = second.finish();
        assert_eq!(short[0].got.len(), 1);
        let why = short[0].error.as_deref().unwrap();
        assert!(why.contains("ended after 1 of 2"), "{why}");
    }
}
