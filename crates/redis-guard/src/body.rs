//! The one body strategy of every layer (rate limit, sessions, response cache, idempotency): a
//! layer's response body is the inner service's body, or bytes the layer wrote itself (an
//! answer of its own, a stored response). Each layer's public `ResponseBody<B>` wraps
//! [`InnerOrBytes`] and adds only what is its own (the rate limiter's leases, the cache's frames
//! read ahead).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

pin_project_lite::pin_project! {
    /// The inner service's body, or the layer's own bytes.
    #[project = InnerOrBytesProj]
    pub(crate) enum InnerOrBytes<B> {
        Inner {
            #[pin]
            body: B,
        },
        Bytes {
            data: Option<Bytes>,
        },
    }
}

impl<B> InnerOrBytes<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self::Inner { body }
    }

    /// The layer's own bytes (an empty body when `data` is empty).
    pub(crate) fn bytes(data: Bytes) -> Self {
        Self::Bytes {
            data: (!data.is_empty()).then_some(data),
        }
    }

    /// The inner service's body, pinned; `None` for the layer's own bytes.
    #[cfg(feature = "rate-limit")]
    pub(crate) fn inner_mut(self: Pin<&mut Self>) -> Option<Pin<&mut B>> {
        match self.project() {
            InnerOrBytesProj::Inner { body } => Some(body),
            InnerOrBytesProj::Bytes { .. } => None,
        }
    }
}

impl<B: Body<Data = Bytes>> Body for InnerOrBytes<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project() {
            InnerOrBytesProj::Inner { body } => body.poll_frame(cx),
            InnerOrBytesProj::Bytes { data } => {
                Poll::Ready(data.take().map(|d| Ok(Frame::data(d))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Inner { body } => body.is_end_stream(),
            Self::Bytes { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Inner { body } => body.size_hint(),
            Self::Bytes { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

/// Shows which of the two it is, not the inner body (often a closure's or a stream's).
impl<B> fmt::Debug for InnerOrBytes<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inner { .. } => f.write_str("Inner"),
            Self::Bytes { data } => f
                .debug_tuple("Bytes")
                .field(&data.as_ref().map_or(0, Bytes::len))
                .finish(),
        }
    }
}

#[cfg(any(feature = "cache", feature = "idempotency"))]
/// The body type of an [`http::Response`]: lets a future generic over its inner service `S`
/// alone name the body of `S::Response` (a bound every HTTP service meets). Public in a private
/// module, as a sealed trait: nothing outside the crate can name it.
pub trait HttpResponse {
    /// The response's body type.
    type Body: Body;
}

#[cfg(any(feature = "cache", feature = "idempotency"))]
impl<B: Body> HttpResponse for http::Response<B> {
    type Body = B;
}

/// The body of the responses of an inner service `S`.
#[cfg(any(feature = "cache", feature = "idempotency"))]
pub(crate) type BodyOf<S, ReqBody> =
    <<S as tower_service::Service<http::Request<ReqBody>>>::Response as HttpResponse>::Body;
