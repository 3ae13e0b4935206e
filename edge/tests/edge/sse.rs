//! SSE fan-out: one upstream tail per stream, byte-exact data for every
//! reader wherever it starts, and slow readers dropped alone.

use base64::Engine;
use edge::config::Limits;
use futures::future::join_all;
use origin::http::JsonReads;

use crate::common::*;

const UPSTREAM_TAILS: &str = "ds_edge_upstream_live_reads";
const TAIL_POLLS: &str = "ds_edge_upstream_requests_total{kind=\"tail\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sse_readers_share_one_upstream_tail_and_get_every_byte() {
    const N: usize = 1000;
    const APPENDS: usize = 40;
    let s = Stack::start().await;
    let p = stream_path("fan");
    s.create(&p, "text/plain").await;
    s.append(&p, "text/plain", "hello\n").await;
    let mut expected = b"hello\n".to_vec();
    for i in 0..APPENDS {
        expected.extend_from_slice(format!("event {i} é\n").as_bytes());
    }
    let end = offset(expected.len() as u64);
    let readers: Vec<_> = (0..N)
        .map(|_| {
            let req = s.http.get(s.url(&format!("{p}?offset=-1&live=sse")));
            let end = end.clone();
            tokio::spawn(async move {
                let r = req.send().await.expect("SSE");
                assert_eq!(r.status(), 200);
                let mut sse = Sse::new(r, WAIT);
                let data = sse.read_until(&end).await;
                (data, sse)
            })
        })
        .collect();
    s.wait_metric("ds_edge_sse_open", |v| v == N as i64).await;
    assert_eq!(s.metric(UPSTREAM_TAILS).await, 1);
    for i in 0..APPENDS {
        s.append(&p, "text/plain", format!("event {i} é\n")).await;
    }
    let mut open = Vec::new();
    for r in join_all(readers).await {
        let (data, sse) = r.unwrap();
        assert!(
            data == expected,
            "byte-exact: {:?}",
            String::from_utf8_lossy(&data)
        );
        open.push(sse);
    }
    assert_eq!(
        s.metric(UPSTREAM_TAILS).await,
        1,
        "one tail for {N} readers"
    );
    let polls = s.metric(TAIL_POLLS).await;
    assert!(
        (1..=APPENDS as i64 + 2).contains(&polls),
        "{polls} upstream polls for {APPENDS} appends"
    );
    assert_eq!(s.metric("ds_edge_sse_dropped_slow_total").await, 0);
    drop(open);
    s.wait_metric(UPSTREAM_TAILS, |v| v == 0).await;
    s.wait_metric("ds_edge_sse_open", |v| v == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_joining_during_appends_get_every_byte_once() {
    readers_joining_during_appends(Limits::default()).await;
}

/// The same with writers of two readers each: ten readers join a hub's
/// writers one after another, so most join a writer that already took
/// frames, or start a new one mid-stream (`fanout::writer`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_on_writers_of_two_get_every_byte_once() {
    let limits = Limits {
        sse_shard_readers: 2,
        ..Limits::default()
    };
    readers_joining_during_appends(limits).await;
}

async fn readers_joining_during_appends(limits: Limits) {
    const APPENDS: usize = 120;
    let s = Stack::start_with(JsonReads::Array, limits).await;
    let p = stream_path("join");
    s.create(&p, "application/json").await;
    let message = |i: usize| format!("{{\"n\":{i}}}");
    // Offsets of every message boundary, to start readers at.
    let mut bounds = vec![0u64];
    for i in 0..APPENDS {
        bounds.push(bounds[i] + message(i).len() as u64 + 1);
    }
    let end = offset(bounds[APPENDS]);
    let mut readers = Vec::new();
    for i in 0..APPENDS {
        s.append(&p, "application/json", message(i)).await;
        if i % 6 == 0 {
            // Alternately from the start, and from a boundary behind the end.
            let from = if i % 12 == 0 {
                "-1".to_owned()
            } else {
                offset(bounds[i / 2])
            };
            let first = if i % 12 == 0 { 0 } else { i / 2 };
            let req = s.http.get(s.url(&format!("{p}?offset={from}&live=sse")));
            let end = end.clone();
            readers.push(tokio::spawn(async move {
                let r = req.send().await.expect("SSE");
                let mut sse = Sse::new(r, WAIT);
                let mut got = Vec::new();
                loop {
                    let e = sse.next().await.expect("an event");
                    match e.event.as_str() {
                        "data" => {
                            let batch: Vec<serde_json::Value> =
                                serde_json::from_str(&e.data).expect("a JSON array");
                            got.extend(batch.into_iter().map(|v| v["n"].as_u64().unwrap()));
                        }
                        "control" if e.json()["streamNextOffset"] == end => break,
                        _ => {}
                    }
                }
                (first, got)
            }));
        }
    }
    for r in join_all(readers).await {
        let (first, got) = r.unwrap();
        let want: Vec<u64> = (first as u64..APPENDS as u64).collect();
        assert_eq!(got, want, "a reader from message {first}");
    }
    assert!(s.metric(UPSTREAM_TAILS).await <= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sse_reader_is_dropped_and_the_others_are_not() {
    const PART: usize = 64 << 10;
    const PARTS: usize = 640;
    let limits = Limits {
        sse_reader_queue: 16,
        sse_ring: 64,
        ..Limits::default()
    };
    let s = Stack::start_with(JsonReads::Ndjson, limits).await;
    let p = stream_path("slow");
    s.create(&p, "application/octet-stream").await;
    // The slow reader never reads its body.
    let slow = s.get(&format!("{p}?offset=-1&live=sse")).await;
    let end = offset((PART * PARTS) as u64);
    // The fast reader says how far it got, and the writer stays at most a
    // few parts ahead of it: it keeps up however slow this machine is,
    // while the slow reader, who reads nothing, falls behind by 40 MiB.
    let (progress, mut got) = tokio::sync::watch::channel(0usize);
    let fast = {
        let req = s.http.get(s.url(&format!("{p}?offset=-1&live=sse")));
        tokio::spawn(async move {
            let mut sse = Sse::new(req.send().await.unwrap(), WAIT);
            let mut data = Vec::new();
            loop {
                let e = sse.next().await.expect("the fast reader is never dropped");
                match e.event.as_str() {
                    "data" => {
                        data.extend(
                            base64::engine::general_purpose::STANDARD
                                .decode(e.data.replace('\n', ""))
                                .unwrap(),
                        );
                        progress.send_replace(data.len());
                    }
                    "control" if e.json()["streamNextOffset"] == end => return data,
                    _ => {}
                }
            }
        })
    };
    s.wait_metric("ds_edge_sse_open", |v| v == 2).await;
    let mut expected = Vec::with_capacity(PART * PARTS);
    for i in 0..PARTS {
        let part: Vec<u8> = (0..PART).map(|j| (i * 7 + j) as u8).collect();
        expected.extend_from_slice(&part);
        s.append(&p, "application/octet-stream", part).await;
        let behind = expected.len().saturating_sub(4 * PART);
        tokio::time::timeout(WAIT, got.wait_for(|n| *n >= behind))
            .await
            .expect("the fast reader keeps up")
            .expect("the fast reader is there");
    }
    let data = fast.await.unwrap();
    assert!(data == expected, "the fast reader got every byte");
    s.wait_metric("ds_edge_sse_dropped_slow_total", |v| v == 1)
        .await;
    s.wait_metric("ds_edge_sse_open", |v| v == 0).await;
    // What the slow reader had queued ends; its answer does not hang.
    let rest = tokio::time::timeout(WAIT, slow.bytes())
        .await
        .expect("the slow answer ends");
    if let Ok(rest) = rest {
        assert!(rest.len() < 4 * PART * PARTS / 3, "it got only part of it");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_session_ends_after_its_time_and_a_reader_resumes_at_its_offset() {
    let limits = Limits {
        sse_session: std::time::Duration::from_millis(300),
        ..Limits::default()
    };
    let s = Stack::start_with(JsonReads::Ndjson, limits).await;
    let p = stream_path("session");
    s.create(&p, "text/plain").await;
    s.append(&p, "text/plain", "one\n").await;
    let r = s.get(&format!("{p}?offset=-1&live=sse")).await;
    assert_eq!(header(&r, "cache-control").as_deref(), Some("no-cache"));
    assert_eq!(
        header(&r, "stream-data-content-type").as_deref(),
        Some("text/plain")
    );
    let mut sse = Sse::new(r, WAIT);
    assert_eq!(sse.read_until(&offset(4)).await, b"one\n");
    // The session ends by itself, as the origin's does.
    assert_eq!(sse.next().await, None);
    // Reconnecting from the last streamNextOffset continues exactly there
    // (on an edge whose sessions outlast the test).
    let s = Stack::start().await;
    s.create(&p, "text/plain").await;
    s.append(&p, "text/plain", "one\n").await;
    s.append(&p, "text/plain", "two\n").await;
    let r = s.get(&format!("{p}?offset={}&live=sse", offset(4))).await;
    let mut sse = Sse::new(r, WAIT);
    assert_eq!(sse.read_until(&offset(8)).await, b"two\n");
    // Closing the stream ends the reader with streamClosed.
    let r = s
        .http
        .post(s.url(&p))
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let e = sse.next().await.expect("a control event");
    assert_eq!(e.event, "control");
    assert_eq!(e.json()["streamClosed"], true);
    assert_eq!(sse.next().await, None);
}

/// All streams' shared feeds hold at most `sse_ring_bytes` together: a feed
/// whose next frame finds no room ends (its reader's answer ends, and it
/// would reconnect); once it ended its room is back for the next reader;
/// and while less than one frame's room is left, a new reader answers 503.
/// (Feeds of exactly one frame's bytes: a full frame's event, with its SSE
/// framing, is a few bytes more.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_feeds_hold_at_most_their_bytes() {
    let limits = Limits {
        sse_ring_bytes: 25_000,
        sse_frame_bytes: 25_000,
        ..Limits::default()
    };
    let s = Stack::start_with(JsonReads::Ndjson, limits).await;
    let p = stream_path("feed-bytes");
    s.create(&p, "text/plain").await;
    let mut reader = Sse::new(s.get(&format!("{p}?offset=now&live=sse")).await, WAIT);
    s.wait_metric("ds_edge_sse_open", |v| v == 1).await;
    s.append(&p, "text/plain", "a".repeat(30_000)).await;
    s.wait_metric("ds_edge_sse_rings_over_budget_total", |v| v == 1)
        .await;
    // The feed ended: the reader's answer ends, with no frame past the
    // feeds' room.
    while let Some(e) = reader.next().await {
        assert_ne!(e.event, "data", "no frame past the feeds' room");
    }
    s.wait_metric("ds_edge_sse_open", |v| v == 0).await;
    // Its room is back: a new reader is served.
    let again = s.get(&format!("{p}?offset=now&live=sse")).await;
    assert_eq!(again.status(), 200);
    drop(again);

    // Feeds with less room than one frame refuse new readers.
    let tight = Limits {
        sse_ring_bytes: 10_000,
        sse_frame_bytes: 25_000,
        ..Limits::default()
    };
    let s = Stack::start_with(JsonReads::Ndjson, tight).await;
    s.create(&p, "application/json").await;
    let refused = s.get(&format!("{p}?offset=now&live=sse")).await;
    assert_eq!(refused.status(), 503);
    assert!(header(&refused, "retry-after").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_reader_is_sent_a_keepalive_each_period_and_then_the_next_append() {
    let every = std::time::Duration::from_millis(200);
    let limits = Limits {
        sse_keepalive: every,
        ..Limits::default()
    };
    let s = Stack::start_with(JsonReads::Ndjson, limits).await;
    let p = stream_path("keepalive");
    s.create(&p, "text/plain").await;
    s.append(&p, "text/plain", "one\n").await;
    // Before the request: the reader's last write comes after this, and a
    // keepalive is never early, so three take at least three periods.
    let began = std::time::Instant::now();
    let r = s.get(&format!("{p}?offset=-1&live=sse")).await;
    let mut sse = Sse::new(r, WAIT);
    assert_eq!(sse.read_until(&offset(4)).await, b"one\n");
    // Silent, the reader is sent a comment every period and nothing else.
    for _ in 0..3 {
        assert_eq!(sse.expect_comment().await, ": keepalive");
    }
    let took = began.elapsed();
    assert!(took >= 3 * every, "{took:?}");
    // The keepalives change no event: the next append arrives as it would.
    s.append(&p, "text/plain", "two\n").await;
    assert_eq!(sse.read_until(&offset(8)).await, b"two\n");
}

/// Readers arriving together at `offset=now` make their catch-up reads
/// through one table: each read either went upstream or joined one in
/// flight for the same range (`ds_edge_sse_reads_collapsed_total`), and
/// every reader still gets every byte once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_arriving_together_share_their_catch_up_reads() {
    const N: usize = 500;
    const SSE_READS: &str = "ds_edge_upstream_requests_total{kind=\"sse_read\"}";
    let s = Stack::start().await;
    let p = stream_path("together");
    s.create(&p, "text/plain").await;
    s.append(&p, "text/plain", "before\n").await;
    let start = offset(7);
    let reads_before = s.metric(SSE_READS).await;
    let readers: Vec<_> = (0..N)
        .map(|_| {
            let req = s.http.get(s.url(&format!("{p}?offset=now&live=sse")));
            tokio::spawn(async move {
                let r = req.send().await.expect("SSE");
                assert_eq!(r.status(), 200);
                Sse::new(r, WAIT)
            })
        })
        .collect();
    s.wait_metric("ds_edge_sse_open", |v| v == N as i64).await;
    // Every reader is at the end: one read each, made or joined.
    let made = s.metric(SSE_READS).await - reads_before;
    let joined = s.metric("ds_edge_sse_reads_collapsed_total").await;
    assert_eq!(made + joined, N as i64, "{made} made, {joined} joined");
    println!("{N} readers at offset=now: {made} upstream reads, {joined} joined");
    s.append(&p, "text/plain", "after\n").await;
    let end = offset(13);
    for r in join_all(readers).await {
        let mut sse = r.expect("reader");
        let first = sse.expect("control").await.json();
        assert_eq!(first["streamNextOffset"], start.as_str());
        assert_eq!(sse.read_until(&end).await, b"after\n");
    }
}
