//! A seeded differential test: random operations on the origin (creates of
//! binary, text and JSON streams, appends across the 4 MiB chunk grid,
//! closes, snapshots, retention, deletes and recreations, forks of a
//! stream into another path at its end or earlier, forks of forks, deletes
//! of sources that forks still read (soft deletes: their path answers 410)
//! and of forks (which take their soft-deleted sources with them); see
//! `differential_forks.rs`), rollbacks (a new incarnation forking the one
//! it replaces, which stays off its path while read), and after each one a few random reads sent to
//! the origin and through the edge alike (chunk URLs of forks over the
//! range they inherit, and reads and writes that change nothing on
//! soft-deleted paths, among them).
//! Every answer through the edge must be the origin's: status, body, every
//! `Stream-*` header (`Stream-Cursor` by presence only: it is time-based),
//! `ETag`, `Content-Type`, `Cache-Control`, `Vary`, `Location`,
//! `Content-Location` (and `Content-Range`, `Accept-Ranges`,
//! `Retry-After`). All mismatches of every seed are collected; the test
//! fails at the end with the list, each line naming the seed, the
//! operation, the request, the field and both values.
//!
//! Knobs (environment; the defaults take about 15 s in debug on 2 cores):
//! - `DIFF_SEED=N`: run seed N only (with `DIFF_SEEDS=K`: K seeds from N).
//! - `DIFF_SEEDS=K` (default 4): run K seeds from the base (1 unless
//!   `DIFF_SEED`), so every setup below runs once.
//! - `DIFF_OPS=N` (default 60): operations per seed.
//! - `DIFF_READS=N` (default 5): reads compared after each operation.
//! - `DIFF_MIB=N` (default 20): bytes appended per seed at most, in MiB
//!   (no incarnation grows past 9 MiB).
//! - `DIFF_SETTLE_MS=N` (default 0): wait this long after every delete,
//!   recreation, retention and published snapshot (which replaces the
//!   previous one) before reading, to tell mismatches the edge loses with
//!   prompt invalidation (within its bound) from those that stay.
//! - `DIFF_TRACE=1`: print every operation as it is done.
//!
//! The setup follows the seed (`seed % 4`): 1 the origin seals into a
//! bucket the edge reads; 2 the origin seals, the edge fills from the
//! origin; 3 as 1 with the origin reading JSON streams as arrays by
//! default; 0 no object storage at all (snapshots answer 400).
//!
//! The model learns every stream's state from the origin's `HEAD` of every
//! path after each operation; it chooses valid operations and states what
//! the protocol promises of deletes and forks (a delete's and a fork's
//! status, which paths then answer 200, 410 or 404). Where the origin
//! answers otherwise, the test fails too, with the list of those
//! "surprises".
//!
//! A seed fixes the operations and the requests (the model follows the
//! origin's answers, which are deterministic); what the edge answers may
//! also depend on timing (whether a chunk is sealed yet, how old the edge's
//! view of a stream is), so a replay may not hit every mismatch again.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use origin::http::JsonReads;
use reqwest::Method;

use crate::common::*;

#[path = "differential_forks.rs"]
mod forks;
#[path = "differential_ops.rs"]
mod ops;
#[path = "differential_reads.rs"]
mod reads;
#[path = "differential_region.rs"]
pub mod region;

const CHUNK: u64 = 4 << 20;
/// The largest an incarnation of a stream grows.
const MAX_STREAM: u64 = 9 << 20;
/// Streams (paths) per seed.
const SLOTS: usize = 4;
/// Mismatch lines in the failure message (all of them go to stderr).
const SHOWN: usize = 40;

// ---------------------------------------------------------------- knobs

struct Knobs {
    seeds: Vec<u64>,
    ops: usize,
    reads: usize,
    budget: u64,
    settle: Duration,
    trace: bool,
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

impl Knobs {
    fn from_env() -> Knobs {
        let one = env_u64("DIFF_SEED");
        let count = env_u64("DIFF_SEEDS").unwrap_or(if one.is_some() { 1 } else { 4 });
        let base = one.unwrap_or(1);
        Knobs {
            seeds: (base..base + count).collect(),
            ops: env_u64("DIFF_OPS").unwrap_or(60) as usize,
            reads: env_u64("DIFF_READS").unwrap_or(5) as usize,
            budget: env_u64("DIFF_MIB").unwrap_or(20) << 20,
            settle: Duration::from_millis(env_u64("DIFF_SETTLE_MS").unwrap_or(0)),
            trace: env_u64("DIFF_TRACE").unwrap_or(0) != 0,
        }
    }
}

// ---------------------------------------------------------------- PRNG

/// splitmix64: tiny, deterministic, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x9e37_79b9_7f4a_7c15)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

// ---------------------------------------------------------------- setups

#[derive(Clone, Copy, Debug)]
enum Setup {
    /// The origin seals into a bucket the edge reads.
    Bucket,
    /// The origin seals; the edge fills every chunk from the origin.
    OriginSeals,
    /// As `Bucket`, with JSON streams read as arrays by default.
    ArrayReads,
    /// No object storage (snapshots and retention are refused).
    Plain,
}

impl Setup {
    fn of(seed: u64) -> Setup {
        match seed % 4 {
            1 => Setup::Bucket,
            2 => Setup::OriginSeals,
            3 => Setup::ArrayReads,
            _ => Setup::Plain,
        }
    }

    async fn start(self) -> Stack {
        match self {
            Setup::Bucket => Stack::start_with_bucket().await,
            Setup::OriginSeals => Stack::start_custom(JsonReads::Ndjson, true, false).await,
            Setup::ArrayReads => Stack::start_custom(JsonReads::Array, true, true).await,
            Setup::Plain => Stack::start().await,
        }
    }
}

// ---------------------------------------------------------------- model

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Binary,
    Text,
    Json,
}

impl Kind {
    fn content_type(self) -> &'static str {
        match self {
            Kind::Binary => "application/octet-stream",
            Kind::Text => "text/plain",
            Kind::Json => "application/json",
        }
    }

    fn of(content_type: &str) -> Kind {
        let media = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/json" => Kind::Json,
            "text/plain" => Kind::Text,
            _ => Kind::Binary,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Binary => "binary",
            Kind::Text => "text",
            Kind::Json => "json",
        }
    }
}

/// One incarnation of a stream as the origin last described it.
#[derive(Clone, Debug)]
struct Incarnation {
    token: String,
    /// Which incarnation of its path (0 the first): `#n` in the lists.
    ordinal: usize,
    kind: Kind,
    len: u64,
    closed: bool,
    retained: u64,
    /// Ends of appends (message boundaries of JSON streams), and 0.
    boundaries: Vec<u64>,
    /// Offsets of the snapshots published, the latest last.
    snapshots: Vec<u64>,
    /// What it was forked from, when it is a fork.
    fork: Option<forks::ForkOf>,
}

/// A stream path and its incarnations.
struct Slot {
    path: String,
    alias: String,
    current: Option<Incarnation>,
    old: Vec<Incarnation>,
    /// Soft-deleted: the latest of `old` was deleted while forks still read
    /// it; the path answers 410 (409 to a `PUT`) until they go.
    gone: bool,
    /// The last operation that a cache may not have learned of (delete,
    /// recreate, retain, close, snapshot): `kind@op`, and when.
    last_change: (String, Option<Instant>),
    /// The last delete, recreation, retention or published snapshot (what
    /// `DIFF_SETTLE_MS` waits after), and when.
    invalidated: Option<(String, Instant)>,
}

impl Slot {
    fn incarnations(&self) -> usize {
        self.old.len() + usize::from(self.current.is_some())
    }

    /// The current incarnation, or the latest deleted one.
    fn latest(&self) -> Option<&Incarnation> {
        self.current.as_ref().or(self.old.last())
    }

    fn all(&self) -> Vec<&Incarnation> {
        self.old.iter().chain(self.current.iter()).collect()
    }
}

// ---------------------------------------------------------------- requests

struct Req {
    method: Method,
    /// Path and query.
    target: String,
    headers: Vec<(&'static str, String)>,
    /// The kind of request, for the summary.
    class: &'static str,
    slot: usize,
}

/// One read whose answer through the edge differs from the origin's.
struct Mismatch {
    seed: u64,
    op: usize,
    op_desc: String,
    request: String,
    class: &'static str,
    /// Statuses, origin's and edge's (0: no answer).
    statuses: (u16, u16),
    /// The last change of the read's stream (`kind@op`) and how long ago.
    since: String,
    since_ms: Option<u128>,
    /// The last delete, recreation, retention or published snapshot of the
    /// stream, and how long before.
    invalidated: Option<(String, u128)>,
    /// (field, origin's value, edge's value).
    fields: Vec<(String, String, String)>,
}

fn clip(v: &str) -> String {
    if v.chars().count() <= 72 {
        v.to_owned()
    } else {
        format!("{}…", v.chars().take(72).collect::<String>())
    }
}

impl Mismatch {
    fn head(&self) -> String {
        let ago = |ms: Option<u128>| ms.map_or(String::new(), |ms| format!(", {ms} ms before"));
        let invalidated = match &self.invalidated {
            Some((what, ms)) => format!("{what}{}", ago(Some(*ms))),
            None => "none".into(),
        };
        format!(
            "seed {} op {} ({}) {} [last change of the stream: {}{}; last delete/recreate/retain/snapshot: {invalidated}]",
            self.seed,
            self.op,
            self.op_desc,
            self.request,
            self.since,
            ago(self.since_ms)
        )
    }

    /// One line per differing field under the request.
    fn lines(&self) -> String {
        let mut s = self.head();
        for (field, o, e) in &self.fields {
            let _ = write!(s, "\n      {field}: origin {} | edge {}", clip(o), clip(e));
        }
        s
    }

    /// What a mismatch is, without the offsets and ops that vary: the kind
    /// of request, both statuses, the fields that differ when the statuses
    /// agree, and whether a delete, recreation, retention or published
    /// snapshot of the stream came less than 1 s (the edge's bound) before.
    fn category(&self) -> String {
        let fields = if self.statuses.0 == self.statuses.1 {
            let names: Vec<&str> = self.fields.iter().map(|(f, ..)| f.as_str()).collect();
            format!(" | {}", names.join(","))
        } else {
            String::new()
        };
        let when = match &self.invalidated {
            Some((what, ms)) if *ms < 1000 => {
                format!("{} < 1 s before", what.split('@').next().unwrap_or(""))
            }
            _ => "no delete/recreate/retain/snapshot within 1 s".into(),
        };
        format!(
            "{} | status {}/{}{fields} | {when}",
            self.class, self.statuses.0, self.statuses.1
        )
    }
}

// ---------------------------------------------------------------- one seed

/// What a seed runs against: one origin and an edge, or a region of two
/// origins (the owner killed halfway) and an edge given both.
enum Under {
    One(Box<Stack>),
    Region(region::RegionStack),
}

impl Under {
    fn origin_base(&self) -> String {
        match self {
            Under::One(s) => format!("http://{}", s.origin.addr),
            Under::Region(r) => r.origin_base.clone(),
        }
    }

    fn edge_base(&self) -> String {
        match self {
            Under::One(s) => format!("http://{}", s.edge_addr),
            Under::Region(r) => r.edge_base.clone(),
        }
    }
}

struct Run<'a> {
    seed: u64,
    knobs: &'a Knobs,
    stack: Under,
    http: reqwest::Client,
    rng: Rng,
    slots: Vec<Slot>,
    op: usize,
    op_desc: String,
    /// The origin's last `ETag` per request, for `If-None-Match`.
    etags: HashMap<String, String>,
    appended: u64,
    reads: usize,
    /// Reads compared per kind of request.
    by_class: BTreeMap<&'static str, usize>,
    /// The origin's statuses of the reads compared.
    by_status: BTreeMap<u16, usize>,
    mismatches: Vec<Mismatch>,
    /// Messages appended so far (JSON messages number themselves).
    messages: u64,
    /// Where the origin answered otherwise than the model expects.
    surprises: Vec<String>,
    fork_stats: forks::Stats,
    /// Incarnations rollbacks replaced that forks still read (the new
    /// incarnation among them): off their paths, yet keeping their sources.
    detached: Vec<Incarnation>,
}

fn hex(o: u64) -> String {
    offset(o)
}

fn header_of(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

impl<'a> Run<'a> {
    async fn new(seed: u64, knobs: &'a Knobs) -> Run<'a> {
        let stack = Under::One(Box::new(Setup::of(seed).start().await));
        Self::on(seed, knobs, stack)
    }

    fn on(seed: u64, knobs: &'a Knobs, stack: Under) -> Run<'a> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        let slots = (0..SLOTS)
            .map(|i| Slot {
                path: format!("/v1/stream/diff-{seed}-{i}"),
                alias: format!("s{i}"),
                current: None,
                old: Vec::new(),
                gone: false,
                last_change: ("none".into(), None),
                invalidated: None,
            })
            .collect();
        Run {
            seed,
            knobs,
            stack,
            http,
            rng: Rng::new(seed),
            slots,
            op: 0,
            op_desc: String::new(),
            etags: HashMap::new(),
            appended: 0,
            reads: 0,
            by_class: BTreeMap::new(),
            by_status: BTreeMap::new(),
            mismatches: Vec::new(),
            messages: 0,
            surprises: Vec::new(),
            fork_stats: forks::Stats::default(),
            detached: Vec::new(),
        }
    }

    async fn run(&mut self) {
        for op in 0..self.knobs.ops {
            self.op = op;
            if op == self.knobs.ops / 2 {
                if let Under::Region(region) = &mut self.stack {
                    let took = region.take_over(&self.http).await;
                    eprintln!(
                        "differential: seed {} op {op}: the owner killed (-9, disk deleted), the other serving after {took:?}",
                        self.seed
                    );
                }
            }
            let (slot, invalidating) = self.step().await;
            if self.knobs.trace {
                eprintln!("seed {} op {op}: {}", self.seed, self.op_desc);
            }
            if invalidating && !self.knobs.settle.is_zero() {
                tokio::time::sleep(self.knobs.settle).await;
            }
            for _ in 0..self.knobs.reads {
                let i = if self.rng.chance(60) {
                    slot
                } else {
                    self.rng.below(SLOTS as u64) as usize
                };
                let req = self.request(i);
                self.compare(req).await;
            }
        }
    }

    // ------------------------------------------------------------ operations

    fn origin(&self, target: &str) -> String {
        format!("{}{target}", self.stack.origin_base())
    }

    /// One random operation on the origin; the slot it concerned and
    /// whether a cache may miss it (delete, recreate, retain, a published
    /// snapshot).
    async fn step(&mut self) -> (usize, bool) {
        let (slot, invalidating) = self.operate().await;
        // A fork, a delete or a source's retention may change other paths.
        self.sync_all(slot).await;
        self.prune_detached();
        (slot, invalidating)
    }

    async fn operate(&mut self) -> (usize, bool) {
        let i = self.rng.below(SLOTS as u64) as usize;
        if self.slots[i].gone {
            return self.gone_step(i).await;
        }
        let Some(cur) = self.slots[i].current.clone() else {
            if let Some(src) = self.fork_source(i) {
                return self.fork_step(src, i).await;
            }
            let kind = self.random_kind();
            let recreate = self.slots[i].incarnations() > 0;
            let status = self.create(i, kind).await;
            self.op_desc = format!(
                "{} {} {}: {status}",
                if recreate { "create again" } else { "create" },
                self.slots[i].alias,
                kind.name()
            );
            if recreate {
                self.changed(i, "recreate");
            }
            return (i, recreate);
        };
        let mut menu: Vec<(u64, &str)> = vec![
            (if cur.closed { 3 } else { 50 }, "append"),
            (12, "snapshot"),
            (10, "retain"),
            (5, "delete"),
            (5, "recreate"),
            (2, "put-again"),
            (if cur.len > 0 { 8 } else { 2 }, "fork"),
        ];
        if cur.fork.as_ref().is_some_and(|f| !f.restored) {
            menu.push((2, "fork-again"));
        }
        if self.forked(&cur) {
            menu.push((10, "retain-forked"));
        }
        if !cur.closed {
            menu.push((4, "close"));
        }
        menu.push((4, "rollback"));
        let total: u64 = menu.iter().map(|(w, _)| w).sum();
        let mut roll = self.rng.below(total);
        let what = menu
            .iter()
            .find(|(w, _)| {
                if roll < *w {
                    true
                } else {
                    roll -= w;
                    false
                }
            })
            .expect("a choice")
            .1;
        let alias = self.slots[i].alias.clone();
        let invalidating = match what {
            "append" => {
                let (n, status) = self.append(i, &cur).await;
                self.op_desc = format!("append {n} bytes to {alias} at {}: {status}", cur.len);
                false
            }
            "close" => {
                let status = self.close(i, &cur).await;
                self.op_desc = format!("close {alias}: {status}");
                self.changed(i, "close");
                false
            }
            "snapshot" => {
                let (at, status) = self.snapshot(i, &cur).await;
                self.op_desc = format!("snapshot {alias} at {at}: {status}");
                // A publish replaces the latest snapshot, whose cacheable
                // URL then answers 404: a change a cache must learn of.
                let published = status == 204;
                self.changed(
                    i,
                    if published {
                        "snapshot"
                    } else {
                        "refused snapshot"
                    },
                );
                published
            }
            "rollback" => self.rollback(i, &cur).await,
            "retain" => {
                let (at, status) = self.retain(i, &cur).await;
                self.op_desc = format!("retain {alias} at {at}: {status}");
                let retained = status == 204;
                self.changed(i, if retained { "retain" } else { "refused retain" });
                retained
            }
            "delete" => {
                let deleted = self.delete(i).await;
                self.op_desc = format!("delete {alias}: {deleted}");
                self.changed(i, "delete");
                true
            }
            "fork" => {
                let dst = (i + 1 + self.rng.below(SLOTS as u64 - 1) as usize) % SLOTS;
                return self.fork_step(i, dst).await;
            }
            "retain-forked" => return self.retain_under_forks(i, &cur).await,
            "fork-again" => {
                self.op_desc = self.fork_again(i, &cur).await;
                false
            }
            "recreate" => {
                let deleted = self.delete(i).await;
                let kind = self.random_kind();
                let status = self.create(i, kind).await;
                self.op_desc = format!(
                    "recreate {alias} as {}: delete {deleted}, create {status}",
                    kind.name()
                );
                self.changed(i, "recreate");
                true
            }
            _ => {
                // The same configuration (200) or another (409).
                let kind = if self.rng.chance(70) {
                    cur.kind
                } else {
                    self.random_kind()
                };
                let status = self.create(i, kind).await;
                self.op_desc = format!("put {alias} again as {}: {status}", kind.name());
                false
            }
        };
        (i, invalidating)
    }

    fn changed(&mut self, i: usize, what: &str) {
        let at = (format!("{what}@{}", self.op), Instant::now());
        if matches!(
            what,
            "delete"
                | "recreate"
                | "retain"
                | "snapshot"
                | "cascade"
                | "source-retain"
                | "rollback"
        ) {
            self.slots[i].invalidated = Some(at.clone());
        }
        self.slots[i].last_change = (at.0, Some(at.1));
    }
}

// ---------------------------------------------------------------- the test

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_on_the_origin_read_the_same_through_the_edge() {
    run_seeds(Knobs::from_env(), false).await;
}

/// The same in a region of two origins whose owner is killed (`-9`, its
/// disk deleted) halfway through each seed: across the takeover every
/// answer through the edge is still the origin's. `DIFF_REGION_SEEDS`
/// (default 1) seeds from 101.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_read_the_same_through_the_edge_across_a_takeover() {
    let mut knobs = Knobs::from_env();
    let count = env_u64("DIFF_REGION_SEEDS").unwrap_or(1);
    knobs.seeds = (101..101 + count).collect();
    run_seeds(knobs, true).await;
}

async fn run_seeds(knobs: Knobs, in_region: bool) {
    let started = Instant::now();
    let mut reads = 0;
    let mut by_class: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut by_status: BTreeMap<u16, usize> = BTreeMap::new();
    let mut mismatches: Vec<Mismatch> = Vec::new();
    let mut surprises: Vec<String> = Vec::new();
    for &seed in &knobs.seeds {
        let t = Instant::now();
        let mut run = if in_region {
            Run::on(
                seed,
                &knobs,
                Under::Region(region::RegionStack::start(seed).await),
            )
        } else {
            Run::new(seed, &knobs).await
        };
        run.run().await;
        let setup = if in_region {
            "Region".to_owned()
        } else {
            format!("{:?}", Setup::of(seed))
        };
        eprintln!("{}", run.seed_summary(&setup, knobs.ops, t.elapsed()));
        reads += run.reads;
        for (c, n) in &run.by_class {
            *by_class.entry(c).or_default() += n;
        }
        for (c, n) in &run.by_status {
            *by_status.entry(*c).or_default() += n;
        }
        mismatches.append(&mut run.mismatches);
        surprises.append(&mut run.surprises);
    }
    let fields: usize = mismatches.iter().map(|m| m.fields.len()).sum();
    let mut categories: BTreeMap<String, (usize, &Mismatch)> = BTreeMap::new();
    for m in &mismatches {
        categories.entry(m.category()).or_insert((0, m)).0 += 1;
    }
    let mut summary = format!(
        "differential: {} seeds {:?}, {} ops each, settle {} ms: {reads} reads compared, \
         {} differ ({fields} fields), {} categories, {:.1} s\n",
        knobs.seeds.len(),
        knobs.seeds,
        knobs.ops,
        knobs.settle.as_millis(),
        mismatches.len(),
        categories.len(),
        started.elapsed().as_secs_f64()
    );
    for (c, (n, example)) in &categories {
        let _ = writeln!(summary, "  {n:>3} x {c}\n        e.g. {}", example.lines());
    }
    let kinds: Vec<String> = by_class.iter().map(|(c, n)| format!("{c} {n}")).collect();
    let _ = writeln!(summary, "  reads by kind: {}", kinds.join(", "));
    let statuses: Vec<String> = by_status.iter().map(|(c, n)| format!("{c} {n}")).collect();
    let _ = writeln!(summary, "  origin statuses: {}", statuses.join(", "));
    let _ = writeln!(
        summary,
        "  the origin otherwise than the model expects: {}",
        surprises.len()
    );
    for s in &surprises {
        let _ = writeln!(summary, "    {s}");
    }
    eprintln!("{summary}");
    if mismatches.is_empty() {
        assert!(surprises.is_empty(), "the model is wrong:\n{summary}");
        return;
    }
    eprintln!("differential: every mismatch:");
    for m in &mismatches {
        eprintln!("  {}", m.lines());
    }
    let mut list = String::new();
    for m in mismatches.iter().take(SHOWN) {
        let _ = writeln!(list, "  {}", m.lines());
    }
    if mismatches.len() > SHOWN {
        let _ = writeln!(
            list,
            "  ... and {} more (all on stderr)",
            mismatches.len() - SHOWN
        );
    }
    panic!(
        "answers through the edge differ from the origin's \
         (replay one seed with DIFF_SEED=N):\n{summary}mismatches:\n{list}"
    );
}
