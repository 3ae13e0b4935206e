//! The origin as `ds-load streams` runs it: a child process under a fixed
//! file-descriptor limit, on a data folder that outlives it (so it can be
//! killed and started again on the same data), its log kept in a file, and
//! its own line about recovery picked out of that log.
//!
//! The limit is set in the child (soft and hard, between fork and exec), not
//! inherited from this shell: a server that needs a descriptor per stream
//! should fail here at a known number, the same on every machine.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::append::connect;
use crate::compare::address_in;
use crate::pool::exchange;

/// How to start the origin; every start uses the same data and limit.
#[derive(Clone, Debug)]
pub struct Launch {
    pub binary: PathBuf,
    pub data: PathBuf,
    /// RLIMIT_NOFILE, soft and hard.
    pub nofile: u64,
    /// More arguments, after ours.
    pub extra: Vec<String>,
    /// Its stdout and stderr, appended to by every start.
    pub log: PathBuf,
}

/// A started origin; it dies when this is dropped.
pub struct Running {
    child: Child,
    pub addr: SocketAddr,
    pub pid: u32,
    /// When it was spawned.
    pub spawned: Instant,
    /// Its log line about recovery, once it printed one.
    recovered: Arc<Mutex<Option<String>>>,
}

/// Sets the child's RLIMIT_NOFILE (soft and hard) to `nofile`.
#[allow(unsafe_code)]
fn limit_open_files(cmd: &mut Command, nofile: u64) {
    let limit = libc::rlimit {
        rlim_cur: nofile as libc::rlim_t,
        rlim_max: nofile as libc::rlim_t,
    };
    // SAFETY: the closure runs in the child between fork and exec; it makes
    // one system call (setrlimit is async-signal-safe), allocates nothing
    // and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

impl Launch {
    /// Spawns the origin and waits for the log line that names its address
    /// (printed once it listens, which may be before it has recovered).
    pub async fn spawn(&self, within: Duration) -> anyhow::Result<Running> {
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let mut cmd = Command::new(&self.binary);
        cmd.args(["--listen", "127.0.0.1:0", "--data"])
            .arg(&self.data)
            .args(&self.extra)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "warn,origin=info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log.try_clone()?)
            .kill_on_drop(true);
        limit_open_files(&mut cmd, self.nofile);
        let spawned = Instant::now();
        let mut child = cmd.spawn().with_context(|| {
            format!(
                "starting {} under RLIMIT_NOFILE {} (raising the hard limit needs root)",
                self.binary.display(),
                self.nofile
            )
        })?;
        let pid = child.id().context("no pid")?;
        let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let deadline = spawned + within;
        let addr = loop {
            let line = tokio::time::timeout_at(deadline.into(), lines.next_line())
                .await
                .with_context(|| format!("no address within {within:?}"))??
                .with_context(|| format!("the origin exited; see {}", self.log.display()))?;
            let _ = writeln!(log, "{line}");
            if let Some(addr) = address_in(&line) {
                break addr;
            }
        };
        let recovered = Arc::new(Mutex::new(None));
        let seen = recovered.clone();
        // Keep draining stdout into the log so the origin never blocks on a
        // full pipe, and keep the recovery line.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = writeln!(log, "{line}");
                if line.contains("recovered") {
                    seen.lock().expect("lock").get_or_insert(line);
                }
            }
        });
        Ok(Running {
            child,
            addr,
            pid,
            spawned,
            recovered,
        })
    }
}

impl Running {
    /// Waits until a GET of `path` is answered by an origin that serves
    /// (any status below 500; a refused or reset connection, or a 5xx, is
    /// tried again every few milliseconds), and says how long after the
    /// spawn that was and with what status.
    pub async fn first_answer(
        &self,
        path: &str,
        within: Duration,
    ) -> anyhow::Result<(Duration, u16)> {
        let deadline = self.spawned + within;
        let mut last = String::from("no answer");
        while Instant::now() < deadline {
            let attempt = async {
                let mut sender = connect(self.addr).await?;
                let req = Request::get(path).body(Full::new(Bytes::new()))?;
                anyhow::Ok(exchange(&mut sender, req).await?.status)
            };
            match tokio::time::timeout_at(deadline.into(), attempt).await {
                Ok(Ok(status)) if status < 500 => return Ok((self.spawned.elapsed(), status)),
                Ok(Ok(status)) => last = format!("HTTP {status}"),
                Ok(Err(e)) => last = format!("{e:#}"),
                Err(_) => break,
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        anyhow::bail!("no answer to GET {path} within {within:?}: {last}")
    }

    /// Its recovery log line, waiting up to `wait` for it.
    pub async fn recovered_line(&self, wait: Duration) -> Option<String> {
        let until = Instant::now() + wait;
        loop {
            if let Some(line) = self.recovered.lock().expect("lock").clone() {
                return Some(line);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// How it exited, if it has (on its own: this is asked before a kill).
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    /// SIGKILL, and the wait for it to be gone.
    pub async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// SIGTERM, and how long it took to exit; SIGKILL after `within`.
    pub async fn terminate(mut self, within: Duration) -> anyhow::Result<Duration> {
        let asked = Instant::now();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .context("running kill -TERM")?;
        anyhow::ensure!(sent.success(), "kill -TERM {}: {sent}", self.pid);
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => {
                status?;
                Ok(asked.elapsed())
            }
            Err(_) => {
                self.kill().await;
                anyhow::bail!("it did not exit within {within:?} of SIGTERM; killed")
            }
        }
    }
}
