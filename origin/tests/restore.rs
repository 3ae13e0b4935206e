//! Rolling a stream back (`POST {stream}/incarnation/{token}/restore`,
//! decision 0029) against a real origin: what readers, writers, producers
//! and forks see after it, its refusals, and the rollback surviving a
//! clean stop and a SIGKILL (replayed from the log).

use crate::common;

use common::{expect_error, header, send, stream_path, Api};
use shared::offset::Offset;

const TEXT: &str = "text/plain";

async fn incarnation(api: &Api, path: &str) -> String {
    let r = send(api.head(path)).await;
    assert_eq!(r.status(), 200, "HEAD {path}");
    header(&r, "stream-incarnation").expect("Stream-Incarnation")
}

fn restore(api: &Api, path: &str, token: &str, to: u64) -> reqwest::RequestBuilder {
    api.post(&format!("{path}/incarnation/{token}/restore"))
        .header("stream-restore-offset", Offset(to).to_string())
}

/// A stream of `parts` appended one by one after an empty create.
async fn stream_of(api: &Api, name: &str, parts: &[&str]) -> String {
    let path = stream_path(name);
    api.create(&path, TEXT).await;
    for p in parts {
        api.append(&path, TEXT, *p).await;
    }
    path
}

#[tokio::test]
async fn a_rollback_keeps_the_prefix_and_names_the_incarnation_it_replaced() {
    let api = Api::start().await;
    let path = stream_of(&api, "rb-basic", &["abc", "def", "ghi"]).await;
    let old = incarnation(&api, &path).await;

    let r = send(restore(&api, &path, &old, 6)).await;
    assert_eq!(r.status(), 200);
    let new = header(&r, "stream-incarnation").unwrap();
    assert_ne!(new, old);
    assert_eq!(
        header(&r, "stream-previous-incarnation").as_deref(),
        Some(old.as_str())
    );
    let six = Offset(6).to_string();
    assert_eq!(
        header(&r, "stream-inherited-offset").as_deref(),
        Some(six.as_str())
    );
    assert_eq!(
        header(&r, "stream-next-offset").as_deref(),
        Some(six.as_str())
    );
    assert_eq!(header(&r, "stream-closed"), None);

    assert_eq!(api.read_all(&path).await, b"abcdef");
    let head = send(api.head(&path)).await;
    assert_eq!(header(&head, "stream-incarnation").unwrap(), new);
    assert_eq!(
        header(&head, "stream-previous-incarnation").as_deref(),
        Some(old.as_str())
    );
    assert_eq!(
        header(&head, "stream-inherited-offset").as_deref(),
        Some(six.as_str())
    );
    // Created again with the same configuration: it is there (200).
    let again = send(api.put(&path).header("content-type", TEXT)).await;
    assert_eq!(again.status(), 200);
    // The stream goes on from the point.
    api.append(&path, TEXT, "xyz").await;
    assert_eq!(api.read_all(&path).await, b"abcdefxyz");
    let read = send(api.get(&format!("{path}?offset={six}"))).await;
    assert_eq!(
        header(&read, "stream-previous-incarnation").as_deref(),
        Some(old.as_str())
    );
    assert_eq!(read.bytes().await.unwrap().as_ref(), b"xyz");

    // A reader that names the old incarnation learns what it may keep.
    let stale = send(
        api.get(&format!("{path}?offset=-1"))
            .header("stream-incarnation", &old),
    )
    .await;
    let h = expect_error(stale, 412, "INCARNATION_MISMATCH").await;
    assert_eq!(h["stream-incarnation"], new.as_str());
    assert_eq!(h["stream-previous-incarnation"], old.as_str());
    assert_eq!(h["stream-inherited-offset"], six.as_str());
    // A rollback sent again after it landed changes nothing.
    let again = send(restore(&api, &path, &old, 6)).await;
    expect_error(again, 412, "INCARNATION_MISMATCH").await;
    assert_eq!(api.read_all(&path).await, b"abcdefxyz");
}

#[tokio::test]
async fn refused_rollbacks_change_nothing() {
    let api = Api::start().await;
    let path = stream_of(&api, "rb-refused", &["abc", "def"]).await;
    let token = incarnation(&api, &path).await;

    let past = send(restore(&api, &path, &token, 7)).await;
    let h = expect_error(past, 400, "INVALID_OFFSET").await;
    assert_eq!(h["stream-next-offset"], Offset(6).to_string().as_str());
    let unnamed = send(api.post(&format!("{path}/incarnation/{token}/restore"))).await;
    expect_error(unnamed, 400, "BAD_REQUEST").await;
    let bad = send(
        api.post(&format!("{path}/incarnation/{token}/restore"))
            .header("stream-restore-offset", "six"),
    )
    .await;
    expect_error(bad, 400, "INVALID_OFFSET").await;
    let other = send(restore(&api, &path, "1-0000000000000000", 3)).await;
    expect_error(other, 412, "INCARNATION_MISMATCH").await;
    let missing = send(restore(&api, &stream_path("rb-none"), &token, 0)).await;
    expect_error(missing, 404, "STREAM_NOT_FOUND").await;
    let get = send(api.get(&format!("{path}/incarnation/{token}/restore"))).await;
    expect_error(get, 405, "METHOD_NOT_ALLOWED").await;

    // A JSON stream goes back between messages only.
    let json = stream_path("rb-json");
    api.create(&json, "application/json").await;
    api.append(&json, "application/json", r#"{"a":1}"#).await;
    api.append(&json, "application/json", r#"{"b":2}"#).await;
    let json_token = incarnation(&api, &json).await;
    let inside = send(restore(&api, &json, &json_token, 3)).await;
    expect_error(inside, 400, "INVALID_OFFSET").await;

    assert_eq!(incarnation(&api, &path).await, token);
    assert_eq!(api.read_all(&path).await, b"abcdef");
    assert_eq!(incarnation(&api, &json).await, json_token);
    let first = api.read_all(&json).await;
    let first_end = first.iter().position(|&b| b == b'\n').unwrap() as u64 + 1;
    let between = send(restore(&api, &json, &json_token, first_end)).await;
    assert_eq!(between.status(), 200);
    assert_eq!(api.read_all(&json).await, b"{\"a\":1}\n");
}

#[tokio::test]
async fn rolling_back_to_before_a_close_reopens_the_stream() {
    let api = Api::start().await;
    let path = stream_of(&api, "rb-closed", &["abc", "def"]).await;
    api.close(&path).await;
    let token = incarnation(&api, &path).await;
    // Nothing taken: still closed.
    let same = send(restore(&api, &path, &token, 6)).await;
    assert_eq!(same.status(), 200);
    assert_eq!(header(&same, "stream-closed").as_deref(), Some("true"));
    let token = header(&same, "stream-incarnation").unwrap();
    let refused = send(api.post(&path).header("content-type", TEXT).body("x")).await;
    expect_error(refused, 409, "STREAM_CLOSED").await;

    let back = send(restore(&api, &path, &token, 3)).await;
    assert_eq!(back.status(), 200);
    assert_eq!(header(&back, "stream-closed"), None);
    api.append(&path, TEXT, "XYZ").await;
    assert_eq!(api.read_all(&path).await, b"abcXYZ");
}

async fn produce(api: &Api, path: &str, epoch: u64, seq: u64, body: &str) -> reqwest::Response {
    send(
        api.post(path)
            .header("content-type", TEXT)
            .header("producer-id", "p")
            .header("producer-epoch", epoch.to_string())
            .header("producer-seq", seq.to_string())
            .body(body.to_owned()),
    )
    .await
}

#[tokio::test]
async fn a_producer_resending_an_append_the_rollback_took_gets_it_applied_once() {
    let api = Api::start().await;
    let path = stream_path("rb-producer");
    api.create(&path, TEXT).await;
    for (seq, body) in ["abc", "def", "ghi"].iter().enumerate() {
        let r = produce(&api, &path, 0, seq as u64, body).await;
        assert_eq!(r.status(), 200, "append {seq}");
    }
    let token = incarnation(&api, &path).await;
    assert_eq!(send(restore(&api, &path, &token, 6)).await.status(), 200);

    // Seq 1 is held: a duplicate. Seq 2 was taken: applied, then a
    // duplicate.
    let held = produce(&api, &path, 0, 1, "def").await;
    assert_eq!(held.status(), 204);
    let resent = produce(&api, &path, 0, 2, "ghi").await;
    assert_eq!(resent.status(), 200);
    let twice = produce(&api, &path, 0, 2, "ghi").await;
    assert_eq!(twice.status(), 204);
    assert_eq!(api.read_all(&path).await, b"abcdefghi");

    // Rolled back past what its receipts tell: the epoch is fenced, the
    // next one starts at 0.
    let token = incarnation(&api, &path).await;
    assert_eq!(send(restore(&api, &path, &token, 4)).await.status(), 200);
    let fenced = produce(&api, &path, 0, 3, "jkl").await;
    expect_error(fenced, 403, "PRODUCER_EPOCH_STALE").await;
    let next = produce(&api, &path, 1, 0, "JKL").await;
    assert_eq!(next.status(), 200);
    assert_eq!(api.read_all(&path).await, b"abcdJKL");
}

#[tokio::test]
async fn forks_of_the_replaced_incarnation_keep_reading_it() {
    let api = Api::start().await;
    let path = stream_of(&api, "rb-forked", &["abc", "def", "ghi"]).await;
    let fork = stream_path("rb-forked-copy");
    let r = send(api.put(&fork).header("stream-forked-from", &path)).await;
    assert_eq!(r.status(), 201);
    let token = incarnation(&api, &path).await;
    assert_eq!(send(restore(&api, &path, &token, 3)).await.status(), 200);
    api.append(&path, TEXT, "123").await;

    assert_eq!(api.read_all(&fork).await, b"abcdefghi");
    assert_eq!(api.read_all(&path).await, b"abc123");
    // The fork goes; the rolled-back stream still reads its prefix.
    assert_eq!(send(api.delete(&fork)).await.status(), 204);
    assert_eq!(api.read_all(&path).await, b"abc123");
    assert_eq!(send(api.delete(&path)).await.status(), 204);
    assert_eq!(send(api.head(&path)).await.status(), 404);
}

/// A rollback to the point of the one before forks that one's source, so
/// rolling back again and again does not lengthen the chain of forks (a
/// chain is bounded at 32).
#[tokio::test]
async fn repeated_rollbacks_do_not_deepen_the_chain() {
    let api = Api::start().await;
    let path = stream_of(&api, "rb-repeat", &["abc", "def"]).await;
    for round in 0..40 {
        let token = incarnation(&api, &path).await;
        let r = send(restore(&api, &path, &token, 3)).await;
        assert_eq!(r.status(), 200, "round {round}");
        api.append(&path, TEXT, "def").await;
    }
    assert_eq!(api.read_all(&path).await, b"abcdef");
}

#[tokio::test]
async fn a_long_poll_on_the_replaced_incarnation_answers_412_naming_the_new_one() {
    let api = Api::start().await;
    let path = stream_of(&api, "rb-poll", &["abc"]).await;
    let token = incarnation(&api, &path).await;
    let three = Offset(3).to_string();
    let poll = tokio::spawn(send(
        api.get(&format!("{path}?offset={three}&live=long-poll")),
    ));
    // The poll parks (a waiter on the stream) before the rollback.
    common::wait_until("the long-poll to wait", || async {
        api.metric("ds_origin_long_polls_waiting").await == 1
    })
    .await;
    let r = send(restore(&api, &path, &token, 1)).await;
    assert_eq!(r.status(), 200);
    let new = header(&r, "stream-incarnation").unwrap();
    let h = expect_error(poll.await.unwrap(), 412, "INCARNATION_MISMATCH").await;
    assert_eq!(h["stream-incarnation"], new.as_str());
    assert_eq!(h["stream-inherited-offset"], Offset(1).to_string().as_str());
}

/// The rollback is one log record: replayed after SIGKILL, and kept by the
/// checkpoint of a clean stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_survives_sigkill_and_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let spawn = || common::process::spawn(&[], &["--data".as_ref(), dir.path().as_os_str()]);
    let client = common::client();
    let path = "/v1/stream/rb/restart";

    let proc = spawn();
    let base = format!("http://{}", proc.addr);
    let put = client.put(format!("{base}{path}")).body("abcdef").send();
    assert_eq!(put.await.unwrap().status(), 201);
    let head = client.head(format!("{base}{path}")).send().await.unwrap();
    let old = header(&head, "stream-incarnation").unwrap();
    let r = client
        .post(format!("{base}{path}/incarnation/{old}/restore"))
        .header("stream-restore-offset", Offset(2).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let new = header(&r, "stream-incarnation").unwrap();
    let post = client
        .post(format!("{base}{path}"))
        .header("content-type", "application/octet-stream")
        .body("XY")
        .send();
    assert_eq!(post.await.unwrap().status(), 204);
    drop(proc); // SIGKILL: the rollback is in the log only

    for restart in ["after SIGKILL", "after a clean stop"] {
        let proc = spawn();
        let base = format!("http://{}", proc.addr);
        let r = client
            .get(format!("{base}{path}?offset=-1"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{restart}");
        assert_eq!(header(&r, "stream-incarnation").unwrap(), new, "{restart}");
        assert_eq!(
            header(&r, "stream-previous-incarnation").as_deref(),
            Some(old.as_str()),
            "{restart}"
        );
        assert_eq!(r.bytes().await.unwrap().as_ref(), b"abXY", "{restart}");
        proc.terminate(); // a checkpoint holds it for the next start
    }
}

/// The rollback writes no object: below the point, the new incarnation
/// reads the old one's sealed chunks; its own appends complete the chunk
/// across the point, which holds the old bytes below it. Across a restart
/// every byte reads from where it lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_shares_the_sealed_chunks_below_its_point() {
    use crate::forks::{pattern, read_whole, start_sealing, wait_sealed};
    use common::s3::S3sFs;
    use shared::offset::CHUNK_BYTES;
    const MIB: usize = 1024 * 1024;
    const BINARY: &str = "application/octet-stream";

    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    let api = Api::on(start_sealing(dir.path(), &server).await);
    let path = stream_path("rb-sealed");
    api.create(&path, BINARY).await;
    let all = pattern(3, 6 * MIB);
    for part in all.chunks(MIB) {
        api.append(&path, BINARY, part.to_vec()).await;
    }
    wait_sealed(&api, 1).await;
    let before = server.object_files();
    let point = 4 * MIB + 100;
    let token = incarnation(&api, &path).await;
    assert_eq!(
        send(restore(&api, &path, &token, point as u64))
            .await
            .status(),
        200
    );
    assert_eq!(server.object_files(), before, "a rollback writes no object");
    let mut want = all[..point].to_vec();
    assert_eq!(read_whole(&api, &path).await, want);

    let own = pattern(5, 4 * MIB);
    api.append(&path, BINARY, own.clone()).await;
    want.extend_from_slice(&own);
    wait_sealed(&api, 2).await;
    assert_eq!(read_whole(&api, &path).await, want);
    let new = incarnation(&api, &path).await;
    let chunk = api
        .get(&format!(
            "{path}/incarnation/{new}/chunk/{}",
            Offset(CHUNK_BYTES)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(chunk.status(), 200);
    assert_eq!(
        chunk.bytes().await.unwrap(),
        want[4 * MIB..8 * MIB],
        "the chunk across the point: the old bytes below it, the new above"
    );

    api.origin.stop().await;
    let api = Api::on(start_sealing(dir.path(), &server).await);
    assert_eq!(read_whole(&api, &path).await, want);
}

/// Claims a wake of subscription `sub`, once there is one.
async fn claim(api: &Api, sub: &str) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = send(
            api.post(&format!("{sub}/claim"))
                .json(&serde_json::json!({"worker": "w"})),
        )
        .await;
        let v: serde_json::Value = r.json().await.unwrap();
        if v.get("token").is_some() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "no wake: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A subscription that acknowledged past the point keeps following the
/// stream: its acknowledged offset goes back to the point (the bytes past
/// it are no longer the stream's), and what is appended after the
/// rollback is pending for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_acked_past_the_point_is_pulled_back_to_it() {
    let api = Api::start().await;
    let sub = "/v1/stream/__ds/subscriptions/rb-sub";
    let declare = api
        .put(sub)
        .json(&serde_json::json!({"type": "pull-wake", "pattern": "rb-sub/*", "wake_stream": "rb-wakes", "lease_ttl_ms": 10000}));
    assert_eq!(send(declare).await.status(), 201);
    let path = stream_of(&api, "rb-sub/s", &["abc", "def", "ghi"]).await;
    let acked = || async {
        let v: serde_json::Value = send(api.get(sub)).await.json().await.unwrap();
        v["streams"][0]["acked_offset"].as_str().unwrap().to_owned()
    };

    let wake = claim(&api, sub).await;
    let ack = api
        .post(&format!("{sub}/ack"))
        .bearer_auth(wake["token"].as_str().unwrap())
        .json(&serde_json::json!({
            "wake_id": wake["wake_id"],
            "generation": wake["generation"],
            "acks": [{"path": wake["streams"][0]["path"], "offset": Offset(9).to_string()}],
            "done": true,
        }));
    assert_eq!(send(ack).await.status(), 200);
    assert_eq!(acked().await, Offset(9).to_string());

    let token = incarnation(&api, &path).await;
    assert_eq!(send(restore(&api, &path, &token, 3)).await.status(), 200);
    common::wait_until("the ack pulled back to the point", || async {
        acked().await == Offset(3).to_string()
    })
    .await;
    api.append(&path, TEXT, "XY").await;
    let wake = claim(&api, sub).await;
    let s = &wake["streams"][0];
    assert_eq!(s["acked_offset"], Offset(3).to_string().as_str());
    assert_eq!(s["tail_offset"], Offset(5).to_string().as_str());
}
