//! Schedules of the fencing model written out step by step: the ones the
//! two last looks (a claim's, a build's) are for, which a random search
//! rarely reaches.

use super::*;

/// The schedule the claim's last look is for, step by step (random
/// schedules rarely reach it): owner X (epoch 1) acknowledges two commits
/// and builds a checkpoint at 10; B (2) and A (3) claim from the start
/// before it is published. A lists before X deletes number 8, B after, so
/// B fences 8. A reads B's fence there, and then drops X's commit at 9 by
/// the epoch rule. Only a look at the checkpoints after the replay tells A
/// that what it read is not the partition.
fn claim_over_a_deleted_number(rules: Rules) {
    let mut w = World::default();
    let mut all = [owner(rules), owner(rules), owner(rules)];
    let [x, b, a] = &mut all;
    w.serving_with_a_build(x);
    w.claim(b, 2);
    w.claim(a, 3);
    // X publishes, A fences 10..=17 and reads 0..=7, X deletes 8.
    w.build(x, 1, 0);
    assert_eq!(w.checkpoints.keys().collect::<Vec<_>>(), [&10]);
    w.claim(a, 16);
    w.build(x, 1, 8);
    assert!(!w.bucket.contains_key(&8));
    // B lists, finds 8 free and fences it (and stalls).
    w.claim(b, 2);
    assert_eq!(w.bucket[&8].0.epoch, 2);
    // A reads 8..=17, looks, serves (or starts over), and commits.
    w.claim(a, 11);
    for _ in 0..40 {
        if matches!(a.phase, Phase::Serving { .. }) {
            break;
        }
        w.claim(a, 1);
    }
    assert!(matches!(a.phase, Phase::Serving { .. }));
    w.commit(a);
    assert_eq!(a.acked.len(), 1);
    w.check(&all);
}

#[test]
fn a_claim_over_a_deleted_number_starts_over() {
    needs(
        claim_over_a_deleted_number,
        Rules {
            claim_look: false,
            ..ALL_RULES
        },
    );
}

/// The schedule the build's last look is for: Y (epoch 1) acknowledges
/// two commits and builds a checkpoint at 10, not yet published; Z (2)
/// looks at the checkpoints and stalls; X (3) claims (reading everything
/// before any delete), commits, and starts a build from the start. Y
/// publishes and deletes 8; Z lists, finds 8 free and fences it; X's build
/// reads Z's fence at 8 and then drops Y's commit at 9. Its look at the
/// next epoch finds none (X is the newest); only a look at the
/// checkpoints tells it its base is no longer the newest.
fn build_over_a_deleted_number(rules: Rules) {
    let mut w = World::default();
    let mut all = [owner(rules), owner(rules), owner(rules)];
    let [y, z, x] = &mut all;
    w.serving_with_a_build(y);
    w.claim(z, 2);
    w.claim(x, 30);
    assert!(matches!(x.phase, Phase::Serving { next: 18, .. }));
    w.commit(x);
    assert_eq!(x.acked, [3]);
    // X's build: a start (up to 19) and reads of 0..=7.
    w.build(x, 9, 0);
    w.build(y, 1, 0);
    w.build(y, 1, 8);
    assert!(!w.bucket.contains_key(&8));
    w.claim(z, 2);
    assert_eq!(w.bucket[&8].0.epoch, 2);
    // X reads 8..=18, looks, and publishes (or gives up).
    w.build(x, 13, 0);
    w.check(&all);
}

#[test]
fn a_build_over_a_deleted_number_gives_up() {
    needs(
        build_over_a_deleted_number,
        Rules {
            build_look: false,
            ..ALL_RULES
        },
    );
}

fn owner(rules: Rules) -> Owner {
    Owner {
        rules,
        epoch: 0,
        phase: Phase::Idle,
        build: Build::Idle,
        replayed: Vec::new(),
        acked: Vec::new(),
    }
}

/// The model's shared state, for schedules written out step by step.
#[derive(Default)]
struct World {
    bucket: Bucket,
    checkpoints: Checkpoints,
    epochs: u64,
    tags: u64,
    stray: Vec<(u64, WalHeader, u64)>,
}

impl World {
    fn claim(&mut self, o: &mut Owner, steps: usize) {
        for _ in 0..steps {
            claim_step(o, &mut self.bucket, &self.checkpoints, &mut self.epochs);
        }
    }

    /// One commit, start to acknowledgement.
    fn commit(&mut self, o: &mut Owner) {
        for sub in 0..4 {
            serve_step(
                o,
                &mut self.bucket,
                &self.checkpoints,
                self.epochs,
                sub,
                &mut self.tags,
                &mut self.stray,
            );
        }
    }

    fn build(&mut self, o: &mut Owner, steps: usize, sub: usize) {
        for _ in 0..steps {
            build_step(o, &mut self.bucket, &mut self.checkpoints, self.epochs, sub);
        }
    }

    /// `o` claims the empty partition (epoch, look, list, 8 fences, 8
    /// reads, the last look), acknowledges two commits (at 8 and 9), and
    /// builds a checkpoint up to 10 (a start, ten reads, its looks), not
    /// yet published.
    fn serving_with_a_build(&mut self, o: &mut Owner) {
        self.claim(o, 20);
        assert!(matches!(o.phase, Phase::Serving { next: 8, .. }));
        self.commit(o);
        self.commit(o);
        assert_eq!(o.acked, [self.tags - 1, self.tags]);
        self.build(o, 12, 0);
        assert!(matches!(o.build, Build::Publishing { upto: 10, .. }));
    }

    fn check(self, all: &[Owner]) {
        check(self.bucket, &self.checkpoints, self.stray, all, &[]);
    }
}

/// Runs `scenario` with every rule, then without one: it must lose an
/// acknowledged commit then (from an owner, or from a checkpoint, which
/// holds only acknowledged ones).
fn needs(scenario: fn(Rules), without: Rules) {
    scenario(ALL_RULES);
    let failed = std::panic::catch_unwind(|| scenario(without));
    let message = failed
        .expect_err("the scenario loses nothing without the rule")
        .downcast::<String>()
        .map(|m| *m)
        .unwrap_or_default();
    assert!(
        message.contains("acknowledged commits lost") || message.contains("not a prefix"),
        "{message}"
    );
}
