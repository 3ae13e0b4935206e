//! The differential test's reads: a random request about a stream, sent
//! to the origin and through the edge, and the two answers compared
//! ([`compared`] says which headers, [`differences`] how).

use super::*;

impl Run<'_> {
    pub(super) fn request(&mut self, i: usize) -> Req {
        if self.slots[i].gone && self.rng.chance(12) {
            return self.soft_deleted_write(i);
        }
        let path = self.slots[i].path.clone();
        let latest = self.slots[i].latest().cloned();
        let get = |target: String, class| Req {
            method: Method::GET,
            target,
            headers: Vec::new(),
            class,
            slot: i,
        };
        let mut req = match self.rng.below(100) {
            // A catch-up read.
            0..38 => {
                let (from, class) = match self.rng.below(100) {
                    0..15 => ("-1".to_owned(), "read -1"),
                    15..25 => ("now".to_owned(), "read now"),
                    _ => (hex(self.offset_in(latest.as_ref())), "read at"),
                };
                let mut q = format!("{path}?offset={from}");
                if self.rng.chance(45) {
                    let max =
                        *self
                            .rng
                            .pick(&[1, 7, 100, 4096, 65_536, 1 << 20, 4 << 20, 5_000_000]);
                    let _ = write!(q, "&max_bytes={max}");
                }
                if self.rng.chance(4) {
                    q.push_str("&consistency=leader");
                }
                get(q, class)
            }
            // A long-poll, at the end or before it.
            38..52 => {
                let (from, class) = match (self.rng.below(100), &latest) {
                    (0..60, Some(l)) => (hex(l.len), "long-poll at end"),
                    (60..75, _) => ("now".to_owned(), "long-poll now"),
                    _ => (hex(self.offset_in(latest.as_ref())), "long-poll at"),
                };
                let mut q = format!("{path}?offset={from}&live=long-poll&timeout_ms=50");
                if self.rng.chance(25) {
                    let max = *self.rng.pick(&[1, 100, 65_536]);
                    let _ = write!(q, "&max_bytes={max}");
                }
                get(q, class)
            }
            // A chunk URL of this or an older incarnation.
            52..72 => {
                let inc = self.some_incarnation(i);
                let token = inc
                    .as_ref()
                    .map(|c| c.token.clone())
                    .unwrap_or_else(|| "1-0123456789abcdef".into());
                let current = self.slots[i].current.as_ref().map(|c| &c.token) == Some(&token);
                let fork = inc.as_ref().and_then(|c| c.fork.clone());
                let inherited = match &fork {
                    Some(f) if self.rng.chance(50) => self.inherited_offset(f),
                    _ => None,
                };
                let at = if let Some(at) = inherited {
                    at
                } else if self.rng.chance(50) {
                    let len = inc.as_ref().map_or(0, |c| c.len);
                    self.rng.below(len / CHUNK + 2) * CHUNK
                } else {
                    self.offset_in(inc.as_ref())
                };
                let class = match &fork {
                    Some(f) if at < f.at => "chunk fork inherited",
                    Some(_) => "chunk fork own",
                    None if current => "chunk current",
                    None => "chunk old",
                };
                get(
                    format!("{path}/incarnation/{token}/chunk/{}", hex(at)),
                    class,
                )
            }
            // A snapshot.
            72..86 => {
                let inc = self.some_incarnation(i);
                let current = inc.is_some()
                    && self.slots[i].current.as_ref().map(|c| &c.token)
                        == inc.as_ref().map(|c| &c.token);
                // A fork without snapshots of its own starts from its
                // source's (at or before its fork point).
                let published = inc.as_ref().and_then(|c| {
                    let mut offsets = c.snapshots.clone();
                    if let (true, Some(f)) = (offsets.is_empty(), &c.fork) {
                        offsets = self.snapshots_of(&f.source_token);
                        offsets.retain(|o| *o <= f.at);
                    }
                    (!offsets.is_empty()).then_some(offsets)
                });
                match self.rng.below(3) {
                    0 => get(format!("{path}/snapshot"), "snapshot latest"),
                    1 => {
                        let at = published
                            .as_ref()
                            .map(|p| *self.rng.pick(p))
                            .unwrap_or_else(|| self.offset_in(inc.as_ref()));
                        get(format!("{path}/snapshot/{}", hex(at)), "snapshot at")
                    }
                    _ => {
                        let token = inc
                            .as_ref()
                            .map(|c| c.token.clone())
                            .unwrap_or_else(|| "1-0123456789abcdef".into());
                        let at = published
                            .as_ref()
                            .map(|p| *self.rng.pick(p))
                            .unwrap_or_else(|| self.offset_in(inc.as_ref()));
                        get(
                            format!("{path}/incarnation/{token}/snapshot/{}", hex(at)),
                            if current {
                                "snapshot cacheable current"
                            } else {
                                "snapshot cacheable old"
                            },
                        )
                    }
                }
            }
            // The stream's state.
            _ => Req {
                method: Method::HEAD,
                target: path.clone(),
                headers: Vec::new(),
                class: "head",
                slot: i,
            },
        };
        let is_snapshot = req.class.starts_with("snapshot");
        if is_snapshot && self.rng.chance(20) {
            let range = self.rng.pick(&["bytes=0-9", "bytes=-5", "bytes=3-"]);
            req.headers.push(("range", (*range).to_owned()));
        }
        if is_snapshot && req.class == "snapshot latest" && self.rng.chance(15) {
            req.method = Method::HEAD;
        }
        if req.method == Method::GET && !req.class.starts_with("chunk") && !is_snapshot {
            let accept = match self.rng.below(100) {
                0..35 => None,
                35..60 => Some("application/json"),
                60..75 => Some("application/x-ndjson"),
                75..85 => Some("*/*"),
                _ => Some("application/x-ndjson;q=0.5, application/json"),
            };
            if let Some(a) = accept {
                req.headers.push(("accept", a.to_owned()));
            }
        }
        if self.rng.chance(30) {
            if let Some(tag) = self.etags.get(&self.key(&req)) {
                req.headers.push(("if-none-match", tag.clone()));
            }
        }
        // Reads of forks and of soft-deleted paths, counted apart.
        let fork = self.slots[i]
            .current
            .as_ref()
            .is_some_and(|c| c.fork.is_some());
        let group = req.class.split(' ').next().unwrap_or("");
        if self.slots[i].gone {
            req.class = match group {
                "head" => "head soft-deleted",
                "chunk" => "chunk soft-deleted",
                "snapshot" => "snapshot soft-deleted",
                _ => "read soft-deleted",
            };
        } else if fork && group != "chunk" {
            req.class = match group {
                "head" => "head fork",
                "snapshot" => "snapshot fork",
                "long-poll" => "long-poll fork",
                _ => "read fork",
            };
        }
        req
    }

    /// What identifies a request for the `ETag` memory.
    pub(super) fn key(&self, req: &Req) -> String {
        let accept = req
            .headers
            .iter()
            .find(|(n, _)| *n == "accept")
            .map_or("", |(_, v)| v.as_str());
        format!("{} {} {accept}", req.method, req.target)
    }

    /// The request as the mismatch list shows it: streams by alias,
    /// incarnations by ordinal.
    pub(super) fn label(&self, req: &Req) -> String {
        let slot = &self.slots[req.slot];
        let mut t = req.target.replacen(&slot.path, &slot.alias, 1);
        for inc in slot.all() {
            t = t.replace(&inc.token, &format!("#{}", inc.ordinal));
        }
        let mut s = format!("{} {t}", req.method);
        for (n, v) in &req.headers {
            let _ = write!(s, " [{n}: {v}]");
        }
        s
    }

    async fn send(&self, base: String, req: &Req) -> Result<Got, String> {
        let mut b = self
            .http
            .request(req.method.clone(), format!("{base}{}", req.target));
        for (n, v) in &req.headers {
            b = b.header(*n, v);
        }
        let r = b.send().await.map_err(|e| format!("transport: {e}"))?;
        let status = r.status().as_u16();
        let mut headers = BTreeMap::new();
        for name in r.headers().keys() {
            if compared(name.as_str()) {
                let joined = r
                    .headers()
                    .get_all(name)
                    .iter()
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                    .collect::<Vec<_>>()
                    .join(", ");
                headers.insert(name.as_str().to_owned(), joined);
            }
        }
        let body = Bytes::from(without_request_id(
            &r.bytes().await.map_err(|e| format!("body: {e}"))?,
        ));
        Ok(Got {
            status,
            headers,
            body,
        })
    }

    pub(super) async fn compare(&mut self, req: Req) {
        let origin_base = self.stack.origin_base();
        let edge_base = self.stack.edge_base();
        let (o, e) = tokio::join!(self.send(origin_base, &req), self.send(edge_base, &req));
        self.reads += 1;
        *self.by_class.entry(req.class).or_default() += 1;
        if let Ok(o) = &o {
            *self.by_status.entry(o.status).or_default() += 1;
        }
        let diffs = match (&o, &e) {
            (Ok(o), Ok(e)) => differences(o, e),
            (o, e) => {
                let show = |r: &Result<Got, String>| match r {
                    Ok(g) => format!("status {}", g.status),
                    Err(e) => e.clone(),
                };
                vec![("transport".into(), show(o), show(e))]
            }
        };
        if let Ok(o) = &o {
            if let Some(tag) = o.headers.get("etag") {
                self.etags.insert(self.key(&req), tag.clone());
            }
        }
        if diffs.is_empty() {
            return;
        }
        let status = |r: &Result<Got, String>| r.as_ref().map_or(0, |g| g.status);
        let slot = &self.slots[req.slot];
        self.mismatches.push(Mismatch {
            seed: self.seed,
            op: self.op,
            op_desc: self.op_desc.clone(),
            request: self.label(&req),
            class: req.class,
            statuses: (status(&o), status(&e)),
            since: slot.last_change.0.clone(),
            since_ms: slot.last_change.1.map(|t| t.elapsed().as_millis()),
            invalidated: slot
                .invalidated
                .as_ref()
                .map(|(w, t)| (w.clone(), t.elapsed().as_millis())),
            fields: diffs,
        });
    }
}

/// One answer, as compared.
struct Got {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Bytes,
}

fn compared(name: &str) -> bool {
    name.starts_with("stream-")
        || matches!(
            name,
            "etag"
                | "content-type"
                | "cache-control"
                | "vary"
                | "location"
                | "content-location"
                | "content-range"
                | "accept-ranges"
                | "retry-after"
        )
}

/// The fields in which two answers differ: (field, origin's, edge's).
fn differences(o: &Got, e: &Got) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    if o.status != e.status {
        out.push(("status".into(), o.status.to_string(), e.status.to_string()));
    }
    let names: std::collections::BTreeSet<&String> =
        o.headers.keys().chain(e.headers.keys()).collect();
    for name in names {
        let (a, b) = (o.headers.get(name), e.headers.get(name));
        let differ = if name == "stream-cursor" {
            a.is_some() != b.is_some()
        } else {
            a != b
        };
        if differ {
            let show = |v: Option<&String>| match v {
                Some(v) if name == "stream-cursor" => format!("present ({v})"),
                Some(v) => v.clone(),
                None => "(absent)".into(),
            };
            out.push((name.clone(), show(a), show(b)));
        }
    }
    if o.body != e.body {
        let at = o
            .body
            .iter()
            .zip(e.body.iter())
            .position(|(a, b)| a != b)
            .unwrap_or(o.body.len().min(e.body.len()));
        let show = |b: &Bytes| {
            let end = (at + 24).min(b.len());
            format!(
                "{} bytes, at {at}: {:?}",
                b.len(),
                String::from_utf8_lossy(&b[at.min(end)..end])
            )
        };
        out.push(("body".into(), show(&o.body), show(&e.body)));
    }
    out
}
