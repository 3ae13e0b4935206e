//! SSE readers on the light path, detached from any task and written to by
//! their hub's writer (`fanout::writer`), seen from a raw socket: the
//! answer closes its connection and ends with its last chunk when its
//! session ends; a client that closes is let go at once; the open-readers
//! gauge counts them as it counts readers with a task.

use std::time::Duration;

use edge::config::Limits;
use origin::http::JsonReads;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;

async fn open_reader(s: &Stack, path_and_query: &str) -> TcpStream {
    let mut c = TcpStream::connect(s.edge_addr).await.unwrap();
    c.write_all(format!("GET {path_and_query} HTTP/1.1\r\nHost: edge\r\n\r\n").as_bytes())
        .await
        .unwrap();
    c
}

/// Reads until what was read holds `want` (or the connection closes).
async fn read_until(c: &mut TcpStream, got: &mut Vec<u8>, want: &[u8]) {
    let mut buf = [0u8; 4096];
    while !got.windows(want.len()).any(|w| w == want) {
        let n = tokio::time::timeout(WAIT, c.read(&mut buf))
            .await
            .expect("the edge writes")
            .unwrap();
        if n == 0 {
            return;
        }
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_reader_gets_its_events_then_its_last_chunk_at_its_session_end() {
    let limits = Limits {
        sse_session: Duration::from_millis(600),
        ..Limits::default()
    };
    let s = Stack::start_with(JsonReads::Ndjson, limits).await;
    let p = stream_path("detached");
    s.create(&p, "text/plain").await;
    s.append(&p, "text/plain", "one\n").await;
    let mut c = open_reader(&s, &format!("{p}?offset=-1&live=sse")).await;
    let mut got = Vec::new();
    read_until(&mut c, &mut got, b"\"upToDate\":true}\n\n").await;
    let text = String::from_utf8_lossy(&got).to_string();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{text}"
    );
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(text.contains("data:one\n"), "{text}");
    // Caught up: its task hands it to the hub's writer, which sends it
    // the next append.
    s.wait_metric("ds_edge_sse_open", |v| v == 1).await;
    s.append(&p, "text/plain", "two\n").await;
    read_until(&mut c, &mut got, b"data:two\n").await;
    // The session ends: the last chunk, then the close.
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, c.read_to_end(&mut rest))
        .await
        .expect("the session ends")
        .unwrap();
    got.extend_from_slice(&rest);
    let all = String::from_utf8_lossy(&got).to_string();
    assert!(all.ends_with("\n\r\n0\r\n\r\n"), "{all}");
    s.wait_metric("ds_edge_sse_open", |v| v == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_reader_that_closes_is_let_go_at_once() {
    let s = Stack::start().await;
    let p = stream_path("leaves");
    s.create(&p, "text/plain").await;
    let mut readers = Vec::new();
    for _ in 0..20 {
        let mut c = open_reader(&s, &format!("{p}?offset=now&live=sse")).await;
        let mut got = Vec::new();
        read_until(&mut c, &mut got, b"\"upToDate\":true}\n\n").await;
        readers.push(c);
    }
    s.wait_metric("ds_edge_sse_open", |v| v == 20).await;
    // Half leave while idle: the writer sees each close (sessions last a
    // minute, no append comes).
    readers.truncate(10);
    s.wait_metric("ds_edge_sse_open", |v| v == 10).await;
    // The rest still get the next append, once.
    s.append(&p, "text/plain", "next\n").await;
    for c in &mut readers {
        let mut got = Vec::new();
        read_until(c, &mut got, b"data:next\n").await;
        assert_eq!(
            String::from_utf8_lossy(&got).matches("data:next").count(),
            1
        );
    }
}

/// Readers of a hub whose ring keeps one frame, eight writers appending at
/// once: a writer that falls behind its feed hands its readers to tasks of
/// their own that catch up and join again (`http::sse::rejoin`); whichever
/// way each frame reaches them, every reader gets every byte once, in the
/// stream's order, and none is dropped. (Whether a writer falls behind here
/// depends on the machine: `ds_edge_sse_writers_behind_total` is printed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_on_a_ring_of_one_frame_get_every_byte_once() {
    const APPENDS: usize = 200;
    let limits = Limits {
        sse_ring: 1,
        ..Limits::default()
    };
    let s = Stack::start_with(JsonReads::Ndjson, limits).await;
    let p = stream_path("behind");
    s.create(&p, "text/plain").await;
    let mut readers = Vec::new();
    for _ in 0..20 {
        let mut c = open_reader(&s, &format!("{p}?offset=-1&live=sse")).await;
        let mut got = Vec::new();
        read_until(&mut c, &mut got, b"\"upToDate\":true}\n\n").await;
        readers.push(c);
    }
    s.wait_metric("ds_edge_sse_open", |v| v == 20).await;
    // Eight writers at once: frames come faster than one at a time.
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let http = s.http.clone();
            let url = s.url(&p);
            tokio::spawn(async move {
                for i in 0..APPENDS / 8 {
                    let r = http
                        .post(&url)
                        .header("content-type", "text/plain")
                        .body(format!("w{w} {i:03}\n"))
                        .send()
                        .await
                        .unwrap();
                    assert!(r.status().is_success());
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    // The stream as it is: what every reader must have got, in this order.
    let whole = s.get(&format!("{p}?offset=-1")).await.text().await.unwrap();
    let want: Vec<&str> = whole.lines().collect();
    assert_eq!(want.len(), APPENDS);
    let last = format!("data:{}\n", want[APPENDS - 1]);
    for c in &mut readers {
        let mut got = Vec::new();
        read_until(c, &mut got, last.as_bytes()).await;
        let text = String::from_utf8_lossy(&got).to_string();
        let lines: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter(|l| l.starts_with('w'))
            .collect();
        assert_eq!(lines, want, "every line once, in order");
    }
    assert_eq!(s.metric("ds_edge_sse_dropped_slow_total").await, 0);
    eprintln!(
        "writers fell behind {} times",
        s.metric("ds_edge_sse_writers_behind_total").await
    );
}
