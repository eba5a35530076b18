//! [`Cache`]: answers from the cache, or calls the inner service and fills it.

use std::sync::Arc;

use bytes::Bytes;
use http::Request;

use super::body::ResponseBody;
use super::flow::{Call, Job};
use super::future::ResponseFuture;
use super::invalidation::{is_safe, unsafe_request};
use super::shared::Shared;

define_service! {
    /// The service [`CacheLayer`](super::CacheLayer) wraps around its inner service. The inner
    /// service must be `Clone` (a stale entry is refreshed by a clone, in a spawned task).
    ///
    /// Clones share the store and the settings.
    Cache { shared: Shared }
}

impl_service! {
    Cache => ResponseBody where {
        S: Send + 'static,
        S::Future: Send,
        S::Error: Send + 'static,
        ReqBody: Send + 'static,
        ResBody: http_body::Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Send,
    } |this, req| {
        let (mut parts, body) = req.into_parts();
        this.shared.key.normalize(&mut parts);
        let carries = this.shared.key.carries(&parts.headers);
        let ids = (this.shared.key.cached(&parts, carries)).then(|| this.shared.ids.ids(&this.shared, &parts));
        let req = Request::from_parts(parts, body);
        if !is_safe(req.method()) {
            let inner = this.take_ready();
            let shared = Arc::clone(&this.shared);
            return ResponseFuture::caching(Box::pin(unsafe_request(shared, inner, req)));
        }
        let Some(ids) = ids else {
            return ResponseFuture::passing(this.inner.call(req));
        };
        let inner = this.take_ready();
        let call = Call {
            shared: Arc::clone(&this.shared),
            digest: ids.variant,
            group: Some(ids.uri),
            read: Some(ids.read),
        };
        ResponseFuture::caching(Box::pin(Job::new(call, inner, req, carries).serve()))
    }
}
