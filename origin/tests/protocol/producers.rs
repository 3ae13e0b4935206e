//! `POST {stream}` with `Producer-Id`, `Producer-Epoch` and `Producer-Seq`:
//! exactly-once appends, fencing, and the refusals that change nothing.

use crate::common::*;

/// An append by producer `id` at `epoch`/`seq`.
fn produce(
    api: &Api,
    path: &str,
    id: &str,
    epoch: u64,
    seq: u64,
    body: &str,
) -> reqwest::RequestBuilder {
    api.post(path)
        .header("content-type", "text/plain")
        .header("producer-id", id)
        .header("producer-epoch", epoch.to_string())
        .header("producer-seq", seq.to_string())
        .body(body.to_owned())
}

fn assert_receipt(
    resp: &reqwest::Response,
    status: u16,
    start: u64,
    end: u64,
    epoch: u64,
    seq: u64,
) {
    assert_eq!(resp.status().as_u16(), status, "status");
    assert_eq!(
        header(resp, "stream-offset"),
        Some(offset(start)),
        "Stream-Offset"
    );
    assert_eq!(
        header(resp, "stream-next-offset"),
        Some(offset(end)),
        "Stream-Next-Offset"
    );
    assert_eq!(
        header(resp, "producer-epoch"),
        Some(epoch.to_string()),
        "Producer-Epoch"
    );
    assert_eq!(
        header(resp, "producer-seq"),
        Some(seq.to_string()),
        "Producer-Seq"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_applies_once_and_a_retry_gets_the_same_offsets() {
    let api = Api::start().await;
    let path = stream_path("producer-once");
    api.create_with(&path, "text/plain", "xx").await;

    let first = send(produce(&api, &path, "p", 0, 0, "abc")).await;
    assert_receipt(&first, 200, 2, 5, 0, 0);
    assert_eq!(
        header(&first, "producer-outcome").as_deref(),
        Some("accepted")
    );
    assert!(first.bytes().await.unwrap().is_empty());

    // The same request again: 204, the original offsets, nothing appended.
    for _ in 0..2 {
        let retry = send(produce(&api, &path, "p", 0, 0, "abc")).await;
        assert_receipt(&retry, 204, 2, 5, 0, 0);
        assert_eq!(
            header(&retry, "producer-outcome").as_deref(),
            Some("duplicate")
        );
    }
    assert_eq!(api.end(&path).await, offset(5));

    let second = send(produce(&api, &path, "p", 0, 1, "de")).await;
    assert_receipt(&second, 200, 5, 7, 0, 1);
    // An older retry still gets its own offsets, and the highest sequence number.
    let late = send(produce(&api, &path, "p", 0, 0, "abc")).await;
    assert_receipt(&late, 204, 2, 5, 0, 1);
    // A retry is recognised by its numbers, not its body.
    let other_body = send(produce(&api, &path, "p", 0, 1, "something else")).await;
    assert_receipt(&other_body, 204, 5, 7, 0, 1);

    assert_eq!(api.read_all(&path).await, b"xxabcde");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_that_skips_ahead_is_409() {
    let api = Api::start().await;
    let path = stream_path("producer-gap");
    api.create(&path, "text/plain").await;
    assert_eq!(
        send(produce(&api, &path, "p", 0, 0, "a")).await.status(),
        200
    );
    for seq in [2, 3, 100] {
        let refused = expect_error(
            send(produce(&api, &path, "p", 0, seq, "x")).await,
            409,
            "PRODUCER_SEQ_CONFLICT",
        )
        .await;
        assert_eq!(refused.get("producer-expected-seq").unwrap(), "1");
        assert_eq!(
            refused
                .get("producer-received-seq")
                .unwrap()
                .to_str()
                .unwrap(),
            seq.to_string()
        );
    }
    // A producer the stream does not know starts at 0.
    let refused = expect_error(
        send(produce(&api, &path, "q", 0, 3, "x")).await,
        409,
        "PRODUCER_SEQ_CONFLICT",
    )
    .await;
    assert_eq!(refused.get("producer-expected-seq").unwrap(), "0");
    assert_eq!(refused.get("producer-received-seq").unwrap(), "3");

    assert_eq!(api.end(&path).await, offset(1));
    assert_eq!(
        send(produce(&api, &path, "p", 0, 1, "b")).await.status(),
        200
    );
    assert_eq!(api.read_all(&path).await, b"ab");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_epoch_is_fenced_with_403() {
    let api = Api::start().await;
    let path = stream_path("producer-fenced");
    api.create(&path, "text/plain").await;
    assert_eq!(
        send(produce(&api, &path, "p", 0, 0, "a")).await.status(),
        200
    );
    // A restarted writer takes over at a higher epoch, from 0.
    let taken = send(produce(&api, &path, "p", 1, 0, "b")).await;
    assert_receipt(&taken, 200, 1, 2, 1, 0);
    for (epoch, seq) in [(0, 1), (0, 0), (0, 5)] {
        let refused = expect_error(
            send(produce(&api, &path, "p", epoch, seq, "zombie")).await,
            403,
            "PRODUCER_EPOCH_STALE",
        )
        .await;
        assert_eq!(
            refused.get("producer-epoch").unwrap(),
            "1",
            "the current epoch"
        );
        assert_eq!(refused.get("producer-outcome").unwrap(), "stale-epoch");
    }
    assert_eq!(api.read_all(&path).await, b"ab");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_epoch_must_start_at_seq_0() {
    let api = Api::start().await;
    let path = stream_path("producer-epoch-400");
    api.create(&path, "text/plain").await;
    assert_eq!(
        send(produce(&api, &path, "p", 0, 0, "a")).await.status(),
        200
    );
    let refused = expect_error(
        send(produce(&api, &path, "p", 1, 5, "x")).await,
        400,
        "BAD_REQUEST",
    )
    .await;
    assert_eq!(refused.get("producer-outcome").unwrap(), "invalid");
    assert_eq!(api.end(&path).await, offset(1));
    // The old epoch still holds.
    assert_eq!(
        send(produce(&api, &path, "p", 0, 1, "b")).await.status(),
        200
    );
    assert_eq!(
        send(produce(&api, &path, "p", 1, 0, "c")).await.status(),
        200
    );
    assert_eq!(api.read_all(&path).await, b"abc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_producer_headers_are_400_and_change_nothing() {
    let api = Api::start().await;
    let path = stream_path("producer-400");
    api.create(&path, "text/plain").await;
    assert_eq!(
        send(produce(&api, &path, "p", 0, 0, "a")).await.status(),
        200
    );

    let cases: &[&[(&str, &str)]] = &[
        &[("producer-id", "p")],
        &[("producer-epoch", "0")],
        &[("producer-seq", "1")],
        &[("producer-id", "p"), ("producer-epoch", "0")],
        &[("producer-id", "p"), ("producer-seq", "1")],
        &[("producer-epoch", "0"), ("producer-seq", "1")],
        &[
            ("producer-id", ""),
            ("producer-epoch", "0"),
            ("producer-seq", "1"),
        ],
        &[
            ("producer-id", "p"),
            ("producer-epoch", "0xyz"),
            ("producer-seq", "1"),
        ],
        &[
            ("producer-id", "p"),
            ("producer-epoch", "0"),
            ("producer-seq", "1abc"),
        ],
        &[
            ("producer-id", "p"),
            ("producer-epoch", "1e3"),
            ("producer-seq", "1"),
        ],
        &[
            ("producer-id", "p"),
            ("producer-epoch", "-1"),
            ("producer-seq", "1"),
        ],
        &[
            ("producer-id", "p"),
            ("producer-epoch", "0"),
            ("producer-seq", "-1"),
        ],
        &[
            ("producer-id", "p"),
            ("producer-epoch", "0"),
            ("producer-seq", "01"),
        ],
        &[
            ("producer-id", "p"),
            ("producer-epoch", "0"),
            ("producer-seq", "+1"),
        ],
        &[
            ("producer-id", "p"),
            ("producer-epoch", "0"),
            ("producer-seq", "1.0"),
        ],
        &[
            ("producer-id", "p"),
            ("producer-epoch", "0"),
            ("producer-seq", ""),
        ],
        &[
            ("producer-id", "p"),
            ("producer-epoch", "9007199254740992"),
            ("producer-seq", "0"),
        ],
        &[
            ("producer-id", "p"),
            ("producer-epoch", "0"),
            ("producer-seq", "9007199254740992"),
        ],
    ];
    for headers in cases {
        let mut req = api
            .post(&path)
            .header("content-type", "text/plain")
            .body("x");
        for (k, v) in *headers {
            req = req.header(*k, *v);
        }
        expect_error(send(req).await, 400, "BAD_REQUEST").await;
    }
    assert_eq!(api.end(&path).await, offset(1));
    // Had any refusal counted, seq 1 would now be a duplicate.
    let next = send(produce(&api, &path, "p", 0, 1, "b")).await;
    assert_receipt(&next, 200, 1, 2, 0, 1);
    // The largest number allowed is 2^53-1.
    let max = send(produce(&api, &path, "p", 9_007_199_254_740_991, 0, "c")).await;
    assert_receipt(&max, 200, 2, 3, 9_007_199_254_740_991, 0);
    assert_eq!(api.read_all(&path).await, b"abc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_bodies_do_not_advance_a_producer() {
    let api = Api::start().await;
    let path = stream_path("producer-json");
    api.create(&path, "application/json").await;
    let json = |seq: u64, body: &str, content_type: &str| {
        api.post(&path)
            .header("content-type", content_type)
            .header("producer-id", "p")
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(body.to_owned())
    };
    expect_error(
        send(json(0, "{", "application/json")).await,
        400,
        "INVALID_JSON",
    )
    .await;
    expect_error(
        send(json(0, "[]", "application/json")).await,
        400,
        "INVALID_JSON",
    )
    .await;
    expect_error(
        send(json(0, "", "application/json")).await,
        400,
        "EMPTY_BODY",
    )
    .await;
    expect_error(
        send(json(0, "1", "text/plain")).await,
        409,
        "CONTENT_TYPE_MISMATCH",
    )
    .await;
    let ok = send(json(0, "{\"id\": 1}", "application/json")).await;
    assert_receipt(&ok, 200, 0, 9, 0, 0);
    let dup = send(json(0, "{\"id\": 1}", "application/json")).await;
    assert_receipt(&dup, 204, 0, 9, 0, 0);
    assert_eq!(api.read_all(&path).await, b"{\"id\":1}\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_are_independent() {
    let api = Api::start().await;
    let path = stream_path("producer-many");
    api.create(&path, "text/plain").await;
    for (id, seq, body) in [
        ("A", 0, "A0"),
        ("B", 0, "B0"),
        ("A", 1, "A1"),
        ("B", 1, "B1"),
    ] {
        assert_eq!(
            send(produce(&api, &path, id, 0, seq, body)).await.status(),
            200,
            "{id}{seq}"
        );
    }
    // B's epoch does not fence A.
    assert_eq!(
        send(produce(&api, &path, "B", 5, 0, "B5")).await.status(),
        200
    );
    assert_eq!(
        send(produce(&api, &path, "A", 0, 2, "A2")).await.status(),
        200
    );
    assert_eq!(api.read_all(&path).await, b"A0B0A1B1B5A2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_wins_over_stream_seq() {
    let api = Api::start().await;
    let path = stream_path("producer-stream-seq");
    api.create(&path, "text/plain").await;
    let req = || produce(&api, &path, "p", 0, 0, "a").header("stream-seq", "001");
    assert_eq!(send(req()).await.status(), 200);
    let dup = send(req()).await;
    assert_receipt(&dup, 204, 0, 1, 0, 0);
    // A new append with the same Stream-Seq is refused.
    let refused = send(produce(&api, &path, "p", 0, 1, "b").header("stream-seq", "001")).await;
    expect_error(refused, 409, "STREAM_SEQ_CONFLICT").await;
    assert_eq!(api.read_all(&path).await, b"a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_closing_append_can_be_retried_and_nothing_follows_it() {
    let api = Api::start().await;
    let path = stream_path("producer-close");
    api.create(&path, "text/plain").await;
    assert_eq!(
        send(produce(&api, &path, "p", 0, 0, "a")).await.status(),
        200
    );
    let close = || produce(&api, &path, "p", 0, 1, "final").header("stream-closed", "true");
    let closed = send(close()).await;
    assert_receipt(&closed, 200, 1, 6, 0, 1);
    assert_eq!(header(&closed, "stream-closed").as_deref(), Some("true"));
    let retry = send(close()).await;
    assert_receipt(&retry, 204, 1, 6, 0, 1);
    assert_eq!(header(&retry, "stream-closed").as_deref(), Some("true"));

    for req in [
        produce(&api, &path, "p", 0, 2, "x"),
        produce(&api, &path, "q", 0, 0, "x"),
    ] {
        let refused = expect_error(send(req).await, 409, "STREAM_CLOSED").await;
        assert_eq!(refused.get("stream-closed").unwrap(), "true");
        assert_eq!(
            refused.get("stream-next-offset").unwrap().to_str().unwrap(),
            offset(6)
        );
    }
    assert_eq!(api.read_all(&path).await, b"afinal");

    // A close-only append with producer headers consumes a sequence number.
    let path = stream_path("producer-close-only");
    api.create(&path, "text/plain").await;
    assert_eq!(
        send(produce(&api, &path, "p", 0, 0, "a")).await.status(),
        200
    );
    let close_only = || {
        api.post(&path)
            .header("producer-id", "p")
            .header("producer-epoch", "0")
            .header("producer-seq", "1")
            .header("stream-closed", "true")
    };
    for _ in 0..2 {
        let resp = send(close_only()).await;
        assert_eq!(resp.status().as_u16(), 204);
        assert_eq!(header(&resp, "stream-closed").as_deref(), Some("true"));
        assert_eq!(header(&resp, "stream-next-offset"), Some(offset(1)));
        assert_eq!(header(&resp, "producer-seq").as_deref(), Some("1"));
    }
}

/// A `Producer-Id` is kept for as long as its producer lives (in memory
/// and every checkpoint): 256 bytes at most; a longer one is 400 and
/// changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_id_is_at_most_256_bytes() {
    let api = Api::start().await;
    let path = stream_path("producer-id-length");
    api.create(&path, "text/plain").await;
    let longest = "p".repeat(256);
    let r = send(produce(&api, &path, &longest, 0, 0, "a")).await;
    assert_eq!(r.status(), 200);
    let tail = api.end(&path).await;
    let too_long = "p".repeat(257);
    expect_error(
        send(produce(&api, &path, &too_long, 0, 0, "b")).await,
        400,
        "BAD_REQUEST",
    )
    .await;
    assert_eq!(api.end(&path).await, tail, "nothing appended");
}
