//! [`Idempotency`]: guards unsafe requests with an `Idempotency-Key`, or passes them.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tower_service::Service;

use super::body::ResponseBody;
use super::future::ResponseFuture;
use super::layer::Shared;

/// The service [`IdempotencyLayer`](super::IdempotencyLayer) wraps around its inner service.
///
/// The inner service must be `Clone` (the clone made ready goes with a guarded request), and
/// its request body buildable from [`Bytes`] (axum's `Body`, `Full<Bytes>`): the layer reads a
/// guarded request's body to fingerprint it, then hands it on as bytes. On plain hyper, map
/// `Incoming` into such a body in front of the layer.
#[derive(Clone)]
pub struct Idempotency<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Idempotency<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    define_inner_service_accessors!();
}

impl<S: fmt::Debug> fmt::Debug for Idempotency<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Idempotency<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    ReqBody: http_body::Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Send,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        if !self.shared.guards(&req) {
            return ResponseFuture::passing(self.inner.call(req));
        }
        // The clone that was made ready goes with the request; this service keeps a fresh one.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        ResponseFuture::guarded(Box::pin(super::flow::guard(shared, inner, req)))
    }
}
