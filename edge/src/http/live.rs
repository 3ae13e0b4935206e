//! A live read's answer (a long-poll or an SSE tail), with nothing of its
//! way here kept while it waits.
//!
//! A parked long-poll keeps its answer's future for its whole wait, and a
//! future is as large as its largest state: through the routing, the
//! access gate and the long-poll, 3.2 KiB a reader, most of it the room of
//! requests moved on and of look-ups long done. So the way here runs boxed
//! and apart ([`prepare`]): it ends either with the answer (an SSE tail's
//! streams from its body; a refusal; anything not a live read after all)
//! or with the long-poll joined to its flight ([`long_poll::Parked`]), and
//! is dropped before the wait. What a parked long-poll keeps is then the
//! waiter, its bound, and what its answer must still get from the gate
//! ([`After`]).

use axum::body::Body;
use http::{Request, Response};
use shared::params::{parse_read_query, Live};
use shared::paths::{classify, Target};

use super::{access_of, holding, is_admin, long_poll, route, sse, Admit, Shared};

/// What the way here decided.
enum Prepared {
    Answered(&'static str, Response<Body>),
    Parked(long_poll::Parked, After),
}

/// What the access gate adds to the answer once it comes.
struct After {
    live: Option<shared::limits::LiveReadGuard>,
    private: bool,
}

impl After {
    fn apply(self, mut resp: Response<Body>) -> Response<Body> {
        if self.private {
            shared::auth::privatize(resp.headers_mut());
        }
        holding(resp, self.live)
    }
}

/// Answers a live read (the request boxed: an argument keeps its room in
/// the future for the future's life).
pub async fn answer(state: Shared, req: Box<Request<Body>>) -> Response<Body> {
    let arrived = shell::request_id::arrived();
    let names_read_origin = state.config.read_origin.is_some() && super::is_stream_read(&req);
    let mut prepared = Box::pin(prepare(&state, req)).await;
    // Waited on where it lies: moved out, it would keep a copy's room in
    // this future for the whole wait.
    let waited = match &mut prepared {
        Prepared::Parked(parked, _) => Some(parked.answer().await),
        Prepared::Answered(..) => None,
    };
    let (route, mut resp) = match (prepared, waited) {
        (Prepared::Parked(_, after), Some(resp)) => ("long_poll", after.apply(resp)),
        (Prepared::Answered(route, resp), _) => (route, resp),
        (Prepared::Parked(..), None) => unreachable!("a parked long-poll is waited on"),
    };
    if names_read_origin {
        super::name_read_origin(&state, &mut resp);
    }
    state
        .metrics
        .request(route, resp.status().as_u16(), arrived.elapsed());
    resp
}

/// The access gate and the routing of `dispatch` and `route`, up to the
/// wait.
/// (The request's box is let go here, before the wait.)
async fn prepare(state: &Shared, req: Box<Request<Body>>) -> Prepared {
    let req = *req;
    let after = match access_of(&req) {
        None => After {
            live: None,
            private: false,
        },
        Some((stream, access, live)) => {
            let admitted = state
                .access
                .admit(&state.upstream, &stream, access, req.headers(), live)
                .await;
            match admitted {
                Admit::Pass => After {
                    live: None,
                    private: false,
                },
                Admit::ToOrigin => {
                    let resp = Box::pin(super::forward::forward_admitted(state, req)).await;
                    return Prepared::Answered("forward", resp);
                }
                Admit::Refuse(resp) => return Prepared::Answered("refused", resp),
                Admit::Public { live } => After {
                    live,
                    private: false,
                },
                Admit::Token { live } => After {
                    live,
                    private: true,
                },
            }
        }
    };
    let params = match classify(req.uri().path()) {
        Target::Stream(_) if !is_admin(req.uri().path()) => parse_read_query(req.uri().query()),
        _ => {
            let (name, resp) = Box::pin(route(state, req)).await;
            return Prepared::Answered(name, after.apply(resp));
        }
    };
    match params.map(|p| (p.live, p)) {
        Ok((Live::LongPoll, params)) => match long_poll::park(state, req, &params) {
            Ok(parked) => Prepared::Parked(parked, after),
            Err(refused) => Prepared::Answered("long_poll", after.apply(*refused)),
        },
        Ok((Live::Sse, params)) => {
            let resp = Box::pin(sse::sse(state, req, &params)).await;
            Prepared::Answered("sse", after.apply(resp))
        }
        _ => {
            let (name, resp) = Box::pin(route(state, req)).await;
            Prepared::Answered(name, after.apply(resp))
        }
    }
}
