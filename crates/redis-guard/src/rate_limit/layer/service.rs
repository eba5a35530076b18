//! The [`RateLimit`] service.

use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;
use tracing::Instrument;

use super::config::Config;
use super::future::ResponseFuture;
use super::response::RateLimitBody;
use crate::rate_limit::LimiterFuture;

define_service! {
    /// The service [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) wraps around its inner
    /// service.
    ///
    /// Clones share the limiter and its state (a clone per connection sees the same limits).
    RateLimit { config: Config }
}

/// Over any inner HTTP service `S: Clone` whose body is a [`RateLimitBody`], answering in that
/// body's [`Out`](RateLimitBody::Out) type with the inner error type.
impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: RateLimitBody,
{
    type Response = Response<ResBody::Out>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let RateLimit { inner, config } = self;
        match &config.plain {
            Some(plain) => super::lean::call(inner, config, plain, req, |inner, req| {
                ResponseFuture::general(inner, config, req)
            }),
            None => ResponseFuture::general(inner, config, req),
        }
    }
}

/// The inner service made ready by `poll_ready`, to go with this request; a fresh clone stays
/// for the next one.
pub(super) fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// `decide`, in a `debug` span when one is listened to.
#[inline]
pub(super) fn in_span<T>(rules: usize, decide: impl FnOnce() -> T) -> T {
    if !tracing::level_enabled!(tracing::Level::DEBUG) {
        return decide();
    }
    let _entered = tracing::debug_span!("rate_limit", rules).entered();
    decide()
}

/// `states`, in a `debug` span when one is listened to (boxed once more only then).
pub(super) fn instrumented<T: 'static>(rules: usize, states: LimiterFuture<T>) -> LimiterFuture<T> {
    if !tracing::level_enabled!(tracing::Level::DEBUG) {
        return states;
    }
    Box::pin(states.instrument(tracing::debug_span!("rate_limit", rules)))
}

#[cfg(feature = "test-util")]
impl<S> RateLimit<S> {
    /// How many throttled requests wait for their slot now (feature `test-util`).
    ///
    /// A throttled request takes its place among the waiters once the limiter's answer has
    /// reached it, a moment after the limiter counted it: a test that needs the place taken
    /// waits for this count, not for the limiter's state.
    pub fn waiting(&self) -> usize {
        self.config.waiters.waiting()
    }
}
