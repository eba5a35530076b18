//! [`Cache`]: answers from the cache, or calls the inner service and fills it.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tower_service::Service;

use super::body::ResponseBody;
use super::flow::Call;
use super::future::ResponseFuture;
use super::shared::Shared;

/// The service [`CacheLayer`](super::CacheLayer) wraps around its inner service. The inner
/// service must be `Clone` (a stale entry is refreshed by a clone, in a spawned task).
#[derive(Clone)]
pub struct Cache<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Cache<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    define_inner_service_accessors!();
}

impl<S: fmt::Debug> fmt::Debug for Cache<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Cache<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
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
        let (mut parts, body) = req.into_parts();
        self.shared.key.normalize(&mut parts);
        let key = self.shared.key.key(&parts);
        let req = Request::from_parts(parts, body);
        let Some(digest) = key else {
            return ResponseFuture::passing(self.inner.call(req));
        };
        // The clone that was made ready goes with the request; this service keeps a fresh one.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let call = Call {
            shared: Arc::clone(&self.shared),
            digest,
        };
        ResponseFuture::caching(Box::pin(call.serve(inner, req)))
    }
}
