//! A fixed pool of keep-alive connections working through a numbered list of
//! requests: connection `c` of `C` sends items `c, c + C, c + 2C, …`, each
//! after the last one is answered.
//!
//! Creating, filling or reading back a million streams with one connection
//! per stream would measure the server's connection handling (and this
//! machine's file-descriptor limit), not its streams; a few hundred
//! connections shared by many streams is how a fleet behind a proxy looks to
//! an origin. Items are independent, so a failure is counted and the pool
//! carries on; after a failed exchange the connection is opened again. The
//! clock starts once every connection is open.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Request};

use crate::append::{connect, with_host, Sender};

/// What a pool sends, and what it accepts as the answer.
pub trait Job: Send + Sync {
    /// The request for item `i`.
    fn request(&self, i: usize) -> anyhow::Result<Request<Full<Bytes>>>;

    /// Whether a 2xx answer to item `i` is the right one; `Err` says how it
    /// is wrong. Most jobs take any 2xx.
    fn check(&self, _i: usize, _answer: &Answer) -> Result<(), String> {
        Ok(())
    }
}

/// An answer, read to its end.
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// How a pool's run went.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub items: usize,
    /// Items that got no answer, or one other than 2xx.
    pub errors: u64,
    /// Items answered 2xx with an answer the job refused.
    pub mismatches: u64,
    /// What the first failed item got, to say why.
    pub first_failure: Option<String>,
    pub elapsed: Duration,
}

impl Tally {
    /// Items sent per second, answered well or not.
    pub fn per_second(&self) -> f64 {
        self.items as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn failures(&self) -> u64 {
        self.errors + self.mismatches
    }

    fn failed(&mut self, mismatch: bool, why: String) {
        if mismatch {
            self.mismatches += 1;
        } else {
            self.errors += 1;
        }
        self.first_failure.get_or_insert(why);
    }

    fn add(&mut self, other: Tally) {
        self.errors += other.errors;
        self.mismatches += other.mismatches;
        self.first_failure = self.first_failure.take().or(other.first_failure);
    }
}

/// Sends one request and reads the whole answer.
pub async fn exchange(sender: &mut Sender, req: Request<Full<Bytes>>) -> anyhow::Result<Answer> {
    sender.ready().await?;
    let resp = sender.send_request(with_host(req)).await?;
    let (parts, body) = resp.into_parts();
    Ok(Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.collect().await?.to_bytes(),
    })
}

/// The start of a refused answer's body, for the report.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    text.trim().to_string()
}

/// Sends items `0..items` of `job` over `connections` connections to `addr`
/// and waits for every answer.
pub async fn run(addr: SocketAddr, connections: usize, items: usize, job: Arc<dyn Job>) -> Tally {
    let connections = connections.clamp(1, items.max(1));
    // Every connection first, off the clock: hundreds of connects at once
    // can overflow a listen queue, and a dropped SYN is sent again only a
    // second later, which would be timed as the requests'. One that fails
    // here is tried again by its first item.
    let connecting: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(connect(addr)))
        .collect();
    let mut senders = Vec::with_capacity(connections);
    for c in connecting {
        senders.push(c.await.ok().and_then(Result::ok));
    }
    let started = Instant::now();
    let tasks: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(c, sender)| {
            let job = job.clone();
            tokio::spawn(
                async move { one_connection(addr, c, connections, items, sender, &*job).await },
            )
        })
        .collect();
    let mut tally = Tally {
        items,
        ..Tally::default()
    };
    for (c, t) in tasks.into_iter().enumerate() {
        match t.await {
            Ok(part) => tally.add(part),
            Err(e) => {
                tally.errors += 1;
                tally
                    .first_failure
                    .get_or_insert(format!("connection {c}: {e}"));
            }
        }
    }
    tally.elapsed = started.elapsed();
    tally
}

/// Connection `c`'s share of the items.
async fn one_connection(
    addr: SocketAddr,
    c: usize,
    connections: usize,
    items: usize,
    mut sender: Option<Sender>,
    job: &dyn Job,
) -> Tally {
    let mut tally = Tally::default();
    for i in (c..items).step_by(connections) {
        let conn = match sender.as_mut() {
            Some(s) => s,
            None => match connect(addr).await {
                Ok(s) => sender.insert(s),
                Err(e) => {
                    tally.failed(false, format!("item {i}: connecting: {e:#}"));
                    // A server that is gone refuses at once; do not spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let answer = match job.request(i) {
            Ok(req) => exchange(conn, req).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(a) if a.status < 300 => {
                if let Err(why) = job.check(i, &a) {
                    tally.failed(true, format!("item {i}: {why}"));
                }
            }
            Ok(a) => tally.failed(
                false,
                format!("item {i}: HTTP {}: {}", a.status, snippet(&a.body)),
            ),
            Err(e) => {
                tally.failed(false, format!("item {i}: {e:#}"));
                sender = None;
            }
        }
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Asks for `/{i}`; the ceiling answers every GET with "x".
    struct Numbered {
        sent: Mutex<Vec<usize>>,
    }

    impl Job for Numbered {
        fn request(&self, i: usize) -> anyhow::Result<Request<Full<Bytes>>> {
            self.sent.lock().expect("lock").push(i);
            Ok(Request::get(format!("/{i}")).body(Full::new(Bytes::new()))?)
        }

        fn check(&self, i: usize, answer: &Answer) -> Result<(), String> {
            match (i % 10, &answer.body[..]) {
                (7, _) => Err("seven is refused".into()),
                (_, b"x") => Ok(()),
                (_, other) => Err(format!("body {other:?}")),
            }
        }
    }

    #[tokio::test]
    async fn every_item_is_sent_once_and_refusals_are_counted() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(crate::ceiling::serve(listener, Bytes::from_static(b"x")));
        let job = Arc::new(Numbered {
            sent: Mutex::new(Vec::new()),
        });
        let tally = run(addr, 4, 30, job.clone()).await;
        let mut sent = job.sent.lock().expect("lock").clone();
        sent.sort_unstable();
        assert_eq!(sent, (0..30).collect::<Vec<_>>());
        assert_eq!((tally.items, tally.errors, tally.mismatches), (30, 0, 3));
        assert!(tally
            .first_failure
            .is_some_and(|f| f.ends_with("seven is refused")));
    }

    #[tokio::test]
    async fn a_server_that_is_not_there_is_an_error_per_item() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let job = Arc::new(Numbered {
            sent: Mutex::new(Vec::new()),
        });
        let tally = run(addr, 2, 4, job).await;
        assert_eq!((tally.errors, tally.mismatches), (4, 0));
    }
}
