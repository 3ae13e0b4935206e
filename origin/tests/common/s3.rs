//! An S3-compatible server (s3s-fs, installed by `scripts/setup`) on loopback.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use origin::objects::instrumented::Objects;
use origin::objects::open_with;

/// An s3s-fs server on a free loopback port with one bucket, `chunks`.
/// It can be stopped and started again on the same port and folder (outage
/// tests).
pub struct S3sFs {
    child: Option<Child>,
    endpoint: String,
    root: tempfile::TempDir,
}

impl S3sFs {
    pub fn start() -> S3sFs {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("chunks")).unwrap();
        let (child, endpoint) = Self::spawn(root.path(), 0);
        S3sFs {
            child: Some(child),
            endpoint,
            root,
        }
    }

    /// Kills the server (an outage); [`S3sFs::restart`] ends it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, with the same objects.
    pub fn restart(&mut self) {
        self.stop();
        let port: u16 = self
            .endpoint
            .rsplit(':')
            .next()
            .unwrap()
            .trim_end_matches('/')
            .parse()
            .unwrap();
        let (child, endpoint) = Self::spawn(self.root.path(), port);
        assert_eq!(
            endpoint, self.endpoint,
            "s3s-fs came back on the same address"
        );
        self.child = Some(child);
    }

    fn spawn(root: &std::path::Path, port: u16) -> (Child, String) {
        let mut child = Command::new(s3s_fs())
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--access-key",
                "test-key",
                "--secret-key",
                "test-secret",
            ])
            .arg(root)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("s3s-fs is installed (scripts/setup installs it)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let endpoint = loop {
            let line = lines.next().expect("s3s-fs prints its address").unwrap();
            if let Some(at) = line.find("http://") {
                break line[at..].trim().to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        (child, endpoint)
    }

    pub fn objects(&self) -> Objects {
        let settings = self.settings();
        let settings: Vec<(&str, &str)> = settings
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Objects::new(open_with(Self::URL, &settings).unwrap())
    }

    /// The objects' files on the server's disk, by path under its root
    /// (s3s-fs keeps one file per object; its sidecar files start with a
    /// dot and are left out).
    pub fn object_files(&self) -> Vec<String> {
        fn walk(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, root, out);
                } else if !e.file_name().to_string_lossy().starts_with('.') {
                    out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
                }
            }
        }
        let mut out = Vec::new();
        walk(self.root.path(), self.root.path(), &mut out);
        out.sort();
        out
    }

    /// The store's URL for the origin.
    pub const URL: &'static str = "s3://chunks/origin-test";

    /// S3 settings that reach this server.
    pub fn settings(&self) -> Vec<(String, String)> {
        [
            ("aws_endpoint", self.endpoint.as_str()),
            ("aws_access_key_id", "test-key"),
            ("aws_secret_access_key", "test-secret"),
            ("aws_region", "us-east-1"),
            ("aws_allow_http", "true"),
            ("aws_virtual_hosted_style_request", "false"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

/// Polls until `key` is gone from object storage (garbage collection is
/// asynchronous; a generous deadline).
pub async fn wait_gone(objects: &Objects, key: &object_store::path::Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while objects.get(key).await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "{key} was never collected"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

impl Drop for S3sFs {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The s3s-fs command: on `PATH`, else where `scripts/setup` puts it, so
/// a plain `cargo test` finds it too.
fn s3s_fs() -> std::path::PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("s3s-fs"))
        .find(|p| p.is_file());
    let tools = std::env::var_os("DS_TOOLS_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache/ds-tools"))
        });
    on_path
        .or_else(|| tools.map(|t| t.join("bin/s3s-fs")))
        .unwrap_or_else(|| "s3s-fs".into())
}
