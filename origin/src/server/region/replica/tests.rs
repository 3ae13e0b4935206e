//! The replica's routing and floor rules, without a region.

use super::*;

#[test]
fn only_catch_up_reads_at_local_consistency_and_chunks_are_asked() {
    let get = Method::GET;
    assert_eq!(
        Ask::of(&get, "/v1/stream/a", Some("offset=-1")),
        Some(Ask::Read {
            stream: "/v1/stream/a",
            from: ReadFrom::Start,
            floor: None,
        })
    );
    assert_eq!(
        Ask::of(
            &get,
            "/v1/stream/a",
            Some("offset=-1&min_next_offset=0000000000000010")
        ),
        Some(Ask::Read {
            stream: "/v1/stream/a",
            from: ReadFrom::Start,
            floor: Some(Offset(16)),
        })
    );
    assert_eq!(
        Ask::of(&get, "/v1/stream/a", None).map(|a| a.stream()),
        Some("/v1/stream/a")
    );
    for query in [
        "offset=-1&live=sse",
        "offset=-1&live=long-poll",
        "offset=-1&consistency=leader",
        "offset=bad",
        "offset=now&min_next_offset=0000000000000010",
        // A malformed floor: the owner refuses it.
        "offset=-1&min_next_offset=now",
    ] {
        assert_eq!(Ask::of(&get, "/v1/stream/a", Some(query)), None, "{query}");
    }
    assert_eq!(Ask::of(&Method::HEAD, "/v1/stream/a", None), None);
    assert_eq!(Ask::of(&Method::POST, "/v1/stream/a", None), None);
    assert_eq!(
        Ask::of(
            &get,
            "/v1/stream/a/incarnation/t/chunk/0000000000400000",
            None
        ),
        Some(Ask::Chunk {
            stream: "/v1/stream/a",
            token: "t",
            at: Offset(CHUNK_BYTES)
        })
    );
    assert_eq!(
        Ask::of(
            &get,
            "/v1/stream/a/incarnation/t/snapshot/0000000000000014",
            None
        ),
        Some(Ask::Snapshot {
            stream: "/v1/stream/a",
            token: "t",
            at: Offset(20)
        })
    );
    // The latest snapshot's name changes: the owner answers it.
    assert_eq!(Ask::of(&get, "/v1/stream/a/snapshot", None), None);
}

#[tokio::test(start_paused = true)]
async fn a_floor_waits_for_the_replica_and_no_longer_than_the_bound() {
    let wait = Duration::from_millis(500);
    let applied = watch::Sender::new(0u64);
    // The replica reaches the floor at its third round, 100 ms apart.
    let rounds = {
        let applied = applied.clone();
        tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                applied.send_modify(|n| *n += 1);
            }
        })
    };
    let began = Instant::now();
    let look = || match *applied.borrow() {
        n if n >= 3 => Local::Answer(n),
        _ => Local::Below(applied.subscribe()),
    };
    assert_eq!(until_reached(began + wait, look).await, Reached::Answer(3));
    assert_eq!(began.elapsed(), Duration::from_millis(300));
    rounds.await.unwrap();

    // Never reached: forwarded at the bound, not later.
    let began = Instant::now();
    let never = || Local::<u64>::Below(applied.subscribe());
    assert_eq!(until_reached(began + wait, never).await, Reached::TooLate);
    assert_eq!(began.elapsed(), wait);

    // What a replica never answers is forwarded without a wait.
    let began = Instant::now();
    let forward = || Local::<u64>::Forward;
    assert_eq!(until_reached(began + wait, forward).await, Reached::Forward);
    assert_eq!(began.elapsed(), Duration::ZERO);

    // The replica stopped while a read waited: forwarded then.
    let gone = watch::Sender::new(0u64);
    let below = gone.subscribe();
    let mut once = Some(below);
    drop(gone);
    let began = Instant::now();
    let stopped = || match once.take() {
        Some(rx) => Local::<u64>::Below(rx),
        None => Local::Forward,
    };
    assert_eq!(until_reached(began + wait, stopped).await, Reached::TooLate);
    assert_eq!(began.elapsed(), Duration::ZERO);
}

#[test]
fn a_replica_answers_only_while_fresh() {
    let t0 = Instant::now();
    assert!(!fresh(None, t0));
    assert!(fresh(Some(t0), t0));
    assert!(fresh(Some(t0), t0 + FRESH_FOR));
    assert!(!fresh(Some(t0), t0 + FRESH_FOR + Duration::from_millis(1)));
    // A clock read before the catch-up it is compared with.
    assert!(fresh(Some(t0 + Duration::from_secs(1)), t0));
}

#[test]
fn written_streams_are_bounded_and_the_least_recently_written_go_first() {
    let t0 = Instant::now();
    let t = |ms| t0 + Duration::from_millis(ms);
    let mut w = Written::new(2);
    w.note("/a", t(1));
    w.note("/b", t(2));
    // `/a` written again: `/b` is now the least recently written, and
    // goes when `/c` comes, however often `/a` is written.
    for i in 0..10 {
        w.note("/a", t(3 + i));
    }
    w.note("/c", t(20));
    assert_eq!(w.last("/a"), Some(t(12)));
    assert_eq!(w.last("/b"), None);
    assert_eq!(w.last("/c"), Some(t(20)));
    assert_eq!(w.len(), 2);
    let mut none = Written::new(0);
    none.note("/a", t(1));
    assert_eq!(none.last("/a"), None);
}
