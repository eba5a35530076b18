//! The [`ResponseFuture`] of the rate-limit service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use http::{Request, Response, StatusCode};
use tower_service::Service;

use super::config::{Config, Plan};
use super::decision::RuleDecision;
use super::headers::RateLimitHeaders;
use super::holding::Holding;
use super::limiter::{
    BoxFuture, Check, Held, LimiterError, Pending, Settling, count_failure, decision_from,
};
use super::response::{self, ResponseBody};
use super::service::start;
use super::{CostReport, Decision, Quota, RuleError};

/// The inner service's response, its body holding the request's leases and settlement, with
/// the rate-limit headers.
fn finish<B>(
    res: Response<B>,
    headers: Option<RateLimitHeaders>,
    mut hold: Option<Holding>,
) -> Response<ResponseBody<B>> {
    if let Some(hold) = hold.as_mut() {
        hold.responded(&res);
    }
    let mut res = res.map(|body| ResponseBody::holding(body, hold));
    if let Some(extra) = headers {
        extra.insert(res.headers_mut());
    }
    res
}

/// The answer of a future polled again after it completed (only reachable by a caller's bug).
fn after_completion<B>(grpc: bool) -> Response<ResponseBody<B>> {
    response::error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "rate-limit future polled after completion",
        grpc,
    )
}

define_response_future! {
    /// The response future of [`RateLimit`](super::RateLimit): waits for the limiter (the only
    /// boxed part), then calls the inner service or answers on its own.
    states {
        Resolving {
            checks: BoxFuture<Result<Vec<Check>, RuleError>>,
            pending: Option<(S, Request<ReqBody>)>,
            config: Arc<Config>,
        },
        Checking {
            states: BoxFuture<Result<Held, LimiterError>>,
            pending: Option<(S, Request<ReqBody>, Vec<RuleDecision>, Settling)>,
            config: Arc<Config>,
            started: Instant,
        },
        Calling {
            #[pin]
            fut: S::Future,
            headers: Option<RateLimitHeaders>,
            // The leases, renewed while the inner service runs, and what the response settles;
            // settled on what was reported and released in the background when dropped (the
            // inner service failed, or the client went away), else handed to the response body.
            hold: Option<Holding>,
        },
        Respond {
            status: StatusCode,
            detail: &'static str,
            grpc: bool,
        },
        Limited {
            response: Option<(Decision, Arc<Config>)>,
        },
    }
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    pub(crate) fn checking(
        pending: Pending,
        inner: S,
        req: Request<ReqBody>,
        config: Arc<Config>,
    ) -> Self {
        Self {
            state: State::Checking {
                states: pending.states,
                pending: Some((inner, req, pending.rules, pending.settling)),
                config,
                started: Instant::now(),
            },
        }
    }

    /// Waits for the quotas of `checks` to be looked up, then as [`checking`](Self::checking).
    pub(crate) fn resolving(
        checks: BoxFuture<Result<Vec<Check>, RuleError>>,
        inner: S,
        req: Request<ReqBody>,
        config: Arc<Config>,
    ) -> Self {
        Self {
            state: State::Resolving {
                checks,
                pending: Some((inner, req)),
                config,
            },
        }
    }

    pub(crate) fn call_inner(mut inner: S, req: Request<ReqBody>) -> Self {
        Self {
            state: State::Calling {
                fut: inner.call(req),
                headers: None,
                hold: None,
            },
        }
    }

    pub(crate) fn respond(status: StatusCode, detail: &'static str, grpc: bool) -> Self {
        Self {
            state: State::Respond {
                status,
                detail,
                grpc,
            },
        }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

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
                    let Some((inner, req)) = pending.take() else {
                        return Poll::Ready(Ok(after_completion(config.grpc)));
                    };
                    match checks {
                        Ok(checks) => {
                            let pending = start(config, checks);
                            State::Checking {
                                states: pending.states,
                                pending: Some((inner, req, pending.rules, pending.settling)),
                                config: Arc::clone(config),
                                started: Instant::now(),
                            }
                        }
                        Err(_) => State::Respond {
                            status: StatusCode::INTERNAL_SERVER_ERROR,
                            detail: "The rate limiter is misconfigured.",
                            grpc: config.grpc,
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
                    let Some((mut inner, mut req, rules, settling)) = pending.take() else {
                        return Poll::Ready(Ok(after_completion(config.grpc)));
                    };
                    // What the fallback needs of the resolved quotas, kept only when some rule
                    // resolves one.
                    let resolved: Vec<(Arc<str>, Quota)> = if config.dynamic {
                        rules
                            .iter()
                            .map(|r| (Arc::clone(&r.rule), r.quota))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    let decided = match states {
                        Ok((states, lease)) => decision_from(rules, states).map(|mut d| {
                            d.lease.0 = lease.map(Arc::new);
                            d
                        }),
                        Err(err) => Err(count_failure(&rules, err)),
                    };
                    let decided = match decided {
                        Ok(decision) => Ok(decision),
                        Err(err) => {
                            config.warn_failed(&err);
                            let (parts, body) = req.into_parts();
                            let answer = config.on_failure(&parts, &resolved);
                            req = Request::from_parts(parts, body);
                            answer
                        }
                    };
                    if let Ok(decision) = &decided {
                        decision.record(started.elapsed());
                    }
                    match decided {
                        Ok(mut decision) if decision.allowed => {
                            let policy = config.ietf_on_allowed().then(|| config.policy(&decision));
                            let extra =
                                RateLimitHeaders::new(&decision, policy, config.legacy_headers());
                            // The response body holds the leases, not the handler's copy.
                            let report = (!settling.is_empty()).then(CostReport::new);
                            let hold = decision.take_lease().and_then(|held| {
                                Holding::new(held, report.clone().map(|r| (settling, r)))
                            });
                            if let Some(report) =
                                report.filter(|_| hold.as_ref().is_some_and(Holding::settles))
                            {
                                req.extensions_mut().insert(report);
                            }
                            req.extensions_mut().insert(decision);
                            State::Calling {
                                fut: inner.call(req),
                                headers: Some(extra),
                                hold,
                            }
                        }
                        Ok(decision) => {
                            tracing::debug!(
                                rule = %decision.rule,
                                retry_after_ms = decision.retry_after.as_millis(),
                                "rate limited"
                            );
                            State::Limited {
                                response: Some((decision, Arc::clone(config))),
                            }
                        }
                        Err(Plan::Respond(status, detail)) => State::Respond {
                            status,
                            detail,
                            grpc: config.grpc,
                        },
                        Err(Plan::Pass | Plan::Check(_) | Plan::Resolve(..)) => State::Calling {
                            fut: inner.call(req),
                            headers: None,
                            hold: None,
                        },
                    }
                }
                StateProj::Calling { fut, headers, hold } => {
                    if let Some(held) = hold.as_mut() {
                        held.poll_renew(cx);
                    }
                    let res = ready!(fut.poll(cx))?;
                    return Poll::Ready(Ok(finish(res, headers.take(), hold.take())));
                }
                StateProj::Respond {
                    status,
                    detail,
                    grpc,
                } => {
                    return Poll::Ready(Ok(response::error(*status, detail, *grpc)));
                }
                StateProj::Limited { response } => {
                    let res = match response.take() {
                        Some((decision, config)) => response::limited(&config, &decision),
                        None => after_completion(false),
                    };
                    return Poll::Ready(Ok(res));
                }
            };
            this.state.set(next);
        }
    }
}
