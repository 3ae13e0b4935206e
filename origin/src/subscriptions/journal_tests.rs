use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::clock::SystemClock;
use crate::core::subscription::config::Config;
use crate::store::StoreConfig;

fn open_store(dir: &std::path::Path) -> Store {
    Store::open(
        StoreConfig::new(dir.to_owned()),
        Arc::new(SystemClock),
        Arc::default(),
    )
    .expect("store")
    .0
}

fn created(id: &str) -> Vec<Event> {
    let config = Config::parse(
        br#"{"type":"pull-wake","pattern":"a/*","wake_stream":"w","lease_ttl_ms":1000}"#,
        10,
    )
    .unwrap();
    vec![
        Event::Created {
            id: id.into(),
            config,
            at: 1,
            base: "http://h".into(),
        },
        Event::Linked {
            path: "a/x".into(),
            glob: true,
            explicit: false,
            acked: 3,
            incarnation: String::new(),
        },
    ]
}

fn fold(events: &[Event]) -> Subscription {
    let mut s = Subscription::unborn();
    s.apply_all(events);
    s
}

fn journals(store: &Store) -> usize {
    store
        .region_streams_under(PREFIX)
        .iter()
        .filter(|v| !v.is_soft_deleted())
        .count()
}

#[tokio::test]
async fn a_rewrite_keeps_every_subscription_and_a_restart_folds_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let (journal, recovered) = Journal::open(store.clone()).await.unwrap();
    assert!(recovered.subscriptions.is_empty());
    assert!(recovered.keys.is_none());
    let (keys, made) = crate::subscriptions::keys::Keys::from_state(None, 1_000, 300).unwrap();
    journal.keys(&made.unwrap()).await.unwrap();
    let kid = keys.active_kid(1_000);
    let mut a = created("a");
    let b = created("b");
    journal.append("/r", "a", &a, || {}).await.unwrap();
    journal.append("/r", "b", &b, || {}).await.unwrap();
    journal
        .append("/r", "b", &[Event::Deleted], || {})
        .await
        .unwrap();
    let before = journal.size().await;
    journal
        .rewrite(Some(keys.state()), || {
            vec![("/r".into(), "a".into(), fold(&a))]
        })
        .await
        .unwrap();
    // Changes after the rewrite go to the new journal.
    let acked = Event::Acked {
        path: "a/x".into(),
        offset: 9,
    };
    journal
        .append("/r", "a", std::slice::from_ref(&acked), || {})
        .await
        .unwrap();
    a.push(acked);
    assert!(journal.size().await < before + 200);
    assert_eq!(journals(&store), 1);
    store.shutdown().await;

    let store = open_store(dir.path());
    let (_journal, recovered) = Journal::open(store.clone()).await.unwrap();
    assert_eq!(
        recovered.subscriptions,
        vec![("/r".into(), "a".into(), fold(&a))]
    );
    assert_eq!(recovered.subscriptions[0].2.links["a/x"].acked, 9);
    // The keys the rewrite carried sign again after the restart.
    let (again, made) =
        crate::subscriptions::keys::Keys::from_state(recovered.keys, 2_000, 300).unwrap();
    assert!(made.is_none());
    assert_eq!(again.active_kid(2_000), kid);
    store.shutdown().await;
}

#[tokio::test]
async fn a_rewrite_cut_before_its_complete_line_leaves_the_old_journal() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let (journal, _) = Journal::open(store.clone()).await.unwrap();
    let a = created("a");
    journal.append("/r", "a", &a, || {}).await.unwrap();
    let n = journal.current.read().await.n;
    // A crash in the middle of a rewrite: the next journal has a state
    // line but no `complete` line.
    let partial = line_bytes(&[Line::State {
        root: "/r".into(),
        id: "ghost".into(),
        s: Box::new(fold(&created("ghost"))),
    }]);
    store
        .create(path(n + 1), config(), false, Bytes::from(partial.to_vec()))
        .await
        .unwrap();
    store.shutdown().await;

    let store = open_store(dir.path());
    let (journal, recovered) = Journal::open(store.clone()).await.unwrap();
    assert_eq!(
        recovered.subscriptions,
        vec![("/r".into(), "a".into(), fold(&a))]
    );
    assert_eq!(journal.current.read().await.n, n);
    assert_eq!(journals(&store), 1, "the incomplete journal is deleted");
    store.shutdown().await;
}
