//! The [`ResponseFuture`] of the rate-limit service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use http::{Request, Response, StatusCode};
use tower_service::Service;

use super::Decision;
use super::config::{Config, Plan};
use super::decision::RuleDecision;
use super::headers::RateLimitHeaders;
use super::lease::Holding;
use super::limiter::{BoxFuture, Held, LimiterError, Pending, count_failure, decision_from};
use super::response::{self, ResponseBody};

define_response_future! {
    /// The response future of [`RateLimit`](super::RateLimit): waits for the limiter (the only
    /// boxed part), then calls the inner service or answers on its own.
    states {
        Checking {
            states: BoxFuture<Result<Held, LimiterError>>,
            pending: Option<(S, Request<ReqBody>, Vec<RuleDecision>)>,
            config: Arc<Config>,
            started: Instant,
        },
        Calling {
            #[pin]
            fut: S::Future,
            headers: Option<RateLimitHeaders>,
            // Renewed while the inner service runs; released when dropped (the inner service
            // failed, or the client went away), else handed to the response body.
            lease: Option<Holding>,
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
                pending: Some((inner, req, pending.rules)),
                config,
                started: Instant::now(),
            },
        }
    }

    pub(crate) fn call_inner(mut inner: S, req: Request<ReqBody>) -> Self {
        Self {
            state: State::Calling {
                fut: inner.call(req),
                headers: None,
                lease: None,
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
                StateProj::Checking {
                    states,
                    pending,
                    config,
                    started,
                } => {
                    let states = ready!(states.as_mut().poll(cx));
                    let Some((mut inner, mut req, rules)) = pending.take() else {
                        // Only reachable if polled after completion.
                        return Poll::Ready(Ok(response::error(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "rate-limit future polled after completion",
                            config.grpc,
                        )));
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
                            let answer = config.on_failure(&parts);
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
                            let lease = decision.take_lease().map(Holding::new);
                            req.extensions_mut().insert(decision);
                            State::Calling {
                                fut: inner.call(req),
                                headers: Some(extra),
                                lease,
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
                        Err(Plan::Pass | Plan::Check(_)) => State::Calling {
                            fut: inner.call(req),
                            headers: None,
                            lease: None,
                        },
                    }
                }
                StateProj::Calling {
                    fut,
                    headers,
                    lease,
                } => {
                    if let Some(held) = lease.as_mut() {
                        held.poll_renew(cx);
                    }
                    let res = ready!(fut.poll(cx))?;
                    let lease = lease.take();
                    let mut res = res.map(|body| ResponseBody::holding(body, lease));
                    if let Some(extra) = headers.take() {
                        extra.insert(res.headers_mut());
                    }
                    return Poll::Ready(Ok(res));
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
                        // Only reachable if polled after completion.
                        None => response::error(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "rate-limit future polled after completion",
                            false,
                        ),
                    };
                    return Poll::Ready(Ok(res));
                }
            };
            this.state.set(next);
        }
    }
}
