//! An HTTP hop between an edge and its origin: nginx from Debian's packages
//! (`scripts/setup` installs it), proxying to the origin over HTTP/1.1 as
//! an internal balancer or a sidecar would. By default it speaks only
//! HTTP/1.1 to the edge too (nginx answers HTTP/2's preface with `400`);
//! [`Hop::start_h2c`] makes one that also takes HTTP/2 with prior
//! knowledge.
//!
//! With `DS_TEST_HOP=nginx`, every edge the tests start reaches each of its
//! origins through a hop of its own ([`through_hops`]): the whole suite
//! again, as behind such a deployment.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running nginx in front of one upstream address; stopped when dropped.
pub struct Hop {
    pub addr: SocketAddr,
    pub upstream: SocketAddr,
    dir: PathBuf,
    child: Child,
}

impl Hop {
    /// An HTTP/1.1-only hop in front of `upstream`.
    pub fn start(upstream: SocketAddr) -> Hop {
        Self::start_on(upstream, None, false)
    }

    /// A hop that also takes HTTP/2 with prior knowledge (`h2c`) from the
    /// edge, on `addr` when given.
    pub fn start_h2c(upstream: SocketAddr, addr: Option<SocketAddr>) -> Hop {
        Self::start_on(upstream, addr, true)
    }

    fn start_on(upstream: SocketAddr, addr: Option<SocketAddr>, h2c: bool) -> Hop {
        let dir = hop_dir();
        let mut last = String::new();
        for _ in 0..5 {
            let addr = addr.unwrap_or_else(free_addr);
            write_config(&dir, addr, upstream, h2c);
            let mut child = spawn(&dir);
            match wait_listening(addr, &mut child) {
                Ok(()) => {
                    return Hop {
                        addr,
                        upstream,
                        dir,
                        child,
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last = format!(
                        "{e}; error log: {}",
                        std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
                    );
                }
            }
        }
        panic!("nginx did not start: {last}");
    }

    /// The requests the hop passed on, one access-log line each:
    /// `PROTOCOL STATUS REQUEST`.
    pub fn access_log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("access.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Stops the hop now (its address stops answering).
    pub fn stop(mut self) -> SocketAddr {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.addr
    }
}

impl Drop for Hop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// With `DS_TEST_HOP=nginx`: `origin` (`http://host:port`) as reached
/// through a new hop, which lives as long as the test's thread (nginx is
/// ended with it: `PR_SET_PDEATHSIG`). Without: `origin` itself.
pub fn through_hops(origin: &http::Uri) -> http::Uri {
    if !in_use() {
        return origin.clone();
    }
    let upstream: SocketAddr = origin
        .authority()
        .expect("an origin URL has an address")
        .as_str()
        .parse()
        .expect("an origin address is an IP and a port");
    let hop = Hop::start(upstream);
    let uri = format!("http://{}", hop.addr).parse().expect("hop URL");
    // Its directory and process outlive this call: the process ends with
    // the thread that started it, the directory with the machine's tmp.
    std::mem::forget(hop);
    uri
}

/// Whether an answer's header `name` is the hop's own (nginx names itself
/// in `Server`; the origin sends none), when tests run through hops.
pub fn added_by_hop(name: &str) -> bool {
    name == "server" && in_use()
}

/// Whether the tests run through hops (`DS_TEST_HOP=nginx`).
pub fn in_use() -> bool {
    std::env::var("DS_TEST_HOP").as_deref() == Ok("nginx")
}

/// Where nginx is: on `PATH`, or Debian's place.
fn nginx() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
        .expect("nginx is not installed: run scripts/setup (Debian package nginx)")
}

fn hop_dir() -> PathBuf {
    let dir = tempfile::Builder::new()
        .prefix("ds-hop-")
        .tempdir()
        .expect("hop dir")
        .keep();
    for sub in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
        std::fs::create_dir_all(dir.join(sub)).expect("nginx temp dir");
    }
    dir
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// A plain reverse proxy as deployments write one: HTTP/1.1 to the
/// upstream with kept-alive connections, the client's `Host` passed on,
/// long reads allowed (long-polls), bodies of any size.
fn write_config(dir: &Path, addr: SocketAddr, upstream: SocketAddr, h2c: bool) {
    let d = dir.display();
    let http2 = if h2c { " http2" } else { "" };
    let config = format!(
        "daemon off;
master_process off;
worker_processes 1;
error_log {d}/error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
  log_format hop '$server_protocol $status $request';
  access_log {d}/access.log hop;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  client_max_body_size 0;
  upstream origin {{
    server {upstream};
    keepalive 256;
  }}
  server {{
    listen {addr}{http2};
    location / {{
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_set_header Host $http_host;
      proxy_read_timeout 120s;
    }}
  }}
}}
"
    );
    std::fs::File::create(dir.join("nginx.conf"))
        .and_then(|mut f| f.write_all(config.as_bytes()))
        .expect("nginx.conf");
}

#[allow(unsafe_code)]
fn spawn(dir: &Path) -> Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(nginx());
    cmd.arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: prctl is async-signal-safe; it only asks the kernel to end
    // the child when the thread that started it ends, so no nginx outlives
    // its test.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().expect("start nginx")
}

/// Waits until `addr` accepts, or nginx has exited.
fn wait_listening(addr: SocketAddr, child: &mut Child) -> Result<(), String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("nginx exited: {status}"));
        }
        if std::time::Instant::now() > deadline {
            return Err("nginx did not listen within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
