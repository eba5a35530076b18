//! [`Idempotency`]: guards unsafe requests with an `Idempotency-Key`, or passes them.

use std::sync::Arc;

use bytes::Bytes;

use super::body::ResponseBody;
use super::future::ResponseFuture;
use super::layer::Shared;

define_service! {
    /// The service [`IdempotencyLayer`](super::IdempotencyLayer) wraps around its inner service.
    ///
    /// The inner service must be `Clone` (the clone made ready goes with a guarded request), and
    /// its request body buildable from [`Bytes`] (axum's `Body`, `Full<Bytes>`): the layer reads a
    /// guarded request's body to fingerprint it, then hands it on as bytes. On plain hyper, map
    /// `Incoming` into such a body in front of the layer.
    ///
    /// A guarded request that has claimed its key runs, from the inner call to its stored
    /// response, in a task spawned on the current Tokio runtime, and the response future waits
    /// for that task: a client that closes its connection (hyper then drops the response
    /// future) does not stop a handler that may have made its effect already, nor frees the key
    /// for a second run. Hence the `Send + 'static` bounds on the inner service, its errors and
    /// both bodies. Without a Tokio runtime, the request runs in the response future itself.
    Idempotency { shared: Shared }
}

impl_service! {
    Idempotency => ResponseBody where {
        S: Send + 'static,
        S::Future: Send,
        S::Error: Send + 'static,
        ReqBody: http_body::Body<Data = Bytes> + From<Bytes> + Send + 'static,
        ResBody: http_body::Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Send,
    } |this, req| {
        if !this.shared.guards(&req) {
            return ResponseFuture::passing(this.inner.call(req));
        }
        let inner = this.take_ready();
        let shared = Arc::clone(&this.shared);
        ResponseFuture::guarded(Box::pin(super::flow::guard(shared, inner, req)))
    }
}
