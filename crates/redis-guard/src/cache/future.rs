//! [`ResponseFuture`]: the inner service's future for requests the cache does not look at, or
//! the cache's work for the others.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;

use super::body::CacheBody;
use super::store::BoxFuture;

pin_project_lite::pin_project! {
    /// The response future of [`CacheService`](super::CacheService).
    pub struct ResponseFuture<F, B: http_body::Body, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, B: http_body::Body, E> {
        // Not cached (not GET/HEAD, credentials): the inner call, its body passed through.
        Passing { #[pin] fut: F },
        // Lookup, and the inner call or the stored response.
        Caching { fut: BoxFuture<Result<Response<CacheBody<B>>, E>> },
    }
}

impl<F, B: http_body::Body, E> ResponseFuture<F, B, E> {
    pub(crate) fn passing(fut: F) -> Self {
        Self {
            state: State::Passing { fut },
        }
    }

    pub(crate) fn caching(fut: BoxFuture<Result<Response<CacheBody<B>>, E>>) -> Self {
        Self {
            state: State::Caching { fut },
        }
    }
}

impl<F, B: http_body::Body, E> std::fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body,
{
    type Output = Result<Response<CacheBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Passing { fut } => {
                let res = ready!(fut.poll(cx))?;
                Poll::Ready(Ok(res.map(CacheBody::inner)))
            }
            StateProj::Caching { fut } => fut.as_mut().poll(cx),
        }
    }
}
