//! The differential test's forks (protocol §4.2), in a file of their own
//! so that the test's files each stay under 800 lines: forking one slot's
//! stream into another slot's path, forking it again with the same
//! request, operations on soft-deleted paths (writes that change nothing,
//! deletes of the forks that keep them), and what the model expects of
//! deletes and forks.
//!
//! A fork's bytes `[0, at)` are its source's, at the same offsets; it is
//! forked at its source's end (with or without `Stream-Fork-Offset`), at an
//! earlier offset the model knows to be valid (any byte offset up to the
//! end of a binary or text stream, the end of an append of a JSON stream),
//! or, now and then, where the origin must refuse (past the end, inside a
//! JSON message, before the source's retention, from a soft-deleted or
//! missing source, with another content type). A stream that forks still read (soft-deleted ones too)
//! is soft-deleted by a `DELETE`: its path answers 410 (409 to a `PUT`)
//! until its last fork goes, which takes it along (and its own source, if
//! that is soft-deleted and this was its last fork). A fork reads nothing
//! its source's retention dropped: its retained offset follows its
//! source's up to its fork point, so sources that forks read are retained
//! there on purpose ([`Run::retain_under_forks`]; the origin then sends
//! edges a retention event for each fork whose retention moved). A fork
//! before its source's retained offset answers 410. The model states each of these statuses before the
//! origin answers ([`Run::expect`]); the origin's `HEAD` of every path
//! then tells it what there is.

use super::*;

/// The origin refuses a fork of a stream this many forks deep (400).
const MAX_FORK_DEPTH: usize = 32;

/// Where a fork's prefix comes from, as the model knows it.
#[derive(Clone, Debug)]
pub(super) struct ForkOf {
    /// The incarnation forked (of whichever slot: it stays at its path
    /// while the fork lives).
    pub source_token: String,
    /// The fork holds its source's bytes `[0, at)`.
    pub at: u64,
    /// Made by a rollback (an incarnation that replaced `source_token` at
    /// its path, or forks an older one holding the same bytes): no `PUT`
    /// to send again.
    pub restored: bool,
    /// The `PUT`'s fork headers, to send again.
    pub headers: Vec<(&'static str, String)>,
}

/// What a seed's forks came to, for its summary line.
#[derive(Default)]
pub(super) struct Stats {
    pub made: usize,
    pub refused: usize,
    /// Deletes that left the path answering 410.
    pub soft_deleted: usize,
    /// Soft-deleted streams that went with their last fork.
    pub cascaded: usize,
    /// Forks whose retained offset moved with their source's.
    pub source_retained: usize,
    /// Rollbacks made (refused ones not counted).
    pub rollbacks: usize,
}

impl Slot {
    /// What the path holds: its stream, or the soft-deleted one.
    pub(super) fn live(&self) -> Option<&Incarnation> {
        self.current
            .as_ref()
            .or(self.old.last().filter(|_| self.gone))
    }
}

impl Run<'_> {
    /// Learns every path's state from the origin; the `HEAD` statuses. A
    /// change seen on another path than the operation's is noted there (a
    /// soft-deleted source that went with its last fork, a fork whose
    /// source's retention moved its own).
    pub(super) async fn sync_all(&mut self, op_slot: usize) -> Vec<u16> {
        let mut statuses = Vec::with_capacity(SLOTS);
        for j in 0..SLOTS {
            let before = (self.slots[j].gone, self.slots[j].live().map(|c| c.retained));
            statuses.push(self.sync(j, None).await);
            let after = (self.slots[j].gone, self.slots[j].live().map(|c| c.retained));
            if j == op_slot || before == after {
                continue;
            }
            if before.0 && !after.0 {
                self.fork_stats.cascaded += 1;
                self.changed(j, "cascade");
            } else if before.1.is_some() && before.1 != after.1 {
                self.fork_stats.source_retained += 1;
                self.changed(j, "source-retain");
            }
        }
        statuses
    }

    /// The `HEAD` status each path answers now, as the model has it.
    fn heads(&self) -> Vec<u16> {
        self.slots
            .iter()
            .map(|s| match (&s.current, s.gone) {
                (Some(_), _) => 200,
                (None, true) => 410,
                (None, false) => 404,
            })
            .collect()
    }

    /// How many streams still at their paths fork `token` (soft-deleted
    /// ones too: they read it), leaving out those in `removed`.
    fn readers(&self, token: &str, removed: &[&str]) -> usize {
        self.slots
            .iter()
            .filter_map(Slot::live)
            .chain(&self.detached)
            .filter(|inc| !removed.contains(&inc.token.as_str()))
            .filter(|inc| inc.fork.as_ref().is_some_and(|f| f.source_token == token))
            .count()
    }

    /// How many forks deep slot `src`'s stream is (0: not a fork).
    fn depth(&self, src: usize) -> usize {
        let mut inc = self.slots[src].live();
        let mut depth = 0;
        while let Some(f) = inc.and_then(|i| i.fork.as_ref()) {
            depth += 1;
            inc = self.incarnation(&f.source_token);
        }
        depth
    }

    /// The incarnation `token`, at a path or detached by a rollback.
    pub(super) fn incarnation(&self, token: &str) -> Option<&Incarnation> {
        self.slots
            .iter()
            .filter_map(Slot::live)
            .chain(&self.detached)
            .find(|c| c.token == token)
    }

    /// Forgets the incarnations rollbacks replaced that nothing reads any
    /// more (the origin removes them then, as it removes a soft-deleted
    /// source with its last fork).
    pub(super) fn prune_detached(&mut self) {
        while let Some(k) =
            (0..self.detached.len()).find(|&k| self.readers(&self.detached[k].token, &[]) == 0)
        {
            self.detached.remove(k);
        }
    }

    /// The slot whose path holds the incarnation `token`.
    fn holder(&self, token: &str) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.live().is_some_and(|c| c.token == token))
    }

    /// What deleting slot `i`'s path answers, and what every path's `HEAD`
    /// answers then: soft-deleted while forks read it; else removed, and
    /// with it each soft-deleted source it was the last fork of.
    pub(super) fn expect_delete(&self, i: usize) -> (u16, Vec<u16>) {
        let mut heads = self.heads();
        let Some(cur) = self.slots[i].current.as_ref() else {
            return (if self.slots[i].gone { 410 } else { 404 }, heads);
        };
        if self.readers(&cur.token, &[]) > 0 {
            heads[i] = 410;
            return (204, heads);
        }
        heads[i] = 404;
        let mut removed = vec![cur.token.as_str()];
        let mut last = cur;
        while let Some(f) = &last.fork {
            if self.readers(&f.source_token, &removed) > 0 {
                break;
            }
            // A source a rollback detached goes as a soft-deleted one does.
            if let Some(d) = self.detached.iter().find(|d| d.token == f.source_token) {
                last = d;
                removed.push(last.token.as_str());
                continue;
            }
            let Some(s) = self.holder(&f.source_token) else {
                break;
            };
            if !self.slots[s].gone {
                break;
            }
            heads[s] = 404;
            last = self.slots[s].live().expect("held");
            removed.push(last.token.as_str());
        }
        (204, heads)
    }

    /// Notes where the origin's status is none of those the model expects.
    pub(super) fn expect(&mut self, what: &str, expected: &[u16], got: u16) {
        if !expected.contains(&got) {
            self.surprises.push(format!(
                "seed {} op {}: {what}: expected {expected:?}, the origin answered {got}",
                self.seed, self.op
            ));
        }
    }

    pub(super) fn expect_heads(&mut self, what: &str, expected: &[u16], got: &[u16]) {
        for (j, (e, g)) in expected.iter().zip(got).enumerate() {
            let what = format!("{what}: {}", self.slots[j].alias);
            self.expect(&what, &[*e], *g);
        }
    }

    /// A source for a fork into the empty path of slot `dst`, or None to
    /// create a plain stream there: another slot's stream mostly, now and
    /// then a soft-deleted or missing one (which the origin refuses).
    pub(super) fn fork_source(&mut self, dst: usize) -> Option<usize> {
        if !self.rng.chance(45) {
            return None;
        }
        let others: Vec<usize> = (0..SLOTS).filter(|j| *j != dst).collect();
        let live: Vec<usize> = others
            .iter()
            .copied()
            .filter(|j| self.slots[*j].current.is_some())
            .collect();
        let long: Vec<usize> = live
            .iter()
            .copied()
            .filter(|j| self.slots[*j].current.as_ref().is_some_and(|c| c.len > 0))
            .collect();
        if !long.is_empty() && self.rng.chance(85) {
            return Some(*self.rng.pick(&long));
        }
        if !live.is_empty() && !self.rng.chance(8) {
            return Some(*self.rng.pick(&live));
        }
        let odd = if live.is_empty() { 10 } else { 100 };
        self.rng.chance(odd).then(|| *self.rng.pick(&others))
    }

    /// Forks slot `src`'s stream into slot `dst`'s path (deleting what is
    /// there first): the slot read most after it, and whether a cache may
    /// miss it (a path that held a stream before).
    pub(super) async fn fork_step(&mut self, src: usize, dst: usize) -> (usize, bool) {
        let mut desc = String::new();
        let recreate = self.slots[dst].incarnations() > 0;
        if self.slots[dst].current.is_some() {
            let d = self.delete(dst).await;
            let _ = write!(desc, "delete {} {d}, then ", self.slots[dst].alias);
        }
        let dst_free = self.slots[dst].current.is_none() && !self.slots[dst].gone;
        let source = self.slots[src].current.clone();
        let kind = self.slots[src].latest().map_or(Kind::Binary, |l| l.kind);
        let len = source.as_ref().map_or(0, |s| s.len);
        // Where, and whether the origin must refuse it (None: the model
        // cannot tell, a byte offset of a JSON stream it did not append).
        let boundaries = source.as_ref().map_or(vec![0], |s| s.boundaries.clone());
        let retained = source.as_ref().map_or(0, |s| s.retained);
        let (named, at, valid) = match self.rng.below(100) {
            0..35 => (None, len, Some(true)),
            35..45 => (Some(len), len, Some(true)),
            45..92 => {
                let at = if kind == Kind::Json {
                    // The origin reads the byte before a JSON fork point,
                    // which must not be before retention.
                    let earlier: Vec<u64> = boundaries
                        .iter()
                        .copied()
                        .filter(|b| *b < len && (*b == 0 || *b > retained))
                        .collect();
                    if earlier.is_empty() {
                        len
                    } else {
                        *self.rng.pick(&earlier)
                    }
                } else {
                    self.rng.range(0, len)
                };
                (Some(at), at, Some(true))
            }
            _ if kind == Kind::Json && len > 1 && self.rng.chance(50) => {
                let at = self.rng.range(1, len - 1);
                let known = boundaries.contains(&at) && at > retained;
                (Some(at), at, known.then_some(true))
            }
            _ => {
                let at = len + self.rng.range(1, 100);
                (Some(at), at, Some(false))
            }
        };
        let mut headers = vec![("stream-forked-from", self.slots[src].path.clone())];
        if let Some(o) = named {
            headers.push(("stream-fork-offset", hex(o)));
        }
        let mismatched = match self.rng.below(100) {
            0..60 => false,
            60..95 => {
                let ct = if kind == Kind::Text && self.rng.chance(30) {
                    "text/plain; charset=utf-8"
                } else {
                    kind.content_type()
                };
                headers.push(("content-type", ct.to_owned()));
                false
            }
            _ => {
                let other = if kind == Kind::Json {
                    Kind::Text
                } else {
                    Kind::Json
                };
                headers.push(("content-type", other.content_type().to_owned()));
                true
            }
        };
        if self.rng.chance(15) {
            headers.push(("stream-ttl", "86400".to_owned()));
        }
        let closed = self.rng.chance(5);
        let body = if self.rng.chance(20) {
            let size = self.rng.range(1, 300);
            self.body(kind, size)
        } else {
            Vec::new()
        };
        self.appended += body.len() as u64;
        let mut put = self.http.put(self.origin(&self.slots[dst].path));
        for (n, v) in &headers {
            put = put.header(*n, v);
        }
        if closed {
            put = put.header("stream-closed", "true");
        }
        let status = put
            .body(body.clone())
            .send()
            .await
            .expect("fork")
            .status()
            .as_u16();
        // What the checks of the source and the request answer, if they
        // refuse; the origin makes them before it looks at the path (as
        // committed) or after (when the path is taken, it only matches what
        // is there).
        let refused: &[u16] = match (&source, valid) {
            _ if self.slots[src].gone => &[409],
            (None, _) => &[404],
            _ if mismatched => &[409],
            // Not before the source's retention (as a read there).
            _ if at < retained => &[410],
            (_, Some(false)) => &[400],
            _ if self.depth(src) >= MAX_FORK_DEPTH => &[400, 409],
            (_, None) => &[201, 400, 503],
            (_, Some(true)) => &[201, 503],
        };
        let expected: Vec<u16> = if dst_free {
            refused.to_vec()
        } else {
            // A path taken: 409, or what refused it first.
            let mut e = vec![409];
            e.extend(
                refused
                    .iter()
                    .filter(|s| **s != 201 && **s != 503 && **s != 404),
            );
            e
        };
        let (sa, da) = (self.slots[src].alias.clone(), self.slots[dst].alias.clone());
        self.expect(&format!("fork {sa} into {da} at {at}"), &expected, status);
        if status == 201 {
            self.fork_stats.made += 1;
        } else {
            self.fork_stats.refused += 1;
        }
        self.sync(dst, None).await;
        if let (201, Some(s)) = (status, &source) {
            if let Some(mut cur) = self.slots[dst].current.take() {
                self.expect_fork(&s.token, at, kind, &mut cur, headers);
                self.slots[dst].current = Some(cur);
            } else {
                let what = format!("HEAD {da} after its fork");
                self.expect(&what, &[200], self.heads()[dst]);
            }
        }
        let point = match named {
            None => "at its end".to_owned(),
            Some(o) if o == len => format!("at its end ({o}), named"),
            Some(o) => format!("at {o}"),
        };
        let extra = format!(
            "{}{}",
            if body.is_empty() {
                String::new()
            } else {
                format!(" with {} bytes", body.len())
            },
            if closed { ", closed" } else { "" }
        );
        self.op_desc = format!(
            "{desc}fork {sa} ({}, {len} bytes) into {da} {point}{extra}: {status}",
            kind.name()
        );
        self.changed(dst, if recreate { "recreate" } else { "fork" });
        (dst, recreate)
    }

    /// Notes what a fork created (`cur`, as the origin's `HEAD` told) holds,
    /// and where the origin describes it otherwise than the model expects.
    fn expect_fork(
        &mut self,
        source: &str,
        at: u64,
        kind: Kind,
        cur: &mut Incarnation,
        headers: Vec<(&'static str, String)>,
    ) {
        let mut wrong = Vec::new();
        if cur.kind != kind {
            wrong.push(format!(
                "kind {} (its source's {})",
                cur.kind.name(),
                kind.name()
            ));
        }
        if cur.len < at {
            wrong.push(format!("end {} before its fork point {at}", cur.len));
        }
        let inherited = self
            .slots
            .iter()
            .flat_map(|s| s.all())
            .find(|i| i.token == source)
            .map(|s| s.boundaries.clone())
            .unwrap_or_default();
        let mut b: Vec<u64> = inherited.into_iter().filter(|b| *b <= at).collect();
        b.extend([at, cur.len]);
        b.sort_unstable();
        b.dedup();
        cur.boundaries = b;
        cur.fork = Some(ForkOf {
            source_token: source.to_owned(),
            at,
            restored: false,
            headers,
        });
        for w in wrong {
            self.surprises.push(format!(
                "seed {} op {}: the fork {}: {w}",
                self.seed, self.op, cur.token
            ));
        }
    }

    /// Sends the `PUT` that made slot `i`'s fork again: the same fork
    /// (200). Once its source is soft-deleted the origin has answered 409
    /// (it resolved the source first: a soft-deleted one forks no more) or
    /// 200 (it matches what is at the path first): either is taken.
    pub(super) async fn fork_again(&mut self, i: usize, cur: &Incarnation) -> String {
        let f = cur.fork.as_ref().expect("a fork");
        let mut put = self.http.put(self.origin(&self.slots[i].path));
        for (n, v) in &f.headers {
            put = put.header(*n, v);
        }
        if cur.closed {
            put = put.header("stream-closed", "true");
        }
        let status = put.send().await.expect("fork again").status().as_u16();
        let source_there = self.slots.iter().any(|s| {
            s.current
                .as_ref()
                .is_some_and(|c| c.token == f.source_token)
        });
        let alias = self.slots[i].alias.clone();
        let expected: &[u16] = if source_there { &[200] } else { &[200, 409] };
        self.expect(&format!("fork {alias} again"), expected, status);
        format!("fork {alias} again: {status}")
    }

    /// The forks of `cur` (slot, fork point) that its retention can reach.
    fn forks_of(&self, cur: &Incarnation) -> Vec<(usize, u64)> {
        (0..SLOTS)
            .filter_map(|j| {
                let f = self.slots[j].live()?.fork.as_ref()?;
                (f.source_token == cur.token && f.at > cur.retained).then_some((j, f.at))
            })
            .collect()
    }

    /// Whether forks read `cur` where its retention can reach.
    pub(super) fn forked(&self, cur: &Incarnation) -> bool {
        !self.forks_of(cur).is_empty()
    }

    /// Publishes a snapshot of slot `i`'s stream, which forks read, and
    /// retains it there: at an offset before a fork's point mostly, so that
    /// the fork's retained offset moves with it (a fork reads nothing its
    /// source's retention dropped). The slot read most after it (the
    /// fork's), and whether retention advanced.
    pub(super) async fn retain_under_forks(
        &mut self,
        i: usize,
        cur: &Incarnation,
    ) -> (usize, bool) {
        let forks = self.forks_of(cur);
        let Some(&(j, at)) = forks.get(self.rng.below(forks.len() as u64) as usize) else {
            return (i, false);
        };
        let floor = cur.snapshots.last().copied().unwrap_or(0).max(cur.retained);
        let hi = if self.rng.chance(80) {
            at.min(cur.len)
        } else {
            cur.len
        };
        let r = if cur.kind == Kind::Json {
            let ok: Vec<u64> = cur
                .boundaries
                .iter()
                .copied()
                .filter(|b| *b > floor && *b <= hi)
                .collect();
            if ok.is_empty() {
                hi
            } else {
                *self.rng.pick(&ok)
            }
        } else if hi > floor {
            self.rng.range(floor + 1, hi)
        } else {
            hi
        };
        let path = self.slots[i].path.clone();
        let put = |target: String| self.http.put(self.origin(&target));
        let published = put(format!("{path}/snapshot/{}", hex(r)))
            .header("content-type", "application/json")
            .body(format!("{{\"state\":{r}}}"))
            .send()
            .await
            .expect("snapshot")
            .status()
            .as_u16();
        let retained = put(format!("{path}/snapshot/{}/retain", hex(r)))
            .send()
            .await
            .expect("retain")
            .status()
            .as_u16();
        if published == 204 {
            if let Some(c) = self.slots[i].current.as_mut() {
                if c.snapshots.last() != Some(&r) {
                    c.snapshots.push(r);
                }
            }
        }
        self.op_desc = format!(
            "snapshot and retain {} (forked by {} at {at}) at {r}: {published}, {retained}",
            self.slots[i].alias, self.slots[j].alias
        );
        self.changed(
            i,
            if retained == 204 {
                "retain"
            } else {
                "refused retain"
            },
        );
        // Here, so that the forks note their source's retention.
        self.sync_all(i).await;
        (j, retained == 204)
    }

    /// An operation on the soft-deleted path of slot `i`: deleting a fork
    /// that keeps it (which may take it along), or a write that changes
    /// nothing.
    pub(super) async fn gone_step(&mut self, i: usize) -> (usize, bool) {
        let alias = self.slots[i].alias.clone();
        let token = self.slots[i].live().expect("soft-deleted").token.clone();
        if self.rng.chance(60) {
            if let Some(j) = self.live_descendant(&token) {
                let d = self.delete(j).await;
                self.op_desc = format!(
                    "delete {} (a fork that reads soft-deleted {alias}): {d}",
                    self.slots[j].alias
                );
                self.changed(j, "delete");
                return (i, true);
            }
        }
        let path = self.origin(&self.slots[i].path);
        let own = self.slots[i].live().expect("soft-deleted").kind;
        let kind = self.random_kind();
        let (what, req, expected) = match self.rng.below(4) {
            0 => (
                format!("create {}", kind.name()),
                self.http
                    .put(&path)
                    .header("content-type", kind.content_type()),
                409,
            ),
            1 => {
                let src = (i + 1) % SLOTS;
                let from = self.slots[src].path.clone();
                (
                    format!("fork {} into", self.slots[src].alias),
                    self.http.put(&path).header("stream-forked-from", from),
                    409,
                )
            }
            2 => {
                let body = self.body(own, 20);
                (
                    "append to".to_owned(),
                    self.http
                        .post(&path)
                        .header("content-type", own.content_type())
                        .body(body),
                    410,
                )
            }
            _ => ("delete".to_owned(), self.http.delete(&path), 410),
        };
        let status = req.send().await.expect("write").status().as_u16();
        self.expect(&format!("{what} soft-deleted {alias}"), &[expected], status);
        self.op_desc = format!("{what} soft-deleted {alias}: {status}");
        (i, false)
    }

    /// A stream at its path (not soft-deleted) whose fork chain reaches the
    /// incarnation `token`.
    fn live_descendant(&mut self, token: &str) -> Option<usize> {
        let mut frontier = vec![token.to_owned()];
        let mut live = Vec::new();
        while let Some(t) = frontier.pop() {
            for (j, s) in self.slots.iter().enumerate() {
                let Some(inc) = s.live() else { continue };
                if inc.fork.as_ref().is_some_and(|f| f.source_token == t) {
                    if s.current.is_some() {
                        live.push(j);
                    } else {
                        frontier.push(inc.token.clone());
                    }
                }
            }
        }
        (!live.is_empty()).then(|| *self.rng.pick(&live))
    }

    /// A write on slot `i`'s soft-deleted path that changes nothing (the
    /// origin answers 410, or 409 to a `PUT`), compared as the reads are.
    pub(super) fn soft_deleted_write(&mut self, i: usize) -> Req {
        let kind = self.slots[i].latest().map_or(Kind::Binary, |l| l.kind);
        let (method, headers) = match self.rng.below(3) {
            0 => (
                Method::PUT,
                vec![("content-type", kind.content_type().to_owned())],
            ),
            1 => (Method::POST, vec![("stream-closed", "true".to_owned())]),
            _ => (Method::DELETE, Vec::new()),
        };
        Req {
            method,
            target: self.slots[i].path.clone(),
            headers,
            class: "write soft-deleted",
            slot: i,
        }
    }

    /// An offset in the range a fork inherits, for its chunk URLs: on the
    /// chunk grid, just before the fork point, or anywhere before it.
    pub(super) fn inherited_offset(&mut self, f: &ForkOf) -> Option<u64> {
        if f.at == 0 {
            return None;
        }
        Some(match self.rng.below(3) {
            0 => self.rng.below((f.at - 1) / CHUNK + 1) * CHUNK,
            1 => f.at - 1,
            _ => self.rng.below(f.at),
        })
    }
}

impl Run<'_> {
    /// The summary line of one seed's run.
    pub(super) fn seed_summary(&self, setup: &str, ops: usize, took: Duration) -> String {
        let f = &self.fork_stats;
        format!(
            "differential: seed {} ({setup}): {ops} ops, {} MiB appended, {} forks (and {} refused), \
             {} soft deletes, {} with their last fork, {} retained with their source, \
             {} rollbacks, {} reads compared, {} mismatches, {:.1} s",
            self.seed,
            self.appended >> 20,
            f.made,
            f.refused,
            f.soft_deleted,
            f.cascaded,
            f.source_retained,
            f.rollbacks,
            self.reads,
            self.mismatches.len(),
            took.as_secs_f64()
        )
    }
}
