//! One cached request: look the key up, then serve, wait, or compute and fill; with
//! `stale_if_error` and fill timeouts, a copy stands in for a failing or slow handler.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{AGE, CONTENT_TYPE, ETAG};
use http::{HeaderValue, Request, Response, StatusCode, response};
use tokio::time::Instant;
use tower_service::Service;

use super::CacheTags;
use super::body::{Collected, ResponseBody, collect};
use super::entry::{Entry, Kind, encode};
pub(crate) use super::lookup::Call;
use super::lookup::{Look, Waited, holding, later, patiently};
use super::policy::{Arrival, Asked, Carries, age_value, life};
use super::status::Outcome;
use super::store::Write;
use super::validate::{Condition, ask, etag_of, freshen, has_validator, not_modified};
use crate::backend::LockGuard;
use crate::served::SessionMark;

type Reply<B, E> = Result<Response<ResponseBody<B>>, E>;

/// A copy that may stand in for the handler (inside `stale_if_error`), read at this time.
type Standby = Option<(Entry, u64)>;

/// Marks the response made from an entry that the handler just revalidated (it answered the
/// layer's conditional request `304`): the client's own condition is answered on it.
#[derive(Clone, Copy, Debug)]
struct Revalidated;

/// One looked-up request: the call, the inner service, the request and its condition.
pub(crate) struct Job<S, ReqBody> {
    call: Call,
    inner: S,
    req: Request<ReqBody>,
    asks: Condition,
    /// The request's `no-store` and `only-if-cached`.
    directives: Asked,
}

impl<S, ReqBody, ResBody> Job<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Send,
{
    /// The request's job; its conditional headers are the layer's to answer. `carries`: which
    /// of them, and of its directives, the request has.
    pub(crate) fn new(call: Call, inner: S, mut req: Request<ReqBody>, carries: Carries) -> Self {
        let asks = if carries.condition {
            let method = req.method().clone();
            Condition::take(&method, req.headers_mut())
        } else {
            Condition::Unconditional
        };
        let directives = if carries.directives {
            Asked::of(req.headers())
        } else {
            Asked::default()
        };
        Self {
            call,
            inner,
            req,
            asks,
            directives,
        }
    }

    pub(crate) async fn serve(self) -> Reply<ResBody, S::Error> {
        let look = self.call.look().await;
        let directed = self.directives.only_if_cached || self.directives.no_store;
        // A fresh hit is answered here; everything else is a future of its own, boxed, so
        // that the future of a hit stays small (it is moved as it is built and boxed).
        match look {
            Look::Fresh(entry, now) if !directed && !self.call.early(&entry, now) => {
                Ok(self.call.respond(entry, now, &self.asks, false))
            }
            look => Box::pin(self.decide(look)).await,
        }
    }

    /// What a request does with what the store holds, but a plain fresh hit.
    async fn decide(self, look: Look) -> Reply<ResBody, S::Error> {
        let xfetch = self.call.shared.stampede.xfetch.is_some();
        if self.directives.only_if_cached || self.directives.no_store {
            return self.directed(look).await;
        }
        match look {
            // Only when XFetch recomputes it early (`serve` answers the others).
            Look::Fresh(entry, now) => {
                let since = Instant::now();
                self.fetch(Some(now), None, Some((entry, now)), None, since)
                    .await
            }
            Look::Stale(entry, now) => {
                let Self {
                    call, inner, req, ..
                } = self;
                let grace = call.grace(&entry);
                let keep = (!grace.is_zero()).then_some(grace);
                let prior = has_validator(&entry.headers).then(|| entry.clone());
                call.refresh_with(move |call, now| async move {
                    // The body is read (and filled) inside compute; what is left is dropped.
                    let _ = call.attempt(inner, req, Some(now), true, keep, prior).await;
                })
                .await;
                Ok(call.respond(entry, now, &self.asks, false))
            }
            Look::Failing { entry, at, due } => {
                let Self {
                    call,
                    inner,
                    req,
                    asks,
                    ..
                } = self;
                if due {
                    // One request per interval tries the origin again, in the background.
                    let grace = call.grace(&entry);
                    let prior = has_validator(&entry.headers).then(|| entry.clone());
                    call.refresh_with(move |call, now| async move {
                        let _ = call
                            .attempt(inner, req, Some(now), true, Some(grace), prior)
                            .await;
                    })
                    .await;
                }
                tracing::debug!(key = %call.digest, "the last fill failed: serving the stale copy (stale_if_error)");
                Ok(call.respond(entry, at, &asks, true))
            }
            Look::Pass(now) => {
                self.fetch(Some(now), None, None, None, Instant::now())
                    .await
            }
            Look::Failed(_) => self.fetch(None, None, None, None, Instant::now()).await,
            Look::Expired(entry, now) if xfetch => {
                let since = Instant::now();
                let copy = self.call.copy(&entry, now);
                self.fetch(Some(now), None, copy, Some(entry), since).await
            }
            Look::Absent(now) if xfetch => {
                self.fetch(Some(now), None, None, None, Instant::now())
                    .await
            }
            Look::Expired(entry, now) => {
                let copy = self.call.copy(&entry, now);
                self.wait_or_compute(now, copy).await
            }
            Look::Absent(now) => self.wait_or_compute(now, None).await,
        }
    }

    /// A request that says `only-if-cached` or `no-store` (RFC 9111 §5.2.1.7, §5.2.1.5): a
    /// usable entry answers it as any other (a stale one without a refresh, which would store
    /// a response to this request); else `504` for `only-if-cached`, and the handler's
    /// response, not stored, for `no-store`.
    async fn directed(self, look: Look) -> Reply<ResBody, S::Error> {
        let since = Instant::now();
        match look {
            Look::Fresh(entry, now) | Look::Stale(entry, now) => {
                Ok(self.call.respond(entry, now, &self.asks, false))
            }
            Look::Failing { entry, at, .. } => Ok(self.call.respond(entry, at, &self.asks, true)),
            _ if self.directives.only_if_cached => Ok(self
                .call
                .gateway_timeout(b"only-if-cached: the cache holds no response to this request\n")),
            Look::Expired(entry, now) => {
                let copy = self.call.copy(&entry, now);
                self.fetch(None, None, copy, None, since).await
            }
            Look::Pass(_) | Look::Absent(_) | Look::Failed(_) => {
                self.fetch(None, None, None, None, since).await
            }
        }
    }

    /// Lock on miss: compute under the lease, or wait for whoever holds it (with a `copy`,
    /// until the soft fill timeout; without, until the hard one). The timeout counts from
    /// the request's arrival, whether it waits, computes, or both.
    async fn wait_or_compute(self, now: u64, copy: Standby) -> Reply<ResBody, S::Error> {
        let since = Instant::now();
        let deadline = self.call.fail_safe().deadline(copy.is_some(), since);
        match self.call.wait(now, deadline, |_| true).await {
            Waited::Lease {
                guard,
                at,
                copy,
                prior,
            } => {
                let copy = copy.map(|entry| (entry, at));
                self.fetch(Some(at), Some(guard), copy, prior.map(|p| *p), since)
                    .await
            }
            Waited::Filled(entry, at) => Ok(self.call.respond(entry, at, &self.asks, false)),
            Waited::Rescued(entry, at) => Ok(self.call.respond(entry, at, &self.asks, true)),
            Waited::GaveUp => Ok(self.call.standing_in(copy, since, &self.asks)),
            Waited::Alone(at) => self.fetch(at, None, copy, None, since).await,
        }
    }

    /// Computes (see [`Call::compute`]), under `guard` when this request holds the lease
    /// (released when the computation ends), revalidating `prior` (the stale entry) when it
    /// has a validator. With fill timeouts the computation runs in a
    /// spawned task that the request stops waiting for at the soft timeout (with a `copy`)
    /// or the hard one, counted from `since` (the request's arrival). With a `copy`, a
    /// handler error or a 5xx is answered with the copy.
    async fn fetch(
        self,
        started: Option<u64>,
        guard: Option<LockGuard>,
        copy: Standby,
        prior: Option<Entry>,
        since: Instant,
    ) -> Reply<ResBody, S::Error> {
        let keep = copy.as_ref().map(|(entry, _)| self.call.grace(entry));
        let holds = guard.is_some();
        let deadline = self.call.fail_safe().deadline(keep.is_some(), since);
        let Self {
            call,
            inner,
            req,
            asks,
            ..
        } = self;
        let worker = call.clone();
        let job = holding(guard, async move {
            worker
                .attempt(inner, req, started, holds, keep, prior)
                .await
        });
        let Some(reply) = patiently(&call.digest, deadline, job).await else {
            return Ok(call.standing_in(copy, since, &asks));
        };
        match (reply, copy) {
            (Err(_), Some((entry, at))) => {
                tracing::warn!(key = %call.digest, "the handler failed: serving the stale copy (stale_if_error)");
                Ok(call.respond(entry, later(at, since), &asks, true))
            }
            (Ok(res), Some((entry, at))) if res.status().is_server_error() => {
                tracing::warn!(key = %call.digest, status = %res.status(), "the handler answered an error: serving the stale copy (stale_if_error)");
                Ok(call.respond(entry, later(at, since), &asks, true))
            }
            (Ok(res), _) if res.extensions().get::<Revalidated>().is_some() => {
                Ok(answered(res, &asks, &call.shared.header))
            }
            (reply, _) => reply,
        }
    }
}

/// The response made from a revalidated entry, as the client asked for it: `304 Not
/// Modified` when its own condition says it has it already (RFC 9111 §4.3.2).
fn answered<B: http_body::Body>(
    res: Response<ResponseBody<B>>,
    asks: &Condition,
    header: &http::HeaderName,
) -> Response<ResponseBody<B>> {
    if !asks.unchanged(res.status(), res.headers()) {
        return res;
    }
    let (mut parts, _) = res.into_parts();
    let kept = [header.clone(), AGE].map(|name| {
        let value = parts.headers.get(&name).cloned();
        (name, value)
    });
    not_modified(&mut parts.headers);
    for (name, value) in kept {
        if let Some(value) = value {
            parts.headers.insert(name, value);
        }
    }
    parts.status = StatusCode::NOT_MODIFIED;
    Response::from_parts(parts, ResponseBody::full(Bytes::new()))
}

impl Call {
    /// `entry`, read at `now`, as a copy that may stand in for a failing handler: only inside
    /// its `stale_if_error` window (an entry kept to be revalidated may be past it).
    fn copy(&self, entry: &Entry, now: u64) -> Standby {
        self.rescuable(entry, now).then(|| (entry.clone(), now))
    }

    /// The answer of a request that stopped waiting at a fill timeout: the copy, else
    /// `504 Gateway Timeout`.
    fn standing_in<B: http_body::Body>(
        &self,
        copy: Standby,
        since: Instant,
        asks: &Condition,
    ) -> Response<ResponseBody<B>> {
        if let Some((entry, at)) = copy {
            return self.respond(entry, later(at, since), asks, true);
        }
        self.gateway_timeout(b"the handler did not answer within the cache's fill timeout\n")
    }

    /// `504 Gateway Timeout`, with `text`, a miss that stored nothing.
    fn gateway_timeout<B: http_body::Body>(
        &self,
        text: &'static [u8],
    ) -> Response<ResponseBody<B>> {
        let mut res = Response::new(ResponseBody::full(Bytes::from_static(text)));
        *res.status_mut() = StatusCode::GATEWAY_TIMEOUT;
        res.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        Outcome::Miss { stored: false }.mark(&self.shared.header, res.headers_mut());
        res
    }

    /// A response from a stored entry (fresh or stale): `304 Not Modified` when the request's
    /// condition says the client has it already. `rescued`: served in place of a handler
    /// that failed or was too slow (as is a softly purged entry): `fwd=stale` once stale.
    fn respond<B: http_body::Body>(
        &self,
        entry: Entry,
        now: u64,
        asks: &Condition,
        rescued: bool,
    ) -> Response<ResponseBody<B>> {
        let mut outcome = Outcome::served(entry.times.fresh_until, now);
        if entry.purged || (rescued && now >= entry.times.fresh_until) {
            outcome = outcome.forwarded();
        }
        let initial_age = if entry.aged {
            age_value(&entry.headers).unwrap_or(0)
        } else {
            0
        };
        let relayed = entry.relayed;
        let (status, mut headers, body) = if asks.unchanged(entry.status, &entry.headers) {
            let mut headers = entry.headers;
            not_modified(&mut headers);
            (StatusCode::NOT_MODIFIED, headers, Bytes::new())
        } else {
            (entry.status, entry.headers, entry.body)
        };
        // Its age when stored (kept in its `Age`) and its time in the store (RFC 9111 §4.2.3),
        // to the nearest second.
        let filled = entry.times.started.saturating_add(entry.times.delta);
        let resident = now.saturating_sub(filled).saturating_add(500_000) / 1_000_000;
        let age = initial_age.saturating_add(resident);
        headers.insert(AGE, super::status::age(age));
        outcome.mark_after(&self.shared.header, &mut headers, relayed);
        let mut res = Response::new(ResponseBody::full(body));
        *res.status_mut() = status;
        *res.headers_mut() = headers;
        res
    }

    /// [`compute`](Self::compute); when a copy is `kept` (with how long past its freshness
    /// it may stand in) and the handler failed (an error or a 5xx), records the failure
    /// before the lease goes back, so that the next requests get the copy at once instead of
    /// queueing behind the origin.
    async fn attempt<S, ReqBody, ResBody>(
        &self,
        inner: S,
        req: Request<ReqBody>,
        started: Option<u64>,
        holds: bool,
        kept: Option<Duration>,
        prior: Option<Entry>,
    ) -> Reply<ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
        ResBody: http_body::Body<Data = Bytes>,
    {
        let reply = (self.compute(inner, req, started, holds, kept.is_some(), prior)).await;
        let failed = match &reply {
            Ok(res) => res.status().is_server_error(),
            Err(_) => true,
        };
        if let (Some(grace), true) = (kept, failed) {
            self.failed(grace).await;
        }
        reply
    }

    /// Calls the inner service; fills the entry when the response is cacheable and `started`
    /// (the store's time when the key was read) is known; leaves a hit-for-pass marker when
    /// not cacheable and this request `holds` the lease (so that waiters stop waiting),
    /// except for a 5xx when a copy is to be `kept` for `stale_if_error`.
    ///
    /// With a `prior` entry (stale) that has a validator, and `started` known, the request
    /// asks the handler whether it is still current (RFC 9111 §4.3.1); a `304` freshens it
    /// (§4.3.4: the `304`'s headers, the stored status and body), stored again as a fill is,
    /// and the response is the stored one, never the `304`.
    #[allow(clippy::too_many_lines)]
    async fn compute<S, ReqBody, ResBody>(
        &self,
        mut inner: S,
        mut req: Request<ReqBody>,
        started: Option<u64>,
        holds: bool,
        kept: bool,
        prior: Option<Entry>,
    ) -> Reply<ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
        ResBody: http_body::Body<Data = Bytes>,
    {
        std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
        // Only a request whose answer may be stored revalidates: a 304 is no entry.
        let prior = prior.filter(|p| started.is_some() && ask(&p.headers, req.headers_mut()));
        // A session layer outside marks the request; one inside marks the response. Either
        // way the mark says, once the handler is done, whether the page depends on a session.
        let asked = request_mark(req.extensions());
        // A HEAD response has no body to hash: its ETag would not be the GET's.
        let head = req.method() == http::Method::HEAD;
        let asked_at = Instant::now();
        let res = inner.call(req).await?;
        let (mut parts, body) = res.into_parts();
        // The answer to the layer's own condition: the stored response, freshened (or left
        // as it was when the 304 names another representation).
        let renewed = match prior {
            Some(prior) if parts.status == StatusCode::NOT_MODIFIED => {
                let Entry {
                    status,
                    mut headers,
                    tags,
                    body,
                    ..
                } = prior;
                let current = freshen(&mut headers, &parts.headers);
                parts.status = status;
                parts.headers = headers;
                Some((current, tags, body))
            }
            _ => None,
        };
        let mut tags = self.take_tags(&mut parts);
        parts.headers.remove(&self.shared.header);
        let shared = &self.shared;
        let marks = || asked.iter().chain(parts.extensions.get::<SessionMark>());
        // The route itself depends on a session: later requests pass too (hit-for-pass). A
        // request that only carried one fills nothing and leaves no marker.
        let touched = marks().any(SessionMark::touched);
        let verdict = if touched {
            Err("the handler used the session")
        } else if marks().any(SessionMark::carried) {
            Err("the request carried a session")
        } else if matches!(renewed, Some((false, ..))) {
            Err("the 304 names another representation than the stored one")
        } else if kept && parts.status.is_server_error() {
            // The copy answers in its place (stale_if_error): a 5xx never replaces it.
            Err("a server error while a copy may stand in")
        } else {
            let arrival = Arrival {
                at: SystemTime::now(),
                delay: asked_at.elapsed(),
            };
            let grace = shared.fail_safe.stale_if_error;
            life(&parts, &shared.key, shared.life, grace, arrival)
        };
        let leaves_marker = (touched || !marks().any(SessionMark::carried))
            && !(kept && parts.status.is_server_error());
        let stored_body = match renewed {
            Some((_, stored_tags, stored_body)) => {
                if tags.is_empty() {
                    tags = stored_tags;
                }
                parts.extensions.insert(Revalidated);
                Some(stored_body)
            }
            None => None,
        };
        let (life, started) = match (verdict, started) {
            (Ok(life), Some(started)) => (life, started),
            (Err(why), started) => {
                tracing::debug!(key = %self.digest, why, "response not cacheable");
                if let (true, true, Some(started)) = (holds, leaves_marker, started) {
                    self.pass(started).await;
                }
                return Ok(self.finish(parts, either(stored_body, body), false));
            }
            (Ok(_), None) => return Ok(self.finish(parts, either(stored_body, body), false)),
        };
        let bytes = match stored_body {
            Some(bytes) => bytes,
            None => match collect(body, shared.body_limit).await {
                Ok(Collected::Whole(bytes)) => bytes,
                Ok(Collected::Partial(rest)) => {
                    tracing::debug!(key = %self.digest, "response body over the entry limit: not cached");
                    if holds {
                        self.pass(started).await;
                    }
                    return Ok(self.finish(parts, rest, false));
                }
                Err(e) => return Ok(self.finish(parts, ResponseBody::failed(e), false)),
            },
        };
        if shared.etag
            && !head
            && !parts.headers.contains_key(ETAG)
            && let Some(tag) = etag_of(&bytes)
        {
            parts.headers.insert(ETAG, tag);
        }
        // Jitter shortens the freshness the response allows, never lengthens it.
        let jitter = life.fresh.mul_f64(shared.jitter * shared.random.draw());
        let blob = if life.age > 0 || parts.headers.contains_key(AGE) {
            // Stored with its age on arrival: a hit's `Age` counts on from it.
            let mut headers = parts.headers.clone();
            headers.remove(AGE);
            if life.age > 0 {
                headers.insert(AGE, HeaderValue::from(life.age));
            }
            encode(&self.digest, parts.status, &headers, &tags, &bytes)
        } else {
            encode(&self.digest, parts.status, &parts.headers, &tags, &bytes)
        };
        let kept = self.kept(&parts.headers, life.grace);
        if life.fresh.is_zero() && kept.is_zero() {
            // Stale when received, and the layer keeps nothing to revalidate.
            tracing::debug!(key = %self.digest, "stale when received, no revalidation window: not cached");
            if holds {
                self.pass(started).await;
            }
            return Ok(self.finish(parts, ResponseBody::full(bytes), false));
        }
        let write = Write {
            kind: Kind::Entry,
            started,
            fresh: life.fresh.saturating_sub(jitter),
            stale: life.stale,
            grace: kept,
            blob,
        };
        let stored = match shared.store.0.write(self.key(), write).await {
            Ok(true) => {
                // The next lookup reads the tags' records with the entry.
                shared.memo.set(&self.digest, &self.records_of(&tags));
                true
            }
            Ok(false) => {
                tracing::debug!(key = %self.digest, "the target URI was invalidated while the response was computed: not cached");
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "cache fill failed");
                false
            }
        };
        Ok(self.finish(parts, ResponseBody::full(bytes), stored))
    }

    /// Leaves a hit-for-pass marker for as long as the lease.
    async fn pass(&self, started: u64) {
        let write = Write {
            kind: Kind::Pass,
            started,
            fresh: self.shared.stampede.lease,
            stale: Duration::ZERO,
            grace: Duration::ZERO,
            blob: Bytes::new(),
        };
        if let Err(e) = self.shared.store.0.write(self.key(), write).await {
            tracing::warn!(error = %e, "cache hit-for-pass marker failed");
        }
    }

    /// The response's tags (extension and header), the header removed.
    fn take_tags(&self, parts: &mut response::Parts) -> Vec<String> {
        let mut tags = parts
            .extensions
            .remove::<CacheTags>()
            .map(|t| t.0)
            .unwrap_or_default();
        for value in parts.headers.get_all(&self.shared.tags_header) {
            let text = String::from_utf8_lossy(value.as_bytes());
            tags.extend(
                text.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned),
            );
        }
        parts.headers.remove(&self.shared.tags_header);
        tags.sort();
        tags.dedup();
        tags
    }

    /// The handler's response, marked a miss (`stored` when this request filled the entry),
    /// or the revalidated entry's, marked so.
    fn finish<B: http_body::Body>(
        &self,
        mut parts: response::Parts,
        body: ResponseBody<B>,
        stored: bool,
    ) -> Response<ResponseBody<B>> {
        let outcome = if parts.extensions.get::<Revalidated>().is_some() {
            Outcome::Revalidated { stored }
        } else {
            Outcome::Miss { stored }
        };
        outcome.mark(&self.shared.header, &mut parts.headers);
        Response::from_parts(parts, body)
    }
}

/// The mark a session layer outside this one put on the request: its [`Session`]'s (one
/// extension for both).
///
/// [`Session`]: crate::session::Session
fn request_mark(extensions: &http::Extensions) -> Option<SessionMark> {
    #[cfg(feature = "session")]
    return extensions
        .get::<crate::session::Session>()
        .map(|session| session.mark().clone());
    #[cfg(not(feature = "session"))]
    {
        // No session layer without the feature.
        let _ = extensions;
        None
    }
}

/// The body of a response: the stored one of a revalidated entry, else the handler's.
fn either<B: http_body::Body>(stored: Option<Bytes>, body: B) -> ResponseBody<B> {
    match stored {
        Some(bytes) => ResponseBody::full(bytes),
        None => ResponseBody::inner(body),
    }
}
