//! The systems under test, each a child process on a free loopback port:
//! how to start it, where its streams live, and what an acknowledged append
//! promises (its durability class). One system runs at a time, so none
//! shares the two cores with another.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::append::{connect, send};
use crate::compare::address_in;

/// Which numbers a system's numbers are compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// The bare-hyper ceiling: stores nothing.
    Ceiling,
    /// An acknowledged append survives power loss.
    Durable,
    /// An acknowledged append survives neither power loss nor (in memory) a
    /// process crash.
    Memory,
}

impl Class {
    pub fn label(self) -> &'static str {
        match self {
            Class::Ceiling => "none",
            Class::Durable => "durable",
            Class::Memory => "memory",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Ceiling,
    Origin,
    /// Our edge in front of our origin: every request goes through the edge.
    Edge,
    Ursula,
    Node,
    /// Electric's Rust server, the `durable-streams` crate.
    Electric,
}

#[derive(Debug)]
pub struct System {
    pub name: &'static str,
    pub kind: Kind,
    pub class: Class,
    /// What an acknowledged append promises, for the table's notes.
    pub durability: &'static str,
}

/// Every system, durable ones first; the table keeps this order.
pub static SYSTEMS: &[System] = &[
    System {
        name: "ceiling",
        kind: Kind::Ceiling,
        class: Class::Ceiling,
        durability: "bare hyper: answers at once, stores nothing",
    },
    System {
        name: "origin-sync",
        kind: Kind::Origin,
        class: Class::Durable,
        durability: "ours, default `--durability sync`: fdatasync of the WAL per group commit before the ack",
    },
    System {
        name: "edge-sync",
        kind: Kind::Edge,
        class: Class::Durable,
        durability: "ours through the edge: origin-sync behind `edge` (writes forwarded, reads from its caches, long-polls collapsed, SSE fanned out); server CPU is the edge's alone",
    },
    System {
        name: "ursula-disk",
        kind: Kind::Ursula,
        class: Class::Durable,
        durability: "Ursula 0.11.5, one Raft voter on its disk WAL; fsync resolves to `always`: a batch is fsynced before the ack",
    },
    System {
        name: "electric",
        kind: Kind::Electric,
        class: Class::Durable,
        durability: "Electric's durable-streams 0.1.5, default `--durability wal`: written to the stream's file (page cache) and staged in one of its WAL shards (one per core); the ack waits for that shard's group-commit fdatasync of the WAL (stream files are fdatasynced at a checkpoint every 3 s, off the ack path; producer dedup state reaches disk at that checkpoint, not before the ack)",
    },
    System {
        name: "node-file",
        kind: Kind::Node,
        class: Class::Durable,
        durability: "@durable-streams/server 0.3.7 file-backed: fdatasync of the stream's log file per append before the ack; LMDB metadata committed before the ack, flushed after it",
    },
    System {
        name: "origin-async",
        kind: Kind::Origin,
        class: Class::Memory,
        durability: "ours, `--durability async`: written to the OS before the ack, no fsync (survives a process crash, unlike the in-memory peers)",
    },
    System {
        name: "ursula-memory",
        kind: Kind::Ursula,
        class: Class::Memory,
        durability: "Ursula 0.11.5 `--preset default`: in-memory engine, no Raft, no WAL",
    },
    System {
        name: "node-memory",
        kind: Kind::Node,
        class: Class::Memory,
        durability: "@durable-streams/server 0.3.7 in memory",
    },
];

/// How the benchmark's user installs Electric's server (never CI: it
/// compiles for minutes).
pub const ELECTRIC_INSTALL: &str =
    "cargo install durable-streams --version 0.1.5 --locked --root ~/.cache/ds-peers/electric";

/// Where the systems' programs are.
#[derive(Clone, Debug)]
pub struct Programs {
    pub origin: PathBuf,
    pub edge: PathBuf,
    pub ursula: PathBuf,
    /// Electric's `durable-streams-server`.
    pub electric: PathBuf,
    /// The folder with `server.mjs` and its installed `node_modules`.
    pub node_dir: PathBuf,
    pub node: PathBuf,
    /// Size of the ceiling's GET answers.
    pub ceiling_get_bytes: usize,
}

/// Where a peer's program is: as given, or where the benchmark's install
/// commands put it, under `~/.cache/ds-peers` (`ursula/bin/ursula`,
/// `electric/bin/durable-streams-server`).
pub fn peer_program(given: &Option<PathBuf>, under_cache: &str) -> PathBuf {
    given.clone().unwrap_or_else(|| {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(".cache/ds-peers")
            .join(under_cache)
    })
}

impl Programs {
    /// Why `system` cannot run on this machine, if it cannot.
    pub fn missing(&self, system: &System) -> Option<String> {
        match system.kind {
            Kind::Ceiling => None,
            Kind::Origin => (!self.origin.is_file()).then(|| {
                format!(
                    "no origin binary at {} (cargo build --release -p origin)",
                    self.origin.display()
                )
            }),
            Kind::Edge => (!self.origin.is_file() || !self.edge.is_file()).then(|| {
                format!(
                    "no origin and edge binaries at {} and {} (cargo build --release -p origin -p edge)",
                    self.origin.display(),
                    self.edge.display()
                )
            }),
            Kind::Ursula => (!self.ursula.is_file()).then(|| {
                format!(
                    "no Ursula binary at {} (cargo install ursula --version 0.11.5 --locked --root ~/.cache/ds-peers/ursula)",
                    self.ursula.display()
                )
            }),
            Kind::Electric => (!self.electric.is_file()).then(|| {
                format!(
                    "no Electric server at {} ({ELECTRIC_INSTALL})",
                    self.electric.display()
                )
            }),
            Kind::Node => {
                let package = self.node_dir.join("node_modules/@durable-streams/server");
                if !package.is_dir() {
                    Some(format!(
                        "@durable-streams/server is not installed in {} (npm ci --prefix {})",
                        self.node_dir.display(),
                        self.node_dir.display()
                    ))
                } else if std::process::Command::new(&self.node)
                    .arg("--version")
                    .stdout(Stdio::null())
                    .status()
                    .is_err()
                {
                    Some(format!("no `{}` to run it with", self.node.display()))
                } else {
                    None
                }
            }
        }
    }
}

/// A started system; the process dies when this is dropped.
pub struct Running {
    child: Child,
    /// A second process the system needs (the origin behind an edge).
    behind: Option<Child>,
    pub addr: SocketAddr,
    /// Streams are `{prefix}{name}`.
    pub prefix: &'static str,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Every process of the system (the edge and the origin behind it).
    pub fn pids(&self) -> Vec<u32> {
        std::iter::once(&self.child)
            .chain(self.behind.as_ref())
            .filter_map(Child::id)
            .collect()
    }

    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        if let Some(mut b) = self.behind.take() {
            let _ = b.start_kill();
            let _ = b.wait().await;
        }
    }
}

/// Starts `system` with its data (and its log) in `dir`.
pub async fn start(system: &System, programs: &Programs, dir: &Path) -> anyhow::Result<Running> {
    let log = dir.join("server.log");
    match system.kind {
        Kind::Ceiling => {
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.args(["ceiling", "--get-bytes"])
                .arg(programs.ceiling_get_bytes.to_string());
            first_line_start(cmd, &log, "/v1/stream/").await
        }
        Kind::Origin => start_origin(programs, dir, system.class, &log).await,
        Kind::Edge => {
            let origin =
                start_origin(programs, dir, Class::Durable, &dir.join("origin.log")).await?;
            let mut cmd = Command::new(&programs.edge);
            cmd.args(["--listen", "127.0.0.1:0", "--origin"])
                .arg(format!("http://{}", origin.addr))
                .env("RUST_LOG", "warn,edge=info");
            let mut edge = first_line_start(cmd, &log, "/v1/stream/").await?;
            edge.behind = Some(origin.child);
            Ok(edge)
        }
        Kind::Node => {
            let mut cmd = Command::new(&programs.node);
            cmd.arg(programs.node_dir.join("server.mjs"));
            if system.class == Class::Durable {
                cmd.arg("--data-dir").arg(dir.join("data"));
            }
            first_line_start(cmd, &log, "/v1/stream/").await
        }
        Kind::Ursula => start_ursula(system, programs, dir, &log).await,
        Kind::Electric => {
            // It prints the address it was asked for, not the one it bound
            // (`--port 0` would print port 0), so it gets a free port.
            let mut cmd = Command::new(&programs.electric);
            cmd.args(["--host", "127.0.0.1", "--port"])
                .arg(free_port()?.to_string())
                .arg("--data-dir")
                .arg(dir.join("data"));
            first_line_start(cmd, &log, "/v1/stream/").await
        }
    }
}

/// Our origin, durable or (`Memory`) with `--durability async`.
async fn start_origin(
    programs: &Programs,
    dir: &Path,
    class: Class,
    log: &Path,
) -> anyhow::Result<Running> {
    let mut cmd = Command::new(&programs.origin);
    cmd.args([
        "--listen",
        "127.0.0.1:0",
        "--object-store",
        "none",
        "--data",
    ])
    .arg(dir.join("data"))
    .env("RUST_LOG", "warn,origin=info");
    if class == Class::Memory {
        cmd.args(["--durability", "async"]);
    }
    first_line_start(cmd, log, "/v1/stream/").await
}

/// Starts a server that names its address in its first stdout line
/// ("... addr=HOST:PORT"); its stderr goes to `log`.
async fn first_line_start(
    mut cmd: Command,
    log: &Path,
    prefix: &'static str,
) -> anyhow::Result<Running> {
    let stderr =
        std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut child = cmd
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .context("starting the server")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .context("no address within 30 s")??
        .with_context(|| format!("the server exited; see {}", log.display()))?;
    let addr = address_in(&first).with_context(|| format!("no address in {first:?}"))?;
    // Keep draining stdout so the server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Running {
        child,
        behind: None,
        addr,
        prefix,
    })
}

/// A port nobody listens on now (Ursula's config needs the number up front:
/// its Raft peer entry names its own URL).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

const URSULA_MEMORY: &str = include_str!("../../peers/ursula-memory.toml");
const URSULA_DISK: &str = include_str!("../../peers/ursula-disk.toml");

/// The committed config with this run's ports and WAL directory.
fn ursula_config(disk: bool, listen: u16, admin: u16, wal: &Path) -> String {
    if disk {
        URSULA_DISK
            .replace("4457", &listen.to_string())
            .replace("4458", &admin.to_string())
            .replace("./data/ursula", &wal.display().to_string())
    } else {
        URSULA_MEMORY
            .replace("4447", &listen.to_string())
            .replace("4448", &admin.to_string())
    }
}

/// Ursula's streams live in buckets: `PUT /bench` first, then `/bench/{name}`. It
/// prints no address line; it is ready when its readiness route says so and
/// the bucket is made.
async fn start_ursula(
    system: &System,
    programs: &Programs,
    dir: &Path,
    log: &Path,
) -> anyhow::Result<Running> {
    let disk = system.class == Class::Durable;
    let (listen, admin) = (free_port()?, free_port()?);
    let config = dir.join("ursula.toml");
    std::fs::write(
        &config,
        ursula_config(disk, listen, admin, &dir.join("wal")),
    )
    .with_context(|| format!("writing {}", config.display()))?;
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = Command::new(&programs.ursula);
    cmd.arg("server");
    if !disk {
        // A config file alone selects the Raft engine; the preset keeps the
        // in-memory one.
        cmd.args(["--preset", "default"]);
    }
    let mut child = cmd
        .arg("--config")
        .arg(&config)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .context("starting ursula")?;
    let addr: SocketAddr = ([127, 0, 0, 1], listen).into();
    let started = Instant::now();
    let mut last = String::from("no answer yet");
    while started.elapsed() < Duration::from_secs(60) {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("ursula exited ({status}); see {}", log.display());
        }
        // Serving-ready first (a Raft node's groups have leaders): a bucket
        // may be made before that, but its streams are refused with 503.
        match ready(addr).await {
            Ok(200) => {}
            Ok(s) => {
                last = format!("GET {URSULA_READY}: HTTP {s}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(e) => {
                last = format!("{e:#}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        }
        match create_bucket(addr).await {
            Ok(s) if s < 300 || s == 409 => {
                return Ok(Running {
                    child,
                    behind: None,
                    addr,
                    prefix: "/bench/",
                })
            }
            // Refused for good (a 5xx or no answer may be a node still starting).
            Ok(s) if (400..500).contains(&s) => anyhow::bail!("PUT /bench: HTTP {s}"),
            Ok(s) => last = format!("PUT /bench: HTTP {s}"),
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!(
        "ursula did not create its bucket within 60 s: {last}; see {}",
        log.display()
    )
}

const URSULA_READY: &str = "/__ursula/ready";

async fn ready(addr: SocketAddr) -> anyhow::Result<u16> {
    let mut sender = connect(addr).await?;
    send(
        &mut sender,
        Request::get(URSULA_READY).body(Full::new(Bytes::new()))?,
    )
    .await
}

/// Bucket ids are 4 to 64 bytes in Ursula 0.11.5.
async fn create_bucket(addr: SocketAddr) -> anyhow::Result<u16> {
    let mut sender = connect(addr).await?;
    send(
        &mut sender,
        Request::put("/bench").body(Full::new(Bytes::new()))?,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ursula_configs_take_this_runs_ports_and_wal() {
        let wal = Path::new("/tmp/x/wal");
        let disk = ursula_config(true, 1111, 2222, wal);
        assert!(disk.contains("listen = \"127.0.0.1:1111\""));
        assert!(disk.contains("admin_listen = \"127.0.0.1:2222\""));
        assert!(disk.contains("url = \"http://127.0.0.1:1111\""));
        assert!(disk.contains("path = \"/tmp/x/wal\""));
        assert!(!disk.contains("4457") && !disk.contains("4458"));
        let memory = ursula_config(false, 3333, 4444, wal);
        assert!(memory.contains("listen = \"127.0.0.1:3333\""));
        assert!(memory.contains("admin_listen = \"127.0.0.1:4444\""));
        assert!(!memory.contains("[raft"));
    }

    #[test]
    fn every_class_but_the_ceiling_has_a_system_of_each_kind() {
        for class in [Class::Durable, Class::Memory] {
            for kind in [Kind::Origin, Kind::Ursula, Kind::Node] {
                assert!(SYSTEMS.iter().any(|s| s.class == class && s.kind == kind));
            }
        }
    }
}
