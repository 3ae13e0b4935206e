//! The tenure rules, checked by a model: origins that each write one log
//! holding the frames of every partition they serve, up to a window of
//! puts in flight; that hand partitions off (a release), take them over
//! (a walk, a fence at the first missing number, a create-only tenure),
//! publish partition checkpoints and delete their own log below them,
//! crash and start again with a fresh log; puts of dead or fenced writers
//! still landing later; and a collector deleting any log, live or dead,
//! as `collect_dead` does for a dead origin's. Every step is interleaved at random against
//! create-only maps (what a conditional put gives). At the end every
//! partition's history, read from its newest checkpoint, is the history
//! of every frame that ever landed read through every tenure; it holds
//! every acknowledged frame exactly once, each owner's in the order it
//! acknowledged them, after exactly what that owner replayed; and each
//! rule, left out, lets the model find a schedule that breaks one of
//! these.

use super::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod collector;
mod reading;
use collector::collect_step;
use reading::{below, check, found, frames_of, walk_all};

const PARTITIONS: usize = 3;
const ORIGINS: usize = 3;
/// Puts a writer keeps in flight.
const IN_FLIGHT: usize = 3;

/// An object of a log: a writer's put (frames, maybe a release) or a
/// fence (no frames, another epoch).
#[derive(Clone, Debug)]
struct Obj {
    epoch: u64,
    /// Unique per put: tells a writer its own put from another's.
    put: u64,
    frames: Vec<(usize, u64)>,
    releases: Option<usize>,
}

type Log = BTreeMap<u64, Obj>;

/// Where a checkpoint stands: a tenure, and the number in it below which
/// it holds every frame.
type At = (usize, u64);

/// The rules, each of which can be left out to show what it is for.
#[derive(Clone, Copy)]
struct Rules {
    /// Rule 2: no frame of a partition after its release is put.
    quiet_after_release: bool,
    /// Rule 3: an open tenure is fenced before it is taken.
    fence_open: bool,
    /// Rule 4: tenures are create-only.
    create_only: bool,
    /// Rule 5: a new owner looks at the newest checkpoint again before it
    /// makes its tenure.
    claim_look: bool,
    /// A log is deleted only below what every partition's newest
    /// checkpoint holds (else below what its writer acknowledged).
    delete_below_checkpoints: bool,
    /// The newest checkpoint is the highest by position (else the last
    /// published).
    newest_by_position: bool,
    /// The collector leaves fences (else it deletes them too).
    collect_keeps_fences: bool,
    /// The collector fences the log where its listing ended before it
    /// looks at the tenures (else a claim in progress, whose first number
    /// was taken before the listing, makes its tenure after the look).
    collect_fences_first: bool,
    /// A writer's own deletion counts a claim in progress from the number
    /// it took (else only the tenures made).
    delete_counts_claims: bool,
}

const ALL_RULES: Rules = Rules {
    quiet_after_release: true,
    fence_open: true,
    create_only: true,
    claim_look: true,
    delete_below_checkpoints: true,
    newest_by_position: true,
    collect_keeps_fences: true,
    collect_fences_first: true,
    delete_counts_claims: true,
};

#[derive(Default)]
struct World {
    rules: Option<Rules>,
    logs: Vec<Log>,
    /// Every object as it first landed, never deleted: what the checker
    /// reads the whole history from.
    archive: Vec<Log>,
    /// Per log, the newest epoch taken (its writer's is 1; fences take
    /// the next: create-only epoch objects make each unique).
    epochs: Vec<u64>,
    tenures: Vec<Vec<Tenure>>,
    /// Per partition, checkpoints by position (create-only), each with
    /// the frames before it and the order it was published in.
    checkpoints: Vec<BTreeMap<At, (Vec<u64>, usize)>>,
    /// Puts of writers that died or stopped, landing some time later.
    stray: Vec<(usize, u64, Obj)>,
    /// Every frame ever put, per partition.
    sent: Vec<BTreeSet<u64>>,
    tags: u64,
    puts: u64,
    /// Per tenure made: partition, tenure number, what its maker replayed.
    made: Vec<(usize, usize, Vec<u64>)>,
    /// Per (partition, tenure number): the frames its writer acknowledged,
    /// in order.
    acked: BTreeMap<(usize, usize), Vec<u64>>,
    /// Hand-offs acknowledged, fences landed, numbers deleted: every path
    /// is taken.
    released: usize,
    fenced: usize,
    deleted: usize,
    /// Numbers the collector deleted.
    collected: usize,
}

impl World {
    fn rules(&self) -> Rules {
        self.rules.expect("set")
    }

    /// A create-only put: whether it landed (the number was free).
    fn land(&mut self, log: usize, n: u64, obj: Obj) -> bool {
        let put = obj.put;
        self.archive[log].entry(n).or_insert_with(|| obj.clone());
        self.logs[log].entry(n).or_insert(obj).put == put
    }

    /// A fence at number `at` of `log`, at a new epoch of it: whether it
    /// landed (the number was free).
    fn fence(&mut self, log: usize, at: u64) -> bool {
        self.epochs[log] += 1;
        self.puts += 1;
        let fence = Obj {
            epoch: self.epochs[log],
            put: self.puts,
            frames: Vec::new(),
            releases: None,
        };
        self.land(log, at, fence)
    }

    /// The newest checkpoint of `p`: where it stands and what it holds.
    fn newest(&self, p: usize) -> Option<(At, Vec<u64>)> {
        let all = &self.checkpoints[p];
        let newest = if self.rules().newest_by_position {
            all.iter().next_back()
        } else {
            all.iter().max_by_key(|(_, (_, order))| *order)
        };
        newest.map(|(at, (held, _))| (*at, held.clone()))
    }
}

struct Put {
    number: u64,
    obj: Obj,
    /// The tenure each frame was put under.
    tenures: Vec<usize>,
    landed: Option<bool>,
}

struct Owned {
    tenure: usize,
    releasing: bool,
    /// What the tenure's maker replayed, then every frame acknowledged
    /// since: the partition up to the writer's acknowledged number.
    held: Vec<u64>,
}

enum Claim {
    /// Replayed from the newest checkpoint through the closed tenures;
    /// walks the newest.
    Walking {
        p: usize,
        base: Option<At>,
        k: usize,
        walk: Walk,
        replayed: Vec<u64>,
    },
    /// The walk ended (or there was no tenure): makes the next.
    Making {
        p: usize,
        base: Option<At>,
        k: usize,
        end: Option<u64>,
        replayed: Vec<u64>,
    },
}

struct Writer {
    log: usize,
    next: u64,
    in_flight: VecDeque<Put>,
    owned: BTreeMap<usize, Owned>,
    claim: Option<Claim>,
    /// The first number of the tenure its claim in progress will make:
    /// taken when the claim starts (the shell's `Reserve`), so the writer
    /// puts other partitions' objects from there while the claim reads.
    claim_from: u64,
    /// Deleting its log below this, a number a step.
    deleting: Option<u64>,
}

const EPOCH: u64 = 1;

impl Writer {
    fn start(world: &mut World) -> Writer {
        world.logs.push(Log::new());
        world.archive.push(Log::new());
        world.epochs.push(EPOCH);
        Writer {
            log: world.logs.len() - 1,
            next: 0,
            in_flight: VecDeque::new(),
            owned: BTreeMap::new(),
            claim: None,
            claim_from: 0,
            deleting: None,
        }
    }

    /// Below this number every put of the writer is acknowledged.
    fn acknowledged(&self) -> u64 {
        self.in_flight.front().map_or(self.next, |put| put.number)
    }

    /// The writer is gone (crashed, or stopped by a fence): what it has in
    /// flight may still land.
    fn die(self, world: &mut World) {
        for put in self.in_flight {
            if put.landed.is_none() {
                world.stray.push((self.log, put.number, put.obj));
            }
        }
    }
}

/// One step of a claim of partition `p` by `w`.
fn claim_step(w: &mut Writer, world: &mut World, sub: usize) {
    let rules = world.rules();
    let claim = match w.claim.take() {
        None => {
            let p = sub % PARTITIONS;
            if w.owned.contains_key(&p) {
                return;
            }
            w.claim_from = w.next;
            // From the newest checkpoint, the closed tenures (they cannot
            // change, but their numbers can be deleted under this read).
            let start = world.newest(p);
            let base = start.as_ref().map(|(at, _)| *at);
            let made = world.tenures[p].len();
            if made == 0 {
                Claim::Making {
                    p,
                    base,
                    k: 0,
                    end: None,
                    replayed: Vec::new(),
                }
            } else {
                let k = made - 1;
                let ((from_tenure, at), mut replayed) = start.unwrap_or(((0, 0), Vec::new()));
                for j in from_tenure..k {
                    let tenure = world.tenures[p][j];
                    let mut walk = if j == from_tenure {
                        Walk::resume(&tenure, at.max(tenure.from), below(world, p, j))
                    } else {
                        Walk::new(&tenure, below(world, p, j))
                    };
                    let (frames, end) = walk_all(&world.logs[tenure.log as usize], p, &mut walk);
                    if end.is_ok() {
                        return; // deleted under it: start over
                    }
                    replayed.extend(frames);
                }
                let tenure = world.tenures[p][k];
                let walk = if from_tenure == k {
                    Walk::resume(&tenure, at.max(tenure.from), None)
                } else {
                    Walk::new(&tenure, None)
                };
                Claim::Walking {
                    p,
                    base,
                    k,
                    walk,
                    replayed,
                }
            }
        }
        Some(Claim::Walking {
            p,
            base,
            k,
            mut walk,
            mut replayed,
        }) => {
            let log = world.tenures[p][k].log as usize;
            let n = walk.next().expect("an unbounded walk");
            match walk.read(found(&world.logs[log], n, p)) {
                Step::Count => {
                    replayed.extend(frames_of(&world.logs[log][&n], p));
                    Claim::Walking {
                        p,
                        base,
                        k,
                        walk,
                        replayed,
                    }
                }
                Step::Ended { at } => Claim::Making {
                    p,
                    base,
                    k: k + 1,
                    end: Some(at),
                    replayed,
                },
                Step::Open { at } if !rules.fence_open => Claim::Making {
                    p,
                    base,
                    k: k + 1,
                    end: Some(at),
                    replayed,
                },
                // Wait for the writer (a hand-off in progress)...
                Step::Open { .. } if sub.is_multiple_of(3) => Claim::Walking {
                    p,
                    base,
                    k,
                    walk,
                    replayed,
                },
                // ...or fence: the next step reads what is there.
                Step::Open { at } => {
                    if world.fence(log, at) {
                        world.fenced += 1;
                    }
                    Claim::Walking {
                        p,
                        base,
                        k,
                        walk,
                        replayed,
                    }
                }
            }
        }
        Some(Claim::Making {
            p,
            base,
            k,
            end,
            replayed,
        }) => {
            if rules.claim_look && world.newest(p).map(|(at, _)| at) != base {
                return; // start over
            }
            let tenures = &mut world.tenures[p];
            if tenures.len() != k {
                if !rules.create_only && tenures.len() > k {
                    tenures.truncate(k);
                } else {
                    return;
                }
            }
            tenures.push(Tenure {
                log: w.log as u64,
                epoch: EPOCH,
                from: w.claim_from,
                previous_end: end,
            });
            world.made.push((p, k, replayed.clone()));
            w.owned.insert(
                p,
                Owned {
                    tenure: k,
                    releasing: false,
                    held: replayed,
                },
            );
            return;
        }
    };
    w.claim = Some(claim);
}

/// Publishes a checkpoint of a partition `w` serves, at what it
/// acknowledged.
fn checkpoint_step(w: &Writer, world: &mut World, sub: usize) {
    let served: Vec<usize> = w.owned.keys().copied().collect();
    let Some(&p) = served.get(sub % served.len().max(1)) else {
        return;
    };
    let owned = &w.owned[&p];
    let at = (owned.tenure, w.acknowledged());
    let order = world.checkpoints[p].len();
    world.checkpoints[p]
        .entry(at)
        .or_insert((owned.held.clone(), order));
}

/// Deletes one number of `w`'s log below what no reader needs: looks at
/// the tenures and checkpoints first, then deletes a number a step.
fn delete_step(w: &mut Writer, world: &mut World, sub: usize) {
    if let Some(below) = w.deleting {
        let present: Vec<u64> = world.logs[w.log].range(..below).map(|(n, _)| *n).collect();
        match present.get(sub % present.len().max(1)) {
            Some(n) => {
                world.logs[w.log].remove(n);
                world.deleted += 1;
            }
            None => w.deleting = None,
        }
        return;
    }
    let mut in_log = Vec::new();
    if w.claim.is_some() && world.rules().delete_counts_claims {
        in_log.push(InLog {
            tenure: u64::MAX,
            from: w.claim_from,
            newest: None,
        });
    }
    if world.rules().delete_below_checkpoints {
        for p in 0..PARTITIONS {
            let newest = world.newest(p).map(|((c, n), _)| Stand {
                tenure: c as u64,
                number: n,
            });
            for (j, tenure) in world.tenures[p].iter().enumerate() {
                if tenure.log as usize == w.log {
                    in_log.push(InLog {
                        tenure: j as u64,
                        from: tenure.from,
                        newest,
                    });
                }
            }
        }
    }
    w.deleting = Some(deletion_bound(w.acknowledged(), in_log));
}

/// One step of a serving writer; false when it stopped (fenced).
fn serve_step(w: &mut Writer, world: &mut World, sub: usize) -> bool {
    let rules = world.rules();
    match sub % 6 {
        // Start a put: a frame for each partition served, maybe a release.
        0 if w.in_flight.len() < IN_FLIGHT => {
            let mut frames = Vec::new();
            let mut tenures = Vec::new();
            for (&p, owned) in &w.owned {
                if !owned.releasing || !rules.quiet_after_release {
                    world.tags += 1;
                    frames.push((p, world.tags));
                    tenures.push(owned.tenure);
                    world.sent[p].insert(world.tags);
                }
            }
            let in_flight = |p: usize| {
                w.in_flight.iter().any(|put| {
                    put.obj.frames.iter().any(|f| f.0 == p) || put.obj.releases == Some(p)
                })
            };
            // A release once every put holding the partition's frames is
            // acknowledged (none in flight).
            let releases = w
                .owned
                .iter()
                .find(|(&p, o)| {
                    o.releasing
                        && (!rules.quiet_after_release
                            || (!in_flight(p) && !frames.iter().any(|f| f.0 == p)))
                })
                .map(|(&p, _)| p);
            if frames.is_empty() && releases.is_none() {
                return true;
            }
            world.puts += 1;
            let obj = Obj {
                epoch: EPOCH,
                put: world.puts,
                frames,
                releases,
            };
            w.in_flight.push_back(Put {
                number: w.next,
                obj,
                tenures,
                landed: None,
            });
            w.next += 1;
        }
        // A put reaches the bucket.
        1 => {
            let waiting: Vec<usize> = (0..w.in_flight.len())
                .filter(|&i| w.in_flight[i].landed.is_none())
                .collect();
            if let Some(&i) = waiting.get(sub / 6 % waiting.len().max(1)) {
                let (n, obj) = (w.in_flight[i].number, w.in_flight[i].obj.clone());
                w.in_flight[i].landed = Some(world.land(w.log, n, obj));
            }
        }
        // Acknowledge in order; a put that found its number taken stops
        // the whole log.
        2 => {
            while let Some(Put {
                landed: Some(true), ..
            }) = w.in_flight.front()
            {
                let put = w.in_flight.pop_front().expect("front");
                for (&(p, tag), &tenure) in put.obj.frames.iter().zip(&put.tenures) {
                    world.acked.entry((p, tenure)).or_default().push(tag);
                    if let Some(owned) = w.owned.get_mut(&p) {
                        owned.held.push(tag);
                    }
                }
                if let Some(p) = put.obj.releases {
                    w.owned.remove(&p);
                    world.released += 1;
                }
            }
            if matches!(
                w.in_flight.front(),
                Some(Put {
                    landed: Some(false),
                    ..
                })
            ) {
                return false;
            }
        }
        3 => checkpoint_step(w, world, sub / 6),
        4 => delete_step(w, world, sub / 6),
        // Begin handing a partition off.
        _ => {
            let served: Vec<usize> = w.owned.keys().copied().collect();
            if let Some(&p) = served.get(sub / 6 % served.len().max(1)) {
                w.owned.get_mut(&p).expect("served").releasing = true;
            }
        }
    }
    true
}

/// What one schedule made: frames read, hand-offs, fences, deletions.
#[derive(Default)]
struct Made {
    read: usize,
    released: usize,
    fenced: usize,
    deleted: usize,
    /// Numbers the collector deleted.
    collected: usize,
}

fn run(seed: u64, len: usize, rules: Rules) -> Made {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut world = World {
        rules: Some(rules),
        tenures: vec![Vec::new(); PARTITIONS],
        checkpoints: vec![BTreeMap::new(); PARTITIONS],
        sent: vec![BTreeSet::new(); PARTITIONS],
        ..World::default()
    };
    let mut origins: Vec<Option<Writer>> = (0..ORIGINS).map(|_| None).collect();
    let mut collector = None;
    for _ in 0..len {
        let actor = rng.random_range(0..=ORIGINS + 1);
        let sub: usize = rng.random_range(0..1 << 20);
        if actor == ORIGINS + 1 {
            collect_step(&mut collector, &mut world, sub);
            continue;
        }
        if actor == ORIGINS {
            if !world.stray.is_empty() {
                let (log, n, obj) = world.stray.remove(sub % world.stray.len());
                world.land(log, n, obj);
            }
            continue;
        }
        let Some(w) = origins[actor].as_mut() else {
            origins[actor] = Some(Writer::start(&mut world));
            continue;
        };
        let alive = match sub % 64 {
            0 => false, // crash
            1..=20 => {
                claim_step(w, &mut world, sub / 64);
                true
            }
            _ => serve_step(w, &mut world, sub / 64),
        };
        if !alive {
            origins[actor].take().expect("alive").die(&mut world);
        }
    }
    for w in origins.into_iter().flatten() {
        w.die(&mut world);
    }
    for (log, n, obj) in std::mem::take(&mut world.stray) {
        world.land(log, n, obj);
    }
    Made {
        read: check(&world),
        released: world.released,
        fenced: world.fenced,
        deleted: world.deleted,
        collected: world.collected,
    }
}

#[test]
fn a_walk_counts_its_epoch_and_ends_at_a_release_or_a_fence() {
    let t = Tenure {
        log: 0,
        epoch: 1,
        from: 4,
        previous_end: None,
    };
    let mut walk = Walk::new(&t, None);
    assert_eq!(walk.next(), Ok(4));
    let own = Found::Object {
        epoch: 1,
        releases: false,
    };
    assert_eq!(walk.read(own), Step::Count);
    assert_eq!(walk.read(Found::Missing), Step::Open { at: 5 });
    assert_eq!(
        walk.read(Found::Object {
            epoch: 2,
            releases: false
        }),
        Step::Ended { at: 5 }
    );
    assert_eq!(
        walk.read(Found::Object {
            epoch: 1,
            releases: true
        }),
        Step::Ended { at: 5 }
    );
    assert_eq!(Walk::new(&t, Some(4)).next(), Err(4));
    assert_eq!(Walk::resume(&t, 9, None).next(), Ok(9));
}

const SCHEDULES: u64 = 3_000;
const STEPS: usize = 800;

#[test]
fn every_acknowledged_frame_is_read_once_and_in_order() {
    let mut all = Made::default();
    for seed in 0..SCHEDULES {
        let made = run(seed, STEPS, ALL_RULES);
        all.read += made.read;
        all.released += made.released;
        all.fenced += made.fenced;
        all.deleted += made.deleted;
        all.collected += made.collected;
    }
    // The schedules make histories, hand-offs, takeovers and deletions,
    // not only empty chains.
    eprintln!(
        "{} frames read, {} hand-offs, {} fences, {} numbers deleted, {} collected",
        all.read, all.released, all.fenced, all.deleted, all.collected
    );
    assert!(all.read > 10_000, "only {} frames read", all.read);
    assert!(all.released > 1_000, "only {} hand-offs", all.released);
    assert!(all.fenced > 1_000, "only {} fences", all.fenced);
    assert!(all.deleted > 1_000, "only {} deleted", all.deleted);
    assert!(all.collected > 1_000, "only {} collected", all.collected);
}

/// Each rule left out: some schedule loses or reorders what was
/// acknowledged, or readers disagree.
#[test]
fn each_rule_is_needed() {
    let without = [
        (
            "quiet after a release",
            Rules {
                quiet_after_release: false,
                ..ALL_RULES
            },
        ),
        (
            "fence an open tenure",
            Rules {
                fence_open: false,
                ..ALL_RULES
            },
        ),
        (
            "create-only tenures",
            Rules {
                create_only: false,
                ..ALL_RULES
            },
        ),
        (
            "look at the checkpoints before making a tenure",
            Rules {
                claim_look: false,
                ..ALL_RULES
            },
        ),
        (
            "delete below the checkpoints",
            Rules {
                delete_below_checkpoints: false,
                ..ALL_RULES
            },
        ),
        (
            "the newest checkpoint by position",
            Rules {
                newest_by_position: false,
                ..ALL_RULES
            },
        ),
        (
            "the collector keeps fences",
            Rules {
                collect_keeps_fences: false,
                ..ALL_RULES
            },
        ),
        (
            "the collector fences first",
            Rules {
                collect_fences_first: false,
                ..ALL_RULES
            },
        ),
        (
            "a writer's deletion counts its claim in progress",
            Rules {
                delete_counts_claims: false,
                ..ALL_RULES
            },
        ),
    ];
    for (rule, rules) in without {
        let found = (0..SCHEDULES)
            .any(|seed| std::panic::catch_unwind(|| run(seed, STEPS, rules)).is_err());
        assert!(found, "without {rule:?}: no schedule fails");
    }
}
