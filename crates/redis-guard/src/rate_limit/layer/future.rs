//! The [`ResponseFuture`] of the rate-limit service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use tower_service::Service;

use super::config::{Config, Plan};
use super::headers::RateLimitHeaders;
use super::lean::{self, Denial};
use super::rejection::Rejection;
use super::response::{RateLimitBody, ResponseBody, after_completion, answer};
use super::service::{in_span, instrumented, take_ready};
use super::throttle::{Reservation, wait_for};
use crate::ConfigError;
use crate::rate_limit::quota_lookup as resolve;
use crate::rate_limit::{
    BoxFuture, Check, CostReport, Decision, Few, Held, Holding, LimiterError, LimiterFuture,
    Pending, Quota, RuleDecision, RuleState, Settling, count_failure_of, settling,
};
use crate::telemetry::Stopwatch;

/// The inner service's response with the rate-limit headers, its body holding what the request
/// holds.
fn finish<B: RateLimitBody>(
    res: Response<B>,
    headers: Option<RateLimitHeaders>,
    hold: Option<Box<Holding>>,
) -> Response<B::Out> {
    let mut res = match hold {
        // Nothing held: the inner body as it is, for a body type that can be passed on
        // unwrapped (axum's).
        None => res.map(B::passed),
        Some(mut hold) => {
            hold.responded(&res);
            res.map(|body| B::holding(ResponseBody::holding(body, Some(hold))))
        }
    };
    if let Some(extra) = headers {
        extra.insert(res.headers_mut());
    }
    res
}

define_response_future! {
    /// The response future of [`RateLimit`](crate::rate_limit::RateLimit): waits for the
    /// limiter, then calls the inner service or answers on its own.
    states {
        // What waits for Redis is boxed: the future stays small for the in-process limiter,
        // which never waits, and a Redis round trip dwarfs an allocation.
        Resolving {
            checks: BoxFuture<Result<Vec<Check>, ConfigError>>,
            pending: Option<Box<(S, Request<ReqBody>)>>,
            config: Arc<Config>,
        },
        Checking {
            states: LimiterFuture<Held>,
            pending: Option<Box<Waiting<S, ReqBody>>>,
            config: Arc<Config>,
            started: Stopwatch,
        },
        Calling {
            #[pin]
            fut: S::Future,
            headers: Option<RateLimitHeaders>,
            // The leases, renewed while the inner service runs, and what the response settles:
            // handed to the response body, or released in the background when dropped. Boxed,
            // being rare.
            hold: Option<Box<Holding>>,
        },
        // Admitted after a wait (a throttled rule); dropped before, the slot is given back.
        Throttled {
            sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
            admitted: Option<Box<Admitted<S, ReqBody>>>,
            config: Arc<Config>,
        },
        // The layer answers itself.
        Rejected {
            rejected: Option<(Rejection, Arc<Config>)>,
        },
        // A plain request waiting for the limiter's store (`lean.rs`).
        Storing {
            states: LimiterFuture<Few<RuleState>>,
            pending: Option<Box<(S, Request<ReqBody>)>>,
            config: Arc<Config>,
            started: Stopwatch,
        },
        // A plain request denied (`lean.rs`): its `429` is written when polled.
        Limited {
            limited: Option<(Arc<Config>, Denial)>,
        },
    }
}

/// What the request and its rules wait for once the limiter answered.
type Waiting<S, ReqBody> = (S, Request<ReqBody>, Vec<RuleDecision>, Settling);

/// An admitted request waiting for its slot, and what holds the slot meanwhile.
type Admitted<S, ReqBody> = (S, Request<ReqBody>, Decision, Settling, Reservation);

/// The state of a request waiting for the layer's limiter to evaluate `checks`.
fn checking<S, ReqBody>(
    checks: Vec<Check>,
    inner: S,
    req: Request<ReqBody>,
    config: &Arc<Config>,
) -> State<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    let rules = checks.len();
    let pending = Pending::start(&*config.limiter, checks);
    State::Checking {
        states: instrumented(rules, pending.states),
        pending: Some(Box::new((inner, req, pending.rules, pending.settling))),
        config: Arc::clone(config),
        started: Stopwatch::start(),
    }
}

/// The inner service called with the admitted `decision`.
fn call<S, ReqBody>(
    config: &Config,
    mut decision: Decision,
    (mut inner, mut req, settling): (S, Request<ReqBody>, Settling),
) -> State<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    let policy = config.ietf_on_allowed.then(|| config.policy(&decision));
    let extra = RateLimitHeaders::new(&decision, policy, config.legacy);
    // The response body holds the leases, not the handler's copy.
    let report = (!settling.is_empty()).then(CostReport::new);
    let hold = decision
        .take_lease()
        .and_then(|held| Holding::new(held, report.clone().map(|r| (settling, r))))
        .map(Box::new);
    if let Some(report) = report.filter(|_| hold.as_ref().is_some_and(|h| h.settles())) {
        req.extensions_mut().insert(report);
    }
    if config.extensions {
        req.extensions_mut().insert(decision);
    }
    State::Calling {
        fut: inner.call(req),
        headers: Some(extra),
        hold,
    }
}

/// The state once the limiter answered `states` for the waiting request.
fn decided<S, ReqBody>(
    config: &Arc<Config>,
    states: Result<Held, LimiterError>,
    (inner, req, rules, settling): Waiting<S, ReqBody>,
    started: Stopwatch,
) -> State<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    // What the fallback needs of the resolved quotas, kept only when some rule resolves one.
    let resolved = resolved(config, rules.iter().map(|r| (&r.rule, r.quota)));
    let decided = match states {
        Ok((states, lease, live)) => Decision::of(rules, &states, &live).map(|mut d| {
            d.lease.0 = lease.map(Arc::new);
            d
        }),
        Err(err) => Err(count_failure_of(rules.iter().map(|r| &r.rule), err)),
    };
    state_of(
        config,
        decided,
        &resolved,
        (move || inner, req, settling),
        started,
    )
}

/// The quotas the request's rules were resolved to, for the fallback: none when no rule
/// resolves its quota per request.
fn resolved<'a>(
    config: &Config,
    rules: impl Iterator<Item = (&'a Arc<str>, Quota)>,
) -> Vec<(Arc<str>, Quota)> {
    if config.dynamic {
        rules
            .map(|(name, quota)| (Arc::clone(name), quota))
            .collect()
    } else {
        Vec::new()
    }
}

/// The state for the limiter's answer `decided` (a failure counted already): the inner service
/// called with the decision, the denial, or what the failure policy says.
fn state_of<S, ReqBody>(
    config: &Arc<Config>,
    decided: Result<Decision, LimiterError>,
    resolved: &[(Arc<str>, Quota)],
    (ready, mut req, settling): (impl FnOnce() -> S, Request<ReqBody>, Settling),
    started: Stopwatch,
) -> State<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    let mut decided = match decided {
        Ok(decision) => Ok(decision),
        Err(err) => {
            config.warn_failed(&err);
            let (parts, body) = req.into_parts();
            let answer = config.on_failure(&parts, resolved);
            req = Request::from_parts(parts, body);
            answer
        }
    };
    // A request admitted after a wait takes a place among the waiters, or, none left, is denied
    // (and counted so) with its slot given back.
    let waiting = match &mut decided {
        Ok(decision) if decision.allowed => wait_for(&config.waiters, decision),
        _ => None,
    };
    if let Ok(decision) = &decided {
        decision.record(started.on().then(|| started.elapsed()), &config.metrics);
    }
    match decided {
        Ok(decision) if decision.allowed => match waiting {
            Some((wait, reservation)) => State::Throttled {
                sleep: Box::pin(tokio::time::sleep(wait)),
                admitted: Some(Box::new((ready(), req, decision, settling, reservation))),
                config: Arc::clone(config),
            },
            None => call(config, decision, (ready(), req, settling)),
        },
        Ok(decision) => {
            tracing::debug!(
                rule = %decision.rule,
                retry_after_ms = decision.retry_after.as_millis(),
                "rate limited"
            );
            State::Rejected {
                rejected: Some((Rejection::Limited(decision), Arc::clone(config))),
            }
        }
        Err(Plan::Respond(rejection)) => State::Rejected {
            rejected: Some((*rejection, Arc::clone(config))),
        },
        Err(Plan::Pass | Plan::Check(_) | Plan::Resolve(..)) => State::Calling {
            fut: ready().call(req),
            headers: None,
            hold: None,
        },
    }
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    /// The general engine: the request's plan, then the limiter's decision of its checks.
    /// `inner` is taken (a clone left in its place) only for a request that is called or waits.
    pub(super) fn general(inner: &mut S, config: &Arc<Config>, req: Request<ReqBody>) -> Self
    where
        S: Clone,
    {
        let (mut parts, body) = req.into_parts();
        let plan = config.plan(&mut parts);
        let req = Request::from_parts(parts, body);
        let state = match plan {
            Plan::Pass => return Self::calling(take_ready(inner).call(req), None),
            Plan::Respond(rejection) => State::Rejected {
                rejected: Some((*rejection, Arc::clone(config))),
            },
            Plan::Check(checks) => {
                // The layer's rules and its limiter were checked when it was built.
                let started = Stopwatch::start();
                let checks_now = checks.as_slice();
                let at_once = || config.limiter.evaluate_at_once(checks_now);
                match in_span(checks_now.len(), at_once) {
                    Some(decided) => {
                        let names = || checks_now.iter().map(|c| c.rule.name_arc());
                        let resolved =
                            resolved(config, names().zip(checks_now.iter().map(|c| c.quota)));
                        let decided = decided.map_err(|err| count_failure_of(names(), err));
                        let ready = (|| take_ready(inner), req, settling(checks_now));
                        state_of(config, decided, &resolved, ready, started)
                    }
                    None => checking(checks.into_vec(), take_ready(inner), req, config),
                }
            }
            Plan::Resolve(checks, lookups) => State::Resolving {
                checks: resolve::looked_up(checks, lookups),
                pending: Some(Box::new((take_ready(inner), req))),
                config: Arc::clone(config),
            },
        };
        Self { state }
    }

    /// The inner service called, with `headers` for its response and nothing held.
    pub(super) fn calling(fut: S::Future, headers: Option<RateLimitHeaders>) -> Self {
        let hold = None;
        Self {
            state: State::Calling { fut, headers, hold },
        }
    }

    /// A plain request waiting for the limiter's store to answer `states` (`lean.rs`).
    #[inline]
    pub(super) fn storing(
        states: LimiterFuture<Few<RuleState>>,
        inner: S,
        req: Request<ReqBody>,
        config: Arc<Config>,
        started: Stopwatch,
    ) -> Self {
        Self {
            state: State::Storing {
                states,
                pending: Some(Box::new((inner, req))),
                config,
                started,
            },
        }
    }

    /// A plain request denied (`lean.rs`).
    pub(super) fn limited(config: Arc<Config>, denial: Denial) -> Self {
        Self {
            state: State::Limited {
                limited: Some((config, denial)),
            },
        }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: RateLimitBody,
{
    type Output = Result<Response<ResBody::Out>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let next = match this.state.as_mut().project() {
                StateProj::Resolving {
                    checks,
                    pending,
                    config,
                } => {
                    let checks = ready!(checks.as_mut().poll(cx));
                    let Some((inner, req)) = pending.take().map(|b| *b) else {
                        return Poll::Ready(Ok(after_completion::<ResBody>()));
                    };
                    match checks {
                        Ok(checks) => checking(checks, inner, req, config),
                        Err(_) => State::Rejected {
                            rejected: Some((Rejection::Misconfigured, Arc::clone(config))),
                        },
                    }
                }
                StateProj::Checking {
                    states,
                    pending,
                    config,
                    started,
                } => {
                    let states = ready!(states.as_mut().poll(cx));
                    let Some(pending) = pending.take() else {
                        return Poll::Ready(Ok(after_completion::<ResBody>()));
                    };
                    decided(config, states, *pending, *started)
                }
                StateProj::Storing {
                    states,
                    pending,
                    config,
                    started,
                } => {
                    let states = ready!(states.as_mut().poll(cx));
                    let (Some((inner, req)), Some((rules, _))) =
                        (pending.take().map(|b| *b), config.plain.as_ref())
                    else {
                        return Poll::Ready(Ok(after_completion::<ResBody>()));
                    };
                    match states {
                        Ok(states) => {
                            let mut inner = inner;
                            let call = move |req| inner.call(req);
                            lean::decided(config, rules, states.as_slice(), call, req, *started)
                                .state
                        }
                        Err(err) => {
                            let err = count_failure_of(rules.iter().map(|r| r.name_arc()), err);
                            let ready = (move || inner, req, Vec::new());
                            state_of(config, Err(err), &[], ready, *started)
                        }
                    }
                }
                StateProj::Calling { fut, headers, hold } => {
                    if let Some(held) = hold.as_mut() {
                        held.poll_renew(cx);
                    }
                    let res = ready!(fut.poll(cx))?;
                    return Poll::Ready(Ok(finish(res, headers.take(), hold.take())));
                }
                StateProj::Throttled {
                    sleep,
                    admitted,
                    config,
                } => {
                    ready!(sleep.as_mut().poll(cx));
                    let Some((inner, req, decision, settling, reservation)) =
                        admitted.take().map(|b| *b)
                    else {
                        return Poll::Ready(Ok(after_completion::<ResBody>()));
                    };
                    reservation.kept();
                    call(config, decision, (inner, req, settling))
                }
                StateProj::Limited { limited } => {
                    let res = match limited.take() {
                        Some((config, denial)) => lean::answer::<ResBody>(&config, denial),
                        None => after_completion::<ResBody>(),
                    };
                    return Poll::Ready(Ok(res));
                }
                StateProj::Rejected { rejected } => {
                    let res = match rejected.take() {
                        Some((rejection, config)) => answer::<ResBody>(&config, rejection),
                        None => after_completion::<ResBody>(),
                    };
                    return Poll::Ready(Ok(res));
                }
            };
            this.state.set(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::mem::size_of;

    use tower::util::BoxCloneSyncService;

    use super::*;

    type Inner = BoxCloneSyncService<Request<String>, Response<String>, Infallible>;

    /// axum and hyper move a request's future several times before and while polling it:
    /// what waits for Redis, the leases and the rare headers are boxed, so an in-process
    /// decision does not pay for moving them (the future was 352 bytes with all of them inline).
    #[test]
    fn the_future_and_the_body_stay_small() {
        let future = size_of::<ResponseFuture<Inner, String>>();
        assert!(future <= 176, "{future} bytes");
        // The body was 256 bytes with the leases inline.
        let body = size_of::<ResponseBody<String>>();
        assert!(body <= 160, "{body} bytes");
    }
}
