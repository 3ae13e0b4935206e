//! The body of a request as the handlers receive it: hyper's, with its idle
//! timeout, or none at all for a request served without hyper (a tail on
//! the light path, `crate::light_path`, which never has a body). hyper's own
//! body type has no public way to make an empty one, hence the enum.

use std::error::Error;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::body::IdleBody;

/// A request's body.
pub enum RequestBody {
    /// Read from the connection by hyper; ends in `BodyIdle` once silent
    /// too long.
    Hyper(IdleBody<Incoming>),
    /// No body (a bodiless request served on the light path).
    Empty,
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = Box<dyn Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            RequestBody::Hyper(b) => Pin::new(b).poll_frame(cx),
            RequestBody::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Hyper(b) => b.is_end_stream(),
            RequestBody::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Hyper(b) => b.size_hint(),
            RequestBody::Empty => SizeHint::with_exact(0),
        }
    }
}
