//! The [`RateLimit`] service.

use std::sync::Arc;

use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;
use tracing::Instrument;

use super::config::{Config, Plan};
use super::future::ResponseFuture;
use super::response::RateLimitBody;
use crate::rate_limit::quota_lookup as resolve;
use crate::rate_limit::{Check, LimiterFuture, Pending};
use crate::telemetry::Stopwatch;

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
            Some(rules) => super::lean::call(inner, config, rules, req, |inner, req| {
                general(inner, config, req)
            }),
            None => general(inner, config, req),
        }
    }
}

/// The inner service made ready by `poll_ready`, to go with this request; a fresh clone stays
/// for the next one.
pub(super) fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// The general engine: the request's plan, then the limiter's decision of its checks.
/// `inner` is taken (a clone left in its place) only for a request that is called or waits.
fn general<S, ReqBody>(
    inner: &mut S,
    config: &Arc<Config>,
    req: Request<ReqBody>,
) -> ResponseFuture<S, ReqBody>
where
    S: tower_service::Service<Request<ReqBody>> + Clone,
{
    let (mut parts, body) = req.into_parts();
    let plan = config.plan(&mut parts);
    let req = Request::from_parts(parts, body);
    match plan {
        Plan::Pass => ResponseFuture::calling(take_ready(inner).call(req), None),
        Plan::Respond(rejection) => ResponseFuture::rejected(*rejection, Arc::clone(config)),
        Plan::Check(checks) => {
            // The layer's rules and its limiter were checked when it was built.
            let started = Stopwatch::start();
            let checks_now = checks.as_slice();
            let at_once = || config.limiter.evaluate_at_once(checks_now);
            if let Some(decided) = in_span(checks_now.len(), at_once) {
                let ready = || take_ready(inner);
                return ResponseFuture::decided(config, decided, (ready, req), checks_now, started);
            }
            let pending = start(config, checks.into_vec());
            ResponseFuture::checking(pending, take_ready(inner), req, Arc::clone(config))
        }
        Plan::Resolve(checks, lookups) => ResponseFuture::resolving(
            resolve::looked_up(checks, lookups),
            take_ready(inner),
            req,
            Arc::clone(config),
        ),
    }
}

/// `decide`, in a `debug` span when one is listened to.
pub(super) fn in_span<T>(rules: usize, decide: impl FnOnce() -> T) -> T {
    if !tracing::level_enabled!(tracing::Level::DEBUG) {
        return decide();
    }
    let _entered = tracing::debug_span!("rate_limit", rules).entered();
    decide()
}

/// Starts evaluating `checks` on the layer's limiter, in a `debug` span when one is listened to.
pub(crate) fn start(config: &Config, checks: Vec<Check>) -> Pending {
    let rules = checks.len();
    let mut pending = Pending::start(&*config.limiter, checks);
    pending.states = instrumented(rules, pending.states);
    pending
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
