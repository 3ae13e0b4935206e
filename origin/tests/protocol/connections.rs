//! Connections: HTTP/2 with prior knowledge beside HTTP/1.1 on the same
//! port, a shutdown that closes idle connections and lets a request in
//! flight finish, waiting requests that end when their client leaves, and
//! the shell's limits as the origin maps them (each limit is checked
//! exactly, on a paused clock, in `shell/tests/limits.rs`).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_with_prior_knowledge_appends_and_reads() {
    let api = Api::start().await;
    let path = stream_path("h2");
    api.create_with(&path, "text/plain", "a").await;

    let tcp = tokio::net::TcpStream::connect(api.origin.addr)
        .await
        .unwrap();
    let (mut h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("an HTTP/2 handshake");
    tokio::spawn(conn);
    let uri = api.origin.url(&path);
    let append = http::Request::post(&uri)
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from_static(b"bc")))
        .unwrap();
    let appended = h2.send_request(append).await.unwrap();
    assert_eq!(appended.version(), http::Version::HTTP_2);
    assert_eq!(appended.status(), 204);
    assert_eq!(
        appended.headers()["stream-next-offset"].to_str().unwrap(),
        offset(3)
    );
    let read = http::Request::get(format!("{uri}?offset=-1"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let read = h2.send_request(read).await.unwrap();
    assert_eq!(read.status(), 200);
    let body = read.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "abc");

    // HTTP/1.1 on the same port at the same time.
    let h1 = send(api.get(&format!("{path}?offset=-1"))).await;
    assert_eq!(h1.version(), reqwest::Version::HTTP_11);
    assert_eq!(h1.bytes().await.unwrap(), "abc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_connections_and_finishes_requests_in_flight() {
    let api = Api::start().await;
    let path = stream_path("drain");
    api.create_with(&path, "text/plain", "a").await;
    let addr = api.origin.addr;
    // Connected and silent (its version is not even known yet); connected
    // after one request and now idle.
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    idle.write_all(format!("HEAD {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    // The whole answer head (a HEAD has no body), however it was split.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut more = [0u8; 1024];
        let n = idle.read(&mut more).await.unwrap();
        assert!(n > 0, "the answer ends early");
        head.extend_from_slice(&more[..n]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"));
    // A long-poll in flight when the shutdown starts: it ends at once with
    // the answer a timeout gives.
    let waiting = tokio::spawn({
        let http = api.http.clone();
        let url = api.origin.url(&format!(
            "{path}?offset=now&live=long-poll&timeout_ms=30000"
        ));
        async move { http.get(url).send().await }
    });
    // The long-poll is waiting once the origin counts it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = send(api.get("/metrics")).await.text().await.unwrap();
        if metrics
            .lines()
            .any(|l| l == "ds_origin_long_polls_waiting 1")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the long-poll waits"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let Api { origin, .. } = api;
    tokio::time::timeout(Duration::from_secs(20), origin.stop())
        .await
        .expect("the shutdown does not wait for idle connections");
    let answered = waiting.await.unwrap().expect("the long-poll was answered");
    assert_eq!(answered.status(), 204);
    // Both idle connections were closed by the server.
    for conn in [&mut silent, &mut idle] {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut rest)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "closed: {read:?} {:?}",
            String::from_utf8_lossy(&rest)
        );
    }
}

/// Polls `/metrics` until `line` is one of its lines.
async fn until_metric(api: &Api, line: &str, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = send(api.get("/metrics")).await.text().await.unwrap();
        if metrics.lines().any(|l| l == line) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The origin serves HTTP/1.1 without reading while it answers (it skips
/// that read on every append); the requests that wait watch their client
/// themselves. A client that leaves a long-poll or an idle SSE tail frees it
/// at once, not after its 60 s; one that pipelines a request is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_requests_end_when_their_client_leaves() {
    let api = Api::start().await;
    let path = stream_path("leave");
    api.create_with(&path, "text/plain", "a").await;
    let addr = api.origin.addr;
    let request = |query: &str| format!("GET {path}?{query} HTTP/1.1\r\nhost: x\r\n\r\n");

    let mut poll = tokio::net::TcpStream::connect(addr).await.unwrap();
    poll.write_all(request("offset=now&live=long-poll&timeout_ms=60000").as_bytes())
        .await
        .unwrap();
    let mut end = tokio::net::TcpStream::connect(addr).await.unwrap();
    end.write_all(request("offset=now&live=sse").as_bytes())
        .await
        .unwrap();
    until_metric(
        &api,
        "ds_origin_long_polls_waiting 1",
        "the long-poll waits",
    )
    .await;
    until_metric(&api, "ds_origin_sse_open 1", "the end is open").await;
    drop(poll);
    drop(end);
    until_metric(
        &api,
        "ds_origin_long_polls_waiting 0",
        "a long-poll whose client left ends",
    )
    .await;
    until_metric(&api, "ds_origin_sse_open 0", "a end whose client left ends").await;

    // A client that pipelines its next request behind a long-poll is still
    // there: the long-poll is answered when data comes, then the next one.
    let mut pipelined = tokio::net::TcpStream::connect(addr).await.unwrap();
    let two = request("offset=now&live=long-poll&timeout_ms=60000") + &request("offset=-1");
    pipelined.write_all(two.as_bytes()).await.unwrap();
    until_metric(
        &api,
        "ds_origin_long_polls_waiting 1",
        "the long-poll waits",
    )
    .await;
    let appended = api.append(&path, "text/plain", "b").await;
    assert_eq!(appended.status(), 204);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let both = |got: &[u8]| {
        let text = String::from_utf8_lossy(got);
        text.matches("HTTP/1.1 200").count() == 2 && text.ends_with("\r\n\r\nab")
    };
    while !both(&got) {
        let left = deadline - tokio::time::Instant::now();
        let n = tokio::time::timeout(left, pipelined.read(&mut buf))
            .await
            .expect("both answers arrive")
            .unwrap();
        assert!(
            n > 0,
            "the connection stays open: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    let first = text.find("HTTP/1.1 200").unwrap();
    let second = text.rfind("HTTP/1.1 200").unwrap();
    assert!(
        text[first..second].ends_with("b"),
        "the long-poll's answer: {text}"
    );
    assert!(text[second..].ends_with("ab"), "the read's answer: {text}");
}

/// What a client reads from a raw connection until the server answers or
/// closes it (within `within`), as text.
async fn answer_of(conn: &mut tokio::net::TcpStream, within: Duration) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(within, conn.read(&mut buf)).await {
        Ok(Ok(n)) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Ok(Err(_)) => Some(String::new()),
        Err(_) => None,
    }
}

fn stalled_post(path: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 8388608\r\n\r\n"
    )
}

/// 40 clients that send a POST's head with `Content-Length: 8 MiB` and
/// then nothing hold none of the ingress budget (room is taken as bytes
/// arrive): every other append goes on. Before, they held 320 MiB of the
/// 256 MiB budget, and every append of every account answered 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_never_come_stop_no_other_write() {
    let api = Api::start().await;
    let path = stream_path("slow-bodies");
    api.create(&path, "text/plain").await;
    let mut stalled = Vec::new();
    for _ in 0..40 {
        let mut c = tokio::net::TcpStream::connect(api.origin.addr)
            .await
            .unwrap();
        c.write_all(stalled_post(&path).as_bytes()).await.unwrap();
        stalled.push(c);
    }
    for i in 0..10 {
        let r = send(
            api.post(&path)
                .header("content-type", "text/plain")
                .body(format!("append {i}")),
        )
        .await;
        assert_eq!(r.status(), 204, "append {i} beside 40 stalled bodies");
    }
    drop(stalled);
}

/// A body that sends nothing for `body_idle_timeout` answers 408 (and the
/// connection closes: the rest of the body is never read); nothing is
/// appended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_answers_408() {
    let api = Api::start_with(origin::http::HttpConfig {
        serve: shell::ServeConfig {
            body_idle_timeout: Duration::from_millis(300),
            ..shell::ServeConfig::default()
        },
        ..origin::http::HttpConfig::default()
    })
    .await;
    let path = stream_path("stalled-body");
    api.create(&path, "text/plain").await;
    let mut c = tokio::net::TcpStream::connect(api.origin.addr)
        .await
        .unwrap();
    c.write_all(stalled_post(&path).as_bytes()).await.unwrap();
    c.write_all(b"a few bytes").await.unwrap();
    let answer = answer_of(&mut c, Duration::from_secs(10))
        .await
        .expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
    assert_eq!(api.end(&path).await, offset(0), "nothing appended");
}
