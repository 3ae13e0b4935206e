//! The command line and the one validated configuration. Every flag also
//! reads an environment variable (`EDGE_*`); a flag on the command line wins
//! over the variable, which wins over the default.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use http::{HeaderValue, Uri};
use shared::units::{parse_duration, parse_size};

#[derive(Debug, Parser)]
#[command(
    name = "edge",
    about = "Durable streams edge: a cache-first read proxy in front of the origin."
)]
pub struct Cli {
    /// Address to listen on; port 0 picks a free port (the first log line names it).
    #[arg(long, env = "EDGE_LISTEN", default_value = "127.0.0.1:4438")]
    pub listen: SocketAddr,
    /// How log lines are written: `text`, or `json` (one object per line,
    /// for log shippers). Lines of a request carry its `request_id`.
    #[arg(long, env = "EDGE_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: shell::logging::LogFormat,
    /// The origin every request the edge cannot answer itself goes to; a
    /// comma-separated list names the origins of one region, tried in turn
    /// when the one in use cannot be reached.
    #[arg(long, env = "EDGE_ORIGIN", default_value = "http://127.0.0.1:4437")]
    pub origin: String,
    /// Object storage the origin seals chunks into (file:///path or
    /// s3://bucket/prefix): complete chunks are read from it on a miss.
    #[arg(long, env = "EDGE_OBJECT_STORE")]
    pub object_store: Option<String>,
    /// Bytes of immutable chunks kept in memory, e.g. 2GiB.
    #[arg(long, env = "EDGE_CACHE", default_value = "2GiB", value_parser = parse_size)]
    pub cache: u64,
    /// How long an SSE reader stays connected before the edge ends it, e.g. 60s.
    #[arg(long, env = "EDGE_SSE_SESSION", default_value = "60s", value_parser = parse_duration)]
    pub sse_session: Duration,
    /// An idle SSE reader gets a comment line this often, so no CDN in
    /// front cuts it for silence (keep it below the CDN's read timeout),
    /// e.g. 15s; 0s: none.
    #[arg(long, env = "EDGE_SSE_KEEPALIVE", default_value = "15s", value_parser = parse_duration)]
    pub sse_keepalive: Duration,
    /// Streams under this path prefix belong to the account `default` (as
    /// on the origin).
    #[arg(long, env = "EDGE_DEFAULT_PREFIX", default_value = "/v1/stream/")]
    pub default_prefix: String,
    /// Accounts usable without a credential or limits (as on the origin;
    /// comma-separated, "" for none).
    #[arg(long, env = "EDGE_OPEN_ACCOUNTS", default_value = "default")]
    pub open_accounts: String,
    /// Requests per second per account at this edge (0: no limit).
    #[arg(long, env = "EDGE_ACCOUNT_RPS", default_value_t = 1000)]
    pub account_rps: u32,
    /// Live reads (long-polls and SSE) open at once per account at this
    /// edge (0: no limit).
    #[arg(long, env = "EDGE_ACCOUNT_LIVE_READS", default_value_t = 16)]
    pub account_live_reads: u32,
    /// Rate-limit budgets (keys, public readers of an account) remembered
    /// at once; past it new ones share one overflow budget until idle ones
    /// (10 minutes) are swept.
    #[arg(long, env = "EDGE_LIMIT_BUDGETS", default_value_t = 100_000)]
    pub limit_budgets: usize,
    /// Hex Ed25519 key that verifies tokens (the origin's
    /// `GET /_auth/public-key`); unset: asked from the origin when needed.
    #[arg(long, env = "EDGE_TOKEN_PUBLIC_KEY")]
    pub token_public_key: Option<String>,
    /// Memory for remembered "is this stream public" answers, e.g. 16MiB;
    /// past it the least used are forgotten (and asked again).
    #[arg(long, env = "EDGE_PUBLIC_MEMORY", default_value = "16MiB", value_parser = parse_size)]
    pub public_memory: u64,
    /// The URL clients reach this edge at (behind a CDN: the CDN's, e.g.
    /// https://streams.example.com); absolute URLs the origin answers with
    /// (`Location`, `Content-Location`) are rewritten to it. Unset:
    /// `http://` and the `Host` the request came with.
    #[arg(long, env = "EDGE_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Where the cacheable reads of every stream (chunk and snapshot URLs)
    /// should go, e.g. the CDN in front of the edges
    /// (https://streams.example.com): named as `Stream-Read-Origin` on
    /// `HEAD` and read answers, in place of the origin's. Unset: the
    /// origin's answer, as it came.
    #[arg(long, env = "EDGE_READ_ORIGIN", value_parser = shared::read_origin::parse)]
    pub read_origin: Option<HeaderValue>,
    /// From SIGTERM (or Ctrl-C), how long the edge goes on serving with
    /// `/readyz` answering 503 before it closes its listener, so a balancer
    /// that checks readiness takes it out of rotation first (set it to the
    /// balancer's check interval times its unhealthy threshold); a second
    /// signal ends it early. 0s: close at once.
    #[arg(long, env = "EDGE_DRAIN_DELAY", default_value = "0s", value_parser = parse_duration)]
    pub drain_delay: Duration,
    /// A request body that sends nothing for this long answers 408.
    #[arg(long, env = "EDGE_BODY_IDLE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub body_idle_timeout: Duration,
    /// A connection that sends no whole request head for this long (after
    /// opening, or idle after an answer) is closed.
    #[arg(long, env = "EDGE_HEADER_READ_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// HTTP/1.1 long-polls and SSE reads are served without hyper once
    /// their head is read, so a waiting reader holds no connection buffers
    /// (false: hyper serves every connection).
    #[arg(long, env = "EDGE_LIGHT_PATH", default_value_t = true, action = clap::ArgAction::Set)]
    pub light_path: bool,
    /// Connections served at once (0: half the descriptor limit found at
    /// start); past it new ones wait in the kernel's backlog.
    #[arg(long, env = "EDGE_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// HTTP/2 connections to each origin that waiting requests (shared
    /// tails, long-polls, the invalidation feed) share, at most.
    #[arg(long, env = "EDGE_UPSTREAM_H2_CONNECTIONS", default_value_t = 64)]
    pub upstream_h2_connections: usize,
    /// Waiting requests on one of those connections at most (keep it below
    /// the origin's HTTP/2 stream limit, 256). Past connections × streams
    /// to one origin, a new tail or long-poll is refused at once.
    #[arg(long, env = "EDGE_UPSTREAM_H2_STREAMS", default_value_t = 200)]
    pub upstream_h2_streams: usize,
    /// Idle HTTP/1.1 connections (forwards, chunk and catch-up reads) kept
    /// open to each origin for reuse, at most; past it an idle one is
    /// closed rather than kept (and one unused for 20 s is closed). Keep it
    /// above the forwards in flight at the busiest steady moment: below it,
    /// connections are closed and opened again all the time.
    #[arg(long, env = "EDGE_UPSTREAM_IDLE_CONNECTIONS", default_value_t = 1024)]
    pub upstream_idle_connections: usize,
    /// How waiting requests (shared tails, long-polls, the invalidation
    /// feed) reach each origin: `auto` finds out whether the origin (or
    /// an HTTP hop before it: a balancer, nginx, a sidecar) speaks HTTP/2
    /// with prior knowledge and uses HTTP/1.1, a connection each, where it
    /// does not; `h2` always HTTP/2; `http1` always HTTP/1.1.
    #[arg(
        long,
        env = "EDGE_UPSTREAM_PROTOCOL",
        value_enum,
        default_value = "auto"
    )]
    pub upstream_protocol: crate::core::upstream_protocol::Mode,
    /// With `--upstream-protocol auto`, how long an origin found not to
    /// speak HTTP/2 gets HTTP/1.1 before it is probed again, e.g. 60s.
    #[arg(long, env = "EDGE_UPSTREAM_PROTOCOL_RECHECK", default_value = "60s", value_parser = parse_duration)]
    pub upstream_protocol_recheck: Duration,
    /// Waiting requests in flight to one origin over HTTP/1.1 (where it
    /// does not speak HTTP/2), a connection each, at most; past it a new
    /// tail or long-poll is refused at once (503 + `Retry-After`).
    #[arg(long, env = "EDGE_UPSTREAM_HTTP1_WAITING", default_value_t = 4096)]
    pub upstream_http1_waiting: usize,
}

impl Cli {
    pub fn config(&self) -> anyhow::Result<EdgeConfig> {
        let public_url = self.public_url.as_deref().map(public_url).transpose()?;
        let mut origins = self.origin.split(',').map(|o| {
            o.trim()
                .parse::<Uri>()
                .map_err(|e| anyhow::anyhow!("--origin {o:?}: {e}"))
        });
        let first = origins
            .next()
            .ok_or_else(|| anyhow::anyhow!("--origin names no origin"))??;
        let more = origins.collect::<anyhow::Result<Vec<Uri>>>()?;
        for o in &more {
            check_origin(o)?;
        }
        EdgeConfig::new(first, self.cache).map(|mut c| {
            c.more_origins = more;
            c.public_url = public_url;
            c.read_origin = self.read_origin.clone();
            c.object_store = self.object_store.clone();
            c.limits.sse_session = self.sse_session;
            c.limits.sse_keepalive = self.sse_keepalive;
            c.limits.upstream_waiting = crate::upstream::multiplexed::MultiplexLimits {
                connections: self.upstream_h2_connections,
                streams: self.upstream_h2_streams,
                idle_http1: self.upstream_idle_connections,
                http1_waiting: self.upstream_http1_waiting,
            };
            c.limits.upstream_protocol = crate::upstream::waiting::ProtocolChoice {
                mode: self.upstream_protocol,
                recheck: self.upstream_protocol_recheck,
            };
            c.limits.serve = shell::ServeConfig {
                max_connections: self.max_connections,
                header_read_timeout: self.header_read_timeout,
                body_idle_timeout: self.body_idle_timeout,
                drain_delay: self.drain_delay,
                light_path: self.light_path,
                ..shell::ServeConfig::default()
            };
            c.access = crate::access::AccessConfig {
                default_prefix: self.default_prefix.clone(),
                open_accounts: shared::auth::account_list(&self.open_accounts),
                limits: shared::limits::LimitConfig {
                    rps: self.account_rps,
                    live_reads: self.account_live_reads,
                    budgets: self.limit_budgets,
                },
                token_public_key: self.token_public_key.clone(),
                public_memory: self.public_memory,
            };
            c
        })
    }
}

/// `--public-url`, checked: an absolute http(s) URL with a host and nothing
/// after it but an optional path prefix; kept without a trailing `/`.
pub fn public_url(url: &str) -> anyhow::Result<String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| anyhow::anyhow!("--public-url {url}: {e}"))?;
    anyhow::ensure!(
        matches!(uri.scheme_str(), Some("http" | "https"))
            && uri.authority().is_some()
            && uri.query().is_none(),
        "--public-url must be an http:// or https:// URL with a host and no query, not {url}"
    );
    Ok(url.trim_end_matches('/').to_owned())
}

/// An origin URL: `http://host:port`, no path.
fn check_origin(origin: &Uri) -> anyhow::Result<()> {
    anyhow::ensure!(
        origin.scheme_str() == Some("http") && origin.authority().is_some(),
        "the origin must be an http:// URL with a host, not {origin}"
    );
    anyhow::ensure!(
        origin.path() == "/" || origin.path().is_empty(),
        "the origin URL takes no path ({origin})"
    );
    Ok(())
}

/// Everything the edge needs to run, validated.
#[derive(Clone, Debug)]
pub struct EdgeConfig {
    /// `scheme://authority` of the origin, without a path.
    pub origin: Uri,
    /// The region's other origins, tried in turn (after `origin`) when the
    /// one in use cannot be reached (see `upstream`).
    pub more_origins: Vec<Uri>,
    /// Where clients reach the edge (see [`Cli::public_url`]).
    pub public_url: Option<String>,
    /// `Stream-Read-Origin` of `HEAD` and read answers (see [`Cli::read_origin`]).
    pub read_origin: Option<HeaderValue>,
    pub object_store: Option<String>,
    /// Capacity of the chunk cache in bytes (bodies plus headers).
    pub cache_bytes: u64,
    pub limits: Limits,
    /// Accounts, tokens and per-account limits.
    pub access: crate::access::AccessConfig,
}

impl EdgeConfig {
    pub fn new(origin: Uri, cache_bytes: u64) -> anyhow::Result<EdgeConfig> {
        check_origin(&origin)?;
        Ok(EdgeConfig {
            origin,
            more_origins: Vec::new(),
            public_url: None,
            read_origin: None,
            object_store: None,
            cache_bytes,
            limits: Limits::default(),
            access: crate::access::AccessConfig::default(),
        })
    }
}

/// Every bound of the edge, in one place (the memory table of
/// `docs/operations.md` lists them). What happens at each limit is written next to it.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Long-poll readers waiting at once, over all streams, those forwarded
    /// to the origin as they came (an API key's) included; one more answers
    /// 503 with `Retry-After`.
    pub max_waiters: usize,
    /// How much longer than its own `timeout_ms` a waiter waits for the
    /// shared upstream answer before it answers 503 by itself.
    pub waiter_grace: Duration,
    /// SSE readers connected at once, those of the shared feeds and those
    /// forwarded to the origin alike (a forwarded one holds an upstream
    /// connection as long); one more answers 503.
    pub max_sse_readers: usize,
    /// Frames queued for one SSE reader; a reader whose queue is full is
    /// disconnected (it reconnects from its last `streamNextOffset`). For
    /// a detached reader (the light path) the queue is the chunks its
    /// socket did not take yet, each a reference to a shared frame.
    pub sse_reader_queue: usize,
    /// Detached SSE readers one writer task serves; a hub with more starts
    /// another writer (so a hub's writes spread over the runtime's
    /// threads), and a writer left with none ends.
    pub sse_shard_readers: usize,
    /// What a reader its writer lost (the writer fell behind its feed)
    /// reads at a time while it catches up again in a task of its own: a
    /// reader whose socket does not drain holds one such piece (framed)
    /// until its session ends.
    pub sse_refill_bytes: u64,
    /// Frames of the live feed kept per stream for readers that are behind;
    /// a reader that falls further behind is disconnected.
    pub sse_ring: usize,
    /// Largest data event of the shared feed (`max_bytes` of the upstream
    /// tail's reads); one JSON message larger than this comes whole.
    pub sse_frame_bytes: u64,
    /// How long one upstream long-poll of a tail waits.
    pub upstream_poll_ms: u64,
    /// Bytes all streams' shared feeds hold together (their frames in the
    /// rings). A feed whose next frame does not fit ends (its readers
    /// reconnect), and while less than one frame's room is left a new SSE
    /// reader answers 503 + `Retry-After`.
    pub sse_ring_bytes: u64,
    /// An SSE reader is ended after this long, as the origin does.
    pub sse_session: Duration,
    /// An SSE reader silent for this long is sent a keepalive comment
    /// (`shared::sse::KEEPALIVE`); zero: none. One whose queue is full is
    /// sent none (bytes are waiting for it anyway).
    pub sse_keepalive: Duration,
    /// Largest upstream answer the edge buffers (a read is at most 8 MiB).
    pub max_answer_bytes: usize,
    /// Waiting requests to the origin (tails, long-polls, the feed): HTTP/2
    /// connections per origin at most, and requests on each at most
    /// (`upstream::multiplexed`); past both, a new one is refused at once
    /// (a tail ends and its readers reconnect, a long-poll answers 503 +
    /// `Retry-After`); and idle HTTP/1.1 connections kept per origin for
    /// the other requests (one more idle is closed).
    pub upstream_waiting: crate::upstream::multiplexed::MultiplexLimits,
    /// Which protocol waiting requests take to each origin (found out, or
    /// fixed), and how often an origin without HTTP/2 is probed again.
    pub upstream_protocol: crate::upstream::waiting::ProtocolChoice,
    /// Bytes of snapshots copied into the cache while they stream through,
    /// all readers together; a snapshot that does not fit streams through
    /// without being kept.
    pub snapshot_fill_bytes: u64,
    /// How long one long-poll of the origin's invalidation feed waits: the
    /// feed's heartbeat when nothing changes.
    pub feed_poll: Duration,
    /// With no answer of the feed for this long, the edge answers nothing
    /// from memory (it asks the origin) until the feed answers again.
    pub feed_stale_after: Duration,
    /// Connections: their cap (past it, no more are accepted until one
    /// closes), the header-read / keep-alive timeout (the connection is
    /// closed), and the body idle timeout (408).
    pub serve: shell::ServeConfig,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_waiters: 100_000,
            waiter_grace: Duration::from_secs(10),
            max_sse_readers: 100_000,
            sse_reader_queue: 32,
            // 256, not 4,096: a hub's thousand readers then spread over
            // both cores' writers (1,000 readers × 100 appends/s, p99 from
            // the answer 11–16 ms against 28–48; no difference at 16,000,
            // 5 December 2026, loadtest/RESULTS.md).
            sse_shard_readers: 256,
            sse_refill_bytes: 64 * 1024,
            sse_ring: 256,
            sse_frame_bytes: 1024 * 1024,
            upstream_poll_ms: 20_000,
            sse_ring_bytes: 512 * 1024 * 1024,
            sse_session: Duration::from_secs(60),
            sse_keepalive: Duration::from_secs(15),
            max_answer_bytes: 9 * 1024 * 1024,
            upstream_waiting: Default::default(),
            upstream_protocol: Default::default(),
            snapshot_fill_bytes: 256 * 1024 * 1024,
            feed_poll: Duration::from_secs(1),
            feed_stale_after: Duration::from_secs(2),
            serve: shell::ServeConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_url_is_checked() {
        assert!(EdgeConfig::new("http://127.0.0.1:4437".parse().unwrap(), 1).is_ok());
        assert!(EdgeConfig::new("http://127.0.0.1:4437/x".parse().unwrap(), 1).is_err());
        assert!(EdgeConfig::new("https://a".parse().unwrap(), 1).is_err());
    }

    #[test]
    fn origin_takes_a_list_of_the_regions_origins() {
        use clap::Parser;
        let config = |arg: &str| Cli::parse_from(["edge", "--origin", arg]).config();
        let c = config("http://127.0.0.1:1, http://127.0.0.1:2,http://127.0.0.1:3").unwrap();
        assert_eq!(c.origin, "http://127.0.0.1:1");
        assert_eq!(c.more_origins, ["http://127.0.0.1:2", "http://127.0.0.1:3"]);
        assert!(config("http://127.0.0.1:1")
            .unwrap()
            .more_origins
            .is_empty());
        assert!(config("http://127.0.0.1:1,https://b").is_err());
        assert!(config("http://127.0.0.1:1,").is_err());
    }

    #[test]
    fn public_url_is_checked() {
        assert_eq!(
            public_url("https://s.example.com/").unwrap(),
            "https://s.example.com"
        );
        assert!(public_url("s.example.com").is_err());
        assert!(public_url("ftp://s.example.com").is_err());
        assert!(public_url("https://s.example.com/?a=1").is_err());
    }

    #[test]
    fn flags_and_env() {
        let cli =
            Cli::try_parse_from(["edge", "--cache", "64MiB", "--listen", "127.0.0.1:0"]).unwrap();
        assert_eq!(cli.cache, 64 << 20);
        assert_eq!(cli.config().unwrap().cache_bytes, 64 << 20);
    }
}
