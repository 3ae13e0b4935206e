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
    l.note("a", s(10));
    assert_eq!(l.dead_for("a", s(14)), None);
    assert_eq!(l.dead_for("a", s(15)), Some(s(0)));
    // Noting again does not restart its lease.
    l.note("a", s(15));
    assert_eq!(l.dead_for("a", s(16)), Some(s(1)));
}

#[test]
fn the_map_holds_at_most_max_nodes() {
    let mut l = Liveness::new(LEASE, 2);
    assert!(!l.observe(&[beat("a", 1), beat("b", 1), beat("c", 1)], s(0)));
    assert_eq!(l.live(s(0)).count(), 2);
    l.note("d", s(0));
    assert_eq!(l.dead_for("d", s(0)), Some(Duration::MAX));
    // Room again once one is gone.
    assert!(l.observe(&[beat("a", 2), beat("c", 1)], s(1)));
    assert_eq!(l.live(s(1)).collect::<Vec<_>>(), ["a", "c"]);
}

#[test]
fn nobody_claimed_yet_means_claim_and_its_own_claim_means_claim_again() {
    let l = Liveness::new(LEASE, 16);
    assert_eq!(decide("a", None, None, &l, STAGGER, s(0)), Decision::Claim);
    assert_eq!(
        decide("a", None, Some(&owner("a", 3)), &l, STAGGER, s(0)),
        Decision::Claim
    );
}

#[test]
fn the_owner_serves_until_a_newer_claim_appears_then_follows_it() {
    let l = Liveness::new(LEASE, 16);
    assert_eq!(
        decide("a", Some(3), Some(&owner("a", 3)), &l, STAGGER, s(0)),
        Decision::Serve
    );
    assert_eq!(
        decide("a", Some(3), Some(&owner("b", 4)), &l, STAGGER, s(0)),
        Decision::Follow {
            url: "http://b".into()
        }
    );
}

#[test]
fn others_follow_a_live_owner_and_claim_in_name_order_once_it_is_dead() {
    let mut l = Liveness::new(LEASE, 16);
    l.observe(&[beat("a", 1), beat("b", 1), beat("c", 1)], s(0));
    let a = owner("a", 1);
    let follow = Decision::Follow {
        url: "http://a".into(),
    };
    assert_eq!(decide("b", None, Some(&a), &l, STAGGER, s(1)), follow);
    // a stops renewing; b and c keep theirs.
    for t in 1..=5 {
        l.observe(&[beat("a", 1), beat("b", 1 + t), beat("c", 1 + t)], s(t));
    }
    assert_eq!(decide("b", None, Some(&a), &l, STAGGER, s(4)), follow);
    // Dead at 5: b (rank 0) claims at once, c (rank 1) a stagger later.
    assert_eq!(
        decide("b", None, Some(&a), &l, STAGGER, s(5)),
        Decision::Claim
    );
    assert_eq!(decide("c", None, Some(&a), &l, STAGGER, s(5)), follow);
    assert_eq!(decide("c", None, Some(&a), &l, STAGGER, s(6)), follow);
    l.observe(&[beat("a", 1), beat("b", 7), beat("c", 7)], s(7));
    assert_eq!(
        decide("c", None, Some(&a), &l, STAGGER, s(7)),
        Decision::Claim
    );
    // Once b's claim is seen, c follows b.
    assert_eq!(
        decide("c", None, Some(&owner("b", 2)), &l, STAGGER, s(7)),
        Decision::Follow {
            url: "http://b".into()
        }
    );
}

#[test]
fn a_dead_rank_zero_does_not_hold_the_next_one_back() {
    let mut l = Liveness::new(LEASE, 16);
    l.observe(&[beat("a", 1), beat("b", 1), beat("c", 1)], s(0));
    // a and b both stop; c alone renews.
    l.observe(&[beat("a", 1), beat("b", 1), beat("c", 9)], s(9));
    assert_eq!(
        decide("c", None, Some(&owner("a", 1)), &l, STAGGER, s(9)),
        Decision::Claim
    );
}

#[test]
fn a_heartbeat_reads_back_and_junk_does_not() {
    let b = beat("a", 7);
    assert_eq!(Heartbeat::decode(&b.encode()), Some(b));
    assert_eq!(Heartbeat::decode(b"not json"), None);
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
        decide("a", Some(3), None, &l, STAGGER, s(0)),
        Decision::Serve
    );
    assert_eq!(
        decide("a", Some(3), Some(&owner("b", 2)), &l, STAGGER, s(0)),
        Decision::Serve
    );
}
