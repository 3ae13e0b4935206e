//! Cacheable chunk URLs: `{stream}/incarnation/{token}/chunk/{offset}`.

use shared::offset::CHUNK_BYTES;

use super::common::{expect_error, header, offset, stream_path, Api};

const MIB: usize = 1024 * 1024;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn chunk(api: &Api, path: &str, token: &str, at: u64) -> reqwest::Response {
    api.get(&format!("{path}/incarnation/{token}/chunk/{}", offset(at)))
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_follow_the_grid_and_are_immutable_when_complete() {
    let api = Api::start().await;
    let path = stream_path("chunks");
    let created = api.create(&path, "application/octet-stream").await;
    let token = header(&created, "stream-incarnation").unwrap();
    let mut all = Vec::new();
    for seed in 0..3u8 {
        let part = pattern(2 * MIB, seed);
        api.append(&path, "application/octet-stream", part.clone())
            .await;
        all.extend(part);
    }

    let first = chunk(&api, &path, &token, 0).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "stream-offset"), Some(offset(0)));
    assert_eq!(
        header(&first, "stream-next-offset"),
        Some(offset(CHUNK_BYTES))
    );
    assert_eq!(header(&first, "stream-immutable").as_deref(), Some("true"));
    assert_eq!(
        header(&first, "cache-control").as_deref(),
        Some("public, max-age=31536000, immutable")
    );
    assert_eq!(header(&first, "stream-closed"), None);
    let etag = header(&first, "etag").unwrap();
    assert_eq!(first.bytes().await.unwrap(), all[..CHUNK_BYTES as usize]);

    // From inside a chunk: to the same boundary.
    let inside = chunk(&api, &path, &token, 0x100).await;
    assert_eq!(
        header(&inside, "stream-next-offset"),
        Some(offset(CHUNK_BYTES))
    );
    assert_eq!(
        inside.bytes().await.unwrap(),
        all[0x100..CHUNK_BYTES as usize]
    );

    // The open end: not immutable, not cacheable.
    let open = chunk(&api, &path, &token, CHUNK_BYTES).await;
    assert_eq!(header(&open, "stream-immutable"), None);
    assert_eq!(header(&open, "cache-control").as_deref(), Some("no-store"));
    assert_eq!(
        header(&open, "stream-next-offset"),
        Some(offset(all.len() as u64))
    );
    assert_eq!(open.bytes().await.unwrap(), all[CHUNK_BYTES as usize..]);

    // If-None-Match with the chunk's tag: 304, no body.
    let again = api
        .get(&format!("{path}/incarnation/{token}/chunk/{}", offset(0)))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    assert!(again.bytes().await.unwrap().is_empty());

    // Closing makes the last chunk final.
    api.close(&path).await;
    let last = chunk(&api, &path, &token, CHUNK_BYTES).await;
    assert_eq!(header(&last, "stream-immutable").as_deref(), Some("true"));
    assert_eq!(header(&last, "stream-closed").as_deref(), Some("true"));

    // Following Stream-Next-Offset from 0 reassembles a plain read.
    let mut reassembled = Vec::new();
    let mut at = 0u64;
    loop {
        let r = chunk(&api, &path, &token, at).await;
        let next = u64::from_str_radix(&header(&r, "stream-next-offset").unwrap(), 16).unwrap();
        let closed = header(&r, "stream-closed").is_some();
        reassembled.extend_from_slice(&r.bytes().await.unwrap());
        at = next;
        if closed {
            break;
        }
    }
    assert_eq!(reassembled, api.read_all(&path).await);
    assert_eq!(reassembled, all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_refusals() {
    let api = Api::start().await;
    let path = stream_path("chunk-refusals");
    let created = api.create(&path, "text/plain").await;
    let token = header(&created, "stream-incarnation").unwrap();
    api.append(&path, "text/plain", "hello").await;
    let url = |t: &str, o: &str| format!("{path}/incarnation/{t}/chunk/{o}");

    let r = api
        .get(&format!("{}?offset=-1", url(&token, &offset(0))))
        .send()
        .await
        .unwrap();
    expect_error(r, 400, "BAD_REQUEST").await;
    let r = api.get(&url(&token, "0")).send().await.unwrap();
    expect_error(r, 400, "INVALID_OFFSET").await;
    let r = api
        .get(&url("not-a-token", &offset(0)))
        .send()
        .await
        .unwrap();
    expect_error(r, 400, "BAD_REQUEST").await;
    let r = api
        .get(&url("1-0000000000000000", &offset(0)))
        .send()
        .await
        .unwrap();
    assert_eq!(
        header(&r, "stream-incarnation").as_deref(),
        Some(token.as_str())
    );
    expect_error(r, 412, "INCARNATION_MISMATCH").await;
    let r = api.get(&url(&token, &offset(6))).send().await.unwrap();
    assert_eq!(header(&r, "stream-next-offset"), Some(offset(5)));
    expect_error(r, 416, "RANGE_NOT_SATISFIABLE").await;
    let r = api
        .post(&url(&token, &offset(0)))
        .body("x")
        .send()
        .await
        .unwrap();
    expect_error(r, 405, "METHOD_NOT_ALLOWED").await;
    let r = api
        .get(&format!(
            "/v1/stream/missing/incarnation/{token}/chunk/{}",
            offset(0)
        ))
        .send()
        .await
        .unwrap();
    expect_error(r, 404, "STREAM_NOT_FOUND").await;

    // After a delete and create, the old token answers 412.
    assert_eq!(api.delete(&path).send().await.unwrap().status(), 204);
    let again = api.create(&path, "text/plain").await;
    assert_ne!(header(&again, "stream-incarnation").unwrap(), token);
    let r = api.get(&url(&token, &offset(0))).send().await.unwrap();
    expect_error(r, 412, "INCARNATION_MISMATCH").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_chunks_are_ndjson_in_every_read_mode() {
    let api = Api::start_array().await;
    let path = stream_path("json-chunk");
    let created = api.create(&path, "application/json").await;
    let token = header(&created, "stream-incarnation").unwrap();
    api.append(&path, "application/json", r#"[{"a": 1}, {"b": 2}]"#)
        .await;
    let r = chunk(&api, &path, &token, 0).await;
    assert_eq!(
        header(&r, "content-type").as_deref(),
        Some("application/x-ndjson")
    );
    assert_eq!(r.text().await.unwrap(), "{\"a\":1}\n{\"b\":2}\n");
}
