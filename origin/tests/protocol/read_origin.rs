//! `Stream-Read-Origin` (`--read-origin`): a stream's `HEAD` and every
//! read answer (catch-up, long-poll, SSE) name where its cacheable reads
//! may go; refusals, writes and the cacheable reads themselves do not,
//! and without the flag nothing does.

use origin::http::HttpConfig;

use crate::common::*;

const CDN: &str = "https://cdn.example.com";

async fn with_read_origin() -> Api {
    Api::start_with(HttpConfig {
        read_origin: Some(shared::read_origin::parse("https://CDN.example.com/").unwrap()),
        ..HttpConfig::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_and_every_read_name_the_read_origin() {
    let api = with_read_origin().await;
    let path = stream_path("read-origin");
    let created = api.create(&path, "text/plain").await;
    assert_eq!(created.status(), 201);
    assert_eq!(
        header(&created, "stream-read-origin"),
        None,
        "a write names none"
    );
    let appended = api.append(&path, "text/plain", "hello").await;
    assert_eq!(header(&appended, "stream-read-origin"), None);

    let head = send(api.head(&path)).await;
    assert_eq!(head.status(), 200);
    assert_eq!(header(&head, "stream-read-origin").as_deref(), Some(CDN));
    let exposed = header(&head, "access-control-expose-headers").unwrap_or_default();
    assert!(exposed.contains("stream-read-origin"), "{exposed}");

    let catch_up = send(api.get(&format!("{path}?offset=-1"))).await;
    assert_eq!(catch_up.status(), 200);
    assert_eq!(
        header(&catch_up, "stream-read-origin").as_deref(),
        Some(CDN)
    );

    let waited = send(api.get(&format!("{path}?offset=now&live=long-poll&timeout_ms=10"))).await;
    assert_eq!(waited.status(), 204);
    assert_eq!(header(&waited, "stream-read-origin").as_deref(), Some(CDN));

    let sse = send(api.get(&format!("{path}?offset=now&live=sse"))).await;
    assert_eq!(sse.status(), 200);
    assert_eq!(header(&sse, "stream-read-origin").as_deref(), Some(CDN));
    drop(sse);

    let missing = send(api.head(&stream_path("no-such"))).await;
    assert_eq!(missing.status(), 404);
    assert_eq!(
        header(&missing, "stream-read-origin"),
        None,
        "a refusal names none"
    );
    let bad = send(api.get(&format!("{path}?offset=bogus"))).await;
    assert_eq!(bad.status(), 400);
    assert_eq!(header(&bad, "stream-read-origin"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_no_answer_names_one() {
    let api = Api::start().await;
    let path = stream_path("no-read-origin");
    api.create(&path, "text/plain").await;
    let head = send(api.head(&path)).await;
    assert_eq!(head.status(), 200);
    assert_eq!(header(&head, "stream-read-origin"), None);
    let read = send(api.get(&format!("{path}?offset=-1"))).await;
    assert_eq!(header(&read, "stream-read-origin"), None);
}
