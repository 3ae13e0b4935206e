//! The tenure rules, checked by a model: origins that each write one log
//! holding the frames of every partition they serve, up to a window of
//! puts in flight; that hand partitions off (a release), take them over
//! (a walk, a fence at the first missing number, a create-only tenure),
//! crash and start again with a fresh log; puts of dead or fenced writers
//! still landing later. Every step is interleaved at random against
//! create-only maps (what a conditional put gives). At the end every
//! partition's history, read through its chain of tenures, holds every
//! acknowledged frame exactly once, each owner's in the order it
//! acknowledged them, after exactly what that owner replayed; and each
//! rule, left out, lets the model find a schedule that loses an
//! acknowledged frame.

use super::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

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

/// The rules, each of which can be left out to show what it is for.
#[derive(Clone, Copy)]
struct Rules {
    /// Rule 2: no frame of a partition after its release is put.
    quiet_after_release: bool,
    /// Rule 3: an open tenure is fenced before it is taken.
    fence_open: bool,
    /// Rule 4: tenures are create-only.
    create_only: bool,
}

const ALL_RULES: Rules = Rules {
    quiet_after_release: true,
    fence_open: true,
    create_only: true,
};

#[derive(Default)]
struct World {
    logs: Vec<Log>,
    /// Per log, the newest epoch taken (its writer's is 1; fences take
    /// the next: create-only epoch objects make each unique).
    epochs: Vec<u64>,
    tenures: Vec<Vec<Tenure>>,
    /// Puts of writers that died or stopped, landing some time later.
    stray: Vec<(usize, u64, Obj)>,
    /// Every frame ever put, per partition.
    sent: Vec<BTreeSet<u64>>,
    tags: u64,
    puts: u64,
    /// Per tenure made: partition, tenure number, what its maker replayed.
    made: Vec<(usize, usize, Vec<u64>)>,
    /// Hand-offs acknowledged and fences landed: both paths are taken.
    released: usize,
    fenced: usize,
    /// Per (partition, tenure number): the frames its writer acknowledged,
    /// in order.
    acked: BTreeMap<(usize, usize), Vec<u64>>,
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
}

enum Claim {
    /// Replayed the closed tenures; walks the newest.
    Walking {
        p: usize,
        k: usize,
        walk: Walk,
        replayed: Vec<u64>,
    },
    /// The walk ended (or there was no tenure): makes the next.
    Making {
        p: usize,
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
}

const EPOCH: u64 = 1;

impl Writer {
    fn start(world: &mut World) -> Writer {
        world.logs.push(Log::new());
        world.epochs.push(EPOCH);
        Writer {
            log: world.logs.len() - 1,
            next: 0,
            in_flight: VecDeque::new(),
            owned: BTreeMap::new(),
            claim: None,
        }
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

/// Reads what tenure `k` of `p` holds, walking it to its end or to a
/// missing number: the frames counted and the step it stopped at.
fn walk_all(world: &World, p: usize, walk: &mut Walk, log: usize) -> (Vec<u64>, Result<Step, u64>) {
    let mut frames = Vec::new();
    loop {
        let n = match walk.next() {
            Ok(n) => n,
            Err(end) => return (frames, Err(end)),
        };
        let step = walk.read(found(&world.logs[log], n, p));
        if step != Step::Count {
            return (frames, Ok(step));
        }
        frames.extend(frames_of(&world.logs[log][&n], p));
    }
}

fn found(log: &Log, n: u64, p: usize) -> Found {
    match log.get(&n) {
        None => Found::Missing,
        Some(o) => Found::Object {
            epoch: o.epoch,
            releases: o.releases == Some(p),
        },
    }
}

fn frames_of(o: &Obj, p: usize) -> impl Iterator<Item = u64> + '_ {
    o.frames.iter().filter(move |f| f.0 == p).map(|f| f.1)
}

/// The end tenure `j` of `p` has, if a successor names it.
fn below(world: &World, p: usize, j: usize) -> Option<u64> {
    world.tenures[p].get(j + 1).map(|t| {
        t.previous_end
            .expect("a later tenure names its predecessor's end")
    })
}

/// One step of a claim of partition `p` by `w`.
fn claim_step(w: &mut Writer, world: &mut World, rules: Rules, sub: usize) {
    let claim = match w.claim.take() {
        None => {
            let p = sub % PARTITIONS;
            if w.owned.contains_key(&p) {
                return;
            }
            // The closed tenures cannot change: one read of each.
            let made = world.tenures[p].len();
            let mut replayed = Vec::new();
            for j in 0..made.saturating_sub(1) {
                let tenure = world.tenures[p][j];
                let mut walk = Walk::new(&tenure, below(world, p, j));
                let (frames, end) = walk_all(world, p, &mut walk, tenure.log as usize);
                assert!(end.is_err(), "a closed tenure reads to its end");
                replayed.extend(frames);
            }
            match made.checked_sub(1) {
                None => Claim::Making {
                    p,
                    k: 0,
                    end: None,
                    replayed,
                },
                Some(k) => Claim::Walking {
                    p,
                    k,
                    walk: Walk::new(&world.tenures[p][k], below(world, p, k)),
                    replayed,
                },
            }
        }
        Some(Claim::Walking {
            p,
            k,
            mut walk,
            mut replayed,
        }) => {
            let log = world.tenures[p][k].log as usize;
            match walk.next() {
                // Someone else made the next tenure meanwhile: lost.
                Err(_) => return,
                Ok(n) => match walk.read(found(&world.logs[log], n, p)) {
                    Step::Count => {
                        replayed.extend(frames_of(&world.logs[log][&n], p));
                        Claim::Walking {
                            p,
                            k,
                            walk,
                            replayed,
                        }
                    }
                    Step::Ended { at } => Claim::Making {
                        p,
                        k: k + 1,
                        end: Some(at),
                        replayed,
                    },
                    Step::Open { at } if !rules.fence_open => Claim::Making {
                        p,
                        k: k + 1,
                        end: Some(at),
                        replayed,
                    },
                    // Wait for the writer (a hand-off in progress)...
                    Step::Open { .. } if sub.is_multiple_of(3) => Claim::Walking {
                        p,
                        k,
                        walk,
                        replayed,
                    },
                    // ...or fence: the next step reads what is there.
                    Step::Open { at } => {
                        world.epochs[log] += 1;
                        world.puts += 1;
                        let fence = Obj {
                            epoch: world.epochs[log],
                            put: world.puts,
                            frames: Vec::new(),
                            releases: None,
                        };
                        let put = fence.put;
                        if world.logs[log].entry(at).or_insert(fence).put == put {
                            world.fenced += 1;
                        }
                        Claim::Walking {
                            p,
                            k,
                            walk,
                            replayed,
                        }
                    }
                },
            }
        }
        Some(Claim::Making {
            p,
            k,
            end,
            replayed,
        }) => {
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
                from: w.next,
                previous_end: end,
            });
            world.made.push((p, k, replayed));
            w.owned.insert(
                p,
                Owned {
                    tenure: k,
                    releasing: false,
                },
            );
            return;
        }
    };
    w.claim = Some(claim);
}

/// One step of a serving writer; false when it stopped (fenced).
fn serve_step(w: &mut Writer, world: &mut World, rules: Rules, sub: usize) -> bool {
    match sub % 4 {
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
            if let Some(&i) = waiting.get(sub / 4 % waiting.len().max(1)) {
                let put = &mut w.in_flight[i];
                let there = world.logs[w.log]
                    .entry(put.number)
                    .or_insert_with(|| put.obj.clone());
                put.landed = Some(there.put == put.obj.put);
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
        // Begin handing a partition off.
        _ => {
            let served: Vec<usize> = w.owned.keys().copied().collect();
            if let Some(&p) = served.get(sub / 4 % served.len().max(1)) {
                w.owned.get_mut(&p).expect("served").releasing = true;
            }
        }
    }
    true
}

/// What one schedule made: frames read, hand-offs, fences.
#[derive(Default)]
struct Made {
    read: usize,
    released: usize,
    fenced: usize,
}

fn run(seed: u64, len: usize, rules: Rules) -> Made {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut world = World {
        tenures: vec![Vec::new(); PARTITIONS],
        sent: vec![BTreeSet::new(); PARTITIONS],
        ..World::default()
    };
    let mut origins: Vec<Option<Writer>> = (0..ORIGINS).map(|_| None).collect();
    for _ in 0..len {
        let actor = rng.random_range(0..=ORIGINS);
        let sub: usize = rng.random_range(0..1 << 20);
        if actor == ORIGINS {
            if !world.stray.is_empty() {
                let (log, n, obj) = world.stray.remove(sub % world.stray.len());
                world.logs[log].entry(n).or_insert(obj);
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
                claim_step(w, &mut world, rules, sub / 64);
                true
            }
            _ => serve_step(w, &mut world, rules, sub / 64),
        };
        if !alive {
            origins[actor].take().expect("alive").die(&mut world);
        }
    }
    for w in origins.into_iter().flatten() {
        w.die(&mut world);
    }
    let (released, fenced) = (world.released, world.fenced);
    Made {
        read: check(world),
        released,
        fenced,
    }
}

/// Lands every stray put, reads every partition through its tenures, and
/// checks it against what was acknowledged; returns the frames read.
fn check(mut world: World) -> usize {
    for (log, n, obj) in std::mem::take(&mut world.stray) {
        world.logs[log].entry(n).or_insert(obj);
    }
    let mut total = 0;
    for p in 0..PARTITIONS {
        let mut history: Vec<u64> = Vec::new();
        let mut starts = Vec::new();
        for (j, tenure) in world.tenures[p].iter().enumerate() {
            starts.push(history.len());
            let end = below(&world, p, j);
            // Read unbounded: every reader finds the end the successor names.
            let mut walk = Walk::new(tenure, None);
            let (frames, stop) = walk_all(&world, p, &mut walk, tenure.log as usize);
            if let Some(end) = end {
                assert_eq!(
                    stop,
                    Ok(Step::Ended { at: end }),
                    "partition {p} tenure {j}: a reader ends it elsewhere"
                );
            }
            history.extend(frames);
        }
        let unique: BTreeSet<u64> = history.iter().copied().collect();
        assert_eq!(unique.len(), history.len(), "partition {p}: a frame twice");
        assert!(
            unique.is_subset(&world.sent[p]),
            "partition {p}: a frame never sent"
        );
        for ((q, k), acked) in &world.acked {
            if *q != p {
                continue;
            }
            let from = *starts.get(*k).unwrap_or_else(|| {
                panic!("partition {p}: tenure {k} acknowledged frames but is not in the chain")
            });
            let mut rest = history[from..].iter();
            for tag in acked {
                assert!(
                    rest.any(|h| h == tag),
                    "partition {p}: acknowledged frame {tag} of tenure {k} lost or out of order"
                );
            }
        }
        for (q, k, replayed) in &world.made {
            if *q == p && starts.get(*k).is_some() {
                assert_eq!(
                    &history[..starts[*k]],
                    &replayed[..],
                    "partition {p}: the maker of tenure {k} replayed another history"
                );
            }
        }
        total += history.len();
    }
    total
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
    let bounded = Walk::new(&t, Some(4));
    assert_eq!(bounded.next(), Err(4));
}

#[test]
fn every_acknowledged_frame_is_read_once_and_in_order() {
    let mut all = Made::default();
    for seed in 0..3_000 {
        let made = run(seed, 800, ALL_RULES);
        all.read += made.read;
        all.released += made.released;
        all.fenced += made.fenced;
    }
    // The schedules make histories, hand-offs and takeovers, not only
    // empty chains.
    eprintln!(
        "{} frames read, {} hand-offs, {} fences",
        all.read, all.released, all.fenced
    );
    assert!(all.read > 30_000, "only {} frames read", all.read);
    assert!(all.released > 1_000, "only {} hand-offs", all.released);
    assert!(all.fenced > 1_000, "only {} fences", all.fenced);
}

/// Each rule left out: some schedule loses or reorders what was
/// acknowledged, or readers disagree.
#[test]
fn each_rule_is_needed() {
    let without = [
        Rules {
            quiet_after_release: false,
            ..ALL_RULES
        },
        Rules {
            fence_open: false,
            ..ALL_RULES
        },
        Rules {
            create_only: false,
            ..ALL_RULES
        },
    ];
    for (i, rules) in without.into_iter().enumerate() {
        let found =
            (0..3_000u64).any(|seed| std::panic::catch_unwind(|| run(seed, 600, rules)).is_err());
        assert!(found, "rule {i} left out: no schedule fails");
    }
}
