//! Shared setup of `ds`'s tests: a real origin (its own data directory) and
//! a real edge in front of it, in process on loopback ports, and the real
//! `ds` binary run as a child process against either.
#![allow(dead_code)]

/// SeaweedFS for the region test (`weed`, installed by `scripts/setup`).
#[path = "../../../origin/tests/common/seaweed.rs"]
pub mod seaweed;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use edge::config::EdgeConfig;
use edge::server::Edge;
use origin::auth::AuthConfig;
use origin::http::HttpConfig;
use origin::server::Origin;
use origin::store::{Store, StoreConfig};
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;

/// The origin's admin token in these tests.
pub const ADMIN: &str = "cli-admin-token";
/// How long a test waits for something that should happen soon.
pub const WAIT: Duration = Duration::from_secs(30);

/// An origin and an edge in front of it, serving until dropped.
pub struct Servers {
    pub origin: SocketAddr,
    pub edge: SocketAddr,
    store: Option<Store>,
    stops: Vec<oneshot::Sender<()>>,
    dir: Option<tempfile::TempDir>,
    /// `XDG_STATE_HOME` of every `ds` run (producer state).
    pub state: tempfile::TempDir,
}

impl Servers {
    pub async fn start() -> Self {
        Self::start_with_sessions(Duration::from_secs(60)).await
    }

    /// Servers that end every SSE session after `sse_session`, so a tail
    /// reconnects.
    pub async fn start_with_sessions(sse_session: Duration) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let http = HttpConfig {
            auth: AuthConfig {
                admin_token: Some(ADMIN.into()),
                ..AuthConfig::default()
            },
            sse_session,
            ..HttpConfig::default()
        };
        let origin = Origin::open(StoreConfig::new(dir.path().to_owned()), http).expect("origin");
        let store = origin.state.store.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let origin_addr = listener.local_addr().expect("addr");
        let (stop_origin, stopped) = oneshot::channel::<()>();
        tokio::spawn(origin.serve(listener, async move {
            let _ = stopped.await;
        }));
        let mut config = EdgeConfig::new(
            format!("http://{origin_addr}").parse().expect("origin url"),
            64 << 20,
        )
        .expect("edge config");
        config.limits.sse_session = sse_session;
        let edge = Edge::new(config).expect("edge");
        let feed = edge.state.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let edge_addr = listener.local_addr().expect("addr");
        let (stop_edge, stopped) = oneshot::channel::<()>();
        tokio::spawn(edge.serve(listener, async move {
            let _ = stopped.await;
        }));
        let deadline = tokio::time::Instant::now() + WAIT;
        while !feed.feed.is_live() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the edge follows its origin"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Servers {
            origin: origin_addr,
            edge: edge_addr,
            store: Some(store),
            stops: vec![stop_edge, stop_origin],
            dir: Some(dir),
            state: tempfile::tempdir().expect("state dir"),
        }
    }

    pub fn origin_url(&self) -> String {
        format!("http://{}", self.origin)
    }

    pub fn edge_url(&self) -> String {
        format!("http://{}", self.edge)
    }

    /// Both servers' URLs, each with its name for messages.
    pub fn targets(&self) -> [(&'static str, String); 2] {
        [("origin", self.origin_url()), ("edge", self.edge_url())]
    }

    /// `ds` with `args` against `url`.
    pub fn ds(&self, url: &str, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_ds"));
        c.args(args)
            .env("DS_URL", url)
            .env_remove("DS_KEY")
            .env_remove("DS_ADMIN_TOKEN")
            .env("XDG_STATE_HOME", self.state.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    /// Runs `ds` to its end; what it printed and its exit code.
    pub async fn run(&self, url: &str, args: &[&str]) -> Ran {
        self.run_with_stdin(url, args, None).await
    }

    /// The same, with bytes on its standard input.
    pub async fn run_with_stdin(&self, url: &str, args: &[&str], stdin: Option<&[u8]>) -> Ran {
        let mut c = self.ds(url, args);
        if stdin.is_some() {
            c.stdin(Stdio::piped());
        }
        let mut child = c.spawn().expect("ds runs");
        if let Some(bytes) = stdin {
            let mut pipe = child.stdin.take().expect("stdin");
            pipe.write_all(bytes).await.expect("write stdin");
            drop(pipe);
        }
        let out = tokio::time::timeout(WAIT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("ds {args:?} ends within {WAIT:?}"))
            .expect("ds output");
        Ran {
            code: out.status.code().expect("an exit code"),
            stdout: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// The stream's length in bytes, asked of the origin directly.
    pub async fn length(&self, path: &str) -> u64 {
        let r = reqwest::Client::new()
            .head(format!("{}{path}", self.origin_url()))
            .send()
            .await
            .expect("HEAD");
        let next = r
            .headers()
            .get("stream-next-offset")
            .expect("next offset")
            .to_str()
            .expect("text");
        u64::from_str_radix(next, 16).expect("hex offset")
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
        // The store's writer stops before its directory goes away, on a
        // thread of its own since this may run inside the test's runtime.
        let store = self.store.take();
        let dir = self.dir.take();
        let _ = std::thread::spawn(move || {
            if let Some(store) = store {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime")
                    .block_on(store.shutdown());
            }
            drop(dir);
        })
        .join();
    }
}

/// A finished run of `ds`.
#[derive(Debug)]
pub struct Ran {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub args: Vec<String>,
}

impl Ran {
    /// Asserts exit 0; its stdout as text.
    pub fn ok(&self) -> String {
        assert_eq!(
            self.code,
            0,
            "ds {:?} failed: {}{}",
            self.args,
            self.stderr,
            String::from_utf8_lossy(&self.stdout)
        );
        self.text()
    }

    /// Asserts this exit code and that stderr is one line starting `ds: `
    /// and holding `needle`.
    pub fn fails(&self, code: i32, needle: &str) {
        assert_eq!(
            self.code,
            code,
            "ds {:?}: {} / {}",
            self.args,
            self.stderr,
            self.text()
        );
        assert!(
            self.stderr.starts_with("ds: ") && self.stderr.trim_end().lines().count() == 1,
            "one line on stderr: {:?}",
            self.stderr
        );
        assert!(
            self.stderr.contains(needle),
            "{needle:?} in {:?}",
            self.stderr
        );
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Its stdout as one JSON object.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.stdout)
            .unwrap_or_else(|e| panic!("JSON from ds {:?}: {e}: {}", self.args, self.text()))
    }
}

/// A unique stream name for a test.
pub fn name(base: &str) -> String {
    format!("{base}-{:016x}", rand_u64())
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_nanos(),
    );
    h.finish()
}

/// A file of `lines` numbered lines in `dir`; its path and contents.
pub fn numbered_lines(dir: &Path, lines: usize) -> (PathBuf, Vec<u8>) {
    let mut text = Vec::new();
    for i in 0..lines {
        text.extend_from_slice(format!("line-{i:06}\n").as_bytes());
    }
    let path = dir.join(format!("lines-{lines}.txt"));
    std::fs::write(&path, &text).expect("write lines");
    (path, text)
}
