use std::collections::BTreeMap;

use super::*;
use crate::core::subscription::config::Config;

fn config(kind: &str) -> Config {
    let body = match kind {
        "webhook" => {
            r#"{"type":"webhook","pattern":"events/*","webhook":{"url":"https://x.example/h"},"lease_ttl_ms":1000}"#
        }
        _ => {
            r#"{"type":"pull-wake","pattern":"events/*","wake_stream":"wake/pool","lease_ttl_ms":1000}"#
        }
    };
    Config::parse(body.as_bytes(), 10).unwrap()
}

/// A subscription with one link at `acked`, and the log that made it.
fn linked(kind: &str, acked: u64) -> (Subscription, Vec<Event>) {
    let events = vec![
        Event::Created {
            id: "s".into(),
            config: config(kind),
            at: 5,
            base: "http://h".into(),
        },
        Event::Linked {
            path: "events/a".into(),
            glob: true,
            explicit: false,
            acked,
            incarnation: "i1".into(),
        },
    ];
    let mut s = Subscription::new(String::new(), config(kind), 0, String::new());
    s.apply_all(&events);
    (s, events)
}

fn tails(t: u64) -> impl Fn(&str) -> Option<u64> {
    move |p: &str| (p == "events/a").then_some(t)
}

fn step(s: &mut Subscription, log: &mut Vec<Event>, events: Vec<Event>) {
    s.apply_all(&events);
    log.extend(events);
}

#[test]
fn pending_work_wakes_once_and_done_acks_the_snapshot() {
    let (mut s, mut log) = linked("webhook", 10);
    assert!(s.wake_if_pending(100, || "w1".into(), tails(10)).is_none());
    let woke = s.wake_if_pending(100, || "w1".into(), tails(30)).unwrap();
    step(&mut s, &mut log, vec![woke]);
    let w = s.wake.clone().unwrap();
    assert_eq!((w.generation, w.lease_until), (1, Some(1_100)));
    // Not expired while its delivery is in flight (not sent yet).
    assert_eq!(s.expire(5_000), None);
    assert_eq!(w.snapshot, BTreeMap::from([("events/a".to_string(), 30)]));
    // One wake in flight at a time.
    assert!(s.wake_if_pending(100, || "w2".into(), tails(40)).is_none());
    // Done acks the snapshot's tail (30), not the tail now (40).
    let done = s.delivered_done(1, "w1").unwrap();
    step(&mut s, &mut log, done);
    assert_eq!(s.links["events/a"].acked, 30);
    assert!(s.wake.is_none());
    // What came after the snapshot wakes again, a new generation.
    let again = s.wake_if_pending(200, || "w2".into(), tails(40)).unwrap();
    step(&mut s, &mut log, vec![again]);
    assert_eq!(s.wake.as_ref().unwrap().generation, 2);
    // Replaying the log gives the same state.
    let mut replayed = Subscription::new(String::new(), config("pull"), 0, String::new());
    replayed.apply_all(&log);
    assert_eq!(replayed, s);
}

#[test]
fn stale_generation_or_wake_is_fenced_and_acks_never_move_back() {
    let (mut s, mut log) = linked("webhook", 10);
    let woke = s.wake_if_pending(0, || "w1".into(), tails(30)).unwrap();
    step(&mut s, &mut log, vec![woke]);
    let ack = |o| {
        vec![Ack {
            stream: "events/a".into(),
            offset: o,
        }]
    };
    assert_eq!(
        s.acknowledge(0, 2, "w1", &[], true, tails(30)),
        Err(Refusal::Fenced)
    );
    assert_eq!(
        s.acknowledge(0, 1, "w0", &[], true, tails(30)),
        Err(Refusal::Fenced)
    );
    // Past the tail, or an unlinked stream: refused.
    assert!(matches!(
        s.acknowledge(0, 1, "w1", &ack(31), false, tails(30)),
        Err(Refusal::BadAck(_))
    ));
    let other = vec![Ack {
        stream: "events/b".into(),
        offset: 1,
    }];
    assert!(matches!(
        s.acknowledge(0, 1, "w1", &other, false, tails(30)),
        Err(Refusal::BadAck(_))
    ));
    // A heartbeat extends the lease.
    let (events, pending) = s
        .acknowledge(500, 1, "w1", &ack(20), false, tails(30))
        .unwrap();
    assert!(pending);
    step(&mut s, &mut log, events);
    assert_eq!(s.wake.as_ref().unwrap().lease_until, Some(1_500));
    assert_eq!(s.links["events/a"].acked, 20);
    // An older offset changes nothing.
    let (events, _) = s
        .acknowledge(600, 1, "w1", &ack(15), false, tails(30))
        .unwrap();
    step(&mut s, &mut log, events);
    assert_eq!(s.links["events/a"].acked, 20);
    let (events, pending) = s
        .acknowledge(700, 1, "w1", &ack(30), true, tails(30))
        .unwrap();
    assert!(!pending);
    step(&mut s, &mut log, events);
    assert!(s.wake.is_none());
    // The same request again: fenced.
    assert_eq!(
        s.acknowledge(800, 1, "w1", &ack(30), true, tails(30)),
        Err(Refusal::Fenced)
    );
}

#[test]
fn failed_deliveries_back_off_and_hold_the_lease() {
    let (mut s, mut log) = linked("webhook", 0);
    let woke = s.wake_if_pending(0, || "w1".into(), tails(5)).unwrap();
    step(&mut s, &mut log, vec![woke]);
    let mut at = 0;
    let mut delays = Vec::new();
    for _ in 0..8 {
        let e = s.delivery_failed(at, 1, "w1", 0.0).unwrap();
        step(&mut s, &mut log, vec![e]);
        let next = s.retry.unwrap().next_at;
        delays.push(next - at);
        at = next;
        assert_eq!(s.status(), "failed");
        // A scheduled retry keeps the wake past its lease.
        assert!(s.expire(next + 10_000).is_none());
        assert_eq!(s.next_due(), Some(next));
    }
    assert_eq!(
        delays,
        [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
    );
    assert!(s.to_send(at - 1).is_none());
    assert!(s.to_send(at).is_some());
    let e = s.delivered(at, 1, "w1").unwrap();
    step(&mut s, &mut log, e);
    assert!(s.to_send(at).is_none());
    assert_eq!(s.status(), "active");
    assert_eq!(s.expire(at + 999), None);
    assert_eq!(s.expire(at + 1_000), Some(Event::Ended));
}

#[test]
fn jitter_stays_within_a_fifth() {
    for attempt in 1..20 {
        let base = retry_delay(attempt, 0.0);
        assert!(retry_delay(attempt, 1.0) <= base + base / 5);
        assert!(retry_delay(attempt, -1.0) >= base - base / 5);
        assert!(retry_delay(attempt, 7.0) <= base + base / 5);
    }
}

#[test]
fn claims_take_turns_and_expire() {
    let (mut s, mut log) = linked("pull", 0);
    assert_eq!(
        s.claim(0, "w", || "x".into(), tails(0)),
        Err(Refusal::NothingPending)
    );
    let events = s.claim(0, "worker-1", || "w1".into(), tails(9)).unwrap();
    step(&mut s, &mut log, events);
    let w = s.wake.clone().unwrap();
    assert_eq!(
        (w.holder.as_deref(), w.lease_until, w.generation),
        (Some("worker-1"), Some(1_000), 1)
    );
    assert_eq!(
        s.claim(10, "worker-2", || "w2".into(), tails(9)),
        Err(Refusal::AlreadyClaimed {
            holder: "worker-1".into(),
            generation: 1
        })
    );
    // Once the lease ran out, another worker's claim starts a new wake.
    let events = s
        .claim(1_000, "worker-2", || "w2".into(), tails(9))
        .unwrap();
    step(&mut s, &mut log, events);
    assert_eq!(s.wake.as_ref().unwrap().generation, 2);
    assert_eq!(s.release(1, "w1"), Err(Refusal::Fenced));
    let e = s.release(2, "w2").unwrap();
    step(&mut s, &mut log, vec![e]);
    assert!(s.wake.is_none());
    // A pull-wake's lease runs from its claim, not its issue; once its
    // events are written, an unclaimed wake lasts one lease.
    let woke = s.wake_if_pending(5_000, || "w3".into(), tails(9)).unwrap();
    step(&mut s, &mut log, vec![woke]);
    assert_eq!(s.expire(u64::MAX), None);
    let announced = s.delivered(5_000, 3, "w3").unwrap();
    step(&mut s, &mut log, announced);
    assert_eq!(s.expire(5_999), None);
    assert_eq!(s.expire(6_000), Some(Event::Ended));
}

#[test]
fn links_keep_flags_apart() {
    let (mut s, _) = linked("webhook", 3);
    s.apply(&Event::Linked {
        path: "events/a".into(),
        glob: false,
        explicit: true,
        acked: 99,
        incarnation: "i2".into(),
    });
    assert_eq!(
        s.links["events/a"],
        Link {
            glob: true,
            explicit: true,
            acked: 3,
            incarnation: "i1".into(),
        }
    );
    assert_eq!(s.links["events/a"].link_type(), "explicit");
    s.apply(&Event::Unlinked {
        path: "events/a".into(),
        glob: false,
        explicit: true,
    });
    assert_eq!(s.links["events/a"].link_type(), "glob");
    s.apply(&Event::Unlinked {
        path: "events/a".into(),
        glob: true,
        explicit: false,
    });
    assert!(s.links.is_empty());
}

#[test]
fn a_deleted_subscription_fences_everything() {
    let (mut s, _) = linked("webhook", 0);
    let woke = s.wake_if_pending(0, || "w1".into(), tails(5)).unwrap();
    s.apply(&woke);
    s.apply(&Event::Deleted);
    assert_eq!(s.delivered_done(1, "w1"), Err(Refusal::Fenced));
    assert!(s.wake_if_pending(0, || "w2".into(), tails(9)).is_none());
}

/// `due_at` says exactly when a walk of every subscription, asking
/// `next_due` and `to_send` at each tick, would have found it due.
fn due_as_a_walk_finds(s: &Subscription) {
    for now in [0, 1, 999, 1_000, 1_001, 5_000, 100_000, u64::MAX] {
        let walked = s.next_due().is_some_and(|d| d <= now) || s.to_send(now).is_some();
        let walked = walked && !s.deleted;
        assert_eq!(
            s.due_at().is_some_and(|d| d <= now),
            walked,
            "at {now}: {s:?}"
        );
    }
}

#[test]
fn due_at_is_when_a_walk_finds_the_subscription_due() {
    let (mut s, mut log) = linked("webhook", 0);
    due_as_a_walk_finds(&s);
    assert_eq!(s.due_at(), None, "idle: only an append moves it");
    let woke = s.wake_if_pending(0, || "w1".into(), tails(5)).unwrap();
    step(&mut s, &mut log, vec![woke]);
    due_as_a_walk_finds(&s);
    assert_eq!(s.due_at(), Some(0), "a wake to send is due at once");
    let e = s.delivery_failed(10, 1, "w1", 0.0).unwrap();
    step(&mut s, &mut log, vec![e]);
    due_as_a_walk_finds(&s);
    assert_eq!(s.due_at(), Some(1_010), "a retry at its time");
    let e = s.delivered(1_010, 1, "w1").unwrap();
    step(&mut s, &mut log, e);
    due_as_a_walk_finds(&s);
    assert_eq!(s.due_at(), Some(2_010), "a taken wake at its lease's end");
    step(&mut s, &mut log, vec![Event::Deleted]);
    due_as_a_walk_finds(&s);
    assert_eq!(s.due_at(), None);
}
