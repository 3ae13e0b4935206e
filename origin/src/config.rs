//! The command line. Every flag also reads an environment variable
//! (`ORIGIN_*`); a flag given on the command line wins over the variable,
//! which wins over the default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::http::{HttpConfig, JsonReads};
use crate::store::{Durability, StoreConfig};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum JsonReadsArg {
    /// `application/x-ndjson`: one message per line.
    Ndjson,
    /// JSON arrays, for clients of the upstream protocol.
    Array,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DurabilityArg {
    /// Acknowledge after fdatasync: survives power loss.
    Sync,
    /// Acknowledge after write: survives a process crash, not a power loss.
    Async,
}

#[derive(Debug, Parser)]
#[command(
    name = "origin",
    about = "Durable streams origin: a crash-safe log per stream behind the HTTP protocol."
)]
pub struct Cli {
    /// Address to listen on; port 0 picks a free port (the first log line names it).
    #[arg(long, env = "ORIGIN_LISTEN", default_value = "127.0.0.1:4437")]
    pub listen: SocketAddr,
    /// Directory of the log, checkpoints and stream files.
    #[arg(long, env = "ORIGIN_DATA", default_value = "./data/origin")]
    pub data: PathBuf,
    /// Object storage for sealed chunks and snapshots (file:///path or
    /// s3://bucket/prefix); default: the folder `objects` in the data
    /// directory; `none`: nothing is sealed, the local log keeps everything.
    #[arg(long, env = "ORIGIN_OBJECT_STORE")]
    pub object_store: Option<String>,
    /// Memory for sealed chunks read back from object storage, e.g. 256MiB.
    #[arg(long, env = "ORIGIN_CHUNK_CACHE", default_value = "256MiB", value_parser = parse_size)]
    pub chunk_cache: u64,
    /// Complete chunks waiting to be sealed (object storage down or slow)
    /// past which appends answer 503, e.g. 1GiB.
    #[arg(long, env = "ORIGIN_MAX_UNSEALED", default_value = "1GiB", value_parser = parse_size)]
    pub max_unsealed: u64,
    /// How JSON streams read: NDJSON (default) or JSON arrays.
    #[arg(long, env = "ORIGIN_JSON_READS", value_enum, default_value = "ndjson")]
    pub json_reads: JsonReadsArg,
    /// Largest request body, e.g. 8MiB.
    #[arg(long, env = "ORIGIN_MAX_BODY", default_value = "8MiB", value_parser = parse_size)]
    pub max_body: u64,
    /// Largest snapshot (published in parts), e.g. 128MiB.
    #[arg(long, env = "ORIGIN_MAX_SNAPSHOT", default_value = "128MiB", value_parser = parse_size)]
    pub max_snapshot: u64,
    /// Request bodies (and snapshots being assembled) held in memory at once,
    /// e.g. 256MiB; never less than the largest body or snapshot.
    #[arg(long, env = "ORIGIN_INGRESS_BUDGET", default_value = "256MiB", value_parser = parse_size)]
    pub ingress_budget: u64,
    /// How long an SSE tail stays open before the server ends it, e.g. 60s.
    #[arg(long, env = "ORIGIN_SSE_SESSION", default_value = "60s", value_parser = parse_duration)]
    pub sse_session: Duration,
    /// When appends are acknowledged: after fdatasync (sync) or after the
    /// write to the OS (async).
    #[arg(long, env = "ORIGIN_DURABILITY", value_enum, default_value = "sync")]
    pub durability: DurabilityArg,
    /// Under concurrent appends, how long the writer waits to gather more of
    /// them into one sync (0s: never). A lone writer never waits.
    #[arg(long, env = "ORIGIN_COMMIT_DELAY", default_value = "1ms", value_parser = parse_duration)]
    pub commit_delay: Duration,
    /// Checkpoint when the open WAL segment reaches this size.
    #[arg(long, env = "ORIGIN_CHECKPOINT_BYTES", default_value = "64MiB", value_parser = parse_size)]
    pub checkpoint_bytes: u64,
}

impl Cli {
    pub fn store_config(&self) -> StoreConfig {
        let mut c = StoreConfig::new(self.data.clone());
        c.checkpoint_bytes = self.checkpoint_bytes;
        c.commit_delay = self.commit_delay;
        match self.object_store.as_deref() {
            None => {}
            Some("none") => c.object_store = None,
            Some(url) => c.object_store = Some(url.to_owned()),
        }
        c.chunk_cache_bytes = self.chunk_cache;
        c.max_unsealed_bytes = self.max_unsealed;
        c.durability = match self.durability {
            DurabilityArg::Sync => Durability::Sync,
            DurabilityArg::Async => Durability::Async,
        };
        c
    }

    pub fn http_config(&self) -> HttpConfig {
        HttpConfig {
            json_reads: match self.json_reads {
                JsonReadsArg::Ndjson => JsonReads::Ndjson,
                JsonReadsArg::Array => JsonReads::Array,
            },
            max_body: self.max_body,
            max_snapshot: self.max_snapshot,
            ingress_budget: self
                .ingress_budget
                .max(self.max_body)
                .max(self.max_snapshot),
            sse_session: self.sse_session,
            ..HttpConfig::default()
        }
    }
}

/// "4MiB", "2GiB", "512KiB", "100" (bytes), "1.5GB".
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("{s:?} is not a size"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => return Err(format!("unknown size unit {other:?}")),
    };
    Ok((n * mult as f64) as u64)
}

/// "60s", "500ms", "2m", "1h".
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration"))?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        other => return Err(format!("unknown duration unit {other:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("x").is_err());
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
    }
}
