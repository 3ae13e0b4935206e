//! How a region origin answers a request: its own endpoints (`/metrics`
//! summed over the stores it serves, `/healthz`), and every other request
//! by the store of its partition, the owner it follows for it, or 503
//! while the partition is joining. Forks whose source is in another
//! partition, and deletes that may end one, go by `across`; the region's
//! own streams answer only requests of its origins (`region::peer_key`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Response};
use axum::response::IntoResponse;

use super::{across, Current, RegionOrigin};
use crate::http::error::ApiError;
use crate::http::{self, routes};

/// Answers one request: the server's own endpoints here, the rest by the
/// store of its partition or the owner this origin follows for it.
pub(super) async fn handle<B>(me: Arc<RegionOrigin>, req: axum::http::Request<B>) -> Response<Body>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    if req.method() == Method::GET {
        match req.uri().path() {
            routes::METRICS => return me.metrics_answer(),
            routes::HEALTH => return http::health_response(),
            routes::READY => return shell::ready::answer(me.readiness()),
            _ => {}
        }
    }
    let mut req = req.map(Body::new);
    // The region's own streams: only its origins may name them.
    let sent = req.headers().get(&shared::headers::REGION_PEER).cloned();
    let claimed = sent.is_some();
    match me.is_peer(sent) {
        Some(true) => {
            req.extensions_mut().insert(http::Peer);
        }
        // A key that is not the region's is no key (and goes no further).
        Some(false) if claimed && !http::names_server_stream(&req) => {
            req.headers_mut().remove(&shared::headers::REGION_PEER);
        }
        Some(false) if http::names_server_stream(&req) => {
            let mut r = http::server_stream_refusal();
            http::common_headers(&mut r, true);
            return me.counted(REGION, r);
        }
        Some(false) => {}
        None => {
            let mut r = ApiError::Busy("the region's peer key is not readable yet; retry shortly")
                .into_response();
            http::common_headers(&mut r, true);
            return me.counted(REGION, r);
        }
    }
    vouch(&me, &mut req);
    if req.uri().path() == shared::listing::PATH && req.method() == Method::GET {
        return super::list::list(&me, req).await;
    }
    let p = shared::partition::of_request(req.uri().path(), req.uri().query(), me.partitions);
    if let Current::Serving { state, .. } = me.current(p) {
        if http::fork_source(&req)
            .is_some_and(|s| shared::partition::of_stream(s, me.partitions) != p)
        {
            // Its refusals come from the source's owner and this store's
            // state: they stand only while this store owns `p`.
            let answer = across::fork(&me, p, Arc::clone(&state), req).await;
            return http::vouched(&state, &Method::PUT, true, answer).await;
        }
        if req.method() == Method::DELETE {
            let copies = state
                .store
                .get(req.uri().path())
                .map(|v| across::copies_above(&v, me.partitions))
                .unwrap_or_default();
            let answer = http::handle(state.clone(), req).await;
            if answer.status().is_success() && !copies.is_empty() {
                across::unpin_removed(&me, &state, copies).await;
            }
            return answer;
        }
    }
    route(&me, p, req).await
}

/// Answers a request by the store of its partition `p` here, the owner
/// this origin follows for it, or 503 while the partition is joining.
async fn route(me: &Arc<RegionOrigin>, p: u32, req: axum::http::Request<Body>) -> Response<Body> {
    let feed = req.uri().path() == shared::invalidation::PATH;
    let mut current = me.current(p);
    if !matches!(current, Current::Serving { .. }) {
        // A read this origin's replica of `p` answers as the owner would
        // (one with a floor once the replica reached it, or not at all).
        if let Some(state) = me.replica_for(p, req.method(), req.uri()).await {
            me.metrics.local_reads.fetch_add(1, Relaxed);
            return http::handle(state, req).await;
        }
        // The replica may have waited for a floor: the partition may have
        // moved meanwhile (claimed here, or another owner).
        current = me.current(p);
    }
    let mut answer = match current {
        Current::Serving { state, .. } => http::handle(state, req).await,
        Current::Following { url } => {
            let write = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
            let path = write.then(|| stream_of(req.uri().path()).to_owned());
            let req = name_the_client(me, req);
            let answer = me.forwarder.forward(&url, req, me.ended(p)).await;
            if let Some(path) = path {
                me.forwarded_write(&path);
            }
            me.counted(FORWARDED, answer)
        }
        Current::Joining => {
            let mut r = ApiError::Busy(
                "this origin is joining its region or taking the partition over; retry shortly",
            )
            .into_response();
            http::common_headers(&mut r, true);
            me.counted(REGION, r)
        }
    };
    // Edges tail every partition's feed, and route by the partition map.
    let named = answer.headers().contains_key(shared::headers::REGION_OWNER);
    if me.partitions > 1 && (feed || named) {
        answer.headers_mut().insert(
            shared::headers::REGION_PARTITIONS,
            axum::http::HeaderValue::from(me.partitions),
        );
    }
    answer
}

/// Believes the client a follower names on a request it forwarded, if the
/// region's peer key vouches for it (`http::ingress::Vouched`); drops the
/// name and the key otherwise, so no client names itself.
fn vouch(me: &RegionOrigin, req: &mut axum::http::Request<Body>) {
    let via = req.headers_mut().remove(&shared::headers::REGION_VIA);
    let named = req.headers_mut().remove(&shared::headers::REGION_CLIENT);
    if let Some(named) = named {
        if me.is_peer(via) == Some(true) {
            req.extensions_mut().insert(http::ingress::Vouched(named));
        }
    }
}

/// A client's request on its way to the partition's owner, naming the
/// client (the region's own requests name none: they are no client's).
fn name_the_client(
    me: &RegionOrigin,
    mut req: axum::http::Request<Body>,
) -> axum::http::Request<Body> {
    let ours = req.extensions().get::<http::Peer>().is_some()
        || req.extensions().get::<http::forward::OnBehalf>().is_some();
    let key = me
        .peer_key
        .get()
        .and_then(|k| axum::http::HeaderValue::from_str(k).ok());
    if let (false, Some(key), Some(client)) = (ours, key, http::ingress::address_of(&me.http, &req))
    {
        req.headers_mut().insert(shared::headers::REGION_VIA, key);
        req.headers_mut()
            .insert(shared::headers::REGION_CLIENT, client);
    }
    req
}

/// The stream a request's path names (a chunk's or snapshot's stream).
fn stream_of(path: &str) -> &str {
    match shared::paths::classify(path) {
        shared::paths::Target::Stream(s)
        | shared::paths::Target::Chunk { stream: s, .. }
        | shared::paths::Target::IncarnationSnapshot { stream: s, .. }
        | shared::paths::Target::Snapshot { stream: s, .. }
        | shared::paths::Target::Restore { stream: s, .. } => s,
        _ => path,
    }
}

/// The routes of requests a region origin answers without a store of its
/// own: forwarded to the partition's owner, or refused by the region
/// itself (a partition joining, the peer key unread, a region stream).
const FORWARDED: &str = "forwarded";
const REGION: &str = "region";

impl RegionOrigin {
    /// Counts `answer` in the process's request series under `route`, as
    /// a store counts its own (so 5xx alerts see the region's 503s too).
    pub(super) fn counted(&self, route: &'static str, answer: Response<Body>) -> Response<Body> {
        self.sharing.timings.requests.answered(
            route,
            answer.status().as_u16(),
            shell::request_id::arrived().elapsed(),
        );
        answer
    }

    /// Ready while not draining, once every partition has been served
    /// here or its owner known (none joining, nor replaying a claim) at
    /// least once. Later takeovers and hand-offs keep it ready: a dead
    /// origin's partitions are claimed by every survivor at once, and a
    /// region whose survivors all turned unready together would be taken
    /// out of its balancer whole; a request for a partition being taken
    /// over answers 503 + `Retry-After` by itself.
    fn readiness(&self) -> Result<(), shell::ready::NotReady> {
        if self.draining.started() {
            return Err(shell::ready::NotReady::Draining);
        }
        if self.joined.load(Relaxed) {
            return Ok(());
        }
        if (0..self.partitions).any(|p| matches!(self.current(p), Current::Joining)) {
            return Err(shell::ready::NotReady::Joining);
        }
        self.joined.store(true, Relaxed);
        Ok(())
    }

    /// `/metrics`: the sums of the stores it serves, and its role.
    fn metrics_answer(&self) -> Response<Body> {
        let scrape = self.scrape.lock();
        let stores = self.serving();
        // Replicas' work counts too (their reads, chunk cache); their
        // streams are the owners' and count there.
        let replicas = self.replica_states();
        let counted: Vec<_> = stores
            .iter()
            .map(|s| (&*s.metrics, s.store.stream_count()))
            .chain(replicas.iter().map(|s| (&*s.metrics, 0)))
            .chain([(&self.retired, 0), (&*self.log_metrics, 0)])
            .collect();
        let mut e = crate::metrics::Exposition::default();
        crate::metrics::Metrics::expose(&counted, &self.sharing.timings, &mut e);
        drop(scrape);
        // One request body budget for the whole origin.
        self.sharing.ingress.expose(&mut e);
        let (mut serving, mut following, mut epoch) = (0, 0, 0);
        for p in 0..self.partitions {
            match self.current(p) {
                Current::Serving { epoch: e, .. } => {
                    serving += 1;
                    epoch = epoch.max(e);
                }
                Current::Following { .. } => following += 1,
                Current::Joining => {}
            }
        }
        let lag = self.replica_lag();
        self.metrics
            .replica_lag_ms
            .store(i64::try_from(lag.as_millis()).unwrap_or(i64::MAX), Relaxed);
        let in_flight = i64::try_from(self.forwarder.in_flight()).unwrap_or(i64::MAX);
        self.metrics.forwards_in_flight.store(in_flight, Relaxed);
        self.metrics.expose(&mut e, serving, following, epoch);
        // The subscriptions' families on the origin that runs them only.
        if let Current::Serving { state, .. } = self.current(0) {
            if let Some(subs) = state.subscriptions.get() {
                subs.metrics.expose(subs.count(), &mut e);
            }
        }
        e.process("origin");
        http::metrics_response(e.render())
    }
}
