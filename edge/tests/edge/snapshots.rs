//! Snapshots at their cacheable URL through the edge, of any size up to the
//! origin's limit: streamed through, kept when they fit, served from memory
//! afterwards.

use crate::common::*;

const MIB: usize = 1024 * 1024;

/// Publishes a snapshot of `size` bytes in parts of at most 4 MiB at the
/// stream's end; its cacheable URL.
async fn publish(s: &Stack, p: &str, size: usize, seed: u8) -> (String, Vec<u8>) {
    let at = offset(5);
    let blob: Vec<u8> = (0..size)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    for (n, part) in blob.chunks(4 * MIB).enumerate() {
        let r = s
            .http
            .put(s.origin_url(&format!("{p}/snapshot/{at}/part/{n}")))
            .body(part.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "part {n}");
    }
    let r = s
        .http
        .put(s.origin_url(&format!("{p}/snapshot/{at}")))
        .header(
            "stream-snapshot-parts",
            blob.chunks(4 * MIB).len().to_string(),
        )
        .header("content-type", "application/octet-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let head = s.http.head(s.origin_url(p)).send().await.unwrap();
    let inc = header(&head, "stream-incarnation").unwrap();
    (format!("{p}/incarnation/{inc}/snapshot/{at}"), blob)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_of_any_size_stream_through_and_those_that_fit_are_kept() {
    // A 160 MiB cache keeps snapshots up to 20 MiB.
    let s = Stack::start_with_bucket_and_cache(160 << 20).await;

    let forwards = "ds_edge_upstream_requests_total{kind=\"forward\"}";
    for (size, kept) in [(12 * MIB, true), (24 * MIB, false)] {
        let q = stream_path(&format!("big-snapshot-{size}"));
        s.create(&q, "application/octet-stream").await;
        s.append(&q, "application/octet-stream", "01234").await;
        let (url, blob) = publish(&s, &q, size, size as u8).await;
        let before = s.metric(forwards).await;
        for _ in 0..3 {
            let r = s.get(&url).await;
            assert_eq!(r.status(), 200);
            assert_eq!(header(&r, "stream-immutable").as_deref(), Some("true"));
            let body = r.bytes().await.unwrap();
            assert!(
                body == blob,
                "{size}: the snapshot's bytes ({} of {})",
                body.len(),
                blob.len()
            );
        }
        let asked = s.metric(forwards).await - before;
        if kept {
            assert_eq!(asked, 1, "{size}: one fill, then memory");
            let tag = header(&s.get(&url).await, "etag").unwrap();
            let r = s
                .http
                .get(s.url(&url))
                .header("if-none-match", tag)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 304);
            assert_eq!(s.metric(forwards).await - before, 1);
        } else {
            assert_eq!(
                asked, 3,
                "{size}: larger than an eighth of the cache, never kept"
            );
        }
    }
    // A reader that stops early keeps nothing, and the next reads are whole.
    let q = stream_path("big-snapshot-abandoned");
    s.create(&q, "application/octet-stream").await;
    s.append(&q, "application/octet-stream", "01234").await;
    let (url, blob) = publish(&s, &q, 12 * MIB, 7).await;
    let mut r = s.get(&url).await;
    let first = r.chunk().await.unwrap().unwrap();
    assert_eq!(first[..], blob[..first.len()]);
    drop(r);
    let r = s.get(&url).await;
    assert!(r.bytes().await.unwrap() == blob);
    assert!(s.get(&url).await.bytes().await.unwrap() == blob);
}
