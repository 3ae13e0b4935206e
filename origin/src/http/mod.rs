//! The HTTP shell: one file per protocol operation, routes in [`routes`],
//! refusals in [`error`].
//!
//! Streams live at any path, so requests are routed by method and by the
//! shape of the path (see `shared::paths`) rather than by a path pattern.

pub(crate) mod admin;
pub(crate) mod append;
pub(crate) mod body;
pub(crate) mod chunk;
pub(crate) mod create;
pub(crate) mod delete;
pub(crate) mod error;
pub(crate) mod fork;
pub(crate) mod forward;
pub(crate) mod head;
pub(crate) mod ingress;
pub(crate) mod invalidations;
pub(crate) mod list;
pub mod live;
pub(crate) mod long_poll;
pub(crate) mod read;
pub(crate) mod reading;
pub mod request;
pub(crate) mod restore;
pub(crate) mod routes;
pub(crate) mod snapshot;
pub(crate) mod sse;
pub(crate) mod staging;
pub mod staging_bucket;
pub(crate) mod subscriptions;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, Response, StatusCode};
use axum::response::IntoResponse;
use shared::error::ErrorCode;
use shared::params::Live;
use shared::paths::{classify, Target};

use crate::metrics::Metrics;
use crate::store::Store;
use error::ApiError;

/// How reads of JSON streams are shaped when `Accept` does not choose
/// (`shared::negotiate`).
pub use shared::negotiate::JsonReads;

/// Limits and timings of the HTTP layer.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// The shape of JSON streams' reads whose `Accept` prefers neither.
    pub json_reads: JsonReads,
    /// The largest request body.
    pub max_body: u64,
    /// Request bodies held in memory at once, in bytes; a request that cannot
    /// get room within `ingress_wait` answers 503. A body takes room as its
    /// bytes arrive (not what it declares), so a body that stalls holds
    /// only what it sent.
    pub ingress_budget: u64,
    pub ingress_wait: Duration,
    /// The most of the ingress budget one client (a credential's account,
    /// else an address) holds at once, in percent; never less than one
    /// largest body.
    pub ingress_share_percent: u8,
    /// A header a trusted proxy in front sets to the client's address
    /// (e.g. `cloudfront-viewer-address`), naming the clients of requests
    /// without a credential; none: the socket's peer.
    pub client_address_header: Option<http::HeaderName>,
    /// Connections: their cap, the header-read / keep-alive timeout, and
    /// the body idle timeout (408, and the body lets go of its room).
    pub serve: shell::ServeConfig,
    /// An SSE tail is closed after this long, so caches can collapse readers.
    pub sse_session: Duration,
    /// An SSE tail silent for this long sends a keepalive comment; zero:
    /// none. Keep it below the read timeout of every proxy in front.
    pub sse_keepalive: Duration,
    /// The largest snapshot accepted in parts (advertised on HEAD).
    pub max_snapshot: u64,
    // Staged snapshot parts wait on disk for their publish
    // (`core::staging`); these bound them.
    /// Snapshot offsets one stream (incarnation) may have parts staged
    /// under at once; a part for one more answers 409 `STAGING_LIMIT`
    /// and writes nothing.
    pub max_staged_uploads_per_stream: usize,
    /// Disk all staged parts may take together, each part counted in whole
    /// 4 KiB blocks; a part past it answers 503 + `Retry-After` and writes
    /// nothing.
    pub max_staged_bytes: u64,
    /// Staged parts of an offset that no part has touched for this long are
    /// removed (publishing or deleting the stream removes them at once).
    pub staged_upload_ttl: Duration,
    /// Accounts, keys, tokens and per-account limits.
    pub auth: crate::auth::AuthConfig,
    /// Subscriptions' bounds and timings (protocol §6–7).
    pub subscriptions: crate::subscriptions::SubscriptionsConfig,
    /// Paths a listing's page looks at most (`GET /_streams`), shown or
    /// skipped (expired, soft-deleted, out of the caller's reach): the
    /// page then ends early, with `has_more` and its cursor at the last
    /// path looked at, so no page walks more than this whatever the
    /// streams and the credential.
    pub list_scan_max: usize,
    /// `Stream-Read-Origin` of `HEAD` and read answers (`--read-origin`).
    pub read_origin: Option<axum::http::HeaderValue>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            json_reads: JsonReads::Ndjson,
            max_body: 8 * 1024 * 1024,
            ingress_budget: 256 * 1024 * 1024,
            ingress_wait: Duration::from_secs(5),
            ingress_share_percent: 25,
            client_address_header: None,
            serve: shell::ServeConfig::default(),
            sse_session: Duration::from_secs(60),
            sse_keepalive: Duration::from_secs(15),
            max_snapshot: 128 * 1024 * 1024,
            max_staged_uploads_per_stream: 4,
            max_staged_bytes: 1024 * 1024 * 1024,
            staged_upload_ttl: Duration::from_secs(60 * 60),
            auth: crate::auth::AuthConfig::default(),
            subscriptions: crate::subscriptions::SubscriptionsConfig::default(),
            list_scan_max: 10_000,
            read_origin: None,
        }
    }
}

pub struct AppState {
    pub store: Store,
    pub config: HttpConfig,
    pub metrics: Arc<Metrics>,
    /// Bytes of request bodies in memory, and each client's share.
    pub ingress: Arc<ingress::Ingress>,
    /// Turns true when the server starts to shut down: live reads end, so
    /// the graceful shutdown does not wait for them.
    pub closing: tokio::sync::watch::Sender<bool>,
    /// The same, for waits polled by hand (a parked long-poll's): closed
    /// once `closing` turns true.
    pub stop: Arc<shell::waker_set::Closing>,
    /// Set from the stop signal on (`/readyz` answers 503 draining).
    pub draining: shell::ready::Draining,
    pub auth: crate::auth::Auth,
    /// Snapshot parts staged on disk, and their bounds.
    pub staging: Arc<staging::Staging>,
    /// In a region: the key store in the bucket, where the admin API puts
    /// each change before answering (`region::auth_sync`).
    pub key_store: Option<Arc<crate::region::auth_sync::KeyStore>>,
    /// Subscriptions and webhooks, once opened (`Origin::serve_held`; in
    /// a region, by the owner of partition 0 once it claimed it).
    pub subscriptions: std::sync::OnceLock<Arc<crate::subscriptions::Subscriptions>>,
    /// Set while the subscriptions are being opened (their requests
    /// answer 503 + `Retry-After` meanwhile, not 404).
    pub subscriptions_opening: std::sync::atomic::AtomicBool,
}

impl AppState {
    /// Resolves once the server is shutting down.
    pub async fn closed(&self) {
        let mut rx = self.closing.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }
}

pub type Shared = Arc<AppState>;

/// A value on cache lines no other value shares (two lines: adjacent-line
/// prefetch pairs them).
#[repr(align(128))]
pub struct OwnLines<T>(pub T);

impl<T> std::ops::Deref for OwnLines<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A request's answer to come, boxed by its kind (see [`handle`]).
pub type Answering = std::pin::Pin<Box<dyn std::future::Future<Output = Response<Body>> + Send>>;

/// Answers one request. Streams live at any path, so there is no route
/// table: the server's own two endpoints, then [`dispatch`] by method and
/// path shape.
///
/// The answer's future is boxed here, once, and its type chosen by the
/// method first: an append keeps its operation's state inline (the hot
/// path: one allocation), every other request has its operation boxed
/// apart ([`BoxedAppend`]), so the future a waiting read keeps for its
/// whole wait is not the append's size (3.7 KiB; a parked long-poll's
/// memory is the idle-reader budget's measure (decision 0020)).
pub fn handle<B>(state: Shared, req: http::Request<B>) -> Answering
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    if req.method() == Method::POST {
        Box::pin(answer::<B, InlineAppend>(state, req))
    } else if live::is_long_poll(&req) && !is_server_endpoint(req.uri().path()) {
        Box::pin(live::answer(state, Box::new(req.map(Body::new))))
    } else {
        Box::pin(answer::<B, BoxedAppend>(state, req))
    }
}

/// How [`dispatch`] runs an append: inline in its future, or boxed.
pub trait AppendArm {
    fn append(
        state: Shared,
        stream: &str,
        req: Request,
    ) -> impl std::future::Future<Output = Response<Body>> + Send + '_;
}

/// An append's state inside the request's future (appends).
pub struct InlineAppend;

/// An append boxed apart (every other request: it never runs there).
pub struct BoxedAppend;

impl AppendArm for InlineAppend {
    fn append(
        state: Shared,
        stream: &str,
        req: Request,
    ) -> impl std::future::Future<Output = Response<Body>> + Send + '_ {
        append::append(state, stream, req)
    }
}

impl AppendArm for BoxedAppend {
    fn append(
        state: Shared,
        stream: &str,
        req: Request,
    ) -> impl std::future::Future<Output = Response<Body>> + Send + '_ {
        Box::pin(append::append(state, stream, req))
    }
}

/// Whether a path is one of the server's own endpoints (`answer` serves
/// them before any stream path).
fn is_server_endpoint(path: &str) -> bool {
    matches!(
        path,
        routes::METRICS
            | routes::HEALTH
            | routes::READY
            | shared::invalidation::PATH
            | shared::listing::PATH
    ) || is_admin_path(path)
}

/// The admin API's and the key exchange's paths.
fn is_admin_path(p: &str) -> bool {
    p.starts_with("/_auth/") || p.starts_with("/_admin/") || p == "/_admin"
}

async fn answer<B, A: AppendArm>(state: Shared, req: http::Request<B>) -> Response<Body>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    state.store.help_publish();
    let req = req.map(Body::new);
    match (req.method(), req.uri().path()) {
        (&Method::GET, routes::METRICS) => metrics_response(metrics_text(&state)),
        (&Method::GET, routes::HEALTH) => health_response(),
        (&Method::GET, routes::READY) => shell::ready::answer(if state.draining.started() {
            Err(shell::ready::NotReady::Draining)
        } else {
            Ok(())
        }),
        (&Method::GET, shared::invalidation::PATH) => {
            let mut r = Box::pin(invalidations::invalidations(state, req)).await;
            common_headers(&mut r, false);
            r
        }
        (&Method::GET, shared::listing::PATH) => Box::pin(list::list(state, req)).await,
        (_, shared::listing::PATH) => list_other(&state, req.method()),
        (_, p) if is_admin_path(p) => Box::pin(admin::handle(state, req)).await,
        _ => dispatch::<A>(state, req).await,
    }
}

/// Any method but `GET` on the listing: its preflight, or 405.
pub fn list_other(state: &AppState, method: &Method) -> Response<Body> {
    let arrived = shell::request_id::arrived();
    let resp = if method == Method::OPTIONS {
        preflight()
    } else {
        method_not_allowed("GET, OPTIONS")
    };
    list::finish(state, arrived, resp)
}

/// The serving store's metrics as Prometheus text.
pub fn metrics_text(state: &AppState) -> String {
    let mut e = crate::metrics::Exposition::default();
    crate::metrics::Metrics::expose(
        &[(&state.metrics, state.store.stream_count())],
        &state.metrics.timings,
        &mut e,
    );
    state.ingress.expose(&mut e);
    e.gauge(
        "ds_origin_feed_readers_waiting",
        "Readers of the invalidation feed parked at its end (edges following it).",
        state.store.invalidations().parked() as f64,
    );
    if let Some(subs) = state.subscriptions.get() {
        subs.metrics.expose(subs.count(), &mut e);
    }
    e.process("origin");
    e.render()
}

pub fn metrics_response(text: String) -> Response<Body> {
    let mut r = Response::new(Body::from(text));
    r.headers_mut().insert(
        "content-type",
        HeaderValue::from_static(shell::metrics::CONTENT_TYPE),
    );
    r.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

pub fn health_response() -> Response<Body> {
    let mut r = Response::new(Body::from("ok"));
    r.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// Marks a request another origin of the region sent (it proved the
/// region's peer key): no credential is asked of it. Only the region's
/// router sets it; no client can.
#[derive(Clone, Copy, Debug)]
pub struct Peer;

/// Marks a request whose caller was admitted already, for its path and
/// its fork's source (a fork across partitions: `server::region::across`
/// asks both before its work, the source of the source's own owner).
#[derive(Clone, Copy, Debug)]
pub struct Admitted;

/// Admits the caller of a `PUT` at its path; the request comes back with
/// its caller (the fork's owner asks this first of a fork across
/// partitions, before any of its work).
pub fn admit_create(state: &AppState, mut req: Request) -> Result<Request, Box<Response<Body>>> {
    let path = req.uri().path().to_owned();
    let target = classify(&path);
    if let Some((stream, access)) = shared::auth::request_access(&target, &Method::PUT) {
        if let Err(mut refused) = admit(state, &mut req, true, stream, access) {
            state.metrics.request(
                "refused",
                refused.status().as_u16(),
                shell::request_id::arrived().elapsed(),
            );
            common_headers(&mut refused, true);
            return Err(refused);
        }
    }
    Ok(req)
}

/// Admits a request or answers its refusal.
pub(crate) fn admit(
    state: &AppState,
    req: &mut Request,
    credentialed: bool,
    stream: &str,
    access: shared::auth::Access,
) -> Result<(), Box<Response<Body>>> {
    // Looked up only when the caller saw one (most appends carry none).
    let authorization = credentialed
        .then(|| req.headers().get(http::header::AUTHORIZATION))
        .flatten()
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    if let Some(caller) = admit_as(state, authorization, stream, access)? {
        req.extensions_mut().insert(caller);
    }
    Ok(())
}

/// Whether `authorization` (none: no credential) admits `access` to
/// `stream`: the caller (none for an open account), or the refusal.
pub(crate) fn admit_as(
    state: &AppState,
    authorization: Option<&str>,
    stream: &str,
    access: shared::auth::Access,
) -> Result<Option<crate::auth::Caller>, Box<Response<Body>>> {
    let now = || state.store.clock().now_ms() / 1000;
    let public = || state.store.get(stream).is_some_and(|v| v.is_public());
    state
        .auth
        .admit(stream, access, authorization, public, now)
        .map_err(|refusal| Box::new(ApiError::from(refusal).into_response()))
}

/// The source a `PUT` forks, if it is a fork.
pub(crate) fn fork_source<B>(req: &http::Request<B>) -> Option<&str> {
    if req.method() != Method::PUT {
        return None;
    }
    let source = req.headers().get(&shared::headers::STREAM_FORKED_FROM)?;
    std::str::from_utf8(source.as_bytes()).ok()
}

/// Whether a request names one of the server's own streams (under
/// `/.ds-region/`), as its path or as a fork's source: no client may.
pub(crate) fn names_server_stream<B>(req: &http::Request<B>) -> bool {
    shared::partition::is_hidden(req.uri().path())
        || fork_source(req).is_some_and(shared::partition::is_hidden)
}

/// The answer to a client that names one of the server's own streams.
pub(crate) fn server_stream_refusal() -> Response<Body> {
    error::error_response(
        ErrorCode::NotFound,
        "no such stream: paths under /.ds-region/ are the server's own",
    )
}

/// Routes a request on a stream path to its operation. Every operation but
/// the append runs boxed: a request's future is as large as its largest
/// arm, and hyper moves it on every request, so the hot path keeps only the
/// append's state inline (the whole future was 3.5 KiB).
///
/// Long by design: the route table, one arm per method and path shape.
async fn dispatch<A: AppendArm>(state: Shared, mut req: Request) -> Response<Body> {
    // The URI's parts are shared bytes: a clone keeps the path borrowable
    // beside the request without copying it.
    let uri = req.uri().clone();
    let path = uri.path();
    let method = req.method().clone();
    let target = classify(path);
    let gate = match gate(&state, &mut req, &target, &method) {
        Ok(gate) => gate,
        Err(refused) => return *refused,
    };
    let (route, resp) = match target {
        Target::Stream(stream) => match method {
            Method::POST => ("append", A::append(state.clone(), stream, req).await),
            Method::PUT => (
                "create",
                Box::pin(create::create(state.clone(), stream.to_owned(), req)).await,
            ),
            Method::DELETE => (
                "delete",
                Box::pin(delete::delete(state.clone(), stream.to_owned(), req)).await,
            ),
            Method::HEAD => (
                "head",
                read_origin(
                    &state,
                    Box::pin(head::head(state.clone(), stream.to_owned(), req)).await,
                ),
            ),
            Method::GET => {
                let (route, resp) =
                    Box::pin(read_route(state.clone(), stream.to_owned(), req)).await;
                (route, read_origin(&state, resp))
            }
            Method::OPTIONS => ("preflight", preflight()),
            _ => (
                "other",
                method_not_allowed("GET, HEAD, PUT, POST, DELETE, OPTIONS"),
            ),
        },
        Target::Snapshot { stream, rest }
            if method != Method::OPTIONS && snapshot::is_resource(rest) =>
        {
            let (stream, rest) = (stream.to_owned(), rest.to_owned());
            Box::pin(snapshot::route(state.clone(), stream, rest, req)).await
        }
        Target::Control { root, rest } => {
            let (root, rest) = (root.to_owned(), rest.to_owned());
            (
                "subscriptions",
                Box::pin(subscriptions::handle(
                    state.clone(),
                    root,
                    rest,
                    req,
                    gate.credentialed,
                ))
                .await,
            )
        }
        // No stream can be created at a reserved path: `create` refuses it
        // with 400 and the reason, rather than a 404 as if nothing were there.
        _ if method == Method::PUT => (
            "create",
            Box::pin(create::create(state.clone(), path.to_owned(), req)).await,
        ),
        Target::Chunk { .. } | Target::IncarnationSnapshot { .. } | Target::Snapshot { .. }
            if method == Method::OPTIONS =>
        {
            ("preflight", preflight())
        }
        Target::Chunk {
            stream,
            token,
            offset,
        } if method == Method::GET || method == Method::HEAD => {
            let (stream, token, offset) = (stream.to_owned(), token.to_owned(), offset.to_owned());
            (
                "chunk",
                Box::pin(chunk::chunk(state.clone(), stream, token, offset, req)).await,
            )
        }
        Target::Chunk { .. } => ("chunk", method_not_allowed("GET, HEAD, OPTIONS")),
        Target::IncarnationSnapshot {
            stream,
            token,
            offset,
        } if method == Method::GET || method == Method::HEAD => {
            let (stream, token, offset) = (stream.to_owned(), token.to_owned(), offset.to_owned());
            (
                "snapshot",
                Box::pin(snapshot::read_cacheable(
                    state.clone(),
                    stream,
                    token,
                    offset,
                    req,
                ))
                .await,
            )
        }
        Target::IncarnationSnapshot { .. } | Target::Snapshot { .. } => {
            ("snapshot", method_not_allowed("GET, HEAD, OPTIONS"))
        }
        Target::Restore { stream, token } if method == Method::POST => {
            let (stream, token) = (stream.to_owned(), token.to_owned());
            (
                "restore",
                Box::pin(restore::restore(state.clone(), stream, token, req)).await,
            )
        }
        Target::Restore { .. } if method == Method::OPTIONS => ("preflight", preflight()),
        Target::Restore { .. } => ("restore", method_not_allowed("POST, OPTIONS")),
        Target::Reserved => (
            "reserved",
            error::error_response(ErrorCode::NotFound, "no such resource"),
        ),
    };
    let resp = vouched(&state, &method, gate.fork, resp).await;
    gate.finish(&state, route, resp)
}

/// What the gate of [`dispatch`] learnt of a request, for its answer.
pub(crate) struct Gate {
    arrived: tokio::time::Instant,
    cors: bool,
    credentialed: bool,
    fork: bool,
}

/// Admits a request on a stream path (its credential for its path, and
/// for a fork's source), or answers its refusal.
pub(crate) fn gate(
    state: &Shared,
    req: &mut Request,
    target: &Target<'_>,
    method: &Method,
) -> Result<Gate, Box<Response<Body>>> {
    let arrived = shell::request_id::arrived();
    // Both found in one pass over the names (standard names compare as
    // numbers; each look-up by name hashed it again).
    let (mut from_browser, mut credentialed) = (false, false);
    for name in req.headers().keys() {
        if name == http::header::ORIGIN {
            from_browser = true;
        } else if name == http::header::AUTHORIZATION {
            credentialed = true;
        }
    }
    let cors = method == Method::GET || method == Method::HEAD || from_browser;
    // A fork reads its source: the credential must reach it too (checked
    // first, so the caller kept is the target's).
    let source = (method == Method::PUT)
        .then(|| req.headers().get(&shared::headers::STREAM_FORKED_FROM))
        .flatten()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // A request of another origin of the region needs no credential; one
    // admitted already is not asked (or charged) again.
    let peer =
        req.extensions().get::<Peer>().is_some() || req.extensions().get::<Admitted>().is_some();
    // The server's own streams (a region's, the subscriptions' journal)
    // are no client's: only another origin of the region names them, or
    // the region's own work (a fork across partitions forks its pin).
    if !peer && names_server_stream(req) {
        let mut r = server_stream_refusal();
        state.metrics.request("reserved", 404, arrived.elapsed());
        common_headers(&mut r, cors);
        return Err(Box::new(r));
    }
    let checks = source
        .as_deref()
        .map(|s| (s, shared::auth::Access::Read))
        .into_iter()
        .chain(shared::auth::request_access(target, method))
        .filter(|_| !peer);
    for (stream, access) in checks {
        if let Err(refused) = admit(state, req, credentialed, stream, access) {
            let mut refused = *refused;
            state
                .metrics
                .request("refused", refused.status().as_u16(), arrived.elapsed());
            common_headers(&mut refused, cors);
            return Err(Box::new(refused));
        }
    }
    Ok(Gate {
        arrived,
        cors,
        credentialed,
        fork: source.is_some(),
    })
}

impl Gate {
    /// The answer as every operation's: counted, with the common headers,
    /// private when the request carried a credential.
    pub(crate) fn finish(
        &self,
        state: &Shared,
        route: &'static str,
        mut resp: Response<Body>,
    ) -> Response<Body> {
        state
            .metrics
            .request(route, resp.status().as_u16(), self.arrived.elapsed());
        common_headers(&mut resp, self.cors);
        if self.credentialed {
            shared::auth::privatize(resp.headers_mut());
        }
        resp
    }
}

/// A stream's `HEAD` or read answer, naming `--read-origin` if set.
fn read_origin(state: &Shared, mut resp: Response<Body>) -> Response<Body> {
    let status = resp.status();
    shared::read_origin::apply(
        status,
        resp.headers_mut(),
        state.config.read_origin.as_ref(),
    );
    resp
}

async fn read_route(state: Shared, stream: String, req: Request) -> (&'static str, Response<Body>) {
    let params = match shared::params::parse_read_query(req.uri().query()) {
        Ok(p) => p,
        Err(e) => {
            let code = if e.is_offset() {
                ErrorCode::InvalidOffset
            } else {
                ErrorCode::BadRequest
            };
            return (
                "read",
                ApiError::Invalid(code, e.to_string()).into_response(),
            );
        }
    };
    // Every read sees what its store acknowledged; `consistency=leader`
    // also needs the store to be its partition's owner still, which a
    // region's store confirms in the bucket (`region::vouch`; nothing to
    // confirm for a single origin).
    if params.consistency == shared::params::Consistency::Leader {
        if let Err(e) = state.store.vouch().await {
            return ("read", ApiError::Store(e).into_response());
        }
    }
    if let Err(e) = reading::check_floor(&state, &stream, &params).await {
        return ("read", e.into_response());
    }
    match params.live {
        Live::No => ("read", read::read(state, stream, req, params).await),
        Live::LongPoll => (
            "long_poll",
            long_poll::long_poll(state, stream, req, params).await,
        ),
        Live::Sse => ("sse", sse::sse(state, stream, req, params).await),
    }
}

/// A write's refusal that this store's state decided (no such stream, a
/// conflict, a stale producer epoch, a failed precondition, a fork past
/// its source's tail) stands only if the store still owns its partition
/// (`region::vouch`): a region origin paused past its lease must not
/// refuse from a state the new owner has moved past. What the writer
/// answered was vouched for already; this covers the refusals made before
/// the writer. Nothing to confirm for a single origin. (A `HEAD` and a
/// `consistency=leader` read confirm before they look; a
/// `consistency=local` read answers from the state at hand.)
pub(crate) async fn vouched(
    state: &Shared,
    method: &Method,
    fork: bool,
    resp: Response<Body>,
) -> Response<Body> {
    let write = matches!(*method, Method::POST | Method::PUT | Method::DELETE);
    let from_state = match resp.status().as_u16() {
        403 | 404 | 409 | 410 | 412 => true,
        // A fork's offset is checked against its source's tail.
        400 => fork,
        _ => false,
    };
    if !(write && from_state) {
        return resp;
    }
    match state.store.vouch().await {
        Ok(()) => resp,
        Err(e) => ApiError::Store(e).into_response(),
    }
}

/// 405 with the methods the resource answers, as `Allow` and in the message.
pub(crate) fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut r = error::error_response(
        ErrorCode::MethodNotAllowed,
        format!("this resource answers {allow}"),
    );
    r.headers_mut()
        .insert(http::header::ALLOW, HeaderValue::from_static(allow));
    r
}

pub(crate) fn preflight() -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    h.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("GET, HEAD, PUT, POST, DELETE, OPTIONS"),
    );
    h.insert(
        "access-control-allow-headers",
        HeaderValue::from_static(routes::ALLOWED_REQUEST_HEADERS),
    );
    h.insert("access-control-max-age", HeaderValue::from_static("86400"));
    r
}

/// `X-Content-Type-Options: nosniff`, which every answer carries.
pub(crate) fn nosniff(h: &mut http::HeaderMap) {
    h.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
}

/// Headers every answer about a stream carries: browser safety (the public
/// conformance suite checks `nosniff` even on a `204`), and CORS.
/// Reads always carry CORS headers, because a cache may hand the same answer
/// to a browser later; writes carry them when a browser sent `Origin` (no
/// cache keeps a write's answer), which keeps the hot append answer small.
pub(crate) fn common_headers(resp: &mut Response<Body>, cors: bool) {
    let h = resp.headers_mut();
    // An answer that carries `nosniff` already chose its safety headers:
    // an append's, from its stream's template, has no body and so no CORP
    // (see `append::answer_headers`).
    if !h.contains_key(http::header::X_CONTENT_TYPE_OPTIONS) {
        shared::headers::insert_safety(h);
    }
    if cors {
        shared::headers::insert_cors(h);
    }
}
