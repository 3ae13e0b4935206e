//! A long-poll's answer, with nothing of its way here kept while it waits.
//!
//! A parked long-poll keeps its answer's future for its whole wait, and a
//! future is as large as its largest state: through the dispatch and the
//! read routing, kilobytes a reader, most of it the room of a request
//! moved on and of look-ups long done. So the way here (the gate, the
//! look at the stream's tail) runs boxed and apart ([`prepare`]) and is
//! dropped before the wait: a parked long-poll keeps its
//! [`long_poll::Parked`] and what its answer must still get from the gate
//! ([`Gate`]).

use axum::body::Body;
use axum::extract::Request;
use axum::http::Response;
use axum::response::IntoResponse;
use shared::params::{parse_read_query, Live};
use shared::paths::{classify, Target};

use super::{gate, long_poll, read_origin, read_route, Gate, Shared};

enum Prepared {
    Answered(Response<Body>),
    Parked(long_poll::Parked, Gate),
}

/// Whether a request is a long-poll of a stream (the server's own
/// endpoints are never one; the caller has ruled them out).
pub fn is_long_poll<B>(req: &http::Request<B>) -> bool {
    req.method() == http::Method::GET
        && req.uri().query().is_some_and(|q| q.contains("live="))
        && matches!(classify(req.uri().path()), Target::Stream(_))
        && parse_read_query(req.uri().query()).is_ok_and(|p| p.live == Live::LongPoll)
}

/// Answers a long-poll (the request boxed: an argument keeps its room in
/// the future for the future's life).
pub async fn answer(state: Shared, req: Box<Request>) -> Response<Body> {
    state.store.help_publish();
    let mut prepared = Box::pin(prepare(&state, req)).await;
    // Waited on where it lies: moved out, it would keep a copy's room in
    // this future for the whole wait.
    let waited = match &mut prepared {
        Prepared::Parked(parked, _) => Some(parked.answer().await),
        Prepared::Answered(_) => None,
    };
    let resp = match (prepared, waited) {
        (Prepared::Parked(_, gate), Some(resp)) => gate.finish(&state, "long_poll", resp),
        (Prepared::Answered(resp), _) => resp,
        (Prepared::Parked(..), None) => unreachable!("a parked long-poll is waited on"),
    };
    read_origin(&state, resp)
}

/// `dispatch`'s gate and `read_route`, up to the wait.
/// (The request's box is let go here, before the wait.)
async fn prepare(state: &Shared, req: Box<Request>) -> Prepared {
    let mut req = *req;
    let uri = req.uri().clone();
    let target = classify(uri.path());
    let gate = match gate(state, &mut req, &target, &http::Method::GET) {
        Ok(gate) => gate,
        Err(refused) => return Prepared::Answered(*refused),
    };
    let Target::Stream(stream) = target else {
        unreachable!("only a stream's long-poll comes here (is_long_poll)")
    };
    match parse_read_query(uri.query()) {
        Ok(params) if params.live == Live::LongPoll => {
            if let Err(e) = super::reading::check_floor(state, stream, &params).await {
                return Prepared::Answered(gate.finish(state, "long_poll", e.into_response()));
            }
            match long_poll::park(state, stream, req, params) {
                Ok(parked) => Prepared::Parked(parked, gate),
                Err(e) => Prepared::Answered(gate.finish(state, "long_poll", e.into_response())),
            }
        }
        // Not a long-poll after all: answered as `dispatch` would.
        _ => {
            let (route, resp) = Box::pin(read_route(state.clone(), stream.to_owned(), req)).await;
            Prepared::Answered(gate.finish(state, route, resp))
        }
    }
}
