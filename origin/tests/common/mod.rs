//! Shared setup of the origin's integration tests: a real origin on a
//! loopback port with its own data directory, and small HTTP helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use origin::http::{HttpConfig, JsonReads};
use origin::server::Origin;
use origin::store::StoreConfig;
use tokio::sync::oneshot;

/// An origin serving on loopback until dropped or stopped.
pub struct TestOrigin {
    pub addr: SocketAddr,
    pub data: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: Option<tempfile::TempDir>,
}

impl TestOrigin {
    pub async fn start() -> Self {
        Self::start_with(HttpConfig::default()).await
    }

    pub async fn start_array() -> Self {
        Self::start_with(HttpConfig { json_reads: JsonReads::Array, ..HttpConfig::default() }).await
    }

    pub async fn start_with(http: HttpConfig) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().to_owned();
        let mut o = Self::start_in(data, http, StoreConfig::new).await;
        o._dir = Some(dir);
        o
    }

    /// Starts on an existing data directory (restarts), keeping it afterwards.
    pub async fn start_in(data: PathBuf, http: HttpConfig, store: impl FnOnce(PathBuf) -> StoreConfig) -> Self {
        let origin = Origin::open(store(data.clone()), http).expect("open origin");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(origin.serve(listener, async move {
            let _ = stopped.await;
        }));
        TestOrigin { addr, data, stop: Some(stop), task: Some(task), _dir: None }
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
            tokio::time::timeout(Duration::from_secs(30), t).await.expect("origin stops").expect("join").expect("serve");
        }
        (self.data.clone(), self._dir.take())
    }
}

impl Drop for TestOrigin {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(64).build().expect("client")
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
    resp.headers().get(name).map(|v| v.to_str().expect("text header").to_owned())
}

/// Asserts an error answer's status and JSON error code.
pub async fn expect_error(resp: reqwest::Response, status: u16, code: &str) -> reqwest::header::HeaderMap {
    assert_eq!(resp.status().as_u16(), status, "status");
    let headers = resp.headers().clone();
    assert_eq!(header(&resp, "content-type").as_deref(), Some("application/json"));
    let body: serde_json::Value = resp.json().await.expect("JSON error body");
    assert_eq!(body["error"]["code"], code, "error code in {body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "message in {body}");
    headers
}
