//! [`ResponseFuture`]: the inner service's future for a request the layer does not guard, or the
//! layer's work for one it does.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use tower_service::Service;

use super::body::ResponseBody;

/// The inner service's response body.
type BodyOf<S, ReqBody> =
    <<S as Service<Request<ReqBody>>>::Response as sealed::HttpResponse>::Body;

/// The guarded path's work: the inner response, its body wrapped.
type Guarded<S, ReqBody> = Pin<
    Box<
        dyn Future<
                Output = Result<
                    Response<ResponseBody<BodyOf<S, ReqBody>>>,
                    <S as Service<Request<ReqBody>>>::Error,
                >,
            > + Send,
    >,
>;

mod sealed {
    /// An `http::Response<B>`, by its body type: lets the future name the inner service's body.
    pub trait HttpResponse {
        type Body: http_body::Body;
    }

    impl<B: http_body::Body> HttpResponse for http::Response<B> {
        type Body = B;
    }
}

define_response_future! {
    /// The response future of [`Idempotency`](super::Idempotency): the inner call for requests
    /// the layer passes (safe methods, no key on a route that does not require one), else
    /// the layer's work (boxed: it waits for the store).
    where { S::Response: sealed::HttpResponse, }
    states {
        Passing { #[pin] fut: S::Future },
        Guarded { fut: Guarded<S, ReqBody> },
    }
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
    S::Response: sealed::HttpResponse,
{
    pub(crate) fn passing(fut: S::Future) -> Self {
        Self {
            state: State::Passing { fut },
        }
    }

    pub(crate) fn guarded(fut: Guarded<S, ReqBody>) -> Self {
        Self {
            state: State::Guarded { fut },
        }
    }
}

impl<S, ReqBody, B> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    B: http_body::Body,
{
    type Output = Result<Response<ResponseBody<B>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Passing { fut } => {
                let res = ready!(fut.poll(cx))?;
                Poll::Ready(Ok(res.map(ResponseBody::inner)))
            }
            StateProj::Guarded { fut } => fut.as_mut().poll(cx),
        }
    }
}
