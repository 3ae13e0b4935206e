//! Shared setup of the edge's integration tests: a real origin and a real
//! edge, each on its own loopback port, and small HTTP helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use edge::config::{EdgeConfig, Limits};
use edge::http::Shared;
use edge::server::Edge;
use origin::http::{HttpConfig, JsonReads};
use origin::server::Origin;
use origin::store::{Store, StoreConfig};
use tokio::sync::oneshot;

/// An HTTP/1.1 hop (nginx) between edge and origin (`DS_TEST_HOP=nginx`).
pub mod hop;
/// A region origin's role, from its metrics.
#[path = "../../../origin/tests/common/region_roles.rs"]
pub mod region_roles;
/// SeaweedFS for origins in object durability (`DS_TEST_DURABILITY=object`).
#[path = "../../../origin/tests/common/seaweed.rs"]
pub mod seaweed;

/// With `DS_TEST_DURABILITY=object`, every origin runs in object
/// durability: one that seals nowhere on the test binary's shared
/// SeaweedFS, under a prefix of its data directory's own (a restart
/// replays the same partition), one that seals into a test's folder on
/// that folder. Every edge test then also runs against an origin whose WAL
/// is in the bucket.
fn in_test_durability(store: StoreConfig) -> StoreConfig {
    if std::env::var("DS_TEST_DURABILITY").as_deref() != Ok("object") {
        return store;
    }
    if store.object_store.is_some() {
        // The test's own bucket (a folder the edge reads chunks from):
        // the WAL goes there too (a folder's create-only puts are atomic
        // on one machine, and one origin writes it).
        return seaweed::single_owner(store);
    }
    seaweed::object_durability(store, "edge-tests")
}

/// How long a test waits for something that should happen soon.
pub const WAIT: Duration = Duration::from_secs(30);
/// How often it looks.
pub const POLL: Duration = Duration::from_millis(20);

/// An origin serving on loopback until dropped.
pub struct TestOrigin {
    pub addr: SocketAddr,
    store: Option<Store>,
    stop: Option<oneshot::Sender<()>>,
    dir: Option<tempfile::TempDir>,
    http: HttpConfig,
    url: Option<String>,
}

impl TestOrigin {
    pub async fn start(json_reads: JsonReads) -> Self {
        Self::start_sealing(json_reads, None).await
    }

    /// An origin that seals complete chunks into the object store at `url`.
    pub async fn start_sealing(json_reads: JsonReads, url: Option<String>) -> Self {
        let http = HttpConfig {
            json_reads,
            ..HttpConfig::default()
        };
        Self::start_http(http, url).await
    }

    /// An origin with this HTTP configuration (access control, limits).
    pub async fn start_http(http: HttpConfig, url: Option<String>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let mut o = TestOrigin {
            addr: listener.local_addr().expect("addr"),
            store: None,
            stop: None,
            dir: Some(dir),
            http,
            url,
        };
        o.serve(listener);
        o
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let data = self.dir.as_ref().expect("data dir").path().to_owned();
        let mut store = StoreConfig::new(data);
        store.object_store = self.url.clone();
        let origin = Origin::open(in_test_durability(store), self.http.clone()).expect("origin");
        self.store = Some(origin.state.store.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(origin.serve(listener, async move {
            let _ = stopped.await;
        }));
        self.stop = Some(stop);
    }

    /// Stops the origin gracefully and starts it again on the same address
    /// and data (an origin restart, as the edge sees it).
    pub async fn restart(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(store) = self.store.take() {
            store.shutdown().await;
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        let listener = loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "rebind {}: {e}",
                        self.addr
                    );
                    tokio::time::sleep(POLL).await;
                }
            }
        };
        self.serve(listener);
    }
}

impl Drop for TestOrigin {
    fn drop(&mut self) {
        // Stop the store's writer thread before its directory goes away
        // (as the origin's own tests do), on a thread of its own since this
        // may run inside the test's runtime.
        let stop = self.stop.take();
        let store = self.store.take();
        let dir = self.dir.take();
        let _ = std::thread::spawn(move || {
            if let Some(store) = store {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(store.shutdown());
            }
            drop(dir);
            if let Some(s) = stop {
                let _ = s.send(());
            }
        })
        .join();
    }
}

/// An edge in front of an origin, both on loopback.
pub struct Stack {
    pub origin: TestOrigin,
    pub edge_addr: SocketAddr,
    pub edge: Shared,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    bucket: Option<tempfile::TempDir>,
}

impl Stack {
    pub async fn start() -> Self {
        Self::start_with(JsonReads::Ndjson, Limits::default()).await
    }

    /// An origin and an edge already serving in front of it.
    pub fn around(origin: TestOrigin, (edge_addr, edge, stop, task): Served) -> Self {
        Stack {
            origin,
            edge_addr,
            edge,
            http: client(),
            stop: Some(stop),
            task: Some(task),
            bucket: None,
        }
    }

    pub async fn start_with(json_reads: JsonReads, limits: Limits) -> Self {
        let origin = TestOrigin::start(json_reads).await;
        let served = start_edge(&format!("http://{}", origin.addr), limits).await;
        Self::around(origin, served)
    }

    /// Origin and edge sharing a bucket (a folder): the origin seals
    /// complete chunks into it, the edge reads them from it.
    pub async fn start_with_bucket() -> Self {
        Self::start_with_bucket_and_cache(64 << 20).await
    }

    /// The same, with an edge cache of `cache_bytes`.
    pub async fn start_with_bucket_and_cache(cache_bytes: u64) -> Self {
        Self::start_built(JsonReads::Ndjson, true, true, cache_bytes).await
    }

    /// Origin and edge with a choice of the origin's JSON read mode, whether
    /// the origin seals complete chunks (and keeps snapshots) in a bucket of
    /// its own, and whether the edge reads that bucket too.
    pub async fn start_custom(
        json_reads: JsonReads,
        sealing: bool,
        edge_reads_bucket: bool,
    ) -> Self {
        Self::start_built(json_reads, sealing, edge_reads_bucket, 64 << 20).await
    }

    async fn start_built(
        json_reads: JsonReads,
        sealing: bool,
        edge_reads_bucket: bool,
        cache_bytes: u64,
    ) -> Self {
        let bucket = sealing.then(|| tempfile::tempdir().expect("bucket"));
        let url = bucket
            .as_ref()
            .map(|b| format!("file://{}", b.path().display()));
        let origin = TestOrigin::start_sealing(json_reads, url.clone()).await;
        let mut config = EdgeConfig::new(
            format!("http://{}", origin.addr)
                .parse()
                .expect("origin url"),
            cache_bytes,
        )
        .expect("config");
        if edge_reads_bucket {
            config.object_store = url;
        }
        let (edge_addr, edge, stop, task) = serve_edge(config).await;
        Stack {
            origin,
            edge_addr,
            edge,
            http: client(),
            stop: Some(stop),
            task: Some(task),
            bucket,
        }
    }

    /// A URL on the edge.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.edge_addr, path)
    }

    /// A GET of `path_and_query` on the edge, sent; panics when it cannot
    /// be sent.
    pub async fn get(&self, path_and_query: &str) -> reqwest::Response {
        self.http
            .get(self.url(path_and_query))
            .send()
            .await
            .expect("a GET on the edge")
    }

    /// A URL on the origin itself.
    pub fn origin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.origin.addr, path)
    }

    /// Stops the edge gracefully; returns how long it took.
    pub async fn stop_edge(&mut self) -> Duration {
        let t = std::time::Instant::now();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(WAIT, task)
                .await
                .expect("the edge stops")
                .expect("join")
                .expect("serve");
        }
        t.elapsed()
    }

    /// Puts a newly started edge in place of the stopped one.
    pub fn replace_edge(
        &mut self,
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        self.stop = Some(stop);
        self.task = Some(task);
    }

    /// Creates a stream through the edge, asserting 201; the answer.
    pub async fn create(&self, path: &str, content_type: &str) -> reqwest::Response {
        let r = self
            .http
            .put(self.url(path))
            .header("content-type", content_type)
            .send()
            .await
            .expect("create");
        assert_eq!(r.status().as_u16(), 201, "create {path}");
        r
    }

    /// Appends through the edge, asserting 204.
    pub async fn append(&self, path: &str, content_type: &str, body: impl Into<Vec<u8>>) {
        let r = self
            .http
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body.into())
            .send()
            .await
            .expect("append");
        assert_eq!(r.status().as_u16(), 204, "append to {path}");
    }

    /// One value of the edge's `/metrics` (a full series name, labels and all).
    pub async fn metric(&self, series: &str) -> i64 {
        metric_at(&self.http, &self.url("/metrics"), series).await
    }

    /// Polls the edge's `/metrics` until `series` satisfies `ok`.
    pub async fn wait_metric(&self, series: &str, ok: impl Fn(i64) -> bool) -> i64 {
        wait_metric_at(&self.http, &self.url("/metrics"), series, ok).await
    }
}

/// One value of the `/metrics` page at `url` (a full series name).
pub async fn metric_at(http: &reqwest::Client, url: &str, series: &str) -> i64 {
    let text = http
        .get(url)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    metric_value(&text, series).unwrap_or_else(|| panic!("{series} in {text}"))
}

/// Polls the `/metrics` page at `url` until `series` satisfies `ok`.
pub async fn wait_metric_at(
    http: &reqwest::Client,
    url: &str,
    series: &str,
    ok: impl Fn(i64) -> bool,
) -> i64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let v = metric_at(http, url, series).await;
        if ok(v) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} stayed at {v} for {WAIT:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Starts an edge in front of `origin` on a free loopback port.
pub async fn start_edge(origin: &str, limits: Limits) -> Served {
    let mut config =
        EdgeConfig::new(origin.parse().expect("origin url"), 64 << 20).expect("config");
    config.limits = limits;
    serve_edge(config).await
}

/// The handles of an edge serving in this process.
pub type Served = (
    SocketAddr,
    Shared,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
);

/// Serves an edge with `config` on a free loopback port, once it follows
/// the origin's invalidation feed.
pub async fn serve_edge(config: EdgeConfig) -> Served {
    let served = spawn_edge(config).await;
    wait_for_feed(&served.1).await;
    served
}

/// Serves an edge with `config` on a free loopback port at once (its
/// origin may be unreachable). With `DS_TEST_HOP=nginx`, it reaches each
/// origin through an HTTP/1.1 hop of its own (`hop`).
pub async fn spawn_edge(mut config: EdgeConfig) -> Served {
    config.origin = hop::through_hops(&config.origin);
    for o in &mut config.more_origins {
        *o = hop::through_hops(o);
    }
    spawn_edge_direct(config).await
}

/// [`serve_edge`] without `DS_TEST_HOP`'s hops (a test that puts its own
/// between edge and origin).
pub async fn serve_edge_direct(config: EdgeConfig) -> Served {
    let served = spawn_edge_direct(config).await;
    wait_for_feed(&served.1).await;
    served
}

/// [`spawn_edge`] without `DS_TEST_HOP`'s hops.
pub async fn spawn_edge_direct(config: EdgeConfig) -> Served {
    let edge = Edge::new(config).expect("edge");
    let state = edge.state.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(edge.serve(listener, async move {
        let _ = stopped.await;
    }));
    (addr, state, stop, task)
}

/// Waits until the edge follows the origin's invalidation feed: before, it
/// answers nothing from memory, and tests that count cache hits would
/// count the few requests that came first.
pub async fn wait_for_feed(state: &Shared) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !state.feed.is_live() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the edge did not follow the origin's invalidation feed within {WAIT:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

pub fn metric_value(text: &str, series: &str) -> Option<i64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(2048)
        .build()
        .expect("client")
}

/// An answer's headers, sorted, without `volatile` ones (that differ
/// between two answers to one request for reasons other than the edge) and
/// without what an HTTP hop (`DS_TEST_HOP`) adds of its own (`Server`).
pub fn comparable_headers(resp: &reqwest::Response, volatile: &[&str]) -> Vec<(String, String)> {
    let mut v: Vec<_> = resp
        .headers()
        .iter()
        .filter(|(k, _)| !volatile.contains(&k.as_str()) && !hop::added_by_hop(k.as_str()))
        .map(|(k, v)| (k.to_string(), v.to_str().expect("text").to_owned()))
        .collect();
    v.sort();
    v
}

/// A unique stream path for a test.
pub fn stream_path(name: &str) -> String {
    format!("/v1/stream/{name}-{:016x}", rand::random::<u64>())
}

/// The value of a header as text, if present.
pub fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().expect("text header").to_owned())
}

/// An offset as the servers write it.
pub fn offset(pos: u64) -> String {
    format!("{pos:016x}")
}

#[allow(unused_imports)] // not every test binary reads SSE
pub use testkit::sse::{Sse, SseEvent};

/// An error body without its `request_id`: it names the request that made
/// the error (each request its own; for an answer the edge shares between
/// readers, the first reader's), so two answers to two requests differ in
/// it and nothing else.
pub fn without_request_id(body: &[u8]) -> Vec<u8> {
    const KEY: &[u8] = b",\"request_id\":\"";
    let Some(at) = body.windows(KEY.len()).position(|w| w == KEY) else {
        return body.to_vec();
    };
    let rest = &body[at + KEY.len()..];
    let Some(end) = rest.iter().position(|b| *b == b'"') else {
        return body.to_vec();
    };
    let mut out = body[..at].to_vec();
    out.extend_from_slice(&rest[end + 1..]);
    out
}
