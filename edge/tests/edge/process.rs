//! The binary: the first log line names the bound address, renamed flags
//! and variables still work under their old names (warned), `/metrics`
//! answers (renamed series under both names), SIGTERM stops it with status 0 (with `--drain-delay`, after
//! `/readyz` said draining, or at a second SIGTERM).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_binary_names_its_address_first_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_edge"))
        .args(["--listen", "127.0.0.1:0", "--origin", "http://127.0.0.1:9"])
        .args(["--light-tails", "false"])
        .env("EDGE_ACCOUNT_TAILS", "4")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .env("EDGE_CACHE", "16MiB")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn edge");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a first line").expect("text");
    assert!(first.contains("edge listening on "), "{first}");
    let addr = first
        .split("addr=")
        .nth(1)
        .expect("addr= in the first line")
        .trim()
        .to_owned();
    assert!(first.contains(&format!("listening on {addr}")), "{first}");
    let mut warned = Vec::new();
    let serving = loop {
        let line = lines.next().expect("the serving line").expect("text");
        if line.contains("cache_bytes=") {
            break line;
        }
        warned.push(line);
    };
    assert!(serving.contains("cache_bytes=16777216"), "{serving}");
    let warned = warned.join("\n");
    assert!(
        warned.contains("--light-tails is deprecated") && warned.contains("use --light-path"),
        "{warned}"
    );
    assert!(
        warned.contains("EDGE_ACCOUNT_TAILS is deprecated")
            && warned.contains("EDGE_ACCOUNT_LIVE_READS"),
        "{warned}"
    );

    let mut conn = std::net::TcpStream::connect(&addr).expect("connect");
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("ds_edge_upstream_live_reads 0"), "{text}");
    // The old name, for one release.
    assert!(text.contains("ds_edge_upstream_tails 0"), "{text}");

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(Instant::now() < deadline, "the edge did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn with_a_drain_delay_sigterm_makes_it_unready_and_a_second_one_stops_it() {
    let (mut child, addr, mut lines) = spawn_logging(&["--drain-delay", "600s"]);
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let get = |path: &str| {
        let mut conn = std::net::TcpStream::connect(&addr).expect("connect");
        write!(
            conn,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        conn.read_to_string(&mut text).unwrap();
        text
    };
    let kill = |child: &std::process::Child| {
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    // Serving: its stop signal's handler is in place (a SIGTERM before it
    // would end the process at once, as any process's default).
    assert!(get("/healthz").starts_with("HTTP/1.1 200"));
    kill(&child);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = get("/readyz");
        if text.contains("draining: shutting down") {
            assert!(text.starts_with("HTTP/1.1 503"), "{text}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SIGTERM did not make it say draining: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(get("/healthz").starts_with("HTTP/1.1 200"), "still serving");
    assert!(child.try_wait().unwrap().is_none(), "still running");
    kill(&child);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second SIGTERM did not stop it"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Spawns the edge binary in front of a dead origin with `args`; its
/// address and its log lines.
fn spawn_logging(
    args: &[&str],
) -> (
    std::process::Child,
    String,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_edge"))
        .args(["--listen", "127.0.0.1:0", "--origin", "http://127.0.0.1:9"])
        .args(args)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn edge");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a first line").expect("text");
    // Text names it as `addr=…`, JSON as `fields.addr`.
    let addr = match serde_json::from_str::<serde_json::Value>(&first) {
        Ok(v) => v["fields"]["addr"].as_str().map(str::to_owned),
        Err(_) => first
            .split("addr=")
            .nth(1)
            .map(|rest| rest.trim().to_owned()),
    }
    .unwrap_or_else(|| panic!("the address in {first}"));
    (child, addr, lines)
}

/// One request the edge cannot forward (it logs why): its answer.
fn ask(addr: &str, id: &str) -> String {
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    conn.write_all(
        format!("GET /v1/stream/x HTTP/1.1\r\nHost: x\r\nX-Request-Id: {id}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn a_requests_log_lines_carry_its_id_in_text_and_json() {
    let (mut child, addr, mut lines) = spawn_logging(&["--log-format", "json"]);
    let answer = ask(&addr, "log-json-7");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("x-request-id: log-json-7"), "{answer}");
    let line = lines
        .by_ref()
        .map(|l| l.expect("text"))
        .find(|l| l.contains("log-json-7"))
        .expect("a log line of the request");
    let v: serde_json::Value = serde_json::from_str(&line).expect("one JSON object per line");
    assert_eq!(v["request_id"], "log-json-7", "{line}");
    assert_eq!(v["level"], "WARN", "{line}");
    assert!(v["fields"]["message"].is_string(), "{line}");
    child.kill().unwrap();
    child.wait().unwrap();

    let (mut child, addr, mut lines) = spawn_logging(&[]);
    ask(&addr, "log-text-8");
    let line = lines
        .by_ref()
        .map(|l| l.expect("text"))
        .find(|l| l.contains("log-text-8"))
        .expect("a log line of the request");
    assert!(line.ends_with(" request_id=log-text-8"), "{line}");
    assert!(line.contains("WARN"), "{line}");
    child.kill().unwrap();
    child.wait().unwrap();
}
