//! A full disk: the origin runs on a small filesystem of its own (a tmpfs
//! of 48 MiB, mounted in a mount namespace made for the test), the disk is
//! filled under it, and writes answer `503` + `Retry-After` while reads go
//! on; once space returns, writes succeed again, and every acknowledged
//! append is there. The process never stops.

use crate::common;
use std::process::Command;

const MIB: usize = 1024 * 1024;

/// Runs `sh -c script` in the origin's mount namespace (where its tmpfs is).
fn in_namespace(pid: u32, script: &str) -> std::process::Output {
    Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-m", "sh", "-c", script])
        .output()
        .expect("nsenter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_and_they_resume_when_space_returns() {
    full_disk("sync").await;
}

/// The same with acknowledgements after the write to the OS: the log's
/// blocks are allocated ahead (`fallocate`) instead of synced zeros. Before,
/// the first write that found the disk full aborted the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_async_durability_refuses_writes_too() {
    full_disk("async").await;
}

async fn full_disk(durability: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("disk");
    std::fs::create_dir(&mount).unwrap();
    let data = mount.join("data");
    let script = r#"mount -t tmpfs -o size=48m tmpfs "$0" && exec "$@""#;
    let runner = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        mount.to_str().unwrap(),
    ];
    let mut proc = common::process::spawn(
        &runner,
        &[
            "--data".as_ref(),
            data.as_os_str(),
            "--object-store".as_ref(),
            "none".as_ref(),
            "--durability".as_ref(),
            durability.as_ref(),
        ],
    );
    let pid = proc.child.id();
    let base = format!("http://{}", proc.addr);
    let http = common::client();
    let path = format!("{base}/v1/stream/disk-full");
    let r = http
        .put(&path)
        .header("content-type", "application/octet-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    // Fill the filesystem (dd stops at the first write that finds no room).
    let filler = mount.join("filler");
    let filled = in_namespace(
        pid,
        &format!(
            "dd if=/dev/zero of={} bs=1M 2>&1; df -m {}",
            filler.display(),
            mount.display()
        ),
    );
    let said = String::from_utf8_lossy(&filled.stdout);
    assert!(said.contains("No space left"), "the disk filled: {said}");

    let mut acknowledged = Vec::new();
    let mut refused = 0;
    for i in 0..64u8 {
        let body = vec![i; MIB];
        let r = http
            .post(&path)
            .header("content-type", "application/octet-stream")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            204 => acknowledged.extend_from_slice(&body),
            503 => {
                assert_eq!(common::header(&r, "retry-after").as_deref(), Some("5"));
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
            other => panic!("append {i}: {other}"),
        }
    }
    assert_eq!(refused, 3, "appends were refused once the disk was full");
    assert!(proc.child.try_wait().unwrap().is_none(), "the origin is up");
    // Reads go on, and hold every acknowledged byte.
    let read = |http: reqwest::Client, path: String| async move {
        let (mut offset, mut out) = ("-1".to_owned(), Vec::new());
        loop {
            let r = http
                .get(format!("{path}?offset={offset}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            offset = common::header(&r, "stream-next-offset").unwrap();
            let done = common::header(&r, "stream-up-to-date").is_some();
            out.extend_from_slice(&r.bytes().await.unwrap());
            if done {
                return out;
            }
        }
    };
    assert!(
        read(http.clone(), path.clone()).await == acknowledged,
        "every acknowledged append, nothing else"
    );

    // Space returns: writes go on by themselves.
    let freed = in_namespace(pid, &format!("rm {}", filler.display()));
    assert!(freed.status.success());
    let r = http
        .post(&path)
        .header("content-type", "application/octet-stream")
        .body(vec![200; MIB])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "writes resume once the disk has space");
    acknowledged.extend_from_slice(&[200; MIB]);
    assert!(read(http.clone(), path.clone()).await == acknowledged);
    let metrics = common::metrics_at(&http, &base).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("ds_origin_log_full_refusals_total ") && !l.ends_with(" 0")),
        "refusals are counted"
    );
    proc.child.kill().unwrap();
}
