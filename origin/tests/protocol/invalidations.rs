//! `GET /_invalidations`: the feed of deletes, creates and retention
//! changes that edges tail, read like a stream.

use shared::invalidation::{decode, stream_id, Change};

use crate::common::*;

async fn feed(api: &Api, query: &str, incarnation: Option<&str>) -> reqwest::Response {
    let mut req = api.get(&format!("/_invalidations?{query}"));
    if let Some(i) = incarnation {
        req = req.header("stream-incarnation", i);
    }
    send(req).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_names_every_delete_create_and_retention_in_order() {
    let api = Api::start().await;
    let now = feed(&api, "offset=now&timeout_ms=0", None).await;
    assert_eq!(now.status().as_u16(), 204);
    assert_eq!(header(&now, "cache-control").as_deref(), Some("no-store"));
    let feed_inc = header(&now, "stream-incarnation").unwrap();
    let from = header(&now, "stream-next-offset").unwrap();

    // A long-poll from the end waits for the next event.
    let waiting = {
        let url = api.url(&format!("/_invalidations?offset={from}&timeout_ms=10000"));
        let inc = feed_inc.clone();
        tokio::spawn(async move {
            let r = send(client().get(url).header("stream-incarnation", inc)).await;
            (r.status().as_u16(), r.bytes().await.unwrap())
        })
    };
    // Parked at the end before the event: it is woken for it (a delivery,
    // timed), not reading behind (a catch-up).
    api.wait_for_metric("ds_origin_feed_readers_waiting", 1)
        .await;
    let path = stream_path("feed");
    let created = api.create(&path, "text/plain").await;
    let first_inc = header(&created, "stream-incarnation").unwrap();
    let (status, body) = waiting.await.unwrap();
    assert_eq!(status, 200);
    let events = decode(&body).expect("NDJSON events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].change, Change::Created);
    assert_eq!(events[0].stream, stream_id(&path));
    assert_eq!(events[0].incarnation, first_inc);

    assert_eq!(send(api.delete(&path)).await.status().as_u16(), 204);
    let again = api.create(&path, "text/plain").await;
    let second_inc = header(&again, "stream-incarnation").unwrap();
    let r = feed(
        &api,
        &format!("offset={from}&timeout_ms=0"),
        Some(&feed_inc),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    let next: u64 = header(&r, "stream-next-offset").unwrap().parse().unwrap();
    let events = decode(&r.bytes().await.unwrap()).unwrap();
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e.change, e.incarnation.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (Change::Created, first_inc.as_str()),
            (Change::Deleted, first_inc.as_str()),
            (Change::Created, second_inc.as_str()),
        ]
    );
    assert_eq!(next, from.parse::<u64>().unwrap() + 3);
    assert!(events.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    // The event the waiting long-poll was woken for is one delivery of
    // the feed; the three read behind the end since are a catch-up, not
    // timed.
    let metrics = api.metrics().await;
    assert_eq!(
        metric_in(
            &metrics,
            "ds_origin_delivery_lag_seconds_count{kind=\"feed\"}"
        ),
        Some(1),
        "{metrics}"
    );

    // Nothing new: 204 after the timeout, at the same position.
    let r = feed(
        &api,
        &format!("offset={next}&timeout_ms=50"),
        Some(&feed_inc),
    )
    .await;
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(header(&r, "stream-next-offset"), Some(next.to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_reader_that_missed_events_is_told_so() {
    let api = Api::start().await;
    let now = feed(&api, "offset=now&timeout_ms=0", None).await;
    let feed_inc = header(&now, "stream-incarnation").unwrap();
    // Another process's feed: 412 with this one's incarnation.
    let r = feed(&api, "offset=0", Some("feed-0000000000000000")).await;
    assert_eq!(r.status().as_u16(), 412);
    assert_eq!(header(&r, "stream-incarnation"), Some(feed_inc.clone()));
    // A position past the end.
    let r = feed(&api, "offset=99", Some(&feed_inc)).await;
    assert_eq!(r.status().as_u16(), 416);
    for bad in ["", "offset=x", "offset=1&timeout_ms=-1"] {
        expect_error(feed(&api, bad, None).await, 400, "BAD_REQUEST").await;
    }
}
