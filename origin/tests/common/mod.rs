//! Shared setup of the origin's integration tests: a real origin on a
//! loopback port with its own data directory, and small HTTP helpers.
#![allow(dead_code)]

pub mod counting_proxy;
pub mod delay_proxy;
pub mod netns;
pub mod process;
pub mod region_roles;
pub mod s3;
pub mod seaweed;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use origin::clock::{Clock, SystemClock};
use origin::http::{HttpConfig, JsonReads};
use origin::server::Origin;
use origin::store::{Store, StoreConfig};
use tokio::sync::oneshot;

/// With `DS_TEST_DURABILITY=object`, a store on the default object store
/// (the data directory's folder) runs in object durability on the test binary's shared SeaweedFS,
/// under a prefix of its data directory's own (so a restart on the same
/// directory claims the same partition and replays it): the same tests,
/// the WAL in the bucket and the local disk rebuilt from it at each start.
pub fn in_test_durability(config: StoreConfig) -> StoreConfig {
    let default_store = StoreConfig::new(config.data.clone()).object_store;
    if std::env::var("DS_TEST_DURABILITY").as_deref() != Ok("object")
        || config.object_store != default_store
    {
        return config;
    }
    seaweed::object_durability(config, "tests")
}

/// An origin serving on loopback until dropped or stopped.
pub struct TestOrigin {
    pub addr: SocketAddr,
    pub data: PathBuf,
    /// The store, to stop its writer before the data directory goes away.
    store: Option<Store>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: Option<tempfile::TempDir>,
}

impl TestOrigin {
    pub async fn start() -> Self {
        Self::start_with(HttpConfig::default()).await
    }

    pub async fn start_array() -> Self {
        Self::start_with(HttpConfig {
            json_reads: JsonReads::Array,
            ..HttpConfig::default()
        })
        .await
    }

    pub async fn start_with(http: HttpConfig) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().to_owned();
        let mut o = Self::start_in(data, http, StoreConfig::new).await;
        o._dir = Some(dir);
        o
    }

    /// Starts with a clock the test moves (TTLs without sleeping).
    pub async fn start_with_clock(http: HttpConfig, clock: Arc<dyn Clock>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().to_owned();
        let mut o = Self::start_in_with_clock(data, http, StoreConfig::new, clock).await;
        o._dir = Some(dir);
        o
    }

    /// Starts on an existing data directory (restarts), keeping it afterwards.
    pub async fn start_in(
        data: PathBuf,
        http: HttpConfig,
        store: impl FnOnce(PathBuf) -> StoreConfig,
    ) -> Self {
        Self::start_in_with_clock(data, http, store, Arc::new(SystemClock)).await
    }

    pub async fn start_in_with_clock(
        data: PathBuf,
        http: HttpConfig,
        store: impl FnOnce(PathBuf) -> StoreConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let origin = Origin::open_with_clock(in_test_durability(store(data.clone())), http, clock)
            .expect("open origin");
        let store = Some(origin.state.store.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(origin.serve(listener, async move {
            let _ = stopped.await;
        }));
        TestOrigin {
            addr,
            data,
            store,
            stop: Some(stop),
            task: Some(task),
            _dir: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Graceful stop: waits for the writer's final checkpoint. Returns the
    /// data directory (kept alive by the returned guard, if any).
    pub async fn stop(mut self) -> (PathBuf, Option<tempfile::TempDir>) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .expect("origin stops")
                .expect("join")
                .expect("serve");
        }
        // Serving ended with the store's shutdown.
        self.store = None;
        (self.data.clone(), self._dir.take())
    }
}

impl Drop for TestOrigin {
    fn drop(&mut self) {
        // The writer thread outlives the test's runtime; were its data
        // directory removed under it, it would abort the whole test process
        // (as it must in production). Stop it first, on a thread of its own
        // since this may run inside the test's runtime, and only then let
        // serving stop (its own call to the store's shutdown would race this
        // one for the writer's handle).
        let stop = self.stop.take();
        match self.store.take() {
            Some(store) => {
                let dir = self._dir.take();
                let stopper = std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime");
                    rt.block_on(store.shutdown());
                    drop(dir);
                    if let Some(s) = stop {
                        let _ = s.send(());
                    }
                });
                let _ = stopper.join();
            }
            None => {
                if let Some(s) = stop {
                    let _ = s.send(());
                }
            }
        }
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .expect("client")
}

/// A unique stream path for a test.
pub fn stream_path(name: &str) -> String {
    format!("/v1/stream/{name}-{:016x}", rand_u64())
}

fn rand_u64() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

/// The value of a header as text, if present.
pub fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().expect("text header").to_owned())
}

/// Asserts an error answer's status and JSON error code, and the shape every
/// error answer shares: `{"error":{"code","message"}}`, `nosniff`, `no-store`.
pub async fn expect_error(
    resp: reqwest::Response,
    status: u16,
    code: &str,
) -> reqwest::header::HeaderMap {
    let url = resp.url().clone();
    assert_eq!(resp.status().as_u16(), status, "status of {url}");
    let headers = resp.headers().clone();
    assert_eq!(
        header(&resp, "content-type").as_deref(),
        Some("application/json"),
        "{url}"
    );
    assert_eq!(
        header(&resp, "x-content-type-options").as_deref(),
        Some("nosniff"),
        "{url}"
    );
    assert_eq!(
        header(&resp, "cache-control").as_deref(),
        Some("no-store"),
        "{url}"
    );
    let id = header(&resp, "x-request-id");
    let body: serde_json::Value = resp.json().await.expect("JSON error body");
    assert_eq!(
        body.as_object().map(|o| o.len()),
        Some(1),
        "only `error` in {body}"
    );
    assert_eq!(
        body["error"].as_object().map(|o| o.len()),
        Some(3),
        "only code, message and request_id in {body}"
    );
    // The body names the request it answers, as the answer's header does.
    assert_eq!(
        body["error"]["request_id"].as_str(),
        id.as_deref(),
        "{body}"
    );
    assert_eq!(
        body["error"]["code"], code,
        "error code in {body} from {url}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "message in {body}"
    );
    headers
}

/// Asserts the status of an error answer to `HEAD`, which has no body.
pub fn expect_head_error(resp: &reqwest::Response, status: u16) {
    assert_eq!(resp.status().as_u16(), status, "HEAD status");
    assert_eq!(
        header(resp, "content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(
        header(resp, "x-content-type-options").as_deref(),
        Some("nosniff")
    );
}

/// An origin and a client for it: the shape most protocol tests start from.
pub struct Api {
    pub origin: TestOrigin,
    pub http: reqwest::Client,
}

impl Api {
    pub async fn start() -> Self {
        Self::on(TestOrigin::start().await)
    }

    /// JSON streams read as JSON arrays (the upstream protocol's clients).
    pub async fn start_array() -> Self {
        Self::on(TestOrigin::start_array().await)
    }

    pub async fn start_with(http: HttpConfig) -> Self {
        Self::on(TestOrigin::start_with(http).await)
    }

    pub fn on(origin: TestOrigin) -> Self {
        Api {
            origin,
            http: client(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        self.origin.url(path)
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, self.url(path))
    }

    pub fn put(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.put(self.url(path))
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.post(self.url(path))
    }

    /// `GET` of a path with its query, e.g. `/s?offset=-1`.
    pub fn get(&self, path_and_query: &str) -> reqwest::RequestBuilder {
        self.http.get(self.url(path_and_query))
    }

    pub fn head(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.head(self.url(path))
    }

    pub fn delete(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.delete(self.url(path))
    }

    /// Creates a stream of `content_type` with no body, asserting 201.
    pub async fn create(&self, path: &str, content_type: &str) -> reqwest::Response {
        self.create_with(path, content_type, Vec::new()).await
    }

    /// Creates a stream with an initial body, asserting 201.
    pub async fn create_with(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<Vec<u8>>,
    ) -> reqwest::Response {
        let req = self
            .put(path)
            .header("content-type", content_type)
            .body(body.into());
        send_expecting(req, 201, &format!("create {path}")).await
    }

    /// A plain append, asserting 204; returns the answer.
    pub async fn append(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<Vec<u8>>,
    ) -> reqwest::Response {
        let req = self
            .post(path)
            .header("content-type", content_type)
            .body(body.into());
        send_expecting(req, 204, &format!("append to {path}")).await
    }

    /// Closes a stream with an empty append, asserting 204.
    pub async fn close(&self, path: &str) -> reqwest::Response {
        let resp = send(self.post(path).header("stream-closed", "true")).await;
        assert_eq!(resp.status().as_u16(), 204, "close {path}");
        resp
    }

    /// The whole stream from the start, asserting one 200 that reaches the end.
    pub async fn read_all(&self, path: &str) -> Vec<u8> {
        let resp = send(self.get(&format!("{path}?offset=-1"))).await;
        assert_eq!(resp.status().as_u16(), 200, "read {path}");
        assert_eq!(
            header(&resp, "stream-up-to-date").as_deref(),
            Some("true"),
            "read of {path} reaches the end"
        );
        resp.bytes().await.expect("body").to_vec()
    }

    /// The stream's end, from `HEAD`.
    pub async fn end(&self, path: &str) -> String {
        let resp = send(self.head(path)).await;
        assert_eq!(resp.status().as_u16(), 200, "HEAD {path}");
        header(&resp, "stream-next-offset").expect("Stream-Next-Offset on HEAD")
    }

    /// The value of a gauge or counter without labels on `/metrics`.
    pub async fn metric(&self, name: &str) -> i64 {
        let text = self.metrics().await;
        metric_in(&text, name).unwrap_or_else(|| panic!("metric {name} in {text}"))
    }

    /// The whole `/metrics` text.
    pub async fn metrics(&self) -> String {
        send(self.get("/metrics"))
            .await
            .text()
            .await
            .expect("metrics")
    }

    /// Polls `/metrics` until `name` equals `value`.
    pub async fn wait_for_metric(&self, name: &str, value: i64) {
        wait_until(&format!("{name} to reach {value}"), || async {
            self.metric(name).await == value
        })
        .await;
    }

    /// Makes an access key through the admin API (`admin` its token);
    /// answers its id and the key.
    pub async fn make_key(&self, admin: &str, body: serde_json::Value) -> (String, String) {
        let r = self
            .post("/_admin/keys")
            .bearer_auth(admin)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let v: serde_json::Value = r.json().await.unwrap();
        assert!(v.get("secret_sha256").is_some());
        (
            v["id"].as_str().unwrap().to_owned(),
            v["key"].as_str().unwrap().to_owned(),
        )
    }

    /// Opens an SSE tail (`GET {path}?{query}&live=sse`), asserting 200.
    pub async fn sse(&self, path: &str, query: &str) -> Sse {
        let resp = send(self.get(&format!("{path}?{query}&live=sse"))).await;
        assert_eq!(resp.status().as_u16(), 200, "SSE on {path}?{query}");
        Sse::new(resp, WAIT)
    }
}

/// Polls `cond` every [`POLL`] until it holds, failing after [`WAIT`].
pub async fn wait_until<F: std::future::Future<Output = bool>>(
    what: &str,
    mut cond: impl FnMut() -> F,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// How long a test waits for something that should happen soon.
pub const WAIT: Duration = Duration::from_secs(10);
/// How often it looks.
pub const POLL: Duration = Duration::from_millis(20);

/// The value of the series `name` (with its labels, if any) in a
/// `/metrics` text.
pub fn metric_in(text: &str, name: &str) -> Option<i64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The `/metrics` text of the server at `base` (`http://host:port`).
pub async fn metrics_at(http: &reqwest::Client, base: &str) -> String {
    send(http.get(format!("{base}/metrics")))
        .await
        .text()
        .await
        .expect("metrics")
}

/// Sends a request, panicking on transport errors.
pub async fn send(req: reqwest::RequestBuilder) -> reqwest::Response {
    req.send().await.expect("request")
}

/// An offset as the server writes it.
pub fn offset(pos: u64) -> String {
    format!("{pos:016x}")
}

#[allow(unused_imports)] // not every test binary reads SSE
pub use testkit::sse::{Sse, SseEvent};

/// Sends a request and asserts its status.
async fn send_expecting(
    req: reqwest::RequestBuilder,
    status: u16,
    what: &str,
) -> reqwest::Response {
    let resp = send(req).await;
    assert_eq!(resp.status().as_u16(), status, "{what}");
    resp
}
