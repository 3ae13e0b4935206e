//! `GET {stream}?offset=…`: catch-up reads, offsets, `max_bytes`,
//! `consistency`, entity tags, `Cache-Control` and JSON reads.

use crate::common::*;

const CACHEABLE: &str = "public, max-age=60, stale-while-revalidate=300";
const MIB: usize = 1024 * 1024;

/// A read's status, body and the headers a read answer is judged by.
struct Read {
    status: u16,
    body: Vec<u8>,
    next: Option<String>,
    up_to_date: bool,
    closed: bool,
    etag: Option<String>,
    cache: Option<String>,
    content_type: Option<String>,
}

async fn read(api: &Api, path: &str, query: &str) -> Read {
    read_with(api.get(&format!("{path}?{query}"))).await
}

async fn read_with(req: reqwest::RequestBuilder) -> Read {
    let resp = send(req).await;
    let flag = |name: &str| match header(&resp, name).as_deref() {
        None => false,
        Some("true") => true,
        Some(other) => panic!("{name}: {other}"),
    };
    let r = Read {
        status: resp.status().as_u16(),
        next: header(&resp, "stream-next-offset"),
        up_to_date: flag("stream-up-to-date"),
        closed: flag("stream-closed"),
        etag: header(&resp, "etag"),
        cache: header(&resp, "cache-control"),
        content_type: header(&resp, "content-type"),
        body: Vec::new(),
    };
    assert_eq!(
        header(&resp, "x-content-type-options").as_deref(),
        Some("nosniff")
    );
    Read {
        body: resp.bytes().await.unwrap().to_vec(),
        ..r
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_start_where_the_offset_says() {
    let api = Api::start().await;
    let path = stream_path("read-offsets");
    api.create_with(&path, "text/plain", "hello").await;

    for query in [
        "",
        "offset=-1",
        "offset=0000000000000000",
        "offset=-1&unknown=1",
    ] {
        let r = read(&api, &path, query).await;
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"hello"[..]),
            "{query}"
        );
        assert_eq!(r.next, Some(offset(5)));
        assert!(r.up_to_date && !r.closed);
        assert_eq!(r.content_type.as_deref(), Some("text/plain"));
        assert!(r.etag.is_some());
    }
    let r = read(&api, &path, "offset=0000000000000002").await;
    assert_eq!(r.body, b"llo");
    assert_eq!(r.next, Some(offset(5)));

    // `now` is the end: nothing, at once, and no entity tag.
    let now = read(&api, &path, "offset=now").await;
    assert_eq!((now.status, now.body.len()), (200, 0));
    assert_eq!(now.next, Some(offset(5)));
    assert!(now.up_to_date);
    assert_eq!(now.etag, None);

    // The end an answer gave reads nothing until something is appended.
    let end = read(&api, &path, &format!("offset={}", offset(5))).await;
    assert_eq!((end.status, end.body.len()), (200, 0));
    assert_eq!(
        end.next,
        Some(offset(5)),
        "an empty answer's next offset is its own"
    );
    assert!(end.up_to_date);
    assert!(end.etag.is_some());
    api.append(&path, "text/plain", "-world").await;
    let more = read(&api, &path, &format!("offset={}", offset(5))).await;
    assert_eq!(more.body, b"-world");
    assert_eq!(more.next, Some(offset(11)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_offsets_are_400_invalid_offset() {
    let api = Api::start().await;
    let path = stream_path("read-bad-offset");
    api.create_with(&path, "text/plain", "hello").await;
    let bad = [
        "",
        "abc",
        "0",
        "-2",
        "NOW",
        "Now",
        "00000000000000000",
        "000000000000000",
        "000000000000000A",
        "000000000000000G",
        "0,1",
        "0000000000000000%20",
        "%200000000000000000",
        "-1%0A",
        "now%00",
        "0000000000000000_0000000000000000",
        "..%2F0000000000000000",
    ];
    for live in ["", "&live=long-poll", "&live=sse"] {
        for value in bad {
            let resp = send(api.get(&format!("{path}?offset={value}{live}"))).await;
            expect_error(resp, 400, "INVALID_OFFSET").await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_parameter_is_400() {
    let api = Api::start().await;
    let path = stream_path("read-repeated");
    api.create_with(&path, "text/plain", "hello").await;
    for query in [
        "offset=-1&offset=-1",
        "offset=-1&offset=now",
        "offset=-1&max_bytes=1&max_bytes=2",
        "offset=-1&live=sse&live=sse",
    ] {
        expect_error(
            send(api.get(&format!("{path}?{query}"))).await,
            400,
            "BAD_REQUEST",
        )
        .await;
    }
    expect_error(
        send(api.get(&format!("{path}?offset=-1&live=poll"))).await,
        400,
        "BAD_REQUEST",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_past_the_end_is_416() {
    let api = Api::start().await;
    let path = stream_path("read-416");
    api.create_with(&path, "text/plain", "hello").await;
    for past in [6, 1 << 32, u64::MAX] {
        let resp = send(api.get(&format!("{path}?offset={}", offset(past)))).await;
        let headers = expect_error(resp, 416, "RANGE_NOT_SATISFIABLE").await;
        assert_eq!(
            headers.get("stream-next-offset").unwrap().to_str().unwrap(),
            offset(5)
        );
    }
    // Also for a tail.
    let resp = send(api.get(&format!("{path}?offset={}&live=long-poll", offset(6)))).await;
    expect_error(resp, 416, "RANGE_NOT_SATISFIABLE").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_bytes_cuts_an_answer_short() {
    let api = Api::start().await;
    let path = stream_path("read-max-bytes");
    api.create_with(&path, "text/plain", "0123456789").await;
    let mut at = 0;
    let mut got = Vec::new();
    for expected in ["0123", "4567", "89"] {
        let r = read(&api, &path, &format!("offset={}&max_bytes=4", offset(at))).await;
        assert_eq!(r.body, expected.as_bytes());
        at += expected.len() as u64;
        assert_eq!(r.next, Some(offset(at)));
        assert_eq!(r.up_to_date, at == 10, "Stream-Up-To-Date only at the end");
        got.extend(r.body);
    }
    assert_eq!(got, b"0123456789");
    // Exactly the rest is up to date.
    let r = read(&api, &path, "offset=-1&max_bytes=10").await;
    assert!(r.up_to_date);
    // A value that is not a positive integer is ignored.
    for ignored in ["abc", "1.5", "", "4x", "-3", "0", "1e1"] {
        let r = read(&api, &path, &format!("offset=-1&max_bytes={ignored}")).await;
        assert_eq!(r.status, 200, "{ignored}");
        assert_eq!(r.body, b"0123456789", "{ignored}");
        assert!(r.up_to_date);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_answer_carries_at_most_8_mib() {
    let api = Api::start().await;
    let path = stream_path("read-8mib");
    api.create(&path, "application/octet-stream").await;
    let big: Vec<u8> = (0..8 * MIB).map(|i| (i % 251) as u8).collect();
    api.append(&path, "application/octet-stream", big.clone())
        .await;
    api.append(&path, "application/octet-stream", vec![9u8; 100])
        .await;
    for query in [
        "offset=-1",
        "offset=-1&max_bytes=20000000",
        "offset=-1&max_bytes=8388609",
        "offset=-1&max_bytes=18446744073709551615",
    ] {
        let r = read(&api, &path, query).await;
        assert_eq!(r.body.len(), 8 * MIB, "{query}");
        assert!(r.body == big, "{query}: the first 8 MiB");
        assert_eq!(r.next, Some(offset(8 * MIB as u64)));
        assert!(!r.up_to_date, "{query}: cut short");
    }
    let rest = read(&api, &path, &format!("offset={}", offset(8 * MIB as u64))).await;
    assert_eq!(rest.body, vec![9u8; 100]);
    assert!(rest.up_to_date);
    assert_eq!(rest.next, Some(offset(8 * MIB as u64 + 100)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_closed_only_on_an_answer_that_reaches_the_end() {
    let api = Api::start().await;
    let path = stream_path("read-closed");
    let resp = send(
        api.put(&path)
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body("abcdef"),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 201);
    let partial = read(&api, &path, "offset=-1&max_bytes=3").await;
    assert_eq!(partial.body, b"abc");
    assert!(
        !partial.closed && !partial.up_to_date,
        "a partial read of a closed stream"
    );
    let rest = read(&api, &path, &format!("offset={}", offset(3))).await;
    assert_eq!(rest.body, b"def");
    assert!(rest.closed && rest.up_to_date);
    for query in [
        format!("offset={}", offset(6)),
        "offset=now".to_owned(),
        "offset=-1".to_owned(),
    ] {
        let r = read(&api, &path, &query).await;
        assert_eq!(r.status, 200);
        assert!(r.closed && r.up_to_date, "{query}");
        assert_eq!(r.next, Some(offset(6)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistency_is_local_or_leader() {
    let api = Api::start().await;
    let path = stream_path("read-consistency");
    api.create_with(&path, "text/plain", "abc").await;
    for value in ["local", "leader"] {
        let r = read(&api, &path, &format!("offset=-1&consistency={value}")).await;
        assert_eq!((r.status, r.body.as_slice()), (200, &b"abc"[..]), "{value}");
    }
    // Read-your-writes with leader consistency.
    api.append(&path, "text/plain", "d").await;
    assert_eq!(read(&api, &path, "consistency=leader").await.body, b"abcd");
    for value in ["strong", "", "LEADER", "Local", "eventual"] {
        let resp = send(api.get(&format!("{path}?offset=-1&consistency={value}"))).await;
        expect_error(resp, 400, "BAD_REQUEST").await;
    }
    for live in ["long-poll", "sse"] {
        let resp = send(api.get(&format!("{path}?offset=-1&consistency=leader&live={live}"))).await;
        expect_error(resp, 400, "BAD_REQUEST").await;
        // Local is fine with live.
        let resp = send(api.get(&format!("{path}?offset=-1&consistency=local&live={live}"))).await;
        assert_eq!(resp.status().as_u16(), 200, "{live}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_and_if_none_match() {
    let api = Api::start().await;
    let path = stream_path("read-etag");
    api.create_with(&path, "text/plain", "abc").await;
    let first = read(&api, &path, "offset=-1").await;
    let tag = first.etag.clone().expect("ETag on 200");
    assert!(
        tag.starts_with('"') && tag.ends_with('"'),
        "a strong tag: {tag}"
    );
    assert_eq!(
        read(&api, &path, "offset=-1").await.etag.as_ref(),
        Some(&tag),
        "the same answer, the same tag"
    );

    for inm in [
        tag.clone(),
        format!("W/{tag}"),
        format!("\"other\", {tag}"),
        "*".to_owned(),
    ] {
        let r = read_with(
            api.get(&format!("{path}?offset=-1"))
                .header("if-none-match", inm.clone()),
        )
        .await;
        assert_eq!(r.status, 304, "{inm}");
        assert!(r.body.is_empty(), "304 has no body");
        assert_eq!(r.next, Some(offset(3)));
        assert_eq!(r.etag.as_ref(), Some(&tag));
    }
    let r = read_with(
        api.get(&format!("{path}?offset=-1"))
            .header("if-none-match", "\"other\""),
    )
    .await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"abc"[..]));

    // Another range is another tag.
    let tail_tag = read(&api, &path, &format!("offset={}", offset(3)))
        .await
        .etag
        .unwrap();
    assert_ne!(tail_tag, tag);
    api.append(&path, "text/plain", "d").await;
    let r = read_with(
        api.get(&format!("{path}?offset=-1"))
            .header("if-none-match", tag.clone()),
    )
    .await;
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"abcd"[..]),
        "the answer changed"
    );
    let open_tag = r.etag.unwrap();
    assert_ne!(open_tag, tag);

    // Closing changes the tag of the same range, so a 304 never hides the end.
    let end_tag = read(&api, &path, &format!("offset={}", offset(4)))
        .await
        .etag
        .unwrap();
    api.close(&path).await;
    for (query, old) in [
        ("offset=-1".to_owned(), open_tag),
        (format!("offset={}", offset(4)), end_tag),
    ] {
        let r = read_with(
            api.get(&format!("{path}?{query}"))
                .header("if-none-match", old.clone()),
        )
        .await;
        assert_eq!(r.status, 200, "{query}");
        assert!(r.closed);
        let closed_tag = r.etag.unwrap();
        assert_ne!(closed_tag, old);
        let again = read_with(
            api.get(&format!("{path}?{query}"))
                .header("if-none-match", closed_tag),
        )
        .await;
        assert_eq!(again.status, 304);
        assert!(again.closed, "the 304 says the stream is closed");
    }
    // Never for `now`, so If-None-Match never matches there.
    let r = read_with(
        api.get(&format!("{path}?offset=now"))
            .header("if-none-match", "*"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.etag, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_control_follows_what_can_change() {
    let api = Api::start().await;
    let path = stream_path("read-cache");
    api.create_with(&path, "text/plain", "abc").await;
    let cases = [
        ("offset=-1", CACHEABLE),
        ("offset=-1&max_bytes=1", CACHEABLE),
        ("offset=0000000000000003", "no-store"), // empty at the open end
        ("offset=now", "no-store"),
    ];
    for (query, cache) in cases {
        assert_eq!(
            read(&api, &path, query).await.cache.as_deref(),
            Some(cache),
            "{query}"
        );
    }
    let tag = read(&api, &path, "offset=-1").await.etag.unwrap();
    let not_modified = read_with(
        api.get(&format!("{path}?offset=-1"))
            .header("if-none-match", tag),
    )
    .await;
    assert_eq!(not_modified.cache.as_deref(), Some(CACHEABLE));

    api.close(&path).await;
    let cases = [
        ("offset=-1", CACHEABLE),
        ("offset=0000000000000003", CACHEABLE), // the end of a closed stream never changes
        ("offset=now", "no-store"),
    ];
    for (query, cache) in cases {
        assert_eq!(
            read(&api, &path, query).await.cache.as_deref(),
            Some(cache),
            "closed, {query}"
        );
    }
    let head = send(api.head(&path)).await;
    assert_eq!(header(&head, "cache-control").as_deref(), Some("no-store"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_streams_read_as_ndjson() {
    let api = Api::start().await;
    let path = stream_path("read-ndjson");
    api.create(&path, "application/json").await;
    let empty = read(&api, &path, "offset=-1").await;
    assert_eq!(empty.content_type.as_deref(), Some("application/x-ndjson"));
    assert!(empty.body.is_empty(), "an empty NDJSON answer has no body");
    api.append(&path, "application/json", "[{\"n\": 1}, {\"n\": 22}]")
        .await;
    let all = read(&api, &path, "offset=-1").await;
    assert_eq!(all.body, b"{\"n\":1}\n{\"n\":22}\n");
    assert_eq!(all.content_type.as_deref(), Some("application/x-ndjson"));
    // max_bytes counts bytes of the NDJSON answer, so it may end inside a message.
    let cut = read(&api, &path, "offset=-1&max_bytes=10").await;
    assert_eq!(cut.body, b"{\"n\":1}\n{\"");
    assert_eq!(cut.next, Some(offset(10)));
    assert!(!cut.up_to_date);
    let rest = read(&api, &path, &format!("offset={}", offset(10))).await;
    assert_eq!(rest.body, b"n\":22}\n");
    assert!(rest.up_to_date);
    // Only the media type decides JSON mode.
    let with_charset = stream_path("read-ndjson-charset");
    api.create(&with_charset, "application/json; charset=utf-8")
        .await;
    api.append(&with_charset, "application/json", "{\"a\": [1, 2]}")
        .await;
    let r = read(&api, &with_charset, "offset=-1").await;
    assert_eq!(r.content_type.as_deref(), Some("application/x-ndjson"));
    assert_eq!(r.body, b"{\"a\":[1,2]}\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_streams_read_as_arrays_in_array_mode() {
    let api = Api::start_array().await;
    let path = stream_path("read-array");
    api.create(&path, "application/json").await;
    let empty = read(&api, &path, "offset=-1").await;
    assert_eq!(empty.content_type.as_deref(), Some("application/json"));
    assert_eq!(empty.body, b"[]");
    // Stored: `{"a":1}\n` (8 bytes), `[1,2]\n` (6), `"x"\n` (4).
    api.append(&path, "application/json", "[{\"a\": 1}, [1, 2], \"x\"]")
        .await;
    let all = read(&api, &path, "offset=-1").await;
    assert_eq!(all.body, b"[{\"a\":1},[1,2],\"x\"]");
    assert_eq!(all.next, Some(offset(18)));

    // max_bytes cuts after the last whole message that fits...
    let cut = read(&api, &path, "offset=-1&max_bytes=10").await;
    assert_eq!(cut.body, b"[{\"a\":1}]");
    assert_eq!(cut.next, Some(offset(8)));
    assert!(!cut.up_to_date);
    let rest = read(&api, &path, &format!("offset={}&max_bytes=10", offset(8))).await;
    assert_eq!(rest.body, b"[[1,2],\"x\"]");
    assert!(rest.up_to_date);
    // ... and a message larger than max_bytes comes whole.
    let one = read(&api, &path, "offset=-1&max_bytes=1").await;
    assert_eq!(one.body, b"[{\"a\":1}]");
    assert_eq!(one.next, Some(offset(8)));
    let at_end = read(&api, &path, &format!("offset={}", offset(18))).await;
    assert_eq!(at_end.body, b"[]");

    // Other streams read as bytes.
    let text = stream_path("read-array-text");
    api.create_with(&text, "text/plain", "[1]\n").await;
    let r = read(&api, &text, "offset=-1").await;
    assert_eq!(r.body, b"[1]\n");
    assert_eq!(r.content_type.as_deref(), Some("text/plain"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_missing_stream_are_404() {
    let api = Api::start().await;
    let path = stream_path("read-404");
    for query in [
        "offset=-1",
        "offset=now",
        "offset=-1&live=long-poll",
        "offset=-1&live=sse",
    ] {
        expect_error(
            send(api.get(&format!("{path}?{query}"))).await,
            404,
            "STREAM_NOT_FOUND",
        )
        .await;
    }
}

/// `min_next_offset` (decision 0025) on one origin, which holds every
/// write it answered: a floor at or below the end is the same read; one
/// past it (another incarnation's, or never given) `416` with the end at
/// once, for reads, long-polls and SSE; a malformed one `400`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_is_the_same_read_until_it_is_past_the_end() {
    let api = Api::start().await;
    let path = stream_path("read-floor");
    api.create_with(&path, "text/plain", "hello").await;
    let plain = read(&api, &path, "offset=-1").await;
    for floor in [offset(0), offset(3), offset(5)] {
        let r = read(&api, &path, &format!("offset=-1&min_next_offset={floor}")).await;
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
        assert_eq!((r.next, r.up_to_date), (plain.next.clone(), true));
        assert_eq!((&r.etag, &r.cache), (&plain.etag, &plain.cache));
    }
    let past = offset(6);
    for query in [
        format!("offset=-1&min_next_offset={past}"),
        format!("offset={}&live=long-poll&min_next_offset={past}", offset(5)),
        format!("offset=-1&live=sse&min_next_offset={past}"),
    ] {
        let began = std::time::Instant::now();
        let r = send(api.get(&format!("{path}?{query}"))).await;
        assert!(
            began.elapsed() < std::time::Duration::from_secs(1),
            "{query}"
        );
        assert_eq!(header(&r, "stream-next-offset"), Some(offset(5)), "{query}");
        expect_error(r, 416, "RANGE_NOT_SATISFIABLE").await;
    }
    for bad in ["-1", "now", "5", "000000000000000G"] {
        let r = send(api.get(&format!("{path}?offset=-1&min_next_offset={bad}"))).await;
        expect_error(r, 400, "INVALID_OFFSET").await;
    }
}
