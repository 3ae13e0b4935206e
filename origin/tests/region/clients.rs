//! Per-client shares behind a follower: a follower forwards a client's
//! request to the partition's owner naming the client (`ds-region-client`,
//! vouched for by the region's peer key), so the owner's ingress shares
//! count each client, not the follower that every forwarded request comes
//! from; a client that names itself so is not believed.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::origins::{wait_owner, wait_serving};
use crate::common::seaweed::Seaweed;
use crate::common::{metric_in, metrics_at};

/// A client whose connections come from `ip` (any address of 127/8 is
/// this machine's loopback).
fn client_from(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::from(ip)))
        .build()
        .unwrap()
}

/// Starts an append of 4 KiB to `url` that sends its first KiB and then
/// holds the rest until the returned sender is dropped.
fn held_append(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
) -> tokio::sync::oneshot::Sender<()> {
    let (release, held) = tokio::sync::oneshot::channel::<()>();
    let body = futures::stream::once(async { Ok::<_, std::io::Error>(vec![b'a'; 1024]) }).chain(
        futures::stream::once(async move {
            let _ = held.await;
            Ok(vec![b'b'; 3072])
        }),
    );
    let mut req = client
        .post(url)
        .header("content-type", "application/octet-stream")
        .header("content-length", "4096")
        .body(reqwest::Body::wrap_stream(body));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    tokio::spawn(req.send());
    release
}

/// Until the owner holds `bytes` of request bodies; then its client count.
async fn clients_once_holding(http: &reqwest::Client, owner: &str, bytes: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = metrics_at(http, owner).await;
        if metric_in(&text, "ds_origin_ingress_bytes") == Some(bytes) {
            return metric_in(&text, "ds_origin_ingress_clients").unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the owner never held {bytes} bytes of bodies:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_counts_each_client_a_follower_forwards_and_no_self_named_one() {
    let weed = Seaweed::start();
    let http = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--body-idle-timeout", "60s"];
    let a = super::origins::start_with(&weed, &dir.path().join("a"), "clients", "a", &flags);
    let owner = format!("http://{}", a.addr);
    wait_owner(&http, &owner).await;
    let b = super::origins::start_with(&weed, &dir.path().join("b"), "clients", "b", &flags);
    let follower = format!("http://{}", b.addr);
    wait_serving(&http, &follower).await;
    while super::origins::serving(&http, &follower).await != Some(false) {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let stream = format!("{follower}/v1/stream/shared");
    assert_eq!(super::origins::create(&http, &stream).await, 201);

    // Two clients at two addresses, each holding a body through the
    // follower: the owner counts two clients (not one follower).
    let x = client_from([127, 0, 0, 2]);
    let y = client_from([127, 0, 0, 3]);
    let _x = held_append(&x, &stream, &[]);
    let _y = held_append(&y, &stream, &[]);
    assert_eq!(clients_once_holding(&http, &owner, 2048).await, 2);

    // A client straight to the owner naming itself another client, with a
    // key that is not the region's: counted by its own address (x's).
    let owner_stream = format!("{owner}/v1/stream/shared");
    let _forged = held_append(
        &x,
        &owner_stream,
        &[
            ("ds-region-client", "198.51.100.9"),
            ("ds-region-via", "not-the-key"),
        ],
    );
    assert_eq!(clients_once_holding(&http, &owner, 3072).await, 2);
    // Without a key at all: the same.
    let _bare = held_append(&y, &owner_stream, &[("ds-region-client", "198.51.100.10")]);
    assert_eq!(clients_once_holding(&http, &owner, 4096).await, 2);
    drop((a, b));
}
