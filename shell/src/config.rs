//! The limits a connection meets before its requests reach the server,
//! shared by origin and edge (each exposes them as flags and environment
//! variables of its own: `--max-connections`, `--header-read-timeout`,
//! `--body-idle-timeout`).

use std::time::Duration;

/// Connection limits and timeouts. At each limit:
/// - `max_connections`: the server stops accepting; new connections wait in
///   the kernel's backlog until one closes (no answer is sent, nothing is
///   dropped by the server);
/// - `header_read_timeout`: an HTTP/1.1 connection that has not sent a whole
///   request head this long after it became ready for one (opened, or idle
///   after an answer) is closed: the header-read and keep-alive timeout;
/// - `body_idle_timeout`: a request body that sends nothing for this long
///   ends in [`crate::BodyIdle`], which the servers answer with 408 and which
///   lets go of the room the body held;
/// - `recovering_connections`: while the origin replays its log, the
///   connections held for it at once (one more is answered `503` +
///   `Retry-After`), and apart from those the connections being looked at
///   or answered as probes at once (past it the listener waits, at most
///   about `probe_timeout`);
/// - `probe_timeout`: while recovering, a connection that has not shown
///   within this long whether it is a probe is held for the server;
/// - `light_path`: HTTP/1.1 long-polls and SSE reads are served without
///   hyper once their head is read (`crate::light_path`; off: hyper serves
///   every connection, as before);
/// - `light_head_bytes`: the most bytes of a request head the light path
///   looks at; a longer head (or one not all arrived) is left to hyper,
///   which serves it as any other request;
/// - `drain_delay`: from a stop signal, how long the server goes on
///   serving with `/readyz` answering `503` before its listener closes
///   (`signal::after_drain`; a second signal ends it early).
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Connections served at once; 0: half the descriptor limit found at
    /// start, at least 16.
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub body_idle_timeout: Duration,
    /// Concurrent requests one HTTP/2 connection may have in flight.
    pub http2_max_streams: u32,
    /// An HTTP/2 connection silent this long is pinged, and closed if the
    /// ping is not answered within as long again (also what bounds a client
    /// that ignores the goodbye of an idle connection).
    pub http2_keep_alive: Duration,
    pub recovering_connections: usize,
    pub probe_timeout: Duration,
    pub drain_delay: Duration,
    pub light_path: bool,
    pub light_head_bytes: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_connections: 0,
            header_read_timeout: Duration::from_secs(30),
            body_idle_timeout: Duration::from_secs(10),
            http2_max_streams: 256,
            http2_keep_alive: Duration::from_secs(30),
            recovering_connections: 256,
            probe_timeout: Duration::from_secs(5),
            drain_delay: Duration::ZERO,
            light_path: true,
            light_head_bytes: 4096,
        }
    }
}

impl ServeConfig {
    /// The connection cap in force: `max_connections`, or its default.
    pub fn connection_cap(&self) -> usize {
        match self.max_connections {
            0 => (crate::descriptors::limit() / 2).max(16) as usize,
            n => n,
        }
        .min(tokio::sync::Semaphore::MAX_PERMITS)
    }
}
