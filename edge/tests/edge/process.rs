//! The binary: the first log line names the bound address, `/metrics`
//! answers, SIGTERM stops it with status 0.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_binary_names_its_address_first_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_edge"))
        .args(["--listen", "127.0.0.1:0", "--origin", "http://127.0.0.1:9"])
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
    let second = lines.next().expect("a second line").expect("text");
    assert!(second.contains("cache_bytes=16777216"), "{second}");

    let mut conn = std::net::TcpStream::connect(&addr).expect("connect");
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("edge_upstream_tails 0"), "{text}");

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
