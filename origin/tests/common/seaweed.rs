//! SeaweedFS (`weed mini`, installed by `scripts/setup`) on loopback: the
//! S3-compatible server whose conditional puts are atomic, for everything
//! that rests on them (fencing). s3s-fs checks and then writes, so racing
//! creates can all win there.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// One `weed mini` with the bucket `region`, killed when dropped. One at
/// a time in a test binary: several starting at once on two cores took
/// past a minute.
pub struct Seaweed {
    child: Child,
    pub endpoint: String,
    dir: tempfile::TempDir,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Free loopback ports (bound and let go: another process could take one
/// between, which fails the start loudly, not silently).
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// `weed mini`'s arguments for a server in `dir` on free ports of `ip`,
/// and its S3 endpoint.
fn mini_args(dir: &std::path::Path, ip: &str) -> (Vec<String>, String) {
    let p = free_ports(12);
    let mut args = vec![
        "mini".to_owned(),
        format!("-dir={}", dir.display()),
        format!("-ip={ip}"),
        format!("-ip.bind={ip}"),
        "-admin.ui=false".to_owned(),
        format!("-bucket={}", Seaweed::BUCKET),
    ];
    let names = [
        "master.port",
        "master.port.grpc",
        "volume.port",
        "volume.port.grpc",
        "filer.port",
        "filer.port.grpc",
        "s3.port",
        "s3.port.grpc",
        "admin.port",
        "admin.port.grpc",
        "webdav.port",
        "debug.port",
    ];
    args.extend(names.iter().zip(&p).map(|(n, port)| format!("-{n}={port}")));
    (args, format!("http://{ip}:{}", p[6]))
}

fn weed() -> String {
    std::env::var("WEED").unwrap_or_else(|_| "weed".into())
}

impl Seaweed {
    pub const BUCKET: &'static str = "region";

    /// Starts one, on fresh ports each try: a start that does not answer
    /// within [`START_PATIENCE`] (seen under heavy load, another process
    /// taking one of its ports meanwhile) is killed and tried again.
    pub fn start() -> Seaweed {
        Self::start_on("127.0.0.1")
    }

    /// [`Seaweed::start`] listening on `ip` (a test network's gateway,
    /// `netns`), on ports free on loopback.
    pub fn start_on(ip: &str) -> Seaweed {
        let guard = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for attempt in 1..=START_TRIES {
            let dir = tempfile::tempdir().unwrap();
            let log = std::fs::File::create(dir.path().join("weed.log")).unwrap();
            let (args, endpoint) = mini_args(dir.path(), ip);
            let mut child = Command::new(weed())
                .args(args)
                .current_dir(dir.path())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("weed is installed (scripts/setup installs SeaweedFS)");
            match listing_within(&endpoint, START_PATIENCE) {
                Ok(()) => {
                    return Seaweed {
                        child,
                        endpoint,
                        dir,
                        _one_at_a_time: guard,
                    }
                }
                Err(()) if attempt < START_TRIES => {
                    eprintln!(
                        "SeaweedFS did not come up within {START_PATIENCE:?}; starting it again"
                    );
                    let _ = child.kill();
                    let _ = child.wait();
                }
                Err(()) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "SeaweedFS did not come up; its log ends:\n{}",
                        log_tail(dir.path())
                    );
                }
            }
        }
        unreachable!("the last try panics")
    }

    /// Sends `signal` (e.g. "STOP" for an outage, "CONT" to end it).
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
    }

    /// The port its S3 endpoint listens on.
    pub fn s3_port(&self) -> u16 {
        self.endpoint
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the S3 endpoint names its port")
    }

    /// The URL of a store under `prefix` in the bucket.
    pub fn url(prefix: &str) -> String {
        format!("s3://{}/{prefix}", Self::BUCKET)
    }

    /// S3 settings that reach this server.
    pub fn settings(&self) -> Vec<(String, String)> {
        settings_for(&self.endpoint)
    }

    /// The same settings as environment variables, for a child origin.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ENDPOINT_URL".into(), self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID".into(), "any".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "any".into()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_ALLOW_HTTP".into(), "true".into()),
        ]
    }

    /// A store under `prefix`, opened as the origin opens it.
    pub fn store(&self, prefix: &str) -> std::sync::Arc<dyn object_store::ObjectStore> {
        let settings = self.settings();
        let settings: Vec<(&str, &str)> = settings
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        origin::objects::open_with(&Self::url(prefix), &settings).unwrap()
    }
}

/// One `weed mini` for a whole test binary ([`shared`]), for tests that
/// run the origin in object durability (`DS_TEST_DURABILITY=object`). It
/// runs under a shell that kills it and deletes its directory once this
/// process's end of its stdin closes, that is when the test binary exits,
/// however it exits (each left behind ~160 MB in the temporary directory).
pub struct SharedWeed {
    pub endpoint: String,
    _stdin: std::process::ChildStdin,
    /// The shell; it exits (and is reaped by init) with the test binary.
    _shell: Child,
}

static SHARED: std::sync::OnceLock<SharedWeed> = std::sync::OnceLock::new();

/// The test binary's shared SeaweedFS, started on first use.
pub fn shared() -> &'static SharedWeed {
    SHARED.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ds-weed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (args, endpoint) = mini_args(&dir, "127.0.0.1");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(concat!(
                r#"dir=$1; shift; "$@" </dev/null >"$dir/weed.log" 2>&1 & pid=$!; "#,
                r#"read _; kill -9 $pid; wait $pid; rm -rf "$dir""#
            ))
            .arg("sh")
            .arg(&dir)
            .arg(weed())
            .args(args)
            .current_dir(&dir)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("sh and weed are installed (scripts/setup installs SeaweedFS)");
        let stdin = child.stdin.take().expect("stdin");
        wait_listing(&endpoint, &dir);
        SharedWeed {
            endpoint,
            _stdin: stdin,
            _shell: child,
        }
    })
}

/// `store` in object durability on the shared SeaweedFS, under `root`
/// and a prefix of its data directory's own (a restart on the same
/// directory claims the same partition and replays it).
pub fn object_durability(
    mut store: origin::store::StoreConfig,
    root: &str,
) -> origin::store::StoreConfig {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(store.data.as_os_str().as_encoded_bytes());
    store.object_store = Some(Seaweed::url(&format!(
        "{root}/{}",
        hex::encode(&digest[..8])
    )));
    store.object_store_settings = shared().settings();
    single_owner(store)
}

/// `store` in object durability on the object store it names, as the one
/// origin writing it.
pub fn single_owner(mut store: origin::store::StoreConfig) -> origin::store::StoreConfig {
    store.durability = origin::store::Durability::Object;
    store.region.node = "test".into();
    store.region.url = "http://test.invalid".into();
    store
}

impl SharedWeed {
    /// S3 settings that reach this server.
    pub fn settings(&self) -> Vec<(String, String)> {
        settings_for(&self.endpoint)
    }
}

fn settings_for(endpoint: &str) -> Vec<(String, String)> {
    [
        ("aws_endpoint", endpoint),
        ("aws_access_key_id", "any"),
        ("aws_secret_access_key", "any"),
        ("aws_region", "us-east-1"),
        ("aws_allow_http", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Tries of [`Seaweed::start`], and how long each waits.
const START_TRIES: u32 = 3;
const START_PATIENCE: Duration = Duration::from_secs(30);

/// Until the bucket at `endpoint` answers a listing (a real request, not a
/// port probe); panics with the end of the log in `dir` after a minute.
fn wait_listing(endpoint: &str, dir: &std::path::Path) {
    if listing_within(endpoint, Duration::from_secs(60)).is_err() {
        panic!(
            "SeaweedFS did not come up; its log ends:\n{}",
            log_tail(dir)
        );
    }
}

/// Whether the bucket at `endpoint` answers a listing within `patience`.
fn listing_within(endpoint: &str, patience: Duration) -> Result<(), ()> {
    let deadline = Instant::now() + patience;
    let url = format!("{}/{}/", endpoint, Seaweed::BUCKET);
    loop {
        let ok = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &url])
            .output()
            .map(|o| o.stdout == b"200")
            .unwrap_or(false);
        if ok {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The end of the SeaweedFS log in `dir`.
fn log_tail(dir: &std::path::Path) -> String {
    let log = std::fs::read_to_string(dir.join("weed.log")).unwrap_or_default();
    log[log.len().saturating_sub(4000)..].to_owned()
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        // `weed` does not always stop on SIGTERM alone.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
