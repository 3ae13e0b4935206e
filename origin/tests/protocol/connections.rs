//! Connections: HTTP/2 with prior knowledge beside HTTP/1.1 on the same
//! port, and a shutdown that closes idle connections and lets a request in
//! flight finish.

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
    let mut head = vec![0u8; 1024];
    let n = idle.read(&mut head).await.unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"));
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
        if metrics.lines().any(|l| l == "ds_long_polls_waiting 1") {
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
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
    }
}
