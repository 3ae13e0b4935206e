//! The chunk cache: misses single-flight, hits come from memory, only
//! immutable answers are kept, and incarnations never mix.

use futures::future::join_all;

use crate::common::*;

const CHUNK: usize = 4 << 20;
const UPSTREAM_CHUNKS: &str = "ds_edge_upstream_requests_total{kind=\"chunk\"}";

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn fill(s: &Stack, p: &str, data: &[u8]) {
    for part in data.chunks(1 << 20) {
        s.append(p, "application/octet-stream", part.to_vec()).await;
    }
}

async fn incarnation(s: &Stack, p: &str) -> String {
    let r = s.http.head(s.url(p)).send().await.unwrap();
    header(&r, "stream-incarnation").expect("incarnation")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_misses_single_flight_and_hits_come_from_memory() {
    let s = Stack::start().await;
    let p = stream_path("chunks");
    s.create(&p, "application/octet-stream").await;
    let data = pattern(CHUNK + (1 << 20), 7);
    fill(&s, &p, &data).await;
    let inc = incarnation(&s, &p).await;
    let url = s.url(&format!("{p}/incarnation/{inc}/chunk/{}", offset(0)));

    // 64 readers of a cold chunk at once: one request to the origin.
    let answers = join_all((0..64).map(|_| async {
        let r = s.http.get(&url).send().await.unwrap();
        let status = r.status().as_u16();
        let immutable = header(&r, "stream-immutable");
        let cache = header(&r, "cache-control");
        let etag = header(&r, "etag");
        (status, immutable, cache, etag, r.bytes().await.unwrap())
    }))
    .await;
    for (status, immutable, cache, etag, body) in &answers {
        assert_eq!(*status, 200);
        assert_eq!(immutable.as_deref(), Some("true"));
        assert_eq!(
            cache.as_deref(),
            Some("public, max-age=31536000, immutable")
        );
        assert_eq!(etag, &answers[0].3);
        assert!(body[..] == data[..CHUNK], "the chunk's bytes");
    }
    assert_eq!(s.metric(UPSTREAM_CHUNKS).await, 1);
    assert_eq!(
        s.metric("ds_edge_cache_misses_total{kind=\"chunk\"}").await,
        1
    );
    assert_eq!(
        s.metric("ds_edge_cache_hits_total{kind=\"chunk\"}").await,
        63
    );

    // `If-None-Match` is answered from memory.
    let etag = answers[0].3.clone().expect("etag");
    let r = s
        .http
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    assert_eq!(header(&r, "etag"), Some(etag));
    assert_eq!(s.metric(UPSTREAM_CHUNKS).await, 1);

    // The chunk at the open end grows with the next append: never kept.
    let open = s.url(&format!(
        "{p}/incarnation/{inc}/chunk/{}",
        offset(CHUNK as u64)
    ));
    for _ in 0..2 {
        let r = s.http.get(&open).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "cache-control").as_deref(), Some("no-store"));
        assert_eq!(header(&r, "stream-immutable"), None);
        assert!(r.bytes().await.unwrap()[..] == data[CHUNK..]);
    }
    assert_eq!(s.metric(UPSTREAM_CHUNKS).await, 3);
    s.append(&p, "application/octet-stream", b"tail".to_vec())
        .await;
    let body = s
        .http
        .get(&open)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body.len(), (1 << 20) + 4, "the grown chunk, not a kept one");

    // A query, or an older token: the origin's refusal, not a kept answer.
    let r = s.http.get(format!("{url}?x=1")).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(s.metric("ds_edge_cache_bytes").await >= 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_stream_gets_its_own_bytes_never_the_old_ones() {
    let s = Stack::start().await;
    let p = stream_path("recreate");
    s.create(&p, "application/octet-stream").await;
    let old = pattern(CHUNK, 1);
    fill(&s, &p, &old).await;
    let old_inc = incarnation(&s, &p).await;
    let old_url = s.url(&format!("{p}/incarnation/{old_inc}/chunk/{}", offset(0)));
    let body = s
        .http
        .get(&old_url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(body[..] == old[..]);
    // A long-poll and an SSE reader that saw the old incarnation.
    let r = s
        .get(&format!("{p}?offset={}&live=sse", offset(CHUNK as u64)))
        .await;
    let mut sse = Sse::new(r, WAIT);
    assert_eq!(sse.next().await.expect("control").event, "control");

    let r = s.http.delete(s.url(&p)).send().await.unwrap();
    assert_eq!(r.status(), 204);
    // The reader of the deleted stream is told, as by the origin.
    let e = sse.next().await.expect("an error event");
    assert_eq!(e.event, "error");
    assert_eq!(e.json()["error"]["code"], "STREAM_NOT_FOUND");
    assert_eq!(sse.next().await, None);

    s.create(&p, "application/octet-stream").await;
    let new = pattern(CHUNK, 2);
    fill(&s, &p, &new).await;
    let new_inc = incarnation(&s, &p).await;
    assert_ne!(new_inc, old_inc);
    let new_url = s.url(&format!("{p}/incarnation/{new_inc}/chunk/{}", offset(0)));
    let r = s.http.get(&new_url).send().await.unwrap();
    assert_eq!(header(&r, "stream-incarnation"), Some(new_inc.clone()));
    assert!(r.bytes().await.unwrap()[..] == new[..]);
    // A catch-up read cut from chunks names the incarnation its bytes are
    // from, always; within a moment it names the new one.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let r = s
            .get(&format!("{p}?offset={}&max_bytes=1000", offset(10)))
            .await;
        assert_eq!(r.status(), 200);
        let inc = header(&r, "stream-incarnation").expect("incarnation");
        let body = r.bytes().await.unwrap();
        if inc == old_inc {
            assert!(
                body[..] == old[10..1010],
                "old bytes under the old incarnation"
            );
        } else {
            assert_eq!(inc, new_inc);
            assert!(
                body[..] == new[10..1010],
                "new bytes under the new incarnation"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still the old incarnation"
        );
        tokio::time::sleep(POLL).await;
    }
    // Reads, long-polls and SSE of the new stream carry the new bytes.
    let r = s
        .get(&format!("{p}?offset={}&live=long-poll", offset(0)))
        .await;
    assert_eq!(header(&r, "stream-incarnation"), Some(new_inc.clone()));
    assert!(r.bytes().await.unwrap()[..] == new[..]);
    let r = s
        .get(&format!("{p}?offset={}&live=sse", offset(CHUNK as u64 - 3)))
        .await;
    assert_eq!(header(&r, "stream-incarnation"), Some(new_inc));
    let mut sse = Sse::new(r, WAIT);
    let e = sse.next().await.expect("data");
    assert_eq!(e.event, "data");
    use base64::Engine;
    let got = base64::engine::general_purpose::STANDARD
        .decode(e.data.replace('\n', ""))
        .unwrap();
    assert_eq!(got, new[CHUNK - 3..]);
}

/// Headers that may differ between two answers to the same request for
/// reasons other than the proxy.
fn comparable(resp: &reqwest::Response) -> Vec<(String, String)> {
    comparable_headers(resp, &["date", "x-request-id"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_reads_cut_from_chunks_are_the_origins_own_answers() {
    catch_up_is_the_origins("text/plain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_reads_of_a_json_stream_read_as_ndjson_come_from_chunks_too() {
    catch_up_is_the_origins("application/json").await;
}

/// Reads at many offsets and sizes through the edge equal the origin's own
/// answers (status, headers, ETag, bytes), before and after the close; the
/// complete chunks come from the edge's memory.
async fn catch_up_is_the_origins(content_type: &str) {
    let s = Stack::start().await;
    let p = stream_path("catch-up");
    s.create(&p, content_type).await;
    let json = content_type == "application/json";
    // JSON messages of 100 bytes each (`"aaaa…"`), stored one per line.
    let message = |i: usize| {
        let c = (b'a' + (i % 26) as u8) as char;
        format!("\"{}\"", c.to_string().repeat(97))
    };
    let data: Vec<u8> = if json {
        (0..(2 * CHUNK + 100) / 100)
            .flat_map(|i| format!("{}\n", message(i)).into_bytes())
            .collect()
    } else {
        (0..2 * CHUNK + 100)
            .map(|i| b'a' + (i % 26) as u8)
            .collect()
    };
    if json {
        for batch in data
            .split(|b| *b == b'\n')
            .filter(|m| !m.is_empty())
            .collect::<Vec<_>>()
            .chunks(10_000)
        {
            let body = format!(
                "[{}]",
                batch
                    .iter()
                    .map(|m| std::str::from_utf8(m).unwrap())
                    .collect::<Vec<_>>()
                    .join(",")
            );
            s.append(&p, content_type, body.into_bytes()).await;
        }
    } else {
        for part in data.chunks(1 << 20) {
            s.append(&p, content_type, part.to_vec()).await;
        }
    }
    let c = CHUNK as u64;
    let compare = async |what: &str| {
        for start in [0, 100, c - 1, c, 2 * c - 3, 2 * c + 5, 2 * c + 100] {
            for max in [
                "",
                "&max_bytes=1",
                "&max_bytes=5000000",
                "&max_bytes=8388608",
            ] {
                // Every shape `Accept` can choose (only JSON streams have
                // more than one): the edge's answer is the origin's.
                for accept in ["*/*", "application/json", "application/x-ndjson"] {
                    let q = format!("{p}?offset={}{max}", offset(start));
                    let get = |url: String| s.http.get(url).header("accept", accept).send();
                    let via_edge = get(s.url(&q)).await.unwrap();
                    let direct = get(s.origin_url(&q)).await.unwrap();
                    assert_eq!(via_edge.status(), direct.status(), "{what} {q} {accept}");
                    assert_eq!(
                        comparable(&via_edge),
                        comparable(&direct),
                        "{what} {q} {accept}"
                    );
                    let (a, b) = (
                        without_request_id(&via_edge.bytes().await.unwrap()),
                        without_request_id(&direct.bytes().await.unwrap()),
                    );
                    assert!(
                        a == b,
                        "{what} {q} {accept}: {} vs {} bytes",
                        a.len(),
                        b.len()
                    );
                }
            }
        }
    };
    compare("open").await;
    let hits = s.metric("ds_edge_cache_hits_total{kind=\"chunk\"}").await;
    assert!(hits > 20, "complete chunks come from memory ({hits} hits)");
    assert_eq!(
        s.metric("ds_edge_cache_misses_total{kind=\"chunk\"}").await,
        2,
        "each complete chunk is filled once"
    );
    let r = s
        .http
        .post(s.url(&p))
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    compare("closed").await;
}

/// One value of the origin's `/metrics`.
async fn origin_metric(s: &Stack, name: &str) -> i64 {
    let text = s
        .http
        .get(s.origin_url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    metric_value(&text, name).unwrap_or_else(|| panic!("{name} in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_chunks_are_filled_from_the_bucket_with_the_origins_headers() {
    let s = Stack::start_with_bucket().await;
    let p = stream_path("bucket");
    s.create(&p, "application/octet-stream").await;
    let data = pattern(2 * CHUNK + 100, 3);
    fill(&s, &p, &data).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while origin_metric(&s, "ds_origin_chunks_sealed_total").await < 2 {
        assert!(tokio::time::Instant::now() < deadline, "chunks not sealed");
        tokio::time::sleep(POLL).await;
    }
    let inc = incarnation(&s, &p).await;
    // The edge computes the key the origin wrote.
    assert_eq!(
        shared::object_keys::chunk_key(&p, &inc, shared::offset::Offset(CHUNK as u64)),
        origin::objects::keys::chunk(&p, &inc, shared::offset::Offset(CHUNK as u64)).to_string()
    );
    for (start, want) in [
        (0, &data[..CHUNK]),
        (100, &data[100..CHUNK]),
        (CHUNK, &data[CHUNK..2 * CHUNK]),
    ] {
        let path = format!("{p}/incarnation/{inc}/chunk/{}", offset(start as u64));
        let via_edge = s.get(&path).await;
        let direct = s.http.get(s.origin_url(&path)).send().await.unwrap();
        assert_eq!(via_edge.status(), 200);
        assert_eq!(comparable(&via_edge), comparable(&direct), "{path}");
        let body = via_edge.bytes().await.unwrap();
        assert!(body[..] == want[..], "{path}");
    }
    assert_eq!(
        s.metric("ds_edge_upstream_requests_total{kind=\"object\"}")
            .await,
        3
    );
    assert_eq!(
        s.metric(UPSTREAM_CHUNKS).await,
        0,
        "no chunk from the origin"
    );
    // The open chunk is not in the bucket: the origin answers it.
    let open = format!("{p}/incarnation/{inc}/chunk/{}", offset(2 * CHUNK as u64));
    let r = s.get(&open).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap()[..], data[2 * CHUNK..]);
    assert_eq!(s.metric(UPSTREAM_CHUNKS).await, 1);
}

/// Chunk offsets at the end of the offset range (the last chunk of the
/// grid has no end): through the edge, with a bucket, as at the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_offsets_at_the_end_of_the_range_answer_as_the_origin() {
    let s = Stack::start_with_bucket().await;
    let p = stream_path("chunk-max");
    s.create(&p, "application/octet-stream").await;
    fill(&s, &p, &pattern(CHUNK + 10, 3)).await;
    let inc = incarnation(&s, &p).await;
    for at in [
        u64::MAX,
        u64::MAX - (CHUNK as u64),
        u64::MAX - u64::MAX % CHUNK as u64,
    ] {
        let path = format!("{p}/incarnation/{inc}/chunk/{}", offset(at));
        let edge = s.get(&path).await;
        let origin = s.http.get(s.origin_url(&path)).send().await.unwrap();
        assert_eq!(origin.status(), 416, "{at:x} is past the end");
        assert_eq!(edge.status(), origin.status(), "{at:x}");
        assert_eq!(
            header(&edge, "stream-next-offset"),
            header(&origin, "stream-next-offset")
        );
    }
}

/// The process's resident memory, from `/proc`.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Chunk URLs at off-grid offsets of one sealed chunk, each answered from
/// the bucket: the cache weighs each answer by what it holds (its own
/// copy), so memory stays within the cache's size. Before, each answer was
/// a slice that kept the whole 4 MiB object alive: 300 of them took an edge
/// with a 64 MiB cache past a gigabyte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_grid_chunk_answers_are_weighed_by_what_they_hold() {
    let cache = 64u64 << 20;
    let s = Stack::start_with_bucket_and_cache(cache).await;
    let p = stream_path("off-grid");
    s.create(&p, "application/octet-stream").await;
    fill(&s, &p, &pattern(CHUNK + 100, 5)).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while origin_metric(&s, "ds_origin_chunks_sealed_total").await < 1 {
        assert!(tokio::time::Instant::now() < deadline, "chunk not sealed");
        tokio::time::sleep(POLL).await;
    }
    let inc = incarnation(&s, &p).await;
    let before = rss_bytes();
    for i in 0..300u64 {
        // Near the end of the chunk: small answers of a 4 MiB object.
        let at = CHUNK as u64 - 1000 - i;
        let path = format!("{p}/incarnation/{inc}/chunk/{}", offset(at));
        let r = s.get(&path).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.bytes().await.unwrap().len() as u64, CHUNK as u64 - at);
    }
    assert!(
        s.metric("ds_edge_upstream_requests_total{kind=\"object\"}")
            .await
            >= 300,
        "answered from the bucket"
    );
    let grown = rss_bytes().saturating_sub(before);
    eprintln!(
        "300 off-grid chunk answers grew the process by {} MiB",
        grown >> 20
    );
    assert!(
        grown < cache + (64 << 20),
        "300 small answers grew the process by {} MiB",
        grown >> 20
    );
}
