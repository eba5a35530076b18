//! [`SessionService`] and its response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::header::{CACHE_CONTROL, SET_COOKIE, VARY};
use http::{HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::cookie::CookieConfig;
use super::session::{CookieAction, Session, Shared};
use super::{FailurePolicy, SessionUser};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The service [`SessionLayer`](super::SessionLayer) wraps around its inner service.
#[derive(Clone)]
pub struct SessionService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> SessionService<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the wrapper, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for SessionService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for SessionService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let cookie = self.shared.cookie.read(req.headers());
        let has_cookie = matches!(cookie, super::cookie::ReadCookie::Ids(_));
        let session = Session::new(Arc::clone(&self.shared), cookie);
        req.extensions_mut().insert(session.clone());
        if self.shared.expose_user && has_cookie {
            let s = session.clone();
            let preload = Box::pin(async move { s.preload().await });
            return ResponseFuture {
                state: State::Preloading {
                    preload,
                    pending: Some((inner, req)),
                    session,
                },
            };
        }
        ResponseFuture {
            state: State::Calling {
                fut: inner.call(req),
                session: Some(session),
            },
        }
    }
}

pin_project! {
    /// The response future of [`SessionService`]: (preload the user,) call the inner service,
    /// then save the session and set the cookie.
    pub struct ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        #[pin]
        state: State<S, ReqBody>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        Preloading {
            preload: BoxFuture<Result<Option<String>, super::SessionError>>,
            pending: Option<(S, Request<ReqBody>)>,
            session: Session,
        },
        Calling {
            #[pin]
            fut: S::Future,
            session: Option<Session>,
        },
        Finishing {
            fut: BoxFuture<Result<<S as Service<Request<ReqBody>>>::Response, S::Error>>,
        },
    }
}

impl<S, ReqBody> fmt::Debug for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Output = Result<Response<ResBody>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let next = match this.state.as_mut().project() {
                StateProj::Preloading {
                    preload,
                    pending,
                    session,
                } => {
                    let user = ready!(preload.as_mut().poll(cx));
                    let Some((mut inner, mut req)) = pending.take() else {
                        return Poll::Ready(Ok(status(StatusCode::INTERNAL_SERVER_ERROR)));
                    };
                    match user {
                        Ok(Some(user)) => {
                            req.extensions_mut().insert(SessionUser(user));
                        }
                        Ok(None) => {}
                        Err(e) => {
                            // Only with FailurePolicy::Closed.
                            tracing::warn!(error = %e, "session store unavailable: 503");
                            return Poll::Ready(Ok(unavailable()));
                        }
                    }
                    State::Calling {
                        fut: inner.call(req),
                        session: Some(session.clone()),
                    }
                }
                StateProj::Calling { fut, session } => {
                    let res = ready!(fut.poll(cx))?;
                    let Some(session) = session.take() else {
                        return Poll::Ready(Ok(res));
                    };
                    State::Finishing {
                        fut: Box::pin(finish(session, res)),
                    }
                }
                StateProj::Finishing { fut } => return fut.as_mut().poll(cx),
            };
            this.state.set(next);
        }
    }
}

async fn finish<B: Default, E>(session: Session, mut res: Response<B>) -> Result<Response<B>, E> {
    let success = res.status().is_success() || res.status().is_redirection();
    let (cookie, failed) = session.finish(success).await;
    if failed && session.policy() == FailurePolicy::Closed {
        return Ok(unavailable());
    }
    let config: &CookieConfig = session.cookie_config();
    let value = match cookie {
        CookieAction::Keep => return Ok(res),
        CookieAction::Set(id) => config.set_cookie(&id),
        CookieAction::Remove => config.removal_cookie(),
    };
    let headers = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&value) {
        headers.append(SET_COOKIE, v);
    }
    // Shared caches must not store a response that hands out a session.
    headers.append(VARY, HeaderValue::from_static("Cookie"));
    private_cache_control(headers);
    Ok(res)
}

/// Makes a response that carries the session's `Set-Cookie` private: drops `public` and
/// `s-maxage` (which would let a shared cache store it and hand the cookie to everyone), adds
/// `private`, and `no-cache="Set-Cookie"` unless `no-cache` or `no-store` is there already.
/// The handler's other directives (`max-age`, `must-revalidate`, …) stay.
fn private_cache_control(headers: &mut http::HeaderMap) {
    let mut directives: Vec<String> = headers
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(split_directives)
        .filter(|d| {
            let name = directive_name(d);
            !name.eq_ignore_ascii_case("public") && !name.eq_ignore_ascii_case("s-maxage")
        })
        .collect();
    let has = |directives: &[String], name: &str| {
        directives
            .iter()
            .any(|d| directive_name(d).eq_ignore_ascii_case(name))
    };
    if !has(&directives, "private") {
        directives.insert(0, "private".to_owned());
    }
    if !has(&directives, "no-cache") && !has(&directives, "no-store") {
        directives.push("no-cache=\"Set-Cookie\"".to_owned());
    }
    headers.remove(CACHE_CONTROL);
    if let Ok(v) = HeaderValue::from_str(&directives.join(", ")) {
        headers.insert(CACHE_CONTROL, v);
    } else {
        headers.insert(
            CACHE_CONTROL,
            HeaderValue::from_static("private, no-cache=\"Set-Cookie\""),
        );
    }
}

fn directive_name(directive: &str) -> &str {
    directive.split('=').next().unwrap_or("").trim()
}

/// Splits a `Cache-Control` value at commas outside quoted strings (`no-cache="a, b"` is one).
fn split_directives(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in value.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    out.push(current);
    out.into_iter()
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty())
        .collect()
}

fn status<B: Default>(code: StatusCode) -> Response<B> {
    let mut res = Response::new(B::default());
    *res.status_mut() = code;
    res
}

fn unavailable<B: Default>() -> Response<B> {
    let mut res = status(StatusCode::SERVICE_UNAVAILABLE);
    res.headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(values: &[&str]) -> String {
        let mut h = http::HeaderMap::new();
        for v in values {
            h.append(CACHE_CONTROL, HeaderValue::from_str(v).unwrap());
        }
        private_cache_control(&mut h);
        assert_eq!(h.get_all(CACHE_CONTROL).iter().count(), 1);
        h[CACHE_CONTROL].to_str().unwrap().to_owned()
    }

    #[test]
    fn cache_control_becomes_private() {
        assert_eq!(apply(&[]), "private, no-cache=\"Set-Cookie\"");
        assert_eq!(
            apply(&["public, max-age=60", "S-MaxAge=600"]),
            "private, max-age=60, no-cache=\"Set-Cookie\""
        );
        assert_eq!(apply(&["no-store"]), "private, no-store");
        assert_eq!(
            apply(&["private=\"a, public\", no-cache"]),
            "private=\"a, public\", no-cache"
        );
    }
}
