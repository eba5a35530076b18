//! [`ResponseFuture`]: the inner service's future for requests the cache does not look at, or
//! the cache's work for the others.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use tower_service::Service;

use super::body::ResponseBody;
use super::store::BoxFuture;
use crate::body::HttpResponse;

/// What the cache's work for a request gives: the response, its body the inner service's `B`
/// or the cache's bytes.
type Reply<S, ReqBody> = Result<
    Response<ResponseBody<<<S as Service<Request<ReqBody>>>::Response as HttpResponse>::Body>>,
    <S as Service<Request<ReqBody>>>::Error,
>;

define_response_future! {
    /// The response future of [`Cache`](super::Cache): the inner service's future for a
    /// request the cache does not look at, else the lookup and the inner call or the stored
    /// response (boxed).
    where { S::Response: HttpResponse, }
    states {
        // Not cached (not GET/HEAD, credentials): the inner call, its body passed through.
        Passing { #[pin] fut: S::Future },
        // Lookup, and the inner call or the stored response.
        Caching { fut: BoxFuture<Reply<S, ReqBody>> },
    }
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
    S::Response: HttpResponse,
{
    pub(crate) fn passing(fut: S::Future) -> Self {
        Self {
            state: State::Passing { fut },
        }
    }

    pub(crate) fn caching(fut: BoxFuture<Reply<S, ReqBody>>) -> Self {
        Self {
            state: State::Caching { fut },
        }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Passing { fut } => {
                let res = ready!(fut.poll(cx))?;
                Poll::Ready(Ok(res.map(ResponseBody::inner)))
            }
            StateProj::Caching { fut } => fut.as_mut().poll(cx),
        }
    }
}
