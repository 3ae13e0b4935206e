use super::*;

const LEASE: Duration = Duration::from_secs(5);
const STAGGER: Duration = Duration::from_secs(2);

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn beat(node: &str, seq: u64) -> Heartbeat {
    Heartbeat {
        node: node.into(),
        url: format!("http://{node}"),
        seq,
        leaving: false,
        released: Vec::new(),
        serving: Vec::new(),
    }
}

fn owner(node: &str, epoch: u64) -> Owner {
    Owner {
        epoch,
        node: node.into(),
        url: format!("http://{node}"),
    }
}

#[test]
fn a_node_lives_while_its_sequence_moves_and_dies_a_lease_after_it_stops() {
    let mut l = Liveness::new(LEASE, 16);
    l.observe(&[beat("a", 1)], s(0));
    assert_eq!(l.dead_for("a", s(4)), None);
    l.observe(&[beat("a", 2)], s(4));
    // The same sequence again proves nothing.
    l.observe(&[beat("a", 2)], s(8));
    assert_eq!(l.dead_for("a", s(8)), None);
    assert_eq!(l.dead_for("a", s(9)), Some(s(0)));
    assert_eq!(l.dead_for("a", s(12)), Some(s(3)));
    // It comes back.
    l.observe(&[beat("a", 3)], s(13));
    assert_eq!(l.dead_for("a", s(13)), None);
}

#[test]
fn a_leaving_node_is_dead_at_once_and_a_vanished_one_is_forgotten() {
    let mut l = Liveness::new(LEASE, 16);
    l.observe(&[beat("a", 1), beat("b", 1)], s(0));
    let mut leaving = beat("a", 2);
    leaving.leaving = true;
    l.observe(&[leaving, beat("b", 2)], s(1));
    assert_eq!(l.dead_for("a", s(1)), Some(s(0)));
    assert_eq!(l.live(s(1)).collect::<Vec<_>>(), ["b"]);
    l.observe(&[beat("b", 3)], s(2));
    // Never noted (or forgotten): nothing proves it alive.
    assert_eq!(l.dead_for("a", s(2)), Some(Duration::MAX));
}

#[test]
fn an_owner_without_a_heartbeat_dies_a_lease_after_it_was_named() {
    let mut l = Liveness::new(LEASE, 16);
    l.note(["a"], s(10));
    assert_eq!(l.dead_for("a", s(14)), None);
    assert_eq!(l.dead_for("a", s(15)), Some(s(0)));
    // Noting again does not restart its lease.
    l.note(["a"], s(15));
    assert_eq!(l.dead_for("a", s(16)), Some(s(1)));
}

#[test]
fn the_map_holds_at_most_max_nodes() {
    let mut l = Liveness::new(LEASE, 2);
    assert!(!l.observe(&[beat("a", 1), beat("b", 1), beat("c", 1)], s(0)));
    assert_eq!(l.live(s(0)).count(), 2);
    l.note(["d"], s(0));
    assert_eq!(l.dead_for("d", s(0)), Some(Duration::MAX));
    // Room again once one is gone.
    assert!(l.observe(&[beat("a", 2), beat("c", 1)], s(1)));
    assert_eq!(l.live(s(1)).collect::<Vec<_>>(), ["a", "c"]);
}

/// The decision of `me` about partition 0 (first seen unclaimed at 0),
/// which the spread gives to `target`.
fn decide_as(
    me: &str,
    serving: Option<u64>,
    owner: Option<&Owner>,
    target: Option<&str>,
    l: &Liveness,
    now: Duration,
) -> Decision {
    let situation = Situation {
        me,
        serving,
        owner,
        target,
        vacant_for: l.vacant_for(me, 0, owner, Some(s(0)), now),
        released_by_me: false,
        misplaced_for: None,
    };
    decide(&situation, l, STAGGER, now)
}

#[test]
fn an_unclaimed_partition_is_claimed_by_its_target_first_and_its_own_claim_again() {
    let mut l = Liveness::new(LEASE, 16);
    l.observe(&[beat("a", 1), beat("b", 1)], s(0));
    assert_eq!(
        decide_as("a", None, None, Some("a"), &l, s(0)),
        Decision::Claim
    );
    // Not the target: a stagger later, should the target not act.
    assert_eq!(
        decide_as("b", None, None, Some("a"), &l, s(1)),
        Decision::Wait
    );
    assert_eq!(
        decide_as("b", None, None, Some("a"), &l, s(2)),
        Decision::Claim
    );
    assert_eq!(
        decide_as("a", None, Some(&owner("a", 3)), Some("b"), &l, s(0)),
        Decision::Claim
    );
}

#[test]
fn the_owner_serves_until_a_newer_claim_appears_then_follows_it() {
    let l = Liveness::new(LEASE, 16);
    assert_eq!(
        decide_as("a", Some(3), Some(&owner("a", 3)), Some("a"), &l, s(0)),
        Decision::Serve
    );
    assert_eq!(
        decide_as("a", Some(3), Some(&owner("b", 4)), Some("a"), &l, s(0)),
        Decision::Follow {
            url: "http://b".into()
        }
    );
}

#[test]
fn others_follow_a_live_owner_and_claim_target_first_once_it_is_dead() {
    let mut l = Liveness::new(LEASE, 16);
    l.observe(&[beat("a", 1), beat("b", 1), beat("c", 1)], s(0));
    let a = owner("a", 1);
    let follow = Decision::Follow {
        url: "http://a".into(),
    };
    assert_eq!(decide_as("b", None, Some(&a), Some("b"), &l, s(1)), follow);
    // a stops renewing; b and c keep theirs.
    for t in 1..=5 {
        l.observe(&[beat("a", 1), beat("b", 1 + t), beat("c", 1 + t)], s(t));
    }
    assert_eq!(decide_as("b", None, Some(&a), Some("b"), &l, s(4)), follow);
    // Dead at 5: b (the target) claims at once, c a stagger later.
    assert_eq!(
        decide_as("b", None, Some(&a), Some("b"), &l, s(5)),
        Decision::Claim
    );
    assert_eq!(decide_as("c", None, Some(&a), Some("b"), &l, s(5)), follow);
    assert_eq!(decide_as("c", None, Some(&a), Some("b"), &l, s(6)), follow);
    l.observe(&[beat("a", 1), beat("b", 7), beat("c", 7)], s(7));
    assert_eq!(
        decide_as("c", None, Some(&a), Some("b"), &l, s(7)),
        Decision::Claim
    );
    // Once b's claim is seen, c follows b.
    assert_eq!(
        decide_as("c", None, Some(&owner("b", 2)), Some("b"), &l, s(7)),
        Decision::Follow {
            url: "http://b".into()
        }
    );
}

#[test]
fn a_dead_target_does_not_hold_the_next_one_back() {
    let mut l = Liveness::new(LEASE, 16);
    l.observe(&[beat("a", 1), beat("b", 1), beat("c", 1)], s(0));
    // a and b both stop; c alone renews; c's spread still named b.
    l.observe(&[beat("a", 1), beat("b", 1), beat("c", 9)], s(9));
    assert_eq!(
        decide_as("c", None, Some(&owner("a", 1)), Some("b"), &l, s(9)),
        Decision::Claim
    );
}

#[test]
fn a_misplaced_partition_is_released_after_a_stagger_and_claimed_by_its_target_at_once() {
    let mut l = Liveness::new(LEASE, 16);
    l.observe(&[beat("a", 1), beat("b", 1)], s(0));
    let a = owner("a", 4);
    let serving = |misplaced| Situation {
        me: "a",
        serving: Some(4),
        owner: Some(&a),
        target: Some("b"),
        vacant_for: None,
        released_by_me: false,
        misplaced_for: Some(misplaced),
    };
    assert_eq!(decide(&serving(s(1)), &l, STAGGER, s(1)), Decision::Serve);
    assert_eq!(decide(&serving(s(2)), &l, STAGGER, s(2)), Decision::Release);
    // Until a's heartbeat lists the release, b follows a.
    assert_eq!(
        decide_as("b", None, Some(&a), Some("b"), &l, s(2)),
        Decision::Follow {
            url: "http://a".into()
        }
    );
    let mut released = beat("a", 2);
    released.released = vec![Released {
        partition: 0,
        epoch: 4,
    }];
    l.observe(&[released, beat("b", 2)], s(3));
    assert_eq!(
        decide_as("b", None, Some(&a), Some("b"), &l, s(3)),
        Decision::Claim
    );
    // A release of another epoch (or partition) is not this one.
    assert_eq!(l.vacant_for("b", 0, Some(&owner("a", 5)), None, s(3)), None);
    assert_eq!(l.vacant_for("b", 1, Some(&a), None, s(3)), None);
    // a itself waits: nobody to forward to, and not its turn.
    let own = Situation {
        me: "a",
        serving: None,
        owner: Some(&a),
        target: Some("b"),
        vacant_for: l.vacant_for("a", 0, Some(&a), None, s(3)),
        released_by_me: true,
        misplaced_for: None,
    };
    assert_eq!(decide(&own, &l, STAGGER, s(3)), Decision::Wait);
    // ...unless b never claims: then a stagger times its rank plus one.
    let later = Situation {
        vacant_for: l.vacant_for("a", 0, Some(&a), None, s(5)),
        ..own
    };
    assert_eq!(decide(&later, &l, STAGGER, s(5)), Decision::Claim);
}

#[test]
fn a_heartbeat_reads_back_and_junk_does_not() {
    let b = beat("a", 7);
    assert_eq!(Heartbeat::decode(&b.encode()), Some(b));
    assert_eq!(Heartbeat::decode(b"not json"), None);
    // One without releases (an older origin's) reads as releasing none.
    let old = br#"{"node":"a","url":"http://a","seq":1,"leaving":false}"#;
    assert_eq!(Heartbeat::decode(old).unwrap().released, vec![]);
}

#[test]
fn a_blind_spot_of_the_observer_kills_nobody() {
    let mut l = Liveness::new(LEASE, 16);
    l.observe(&[beat("a", 1)], s(0));
    // The observer's reads failed from 1 s to 20 s; a could not renew
    // either (the same bucket). Its first read after sees a unchanged.
    l.after_blind(s(20));
    l.observe(&[beat("a", 1)], s(20));
    assert_eq!(l.dead_for("a", s(24)), None);
    // Then a lease of real silence does kill it.
    assert_eq!(l.dead_for("a", s(25)), Some(s(0)));
}

#[test]
fn the_owner_keeps_serving_while_no_newer_claim_is_known() {
    let l = Liveness::new(LEASE, 16);
    // The newest claim did not read (or the listing lags behind its own).
    assert_eq!(
        decide_as("a", Some(3), None, Some("a"), &l, s(0)),
        Decision::Serve
    );
    assert_eq!(
        decide_as("a", Some(3), Some(&owner("b", 2)), Some("a"), &l, s(0)),
        Decision::Serve
    );
}
