//! `DELETE {stream}`: remove a stream and its bytes (and the snapshot parts
//! staged for it). A stream created again at the same path gets a new
//! incarnation.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Response, StatusCode};
use axum::response::IntoResponse;

use super::request;
use super::Shared;

pub async fn delete(state: Shared, path: String, req: Request) -> Response<Body> {
    let incarnation = match request::incarnation(req.headers()) {
        Ok(i) => i,
        Err(e) => return e.into_response(),
    };
    match state.store.delete(path.clone(), incarnation).await {
        Ok(()) => {
            state.staging.drop_stream(&path).await;
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        }
        Err(e) => super::error::ApiError::from(e).into_response(),
    }
}
