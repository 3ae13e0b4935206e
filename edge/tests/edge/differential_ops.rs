//! The differential test's operations on the origin, and the model of
//! what they made.

use super::*;

impl Run<'_> {
    /// Deletes slot `i`'s stream at the origin, and learns what is left
    /// (of every path: a delete may soft-delete the stream, or take
    /// soft-deleted sources with it).
    pub(super) async fn delete(&mut self, i: usize) -> u16 {
        let (expected, heads) = self.expect_delete(i);
        let r = self
            .http
            .delete(self.origin(&self.slots[i].path))
            .send()
            .await
            .expect("delete");
        let status = r.status().as_u16();
        let what = format!("DELETE {}", self.slots[i].alias);
        self.expect(&what, &[expected], status);
        let got = self.sync_all(i).await;
        if status == 204 && got[i] == 410 {
            self.fork_stats.soft_deleted += 1;
        }
        self.expect_heads(&format!("HEAD after {what}"), &heads, &got);
        status
    }

    pub(super) fn random_kind(&mut self) -> Kind {
        *self.rng.pick(&[Kind::Binary, Kind::Text, Kind::Json])
    }

    pub(super) async fn create(&mut self, i: usize, kind: Kind) -> u16 {
        let r = self
            .http
            .put(self.origin(&self.slots[i].path))
            .header("content-type", kind.content_type())
            .send()
            .await
            .expect("create");
        let status = r.status().as_u16();
        self.sync(i, Some(kind)).await;
        status
    }

    /// Learns the stream's state from the origin's `HEAD`; its status.
    pub(super) async fn sync(&mut self, i: usize, kind: Option<Kind>) -> u16 {
        let r = self
            .http
            .head(self.origin(&self.slots[i].path))
            .send()
            .await
            .expect("head");
        let slot = &mut self.slots[i];
        let status = r.status().as_u16();
        if status == 404 || status == 410 {
            if let Some(cur) = slot.current.take() {
                slot.old.push(cur);
            }
            // 410: deleted while forks read it (the latest of `old`).
            slot.gone = status == 410 && !slot.old.is_empty();
            return status;
        }
        slot.gone = false;
        assert_eq!(r.status(), 200, "HEAD {} on the origin", slot.path);
        let token = header_of(&r, "stream-incarnation").expect("an incarnation");
        let num = |name: &str| {
            header_of(&r, name)
                .and_then(|v| u64::from_str_radix(&v, 16).ok())
                .unwrap_or(0)
        };
        let len = num("stream-next-offset");
        let retained = num("stream-retained-offset");
        let closed = header_of(&r, "stream-closed").as_deref() == Some("true");
        let content_kind = header_of(&r, "content-type").map(|c| Kind::of(&c));
        if slot.current.as_ref().is_none_or(|c| c.token != token) {
            if let Some(cur) = slot.current.take() {
                slot.old.push(cur);
            }
            let ordinal = slot.old.len();
            slot.current = Some(Incarnation {
                token,
                ordinal,
                kind: content_kind.or(kind).unwrap_or(Kind::Binary),
                len,
                closed,
                retained,
                boundaries: vec![0],
                snapshots: Vec::new(),
                fork: None,
            });
        }
        let cur = slot.current.as_mut().expect("current");
        cur.len = len;
        cur.closed = closed;
        cur.retained = retained;
        if cur.boundaries.last() != Some(&len) {
            cur.boundaries.push(len);
        }
        status
    }

    /// How many bytes the next append stores, about.
    pub(super) fn append_size(&mut self, cur: &Incarnation) -> u64 {
        let left = self.knobs.budget.saturating_sub(self.appended);
        let room = MAX_STREAM.saturating_sub(cur.len).min(left);
        let want = match self.rng.below(100) {
            0..40 => self.rng.range(1, 300),
            40..65 => self.rng.range(300, 64 << 10),
            65..80 => self.rng.range(256 << 10, 1536 << 10),
            _ => {
                // Across the next boundary of the chunk grid.
                let boundary = (cur.len / CHUNK + 1) * CHUNK;
                boundary - cur.len + self.rng.range(1, 64 << 10)
            }
        };
        if want > room {
            self.rng.range(1, 300)
        } else {
            want
        }
    }

    pub(super) fn body(&mut self, kind: Kind, size: u64) -> Vec<u8> {
        let size = size as usize;
        match kind {
            Kind::Binary => self.rng.bytes(size),
            Kind::Text => {
                const PIECES: [&str; 8] = ["a", "bc", " ", "\n", "é", "€", "😀", "xyz"];
                let mut s = String::with_capacity(size + 4);
                while s.len() < size {
                    let piece: &&str = self.rng.pick(&PIECES[..]);
                    s.push_str(piece);
                }
                s.into_bytes()
            }
            Kind::Json => {
                // Messages of varied sizes, stored one per line without
                // insignificant whitespace (the request may have some).
                let mut msgs = Vec::new();
                let mut stored = 0;
                while stored < size {
                    let left = size - stored;
                    let len = if self.rng.chance(50) {
                        self.rng.range(0, 200)
                    } else {
                        self.rng.range(0, 64 << 10)
                    }
                    .min(left as u64) as usize;
                    let n = self.messages;
                    self.messages += 1;
                    let fill: String = if self.rng.chance(10) {
                        "é".repeat(len / 2)
                    } else {
                        (0..len)
                            .map(|j| (b'a' + ((n as usize + j) % 26) as u8) as char)
                            .collect()
                    };
                    let m = format!("{{\"n\":{n},\"s\":\"{fill}\"}}");
                    stored += m.len() + 1;
                    msgs.push(m);
                }
                if msgs.len() == 1 && self.rng.chance(30) {
                    msgs.pop().expect("one").into_bytes()
                } else {
                    let sep = if self.rng.chance(20) { " ,\n " } else { "," };
                    format!("[{}]", msgs.join(sep)).into_bytes()
                }
            }
        }
    }

    pub(super) async fn append(&mut self, i: usize, cur: &Incarnation) -> (usize, u16) {
        let size = self.append_size(cur);
        let body = self.body(cur.kind, size);
        let n = body.len();
        self.appended += n as u64;
        let r = self
            .http
            .post(self.origin(&self.slots[i].path))
            .header("content-type", cur.kind.content_type())
            .body(body)
            .send()
            .await
            .expect("append");
        let status = r.status().as_u16();
        self.sync(i, None).await;
        (n, status)
    }

    pub(super) async fn close(&mut self, i: usize, cur: &Incarnation) -> u16 {
        let mut req = self
            .http
            .post(self.origin(&self.slots[i].path))
            .header("stream-closed", "true");
        if self.rng.chance(50) {
            let size = self.rng.range(1, 200);
            let body = self.body(cur.kind, size);
            self.appended += body.len() as u64;
            req = req
                .header("content-type", cur.kind.content_type())
                .body(body);
        }
        let status = req.send().await.expect("close").status().as_u16();
        self.sync(i, None).await;
        status
    }

    pub(super) async fn snapshot(&mut self, i: usize, cur: &Incarnation) -> (u64, u16) {
        let floor = cur.snapshots.last().copied().unwrap_or(0).max(cur.retained);
        let candidates: Vec<u64> = cur
            .boundaries
            .iter()
            .copied()
            .filter(|b| *b >= floor)
            .collect();
        let at = if self.rng.chance(10) || candidates.is_empty() {
            // Possibly refused: inside a message, before the latest, past the end.
            self.rng.range(0, cur.len + 1)
        } else if cur.kind != Kind::Json && self.rng.chance(40) {
            self.rng.range(floor, cur.len)
        } else {
            *self.rng.pick(&candidates)
        };
        let (content_type, body) = if self.rng.chance(50) {
            let n = self.rng.range(0, 1000);
            (
                "application/json",
                format!("{{\"state\":{n}}}").into_bytes(),
            )
        } else {
            let n = self.rng.range(1, 20_000) as usize;
            ("application/octet-stream", self.rng.bytes(n))
        };
        let r = self
            .http
            .put(self.origin(&format!("{}/snapshot/{}", self.slots[i].path, hex(at))))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("snapshot");
        let status = r.status().as_u16();
        if status == 204 {
            if let Some(c) = self.slots[i].current.as_mut() {
                if c.snapshots.last() != Some(&at) {
                    c.snapshots.push(at);
                }
            }
        }
        self.sync(i, None).await;
        (at, status)
    }

    pub(super) async fn retain(&mut self, i: usize, cur: &Incarnation) -> (u64, u16) {
        let at = match cur.snapshots.last() {
            Some(s) if self.rng.chance(85) => *s,
            _ => self.rng.range(0, cur.len),
        };
        let r = self
            .http
            .put(self.origin(&format!(
                "{}/snapshot/{}/retain",
                self.slots[i].path,
                hex(at)
            )))
            .send()
            .await
            .expect("retain");
        let status = r.status().as_u16();
        self.sync(i, None).await;
        (at, status)
    }

    /// Rolls slot `i`'s stream back to one of its append boundaries at or
    /// past its retained offset (a JSON stream's are between messages):
    /// 200, or 409 when a retained snapshot lies past the point. The model
    /// learns the new incarnation from the origin's `HEAD`. Whether it was
    /// rolled back (a change a cache may miss).
    pub(super) async fn rollback(&mut self, i: usize, cur: &Incarnation) -> bool {
        let points: Vec<u64> = cur
            .boundaries
            .iter()
            .copied()
            .filter(|&b| b >= cur.retained && b <= cur.len)
            .collect();
        let at = if points.is_empty() {
            cur.len
        } else {
            *self.rng.pick(&points)
        };
        let r = self
            .http
            .post(self.origin(&format!(
                "{}/incarnation/{}/restore",
                self.slots[i].path, cur.token
            )))
            .header("stream-restore-offset", hex(at))
            .send()
            .await
            .expect("rollback");
        let status = r.status().as_u16();
        let snapshot_past = cur.retained > 0 && cur.snapshots.last().is_some_and(|&s| s > at);
        // A fork's readers start from its source's snapshot, which the
        // model does not follow: with retention, either may be right.
        let expected: &[u16] = match (snapshot_past, cur.retained > 0) {
            (true, _) => &[409],
            (false, true) => &[200, 409],
            (false, false) => &[200],
        };
        let alias = self.slots[i].alias.clone();
        self.expect(&format!("roll {alias} back to {at}"), expected, status);
        self.sync(i, None).await;
        if status == 200 {
            self.fork_stats.rollbacks += 1;
            // The new incarnation forks the replaced one at the point, or
            // the furthest source holding the same bytes; the replaced one
            // stays off its path while anything reads it.
            let mut source = cur.clone();
            while let Some(f) = source.fork.as_ref().filter(|f| at <= f.at) {
                match self.incarnation(&f.source_token) {
                    Some(s) => source = s.clone(),
                    None => break,
                }
            }
            if let Some(new) = self.slots[i].current.as_mut() {
                new.fork = Some(forks::ForkOf {
                    source_token: source.token.clone(),
                    at,
                    restored: true,
                    headers: Vec::new(),
                });
            }
            self.detached.push(cur.clone());
            self.prune_detached();
        }
        self.op_desc = format!("roll {alias} back to {at}: {status}");
        let rolled = status == 200;
        self.changed(
            i,
            if rolled {
                "rollback"
            } else {
                "refused rollback"
            },
        );
        rolled
    }

    // ------------------------------------------------------------ reads

    /// An offset worth reading at in `inc`.
    pub(super) fn offset_in(&mut self, inc: Option<&Incarnation>) -> u64 {
        let Some(inc) = inc else {
            return *self.rng.pick(&[0, 1, CHUNK]);
        };
        let len = inc.len;
        if let Some(f) = inc.fork.as_ref().filter(|_| self.rng.chance(12)) {
            // At and around the fork point.
            return *self.rng.pick(&[f.at, f.at.saturating_sub(1), f.at + 1]);
        }
        match self.rng.below(11) {
            0 => 0,
            1 | 2 => len,
            3 => len + 1,
            4 => *self.rng.pick(&inc.boundaries),
            5 => {
                let k = self.rng.below(len / CHUNK + 2);
                (k * CHUNK + *self.rng.pick(&[0, 0, 1])).saturating_sub(self.rng.below(2))
            }
            6 => {
                // At, around and before the retained offset.
                let r = inc.retained;
                let before = self.rng.below(r.max(1));
                *self.rng.pick(&[r, r.saturating_sub(1), r + 1, before])
            }
            7 => inc.snapshots.last().copied().unwrap_or(0),
            8 => len.saturating_sub(self.rng.range(1, 100)),
            _ => self.rng.range(0, len),
        }
    }

    /// An incarnation of slot `i` to name in a URL: mostly the current one.
    /// The snapshots published on the incarnation with this token.
    pub(super) fn snapshots_of(&self, token: &str) -> Vec<u64> {
        self.slots
            .iter()
            .flat_map(|s| s.current.iter().chain(&s.old))
            .find(|c| c.token == token)
            .map_or_else(Vec::new, |c| c.snapshots.clone())
    }

    pub(super) fn some_incarnation(&mut self, i: usize) -> Option<Incarnation> {
        let slot = &self.slots[i];
        if slot.current.is_some() && (slot.old.is_empty() || self.rng.chance(65)) {
            return slot.current.clone();
        }
        if slot.old.is_empty() {
            return None;
        }
        let recent = &slot.old[slot.old.len().saturating_sub(4)..];
        Some(self.rng.pick(recent).clone())
    }
}
