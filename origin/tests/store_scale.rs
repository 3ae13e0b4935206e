//! The store at scale, driven directly on an injected clock: expiring many
//! streams at once is spread over ticks ([`EXPIRE_PER_TICK`] each) while
//! appends to other streams go on, and a tick costs the streams due, not
//! the streams held.

use std::sync::Arc;

use bytes::Bytes;
use origin::clock::ManualClock;
use origin::core::config::{Expiry, StreamConfig};
use origin::core::stream::AppendRequest;
use origin::metrics::Metrics;
use origin::store::writer::EXPIRE_PER_TICK;
use origin::store::{Durability, Store, StoreConfig};

fn config(expiry: Expiry) -> StreamConfig {
    StreamConfig {
        content_type: "text/plain".into(),
        expiry,
        public: false,
    }
}

fn append(len: usize) -> AppendRequest {
    AppendRequest {
        content_type: Some("text/plain".into()),
        payload_len: len as u64,
        producer: None,
        stream_seq: None,
        close: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mass_expiry_is_spread_over_ticks_while_appends_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::new(dir.path().to_owned());
    cfg.object_store = None;
    cfg.durability = Durability::Async;
    let clock = Arc::new(ManualClock::new(1_000_000));
    let (store, _) = Store::open(cfg, clock.clone(), Arc::new(Metrics::default())).unwrap();
    let expiring = EXPIRE_PER_TICK * 2 + EXPIRE_PER_TICK / 2;
    let creates = (0..expiring).map(|i| {
        let store = store.clone();
        async move {
            store
                .create(
                    format!("/v1/stream/ttl/{i}"),
                    config(Expiry::IdleSecs(1)),
                    false,
                    Bytes::from_static(b"x"),
                )
                .await
                .unwrap();
        }
    });
    futures::future::join_all(creates).await;
    let keep = store
        .create(
            "/v1/stream/keep".into(),
            config(Expiry::Never),
            false,
            Bytes::new(),
        )
        .await
        .unwrap()
        .view;
    assert_eq!(store.stream_count(), expiring + 1);

    clock.advance(2_000);
    let mut left = expiring;
    for tick in 1..=3 {
        store.tick().await;
        // An append behind the tick answers once the tick's batch is
        // durable and published: the deletions are visible then.
        let r = store
            .append(Arc::clone(&keep), None, append(1), Bytes::from_static(b"k"))
            .await
            .unwrap();
        assert_eq!(r.end.next, tick as u64, "the append during expiry applied");
        left -= left.min(EXPIRE_PER_TICK);
        assert_eq!(
            store.stream_count(),
            left + 1,
            "tick {tick} deletes at most {EXPIRE_PER_TICK} streams"
        );
    }
    assert_eq!(
        store.stream_count(),
        1,
        "only the stream without a TTL is left"
    );
    store.shutdown().await;
}

/// Streams written with many small appends keep them in the log while all
/// streams' extents stay within `max_log_extents`; past it, the heavy ones
/// (16 extents or more) are promoted into their own files, and every byte
/// reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_streams_are_promoted_once_all_extents_pass_their_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::new(dir.path().to_owned());
    cfg.object_store = None;
    cfg.durability = Durability::Async;
    cfg.max_log_extents = 200;
    let clock = Arc::new(ManualClock::new(1_000_000));
    let (store, _) = Store::open(cfg, clock, Arc::new(Metrics::default())).unwrap();
    let mut views = Vec::new();
    for s in 0..20 {
        let created = store
            .create(
                format!("/v1/stream/heavy/{s}"),
                config(Expiry::Never),
                false,
                Bytes::new(),
            )
            .await
            .unwrap();
        views.push(created.view);
    }
    let files = || {
        std::fs::read_dir(dir.path().join("streams"))
            .unwrap()
            .flat_map(|d| std::fs::read_dir(d.unwrap().path()).into_iter().flatten())
            .count()
    };
    // 20 streams × 9 appends: 180 extents, within the bound: no file.
    append_rounds(&store, &views, 0..9).await;
    assert_eq!(
        files(),
        0,
        "within the bound, small streams stay in the log"
    );
    // Past it: every stream is heavy (16+), and they are promoted.
    append_rounds(&store, &views, 9..20).await;
    // The promoter writes the files on its own thread: wait for the first.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while files() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "heavy streams were promoted into their own files"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let expected: Vec<u8> = (0..20u8).map(|r| b'a' + r).collect();
    for view in &views {
        assert_eq!(&view.read(0, 20).await.unwrap()[..], &expected[..]);
    }
    store.shutdown().await;
}

/// One byte (`a` + round) appended to every stream, round by round.
async fn append_rounds(
    store: &Store,
    views: &[Arc<origin::store::StreamView>],
    rounds: std::ops::Range<u8>,
) {
    for round in rounds {
        for view in views {
            store
                .append(
                    Arc::clone(view),
                    None,
                    append(1),
                    Bytes::from(vec![b'a' + round]),
                )
                .await
                .unwrap();
        }
    }
}

/// The region's sweeps walk its own streams alone (under `/.ds-region/`),
/// kept apart as they are made and deleted and rebuilt at a restart,
/// however many other streams the store holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_regions_own_streams_are_walked_apart_from_all_others() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        let mut cfg = StoreConfig::new(dir.path().to_owned());
        cfg.object_store = None;
        cfg.durability = Durability::Sync;
        let clock = Arc::new(ManualClock::new(1_000_000));
        Store::open(cfg, clock, Arc::new(Metrics::default()))
            .unwrap()
            .0
    };
    let store = open();
    let paths = [
        "/.ds-region/in/0/pin/00000000000000aa/v1/stream/a",
        "/.ds-region/in/0/copy/00000000000000bb/v1/stream/b",
        "/.ds-region/in/1/pin/00000000000000cc/v1/stream/c",
        "/v1/stream/.ds-region/in/0/not-ours",
        "/v1/stream/plain",
    ];
    for p in paths {
        store
            .create(p.into(), config(Expiry::Never), false, Bytes::new())
            .await
            .unwrap();
    }
    let under = |store: &Store, prefix: &str| -> Vec<String> {
        store
            .region_streams_under(prefix)
            .iter()
            .map(|v| v.path.to_string())
            .collect()
    };
    // In path order: the copy before the pin.
    assert_eq!(under(&store, "/.ds-region/in/0/"), [paths[1], paths[0]]);
    assert_eq!(under(&store, "/.ds-region/in/1/"), [paths[2]]);
    store.delete(paths[1].into(), None).await.unwrap();
    assert_eq!(under(&store, "/.ds-region/in/0/"), [paths[0]]);
    store.shutdown().await;
    drop(store);
    let store = open();
    assert_eq!(under(&store, "/.ds-region/in/0/"), [paths[0]]);
    assert_eq!(under(&store, "/.ds-region/"), [paths[0], paths[2]]);
    assert_eq!(store.stream_count(), 4);
    store.shutdown().await;
}
