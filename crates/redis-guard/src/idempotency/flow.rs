//! One guarded request: read its key and body, claim its record, then run it and store its
//! response, or answer from the record.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::header::{
    CONNECTION, CONTENT_LENGTH, PROXY_AUTHENTICATE, SET_COOKIE, TE, TRAILER, TRANSFER_ENCODING,
    UPGRADE,
};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use tower_service::Service;
use tracing::Instrument as _;

use super::body::{Read, ResponseBody, read};
use super::key::Unscoped;
use super::layer::Shared;
use super::record::{self, Record, StoredResponse};
use super::store::Claim;
use super::{IdempotencyStore, Rejection, key};

type Reply<B, E> = Result<Response<ResponseBody<B>>, E>;

pub(crate) async fn guard<S, ReqBody, ResBody>(
    shared: Arc<Shared>,
    inner: S,
    req: Request<ReqBody>,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    ReqBody: http_body::Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Send,
{
    let (parts, body) = req.into_parts();
    let key = match key::parse(&parts.headers) {
        Ok(Some(key)) => key,
        Ok(None) => return Ok(shared.reject(Rejection::MissingKey)),
        Err(why) => return Ok(shared.reject(Rejection::MalformedKey(why))),
    };
    let body = match read(body, shared.body_limit).await {
        Read::Whole(body) => body,
        Read::TooLarge(_) => return Ok(shared.reject(Rejection::BodyTooLarge(shared.body_limit))),
        Read::Trailers(_) | Read::Failed(_) => return Ok(shared.reject(Rejection::BodyUnreadable)),
    };
    let scope = shared.scope.of(&parts).await;
    let fingerprint = key::fingerprint(&parts, &body);
    let req = Request::from_parts(parts, ReqBody::from(body));
    let scope = match scope {
        Ok(scope) => scope,
        Err(Unscoped::SessionFailed) => return shared.unavailable(inner, req).await,
        Err(Unscoped::NoSession) => {
            if !shared.warned_no_session.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    "idempotency: a request reached the layer without a session, and its keys are scoped by the session's user, so it is answered 500 (logged once). Put the session layer outside this one (`.layer(idempotency).layer(sessions)` in axum), or choose a scope: `scope_header`, `scope`, or `shared_scope` for one scope shared by every client"
                );
            }
            return Ok(shared.reject(Rejection::NoSession));
        }
    };
    let name = key::record_name(scope.as_deref(), &key);
    let token = format!("{:032x}", crate::backend::token());
    let claim = shared
        .store
        .claim(
            &name,
            &token,
            shared.lease,
            &record::in_flight(&fingerprint),
        )
        .await;
    match claim {
        Ok(Claim::Claimed) => {}
        Ok(Claim::Found(found)) if found.fingerprint() != fingerprint => {
            return Ok(shared.reject(Rejection::KeyReused));
        }
        Ok(Claim::Found(Record::InFlight { .. })) => return Ok(shared.reject(Rejection::InFlight)),
        Ok(Claim::Found(Record::Done { response, .. })) => return Ok(shared.replay(response)),
        Ok(Claim::Full) => {
            if !shared.warned_full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "idempotency: the memory store is full of running requests, so requests with a new key are answered 503 until one ends (logged once); raise its capacity, or keep the records on Redis"
                );
            }
            return Ok(shared.reject(Rejection::StoreFull));
        }
        Err(e) => {
            tracing::warn!(error = %e, "idempotency store unavailable");
            return shared.unavailable(inner, req).await;
        }
    }
    let held = Held {
        store: shared.store.clone(),
        name,
        token,
        armed: true,
    };
    // From the claim to the stored response, the request runs in a task of its own: a client
    // that goes away (hyper then drops this future) must not stop a handler that may already
    // have made its effect, nor release the key, or its retry would run the handler again.
    let run = run(Arc::clone(&shared), inner, req, fingerprint, held)
        .instrument(tracing::Span::current());
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // No Tokio runtime to run it on: here, as part of this response future.
        return run.await;
    };
    match runtime.spawn(run).await {
        Ok(reply) => reply,
        // The handler panicked: the panic goes on where it would have without the task (the
        // key was released as the task unwound, as for a `500`).
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down.
        Err(_) => Ok(shared.reject(Rejection::Unavailable)),
    }
}

/// Runs a claimed request and stores its response; releases the key when the handler says
/// "try again" (an error, a `5xx`, a status that is not replayable) or its response cannot be
/// stored (too large, trailers, a failing body). A response the store refuses keeps the key
/// claimed until the lease ends: never released for a second run.
async fn run<S, ReqBody, ResBody>(
    shared: Arc<Shared>,
    mut inner: S,
    req: Request<ReqBody>,
    fingerprint: String,
    held: Held,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body<Data = Bytes>,
{
    let res = match call(&mut inner, req).await {
        Ok(res) => res,
        Err(e) => {
            held.release().await;
            return Err(e);
        }
    };
    let (parts, body) = res.into_parts();
    if !replayable(parts.status) {
        held.release().await;
        return Ok(Response::from_parts(parts, ResponseBody::inner(body)));
    }
    let body = match read(body, shared.response_limit).await {
        Read::Whole(body) => body,
        Read::TooLarge(rest) | Read::Trailers(rest) => {
            tracing::warn!(
                limit = shared.response_limit,
                "idempotency: a response too large to store (or with trailers): its key is released"
            );
            held.release().await;
            return Ok(Response::from_parts(parts, rest));
        }
        Read::Failed(rest) => {
            held.release().await;
            return Ok(Response::from_parts(parts, rest));
        }
    };
    let stored = record::done(
        &fingerprint,
        parts.status,
        &stored_headers(&parts.headers),
        &body,
    );
    match shared
        .store
        .complete(&held.name, &held.token, shared.retention, &stored)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(
                "idempotency: a request outlived its lease and another took its key: its response is not stored"
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "idempotency: storing a response failed; its key is held until the lease ends");
        }
    }
    held.disarm();
    Ok(Response::from_parts(parts, ResponseBody::bytes(body)))
}

async fn call<S, R>(inner: &mut S, req: R) -> Result<S::Response, S::Error>
where
    S: Service<R>,
{
    std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
    inner.call(req).await
}

/// Whether a response is stored for replay: every status below 500 but those that say "try
/// again" (408, 409, 425, 429). A 5xx, or one of those, releases the key, so a retry runs again.
fn replayable(status: StatusCode) -> bool {
    status.as_u16() < 500 && !matches!(status.as_u16(), 408 | 409 | 425 | 429)
}

/// The headers a replay repeats: all but the hop-by-hop ones (and those `Connection` names),
/// `Content-Length` (the server writes it again) and `Set-Cookie` (a replay hands out no
/// cookie: it would bring back a session, or a token, the first response set).
fn stored_headers(headers: &HeaderMap) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .collect();
    let mut out = headers.clone();
    for name in [
        CONNECTION,
        CONTENT_LENGTH,
        PROXY_AUTHENTICATE,
        SET_COOKIE,
        TE,
        TRAILER,
        TRANSFER_ENCODING,
        UPGRADE,
    ] {
        out.remove(name);
    }
    for name in ["keep-alive", "proxy-connection"]
        .into_iter()
        .chain(named.iter().map(String::as_str))
    {
        out.remove(name);
    }
    out
}

impl Shared {
    /// The layer's own answer, the rejection in its extensions.
    pub(crate) fn reject<B: http_body::Body>(
        &self,
        rejection: Rejection,
    ) -> Response<ResponseBody<B>> {
        let mut res = match &self.response {
            Some(respond) => respond.call(&rejection),
            None => rejection.response(),
        };
        tracing::debug!(status = %rejection.status(), reason = %rejection, "idempotency: answered by the layer");
        res.extensions_mut().insert(rejection);
        res.map(ResponseBody::bytes)
    }

    /// The stored response, marked as replayed.
    fn replay<B: http_body::Body>(&self, stored: StoredResponse) -> Response<ResponseBody<B>> {
        let mut res = Response::new(ResponseBody::bytes(stored.body));
        *res.status_mut() = stored.status;
        *res.headers_mut() = stored.headers;
        res.headers_mut().insert(
            self.replayed_header.clone(),
            HeaderValue::from_static("true"),
        );
        res
    }

    /// The store (or the session) failed: `503`, or the request unguarded when the layer
    /// fails open.
    async fn unavailable<S, ReqBody, ResBody>(
        &self,
        mut inner: S,
        req: Request<ReqBody>,
    ) -> Reply<ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
        ResBody: http_body::Body,
    {
        if !self.fail_open {
            return Ok(self.reject(Rejection::Unavailable));
        }
        tracing::warn!("idempotency: running a request unguarded (fail_open)");
        Ok(call(&mut inner, req).await?.map(ResponseBody::inner))
    }
}

/// A claim this request holds: released when dropped while armed, which happens only when the
/// handler panics, when its task is cancelled (the runtime shutting down), or, without a Tokio
/// runtime, when the response future is dropped.
struct Held {
    store: IdempotencyStore,
    name: String,
    token: String,
    armed: bool,
}

impl Held {
    async fn release(mut self) {
        self.armed = false;
        if let Err(e) = self.store.release(&self.name, &self.token).await {
            tracing::warn!(error = %e, "idempotency: releasing a key failed; it is held until the lease ends");
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, name, token) = (
            self.store.clone(),
            std::mem::take(&mut self.name),
            std::mem::take(&mut self.token),
        );
        let in_process = store.in_process();
        let release = async move {
            if let Err(e) = store.release(&name, &token).await {
                tracing::warn!(error = %e, "idempotency: releasing the key of a dropped request failed; it is held until the lease ends");
            }
        };
        if in_process {
            // No await inside: the future completes on its first poll.
            let _ = futures_util::FutureExt::now_or_never(release);
        } else if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(release);
        }
    }
}
