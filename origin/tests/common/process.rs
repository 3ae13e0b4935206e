//! The origin binary as a child process (crash and scale tests): started,
//! its bound address read from its first log line, its later lines kept for
//! a look, killed with SIGKILL when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Proc {
    pub child: Child,
    pub addr: SocketAddr,
    /// The origin's log lines after the first.
    pub log: std::sync::mpsc::Receiver<String>,
}

/// `origin --listen 127.0.0.1:0` with `args` after it, run by `runner`
/// first when given (e.g. `prlimit --nofile=…`).
pub fn spawn(runner: &[&str], args: &[&std::ffi::OsStr]) -> Proc {
    spawn_with_env(runner, args, &[])
}

/// [`spawn`], with these environment variables set for the child.
pub fn spawn_with_env(
    runner: &[&str],
    args: &[&std::ffi::OsStr],
    env: &[(String, String)],
) -> Proc {
    spawn_at("127.0.0.1:0", runner, args, env)
}

/// [`spawn_with_env`] listening on `listen` (a restart on the same port).
pub fn spawn_at(
    listen: &str,
    runner: &[&str],
    args: &[&std::ffi::OsStr],
    env: &[(String, String)],
) -> Proc {
    let mut cmd = match runner.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(env!("CARGO_BIN_EXE_origin"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_origin")),
    };
    let mut child = cmd
        .args(["--listen", listen])
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(if std::env::var_os("DS_TEST_ECHO_LOGS").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .expect("spawn origin");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().expect("a first log line").expect("read log");
    let addr = first
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr=").and_then(|a| a.parse().ok()))
        .unwrap_or_else(|| panic!("no address in the first log line: {first}"));
    // Keep draining stdout so the child never blocks on a full pipe.
    // DS_TEST_ECHO_LOGS=1 echoes every origin's log (debugging a test).
    let echo = std::env::var_os("DS_TEST_ECHO_LOGS").is_some();
    let (tx, log) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.by_ref().map_while(Result::ok) {
            if echo {
                eprintln!("[{addr}] {line}");
            }
            let _ = tx.send(line);
        }
    });
    Proc { child, addr, log }
}

impl Proc {
    /// Stops the origin with SIGTERM (it checkpoints) and waits for it.
    pub fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
        self.child.wait().expect("wait");
    }

    /// `kill -9`, and waits until the process is gone (its port free).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to the origin.
    pub fn signal(&self, signal: &str) {
        let sent = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
    }

    /// Every log line not read yet.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.try_iter().collect()
    }

    /// Records the start replayed from the log (its "recovered" line).
    pub fn records_replayed(&self) -> u64 {
        loop {
            let line = self
                .log
                .recv_timeout(Duration::from_secs(30))
                .expect("a recovered line");
            if line.contains("recovered") {
                return line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("records=").and_then(|n| n.parse().ok()))
                    .unwrap_or_else(|| panic!("no records= in {line}"));
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Files under `dir`, in all its folders.
pub fn count_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .map(|e| {
                let e = e.unwrap();
                if e.file_type().unwrap().is_dir() {
                    count_files(&e.path())
                } else {
                    1
                }
            })
            .sum()
    })
}
