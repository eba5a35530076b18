//! [`Sessions`]: gives each request its [`Session`].

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::body::ResponseBody;
use super::cookie_header::ReadCookie;
use super::future::ResponseFuture;
use super::handle::Session;
use super::shared::{Shared, Visit};

/// The service [`SessionLayer`](super::SessionLayer) wraps around its inner service.
#[derive(Clone)]
pub struct Sessions<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Sessions<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    define_inner_service_accessors!();
}

impl<S: fmt::Debug> fmt::Debug for Sessions<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Sessions<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let cookie = self
            .shared
            .transport
            .read(req.headers(), &self.shared.cookie);
        let has_cookie = matches!(cookie, ReadCookie::Ids(_));
        let (parts, body) = req.into_parts();
        let visit = Visit::of(&parts, &self.shared.metadata);
        let mut req = Request::from_parts(parts, body);
        let session = Session::new(Arc::clone(&self.shared), cookie, visit);
        req.extensions_mut().insert(session.clone());
        // A response cache inside this layer reads it: never store what this request renders
        // if it carried a session, or once its handler uses one.
        req.extensions_mut().insert(session.mark().clone());
        if self.shared.expose_user && has_cookie {
            return ResponseFuture::preloading(session, inner, req);
        }
        ResponseFuture::calling(session, inner, req)
    }
}
