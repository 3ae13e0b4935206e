//! The command line. Every flag also reads an environment variable
//! (`ORIGIN_*`); a flag given on the command line wins over the variable,
//! which wins over the default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
pub use shared::units::{parse_duration, parse_size};

use crate::http::{HttpConfig, JsonReads};
use crate::store::{Durability, StoreConfig};

/// The longest `--region-replica-floor-wait` (a read with a floor holds a
/// task of the follower's for as long).
const MAX_FLOOR_WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum JsonReadsArg {
    /// `application/x-ndjson`: one message per line.
    Ndjson,
    /// JSON arrays, for clients of the upstream protocol.
    Array,
}

/// Where a region's origins put their commits (`--region-wal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WalLayoutArg {
    /// The bucket's: as pinned by the region's first origin; one WAL per
    /// origin for a new region, a WAL per partition for a bucket made
    /// before the layout was pinned. Read from the bucket at start.
    Auto,
    /// A WAL per partition (decisions 0012, 0015).
    Partition,
    /// One WAL per origin for every partition it serves (decision 0028).
    Origin,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DurabilityArg {
    /// Acknowledge after fdatasync: survives power loss.
    Sync,
    /// Acknowledge after write: survives a process crash, not a power loss.
    Async,
    /// Acknowledge once the commit is an object in object storage (written
    /// by a create-only put): survives the loss of the machine and its
    /// disk. Needs `--object-store`; the local disk is a cache.
    Object,
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
    /// How log lines are written: `text`, or `json` (one object per line,
    /// for log shippers). Lines of a request carry its `request_id`.
    #[arg(
        long,
        env = "ORIGIN_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: shell::logging::LogFormat,
    /// Directory of the log, checkpoints and stream files.
    #[arg(
        long,
        env = "ORIGIN_DATA",
        default_value = "./data/origin",
        global = true
    )]
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
    /// How JSON streams read when a request's `Accept` prefers neither
    /// `application/json` (arrays) nor `application/x-ndjson`: NDJSON
    /// (default) or JSON arrays.
    #[arg(long, env = "ORIGIN_JSON_READS", value_enum, default_value = "ndjson")]
    pub json_reads: JsonReadsArg,
    /// Largest request body, e.g. 8MiB.
    #[arg(long, env = "ORIGIN_MAX_BODY", default_value = "8MiB", value_parser = parse_size)]
    pub max_body: u64,
    /// Largest snapshot (published in parts), e.g. 128MiB.
    #[arg(long, env = "ORIGIN_MAX_SNAPSHOT", default_value = "128MiB", value_parser = parse_size)]
    pub max_snapshot: u64,
    /// Snapshot offsets one stream may have parts staged under at once; a
    /// part for one more answers 409 STAGING_LIMIT.
    #[arg(
        long,
        env = "ORIGIN_MAX_STAGED_UPLOADS_PER_STREAM",
        default_value_t = 4
    )]
    pub max_staged_uploads_per_stream: usize,
    /// Disk all staged snapshot parts may take together (each part counted
    /// in whole 4 KiB blocks), e.g. 1GiB; never less than the largest
    /// snapshot. A part past it answers 503 + Retry-After.
    #[arg(long, env = "ORIGIN_MAX_STAGED_BYTES", default_value = "1GiB", value_parser = parse_size)]
    pub max_staged_bytes: u64,
    /// Staged parts of a snapshot offset that no part has touched for this
    /// long are removed, e.g. 1h.
    #[arg(long, env = "ORIGIN_STAGED_UPLOAD_TTL", default_value = "1h", value_parser = parse_duration)]
    pub staged_upload_ttl: Duration,
    /// Request bodies (and snapshots being assembled) held in memory at once,
    /// e.g. 256MiB; never less than the largest body or snapshot.
    #[arg(long, env = "ORIGIN_INGRESS_BUDGET", default_value = "256MiB", value_parser = parse_size)]
    pub ingress_budget: u64,
    /// The most of the ingress budget one client holds at once, in percent
    /// (a credential's account; without one, its address).
    #[arg(long, env = "ORIGIN_INGRESS_SHARE_PERCENT", default_value_t = 25, value_parser = clap::value_parser!(u8).range(1..=100))]
    pub ingress_share_percent: u8,
    /// How long a request body waits for room in the ingress budget (or its
    /// client's share) before it is refused with 503 + Retry-After, e.g. 5s.
    #[arg(long, env = "ORIGIN_INGRESS_WAIT", default_value = "5s", value_parser = parse_duration)]
    pub ingress_wait: Duration,
    /// A header a trusted proxy in front sets to the client's address, e.g.
    /// cloudfront-viewer-address; unset: the connection's peer address.
    #[arg(long, env = "ORIGIN_CLIENT_ADDRESS_HEADER")]
    pub client_address_header: Option<http::HeaderName>,
    /// How long an SSE tail stays open before the server ends it, e.g. 60s.
    #[arg(long, env = "ORIGIN_SSE_SESSION", default_value = "60s", value_parser = parse_duration)]
    pub sse_session: Duration,
    /// An idle SSE tail sends a comment line this often, so no proxy or
    /// CDN in front cuts it for silence (keep it below their read
    /// timeouts), e.g. 15s; 0s: none.
    #[arg(long, env = "ORIGIN_SSE_KEEPALIVE", default_value = "15s", value_parser = parse_duration)]
    pub sse_keepalive: Duration,
    /// Subscriptions and webhooks.
    #[command(flatten)]
    pub subscriptions: crate::subscriptions::flags::SubscriptionFlags,
    /// From SIGTERM (or Ctrl-C), how long the origin goes on serving with
    /// `/readyz` answering 503 before it closes its listener, so a balancer
    /// that checks readiness takes it out of rotation first (set it to the
    /// balancer's check interval times its unhealthy threshold); a second
    /// signal ends it early. 0s: close at once.
    #[arg(long, env = "ORIGIN_DRAIN_DELAY", default_value = "0s", value_parser = parse_duration)]
    pub drain_delay: Duration,
    /// A request body that sends nothing for this long answers 408.
    #[arg(long, env = "ORIGIN_BODY_IDLE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub body_idle_timeout: Duration,
    /// A connection that sends no whole request head for this long (after
    /// opening, or idle after an answer) is closed.
    #[arg(long, env = "ORIGIN_HEADER_READ_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// HTTP/1.1 long-polls and SSE reads are served without hyper once
    /// their head is read, so a waiting reader holds no connection buffers
    /// (false: hyper serves every connection).
    #[arg(long, env = "ORIGIN_LIGHT_PATH", default_value_t = true, action = clap::ArgAction::Set)]
    pub light_path: bool,
    /// Connections served at once (0: half the descriptor limit found at
    /// start); past it new ones wait in the kernel's backlog.
    #[arg(long, env = "ORIGIN_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// When appends are acknowledged: after fdatasync (sync) or after the
    /// write to the OS (async).
    #[arg(long, env = "ORIGIN_DURABILITY", value_enum, default_value = "sync")]
    pub durability: DurabilityArg,
    /// This origin's name in its region (object durability): unique among
    /// the origins sharing a bucket and prefix.
    #[arg(long, env = "ORIGIN_NODE_ID", default_value = "origin")]
    pub node_id: String,
    /// Where the region's other origins reach this one (default:
    /// http:// and the bound listen address).
    #[arg(long, env = "ORIGIN_ADVERTISE_URL", default_value = "")]
    pub advertise_url: String,
    /// With object durability, how long a write waits for object storage
    /// before it answers 503 + Retry-After (the commit may still land).
    #[arg(long, env = "ORIGIN_OBJECT_WRITE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub object_write_timeout: Duration,
    /// With object durability, how long an origin's heartbeat may stand
    /// still before the region takes its partition over (takeover takes
    /// about this plus a renewal and the replay).
    #[arg(long, env = "ORIGIN_LEASE", default_value = "5s", value_parser = parse_duration)]
    pub lease: Duration,
    /// How often a region origin renews its heartbeat and reads the others'.
    #[arg(long, env = "ORIGIN_LEASE_RENEW", default_value = "1s", value_parser = parse_duration)]
    pub lease_renew: Duration,
    /// With object durability, the serving origin writes a checkpoint of
    /// its partition into the bucket (and deletes the WAL below it) once
    /// this many WAL objects are past the last one...
    #[arg(long, env = "ORIGIN_REGION_CHECKPOINT_OBJECTS", default_value_t = 4096)]
    pub region_checkpoint_objects: u64,
    /// ...or this many bytes of them, and at least the last image's size.
    #[arg(long, env = "ORIGIN_REGION_CHECKPOINT_BYTES", default_value = "64MiB", value_parser = parse_size)]
    pub region_checkpoint_bytes: u64,
    /// With object durability, how many partitions the region splits its
    /// streams into (each owned by one origin at a time, spread evenly
    /// over the live origins). Fixed for a bucket's life: the first origin
    /// pins it there, and an origin given another count refuses to start.
    #[arg(long, env = "ORIGIN_REGION_PARTITIONS", default_value_t = 1)]
    pub region_partitions: u32,
    /// A fork whose source is in another partition copies the source's
    /// prefix into its own partition: at most this many bytes (a longer
    /// prefix answers 409 FORK_ACROSS_PARTITIONS).
    #[arg(long, env = "ORIGIN_REGION_FORK_COPY_MAX", default_value = "256MiB", value_parser = parse_size)]
    pub region_fork_copy_max: u64,
    /// How old the region's record of a fork across partitions must be
    /// before its owner checks that the fork's other end still exists
    /// (and drops it if not: after a crash in the middle of making one).
    #[arg(long, env = "ORIGIN_REGION_PIN_GRACE", default_value = "60s", value_parser = parse_duration)]
    pub region_pin_grace: Duration,
    /// Forks across partitions one origin makes at once (each copies its
    /// source's prefix); one more answers 503 + Retry-After.
    #[arg(long, env = "ORIGIN_REGION_FORK_COPIES", default_value_t = 8)]
    pub region_fork_copies: usize,
    /// In a region, each origin keeps a replica of the partitions it
    /// follows, read from the owner's WAL objects in the bucket, and
    /// answers `consistency=local` catch-up reads from it (decision 0018);
    /// `false`: every request for a partition owned elsewhere is forwarded.
    #[arg(long, env = "ORIGIN_REGION_REPLICAS", default_value_t = true, action = clap::ArgAction::Set)]
    pub region_replicas: bool,
    /// Where a region's origins put their commits: `origin`, one WAL per
    /// origin for every partition it serves, so puts do not grow with the
    /// partition count (decision 0028); `partition`, a WAL per partition;
    /// `auto`, the layout the bucket holds (one WAL per origin for a new
    /// region). Every origin of a region must use the same.
    #[arg(long, env = "ORIGIN_REGION_WAL", value_enum, default_value = "auto")]
    pub region_wal: WalLayoutArg,
    /// How often a replica looks for its owner's new commits (its lag is
    /// about this plus one read of the bucket).
    #[arg(long, env = "ORIGIN_REGION_REPLICA_INTERVAL", default_value = "250ms", value_parser = parse_duration)]
    pub region_replica_interval: Duration,
    /// Streams an origin remembers having forwarded a write of, whose
    /// reads it forwards until its replica caught up with the write (read
    /// your writes through one origin); past it the oldest is forgotten.
    #[arg(long, env = "ORIGIN_REGION_REPLICA_WRITTEN", default_value_t = 65_536)]
    pub region_replica_written: usize,
    /// How long a follower waits for its replica to reach a read's
    /// `min_next_offset` (decision 0025) before it forwards the read to the
    /// owner instead; `0s`: forwarded at once; 10s at most (more is taken
    /// as 10s).
    #[arg(long, env = "ORIGIN_REGION_REPLICA_FLOOR_WAIT", default_value = "500ms", value_parser = parse_duration)]
    pub region_replica_floor_wait: Duration,
    /// Requests this origin forwards to partitions' owners at once (writes,
    /// long-polls, SSE tails, the feed: each holds a connection to the
    /// owner until its answer ends); one more answers 503 + Retry-After.
    #[arg(long, env = "ORIGIN_REGION_FORWARDS", default_value_t = 16_384)]
    pub region_forwards: usize,
    /// Reads with `min_next_offset` a follower holds at once while its
    /// replica catches up; past it such a read is forwarded to the owner
    /// at once (it has every write).
    #[arg(
        long,
        env = "ORIGIN_REGION_REPLICA_FLOOR_WAITING",
        default_value_t = 4_096
    )]
    pub region_replica_floor_waiting: usize,
    /// How often the serving origin looks whether a checkpoint is due.
    #[arg(long, env = "ORIGIN_REGION_CHECKPOINT_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub region_checkpoint_interval: Duration,
    /// Benchmarks only: a wait before every WAL put in object durability
    /// (object storage farther away, e.g. 10ms for S3 Express, 50ms for S3
    /// Standard).
    #[arg(long, env = "ORIGIN_OBJECT_PUT_DELAY", default_value = "0s", value_parser = parse_duration, hide = true)]
    pub object_put_delay: Duration,
    /// Under concurrent appends, how long the writer waits at most to gather
    /// more of them into one sync (0s: never); it stops early once as many
    /// wait as the last batch had. A lone writer never waits. Default 1ms;
    /// 10ms in a region of several partitions, whose per-partition WALs
    /// would otherwise put many small objects (the PUT bill).
    #[arg(long, env = "ORIGIN_COMMIT_DELAY", value_parser = parse_duration)]
    pub commit_delay: Option<Duration>,
    /// Checkpoint when the open WAL segment reaches this size.
    #[arg(long, env = "ORIGIN_CHECKPOINT_BYTES", default_value = "64MiB", value_parser = parse_size)]
    pub checkpoint_bytes: u64,
    /// Log kept on disk for small streams' bytes (older than the last
    /// checkpoint) before the oldest segment is cleaned into their files.
    #[arg(long, env = "ORIGIN_LOG_RETAIN_BYTES", default_value = "1GiB", value_parser = parse_size)]
    pub log_retain_bytes: u64,
    /// Streams' own files kept open at most (0: a quarter of the
    /// descriptor limit found at start, 64 to 4,096).
    #[arg(long, env = "ORIGIN_OPEN_FILES", default_value_t = 0)]
    pub open_files: usize,
    /// Streams under this path prefix belong to the account `default`.
    #[arg(long, env = "ORIGIN_DEFAULT_PREFIX", default_value = "/v1/stream/")]
    pub default_prefix: String,
    /// Accounts anyone may use without a credential and without limits
    /// (comma-separated; "" for none).
    #[arg(long, env = "ORIGIN_OPEN_ACCOUNTS", default_value = "default")]
    pub open_accounts: String,
    /// Requests per second per credential, charged after authentication
    /// (an account's anonymous public readers share one; 0: no limit).
    #[arg(long, env = "ORIGIN_ACCOUNT_RPS", default_value_t = 1000)]
    pub account_rps: u32,
    /// Live reads (long-polls and SSE) open at once per credential (an
    /// account's anonymous public readers share one; 0: no limit).
    #[arg(long, env = "ORIGIN_ACCOUNT_LIVE_READS", default_value_t = 16)]
    pub account_live_reads: u32,
    /// Rate-limit budgets (keys, public readers of an account) remembered
    /// at once; past it new ones share one overflow budget until idle ones
    /// (10 minutes) are swept.
    #[arg(long, env = "ORIGIN_LIMIT_BUDGETS", default_value_t = 100_000)]
    pub limit_budgets: usize,
    /// Paths one page of `GET /_streams` looks at most, listed or skipped
    /// (expired, out of the caller's reach); past it the page ends early
    /// with `has_more` and a cursor to go on from.
    #[arg(long, env = "ORIGIN_LIST_SCAN_MAX", default_value_t = 10_000)]
    pub list_scan_max: usize,
    /// Where the cacheable reads of every stream (chunk and snapshot URLs)
    /// should go, e.g. the CDN in front of the edges
    /// (https://streams.example.com): named as `Stream-Read-Origin` on
    /// `HEAD` and read answers. Unset: not sent.
    #[arg(long, env = "ORIGIN_READ_ORIGIN", value_parser = shared::read_origin::parse)]
    pub read_origin: Option<axum::http::HeaderValue>,
    /// Longest lifetime of an exchanged token, e.g. 1h.
    #[arg(long, env = "ORIGIN_MAX_TOKEN_TTL", default_value = "1h", value_parser = parse_duration)]
    pub max_token_ttl: Duration,
    /// Bearer token of the admin API (/_admin/keys); unset: the API is off.
    /// Prefer the environment variable: command lines are visible to others.
    #[arg(long, env = "ORIGIN_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Admin commands that work on the data directory; a running origin picks
/// up their changes within a second.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        action: KeysAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysAction {
    /// Make a key; prints it once (only its hash is kept).
    Create {
        #[arg(long)]
        account: String,
        /// Reads only.
        #[arg(long)]
        read_only: bool,
        /// Only streams whose name (the path after the account) starts with this.
        #[arg(long)]
        prefix: Option<String>,
        /// An agent's key: must be exchanged for a token before use.
        #[arg(long)]
        agent: bool,
    },
    /// List keys (never their secrets).
    List {
        #[arg(long)]
        account: Option<String>,
    },
    /// Revoke a key by id.
    Revoke { id: String },
}

impl Cli {
    pub fn store_config(&self) -> StoreConfig {
        let mut c = StoreConfig::new(self.data.clone());
        c.checkpoint_bytes = self.checkpoint_bytes;
        c.log_retain_bytes = self.log_retain_bytes;
        c.open_files = self.open_files;
        let partitioned =
            matches!(self.durability, DurabilityArg::Object) && self.region_partitions > 1;
        c.commit_delay = self.commit_delay.unwrap_or(if partitioned {
            Duration::from_millis(10)
        } else {
            Duration::from_millis(1)
        });
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
            DurabilityArg::Object => Durability::Object,
        };
        c.region.node = self.node_id.clone();
        c.region.url = self.advertise_url.clone();
        c.region.partitions = self.region_partitions;
        c.region.checkpoint.objects = self.region_checkpoint_objects;
        c.region.checkpoint.bytes = self.region_checkpoint_bytes;
        c.region.checkpoint.interval = self.region_checkpoint_interval;
        c.region.fork_copy_max = self.region_fork_copy_max;
        c.region.pin_grace = self.region_pin_grace;
        c.region.fork_copies = self.region_fork_copies.max(1);
        c.region.one_wal = self.region_wal == WalLayoutArg::Origin;
        c.region.wal_auto = self.region_wal == WalLayoutArg::Auto;
        c.region.replicas = self.region_replicas;
        c.region.replica_interval = self.region_replica_interval.max(Duration::from_millis(10));
        c.region.replica_written = self.region_replica_written;
        c.region.forwards = self.region_forwards.max(1);
        c.region.replica_floor_waiting = self.region_replica_floor_waiting;
        // Every floored read a follower holds waits this long at most: a
        // few seconds is already far past a replica round.
        c.region.replica_floor_wait = self.region_replica_floor_wait.min(MAX_FLOOR_WAIT);
        c.object_write_timeout = self.object_write_timeout;
        c.object_put_delay = self.object_put_delay;
        c
    }

    /// Settings that do not go together, as a message for the operator.
    pub fn check(&self) -> Result<(), String> {
        let explicit_store = self
            .object_store
            .as_deref()
            .is_some_and(|url| url != "none");
        if matches!(self.durability, DurabilityArg::Object) && !explicit_store {
            return Err("--durability object needs --object-store URL: the bucket is what survives the machine (the default folder lives in the data directory)".into());
        }
        let node = &self.node_id;
        if node.is_empty()
            || node.len() > 64
            || node.starts_with('.')
            || !node
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err("--node-id is 1 to 64 of A-Z a-z 0-9 . _ - (not starting with a dot): it names an object in the bucket".into());
        }
        if self.region_checkpoint_objects == 0 || self.region_checkpoint_interval.is_zero() {
            return Err(
                "--region-checkpoint-objects and --region-checkpoint-interval must be more than 0"
                    .into(),
            );
        }
        if !(1..=shared::partition::MAX_PARTITIONS).contains(&self.region_partitions) {
            return Err(format!(
                "--region-partitions is 1 to {}",
                shared::partition::MAX_PARTITIONS
            ));
        }
        if self.lease_renew.is_zero() || self.lease < self.lease_renew.saturating_mul(2) {
            return Err("--lease must be at least twice --lease-renew (and the renewal more than 0s), or a live origin looks dead between two renewals".into());
        }
        Ok(())
    }

    /// How a region origin finds the others and takes over.
    pub fn membership_config(&self) -> crate::region::membership::MembershipConfig {
        crate::region::membership::MembershipConfig {
            lease: self.lease,
            renew: self.lease_renew,
            stagger: self.lease_renew.saturating_mul(2),
            ..Default::default()
        }
    }

    /// Whether this origin is one of a region (object durability).
    pub fn in_region(&self) -> bool {
        matches!(self.durability, DurabilityArg::Object)
    }

    pub fn http_config(&self) -> HttpConfig {
        HttpConfig {
            json_reads: match self.json_reads {
                JsonReadsArg::Ndjson => JsonReads::Ndjson,
                JsonReadsArg::Array => JsonReads::Array,
            },
            max_body: self.max_body,
            max_snapshot: self.max_snapshot,
            max_staged_uploads_per_stream: self.max_staged_uploads_per_stream,
            max_staged_bytes: self.max_staged_bytes.max(self.max_snapshot),
            staged_upload_ttl: self.staged_upload_ttl,
            ingress_budget: self
                .ingress_budget
                .max(self.max_body)
                .max(self.max_snapshot),
            sse_session: self.sse_session,
            sse_keepalive: self.sse_keepalive,
            ingress_share_percent: self.ingress_share_percent,
            ingress_wait: self.ingress_wait,
            client_address_header: self.client_address_header.clone(),
            serve: shell::ServeConfig {
                max_connections: self.max_connections,
                header_read_timeout: self.header_read_timeout,
                body_idle_timeout: self.body_idle_timeout,
                drain_delay: self.drain_delay,
                light_path: self.light_path,
                ..shell::ServeConfig::default()
            },
            auth: crate::auth::AuthConfig {
                default_prefix: self.default_prefix.clone(),
                open_accounts: shared::auth::account_list(&self.open_accounts),
                limits: shared::limits::LimitConfig {
                    rps: self.account_rps,
                    live_reads: self.account_live_reads,
                    budgets: self.limit_budgets,
                },
                max_token_secs: self.max_token_ttl.as_secs().max(1),
                admin_token: self.admin_token.clone().filter(|t| !t.is_empty()),
            },
            subscriptions: self.subscriptions.config(),
            list_scan_max: self.list_scan_max.max(1),
            read_origin: self.read_origin.clone(),
        }
    }
}
