//! The [`RateLimit`] service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;
use tracing::Instrument;

use super::config::{Config, Plan};
use super::future::ResponseFuture;
use super::response::ResponseBody;
use crate::rate_limit::{Check, Decision, LimiterError, Pending, looked_up};
use crate::telemetry::Stopwatch;

/// The service [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) wraps around its inner service.
///
/// Clones share the limiter and its state (a clone per connection sees the same limits).
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> RateLimit<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    define_inner_service_accessors!();
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The readied service goes with this request; a fresh clone waits for the next one.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (parts, body) = req.into_parts();
        let plan = self.config.plan(&parts);
        let req = Request::from_parts(parts, body);
        match plan {
            Plan::Pass => ResponseFuture::call_inner(inner, req),
            Plan::Respond(rejection) => {
                ResponseFuture::rejected(*rejection, Arc::clone(&self.config))
            }
            Plan::Check(checks) => {
                // The layer's rules and its limiter were checked when it was built.
                let started = Stopwatch::start();
                let checks_now = checks.as_slice();
                if let Some(decided) = at_once(&self.config, checks_now) {
                    let waiting = (inner, req);
                    return ResponseFuture::decided(
                        &self.config,
                        decided,
                        waiting,
                        checks_now,
                        started,
                    );
                }
                let pending = start(&self.config, checks.into_vec());
                ResponseFuture::checking(pending, inner, req, Arc::clone(&self.config))
            }
            Plan::Resolve(checks, lookups) => ResponseFuture::resolving(
                looked_up(checks, lookups),
                inner,
                req,
                Arc::clone(&self.config),
            ),
        }
    }
}

/// The decision of `checks` when the layer's limiter decides in process (no future, nothing
/// boxed), in a `debug` span when one is listened to.
fn at_once(config: &Config, checks: &[Check]) -> Option<Result<Decision, LimiterError>> {
    if !tracing::level_enabled!(tracing::Level::DEBUG) {
        return config.limiter.evaluate_at_once(checks);
    }
    let span = tracing::debug_span!("rate_limit", rules = checks.len());
    let _entered = span.enter();
    config.limiter.evaluate_at_once(checks)
}

/// Starts evaluating `checks` on the layer's limiter, in a `debug` span when one is listened to.
pub(crate) fn start(config: &Config, checks: Vec<Check>) -> Pending {
    let span = tracing::debug_span!("rate_limit", rules = checks.len());
    let mut pending = Pending::start(&*config.limiter, checks);
    if !span.is_disabled() {
        // Boxed once more only while a subscriber listens at `debug`.
        pending.states = Box::pin(pending.states.instrument(span));
    }
    pending
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}
