//! Names the git revision the binaries are built from, for
//! `ds_build_info` (`DS_GIT_REVISION` overrides it; `unknown` outside a
//! checkout).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=DS_GIT_REVISION");
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs/heads");
    let revision = std::env::var("DS_GIT_REVISION").ok().unwrap_or_else(|| {
        Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".to_owned())
    });
    println!("cargo:rustc-env=DS_GIT_REVISION={revision}");
}
