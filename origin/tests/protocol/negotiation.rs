//! Content negotiation of JSON streams' reads: `Accept` chooses JSON
//! arrays or NDJSON for reads, long-polls and SSE tails, whatever the
//! server's default; the answers say `Vary: Accept` and their entity tags
//! name the shape. Chunk URLs are the stored NDJSON whatever is accepted.

use crate::common::*;

const JSON: &str = "application/json";
const NDJSON: &str = "application/x-ndjson";

/// `GET {path}?{query}` with `Accept: accept` (none for `None`).
async fn get(api: &Api, path_and_query: &str, accept: Option<&str>) -> reqwest::Response {
    let mut req = api.get(path_and_query);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    send(req).await
}

/// Status, content type, `Vary`, `ETag` and body of one read.
async fn shape(resp: reqwest::Response) -> (u16, String, Option<String>, String, String) {
    let status = resp.status().as_u16();
    let ct = header(&resp, "content-type").unwrap_or_default();
    let vary = header(&resp, "vary");
    let etag = header(&resp, "etag").unwrap_or_default();
    (status, ct, vary, etag, resp.text().await.unwrap())
}

const STORED: &str = "{\"a\":1}\n[2]\n";

async fn json_stream(api: &Api, name: &str) -> String {
    let path = stream_path(name);
    api.create_with(&path, JSON, "[{\"a\": 1}, [2]]").await;
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_chooses_the_shape_of_reads_in_the_default_mode() {
    let api = Api::start().await;
    let path = json_stream(&api, "neg-read").await;
    let q = format!("{path}?offset=-1");

    for accept in [
        None,
        Some("*/*"),
        Some(NDJSON),
        Some("text/html, */*;q=0.8"),
    ] {
        let (status, ct, vary, etag, body) = shape(get(&api, &q, accept).await).await;
        assert_eq!(
            (status, ct.as_str(), body.as_str()),
            (200, NDJSON, STORED),
            "{accept:?}"
        );
        assert_eq!(vary.as_deref(), Some("accept"), "{accept:?}");
        assert!(!etag.ends_with(":a\""), "{etag}");
    }
    for accept in [
        JSON,
        "application/json; charset=utf-8",
        "application/x-ndjson;q=0.5, application/json",
    ] {
        let (status, ct, vary, etag, body) = shape(get(&api, &q, Some(accept)).await).await;
        assert_eq!(
            (status, ct.as_str(), body.as_str()),
            (200, JSON, "[{\"a\":1},[2]]"),
            "{accept}"
        );
        assert_eq!(vary.as_deref(), Some("accept"));
        assert!(etag.ends_with(":a\""), "{etag}");
    }

    // An entity tag names one shape: a 304 only for the shape it named.
    let (_, _, _, array_tag, _) = shape(get(&api, &q, Some(JSON)).await).await;
    let (_, _, _, ndjson_tag, _) = shape(get(&api, &q, None).await).await;
    assert_ne!(array_tag, ndjson_tag);
    let again = send(
        api.get(&q)
            .header("accept", JSON)
            .header("if-none-match", &array_tag),
    )
    .await;
    assert_eq!(again.status().as_u16(), 304);
    assert_eq!(header(&again, "vary").as_deref(), Some("accept"));
    let other = send(api.get(&q).header("if-none-match", &array_tag)).await;
    assert_eq!(other.status().as_u16(), 200);
    assert_eq!(other.text().await.unwrap(), STORED);

    // Arrays cut between messages, as in the array mode.
    let cut = get(&api, &format!("{path}?offset=-1&max_bytes=9"), Some(JSON)).await;
    assert_eq!(header(&cut, "stream-next-offset"), Some(offset(8)));
    assert_eq!(cut.text().await.unwrap(), "[{\"a\":1}]");

    // Streams that are not JSON have one shape: no Vary.
    let text = stream_path("neg-text");
    api.create_with(&text, "text/plain", "[1]\n").await;
    let (_, ct, vary, _, body) =
        shape(get(&api, &format!("{text}?offset=-1"), Some(JSON)).await).await;
    assert_eq!(
        (ct.as_str(), vary, body.as_str()),
        ("text/plain", None, "[1]\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ndjson_is_still_there_in_the_array_mode() {
    let api = Api::start_array().await;
    let path = json_stream(&api, "neg-array-mode").await;
    let q = format!("{path}?offset=-1");
    let (_, ct, vary, _, body) = shape(get(&api, &q, None).await).await;
    assert_eq!(
        (ct.as_str(), vary.as_deref(), body.as_str()),
        (JSON, Some("accept"), "[{\"a\":1},[2]]")
    );
    let (_, ct, _, _, body) = shape(get(&api, &q, Some("*/*")).await).await;
    assert_eq!((ct.as_str(), body.as_str()), (JSON, "[{\"a\":1},[2]]"));
    let (_, ct, _, _, body) = shape(get(&api, &q, Some(NDJSON)).await).await;
    assert_eq!((ct.as_str(), body.as_str()), (NDJSON, STORED));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_and_sse_tails_negotiate_too() {
    let api = Api::start().await;
    let path = json_stream(&api, "neg-live").await;
    let end = offset(12);

    let waiting = {
        let api_url = api.url(&format!("{path}?offset={end}&live=long-poll"));
        tokio::spawn(async move {
            shape(send(client().get(api_url).header("accept", JSON)).await).await
        })
    };
    let plain = format!("{path}?offset=-1&live=long-poll");
    let (status, ct, vary, etag, body) = shape(get(&api, &plain, None).await).await;
    assert_eq!(
        (status, ct.as_str(), vary.as_deref(), body.as_str()),
        (200, NDJSON, Some("accept"), STORED)
    );
    assert!(!etag.ends_with(":a\""));
    api.append(&path, JSON, "{\"b\": 3}").await;
    let (status, ct, vary, etag, body) = waiting.await.unwrap();
    assert_eq!(
        (status, ct.as_str(), vary.as_deref(), body.as_str()),
        (200, JSON, Some("accept"), "[{\"b\":3}]")
    );
    assert!(etag.ends_with(":a\""), "{etag}");

    // SSE: `text/event-stream` alone is the default; with `application/json`
    // the events carry arrays.
    let sse_q = format!("{path}?offset=-1&live=sse");
    let mut ndjson = Sse::new(
        send(api.get(&sse_q).header("accept", "text/event-stream")).await,
        WAIT,
    );
    assert_eq!(
        header(&ndjson.resp, "stream-data-content-type").as_deref(),
        Some(NDJSON)
    );
    assert_eq!(header(&ndjson.resp, "vary").as_deref(), Some("accept"));
    assert_eq!(
        ndjson.expect("data").await.data,
        "{\"a\":1}\n[2]\n{\"b\":3}\n"
    );
    let mut arrays = Sse::new(
        send(
            api.get(&sse_q)
                .header("accept", "text/event-stream, application/json"),
        )
        .await,
        WAIT,
    );
    assert_eq!(
        header(&arrays.resp, "stream-data-content-type").as_deref(),
        Some(JSON)
    );
    assert_eq!(
        arrays.expect("data").await.data,
        "[{\"a\":1},[2],{\"b\":3}]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_urls_are_ndjson_whatever_is_accepted() {
    let api = Api::start().await;
    let path = json_stream(&api, "neg-chunk").await;
    let head = send(api.head(&path)).await;
    let incarnation = header(&head, "stream-incarnation").unwrap();
    let url = format!("{path}/incarnation/{incarnation}/chunk/{}", offset(0));
    let (status, ct, vary, _, body) = shape(get(&api, &url, Some(JSON)).await).await;
    assert_eq!(
        (status, ct.as_str(), vary, body.as_str()),
        (200, NDJSON, None, STORED)
    );
}
