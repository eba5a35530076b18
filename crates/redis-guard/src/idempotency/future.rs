//! [`ResponseFuture`]: the inner service's future for a request the layer does not guard, or the
//! layer's work for one it does.

use super::body::ResponseBody;

define_passing_future! {
    /// The response future of [`Idempotency`](super::Idempotency): the inner call for requests
    /// the layer passes (safe methods, no key on a route that does not require one), else
    /// the layer's work (boxed: it waits for the store).
    Guarded by guarded
}
