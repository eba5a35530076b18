//! [`ResponseFuture`]: preload the user, call the inner service, then save the session and set
//! the cookie (or the token header).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::header::{SET_COOKIE, VARY};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use tower_service::Service;

use super::body::ResponseBody;
use super::cache_control::private_cache_control;
use super::handle::Session;
use super::state::CookieAction;
use super::store::{BoxFuture, StoreFuture};
use super::token::Wire;
use super::{FailurePolicy, Rejection, SessionUser};
use crate::problem::problem;

define_response_future! {
    /// The response future of [`Sessions`](super::Sessions): (preload the user,) call the
    /// inner service, then save the session and set the cookie.
    states {
        Preloading {
            preload: StoreFuture<Option<String>>,
            // The inner service, the request and the session, until the user is known.
            pending: Option<(S, Request<ReqBody>, Session)>,
        },
        Calling {
            #[pin]
            fut: S::Future,
            session: Option<Session>,
        },
        // The inner service's response, or the layer's answer instead.
        Finishing {
            fut: BoxFuture<Result<<S as Service<Request<ReqBody>>>::Response, Response<Bytes>>>,
        },
    }
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    /// Loads the session (to expose its user), then calls `inner`.
    pub(crate) fn preloading(session: Session, inner: S, req: Request<ReqBody>) -> Self {
        let s = session.clone();
        let preload = Box::pin(async move { s.preload().await });
        Self {
            state: State::Preloading {
                preload,
                pending: Some((inner, req, session)),
            },
        }
    }

    /// Calls `inner` right away; the session loads when the handler needs it.
    pub(crate) fn calling(session: Session, mut inner: S, req: Request<ReqBody>) -> Self {
        Self {
            state: State::Calling {
                fut: inner.call(req),
                session: Some(session),
            },
        }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Send + 'static,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let next = match this.state.as_mut().project() {
                StateProj::Preloading { preload, pending } => {
                    let user = ready!(preload.as_mut().poll(cx));
                    let Some((mut inner, mut req, session)) = pending.take() else {
                        return Poll::Ready(Ok(after_completion()));
                    };
                    match user {
                        Ok(Some(user)) => {
                            req.extensions_mut().insert(SessionUser(user));
                        }
                        Ok(None) => {}
                        Err(e) => {
                            // Only with FailurePolicy::Closed.
                            tracing::warn!(error = %e, "session store unavailable: 503");
                            let res = session.rejected(Rejection::StoreUnavailable);
                            return Poll::Ready(Ok(res.map(ResponseBody::full)));
                        }
                    }
                    State::Calling {
                        fut: inner.call(req),
                        session: Some(session),
                    }
                }
                StateProj::Calling { fut, session } => {
                    let res = ready!(fut.poll(cx))?;
                    let Some(session) = session.take() else {
                        return Poll::Ready(Ok(res.map(ResponseBody::inner)));
                    };
                    // Most requests that read their session write nothing: answered here,
                    // without boxing `finish` or waiting for the lock.
                    if let Some(failed) = session.finished_at_once(succeeded(&res)) {
                        let res = if failed && session.policy() == FailurePolicy::Closed {
                            let answer = session.rejected(Rejection::StoreUnavailable);
                            answer.map(ResponseBody::full)
                        } else {
                            respond(&session, res, &CookieAction::Keep, None)
                                .map(ResponseBody::inner)
                        };
                        return Poll::Ready(Ok(res));
                    }
                    State::Finishing {
                        fut: Box::pin(finish(session, res)),
                    }
                }
                StateProj::Finishing { fut } => {
                    return Poll::Ready(Ok(match ready!(fut.as_mut().poll(cx)) {
                        Ok(res) => res.map(ResponseBody::inner),
                        Err(answer) => answer.map(ResponseBody::full),
                    }));
                }
            };
            this.state.set(next);
        }
    }
}

/// The inner service's response with the session's cookie and cache headers, or the layer's
/// own answer when the store failed under [`FailurePolicy::Closed`].
async fn finish<B>(session: Session, res: Response<B>) -> Result<Response<B>, Response<Bytes>> {
    let (cookie, failed) = session.finish(succeeded(&res)).await;
    if failed && session.policy() == FailurePolicy::Closed {
        return Err(session.rejected(Rejection::StoreUnavailable));
    }
    let age = match (&cookie, session.transport()) {
        (CookieAction::Set(_), Wire::Cookie) => session.cookie_age().await,
        _ => None,
    };
    Ok(respond(&session, res, &cookie, age))
}

/// Whether the inner service's response counts as a use of the session (a success or a
/// redirection): only then does an untouched session have its idle timeout restarted.
fn succeeded<B>(res: &Response<B>) -> bool {
    res.status().is_success() || res.status().is_redirection()
}

/// The response with the session's cookie and cache headers, once the session is finished
/// (and the store did not fail under [`FailurePolicy::Closed`]): `cookie` says what to do with
/// the cookie, `age` is the `Max-Age` of one set.
fn respond<B>(
    session: &Session,
    mut res: Response<B>,
    cookie: &CookieAction,
    age: Option<Duration>,
) -> Response<B> {
    // A response cache outside this layer reads the mark: never store a response that depends
    // on a session. A mark that says neither tells it nothing, so none is allocated then.
    let mark = session.mark();
    if mark.personal() {
        res.extensions_mut().insert(mark.clone());
    }
    let (credential, token) = match session.transport() {
        Wire::Cookie => (HeaderName::from_static("cookie"), false),
        Wire::Header(token) => {
            token.respond(res.headers_mut(), cookie);
            (token.request_header().clone(), true)
        }
    };
    let hands_out = *cookie != CookieAction::Keep;
    if !token {
        let config = session.cookie_config();
        let value = match cookie {
            CookieAction::Keep => None,
            CookieAction::Set(id) => Some(config.set_cookie(id, age)),
            CookieAction::Remove => Some(config.removal_cookie()),
        };
        if let Some(v) = value.and_then(|v| HeaderValue::from_str(&v).ok()) {
            res.headers_mut().append(SET_COOKIE, v);
        }
    }
    let headers = res.headers_mut();
    // What the page shows may depend on the credential (or, for an anonymous visitor, on having
    // none): caches in front key on it.
    if mark.personal() || hands_out {
        headers.append(VARY, vary_value(&credential));
    }
    // Shared caches must not store a response that hands out a session, nor one rendered for a
    // token holder or from a session the request named.
    // (A new token already went out with `no-store`.)
    if token && matches!(cookie, CookieAction::Set(_)) {
        return res;
    }
    if hands_out || (mark.carried() && (token || mark.touched())) {
        private_cache_control(headers, hands_out && !token);
    }
    res
}

/// The `Vary` value naming the credential header, in its usual spelling for `Cookie`.
fn vary_value(credential: &HeaderName) -> HeaderValue {
    if credential == http::header::COOKIE {
        return HeaderValue::from_static("Cookie");
    }
    HeaderValue::from_str(credential.as_str()).unwrap_or(HeaderValue::from_static("*"))
}

/// The answer of a future polled again after it completed (only reachable by a caller's bug).
fn after_completion<B>() -> Response<ResponseBody<B>> {
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "session future polled after completion",
        &[],
    )
    .map(ResponseBody::full)
}
