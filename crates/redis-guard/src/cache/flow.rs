//! One cached request: look the key up, then serve, wait, or compute and fill.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{AGE, ETAG};
use http::{HeaderValue, Request, Response, StatusCode, response};
use tower_service::Service;

use super::CacheTags;
use super::body::{Collected, ResponseBody, collect};
use super::entry::{Entry, Kind, Stored, decode, encode};
use super::policy::life;
use super::shared::Shared;
use super::status::Outcome;
use super::store::Write;
use super::validate::{Condition, etag_of, not_modified};
use crate::backend::{BackendError, LockGuard};
use crate::served::SessionMark;

/// What the store holds for a key, as this request may use it.
pub(crate) enum Look {
    Fresh(Entry, u64),
    Stale(Entry, u64),
    /// A hit-for-pass marker: the last response was not cacheable.
    Pass(u64),
    /// Nothing usable (absent, expired, invalidated, not ours): a miss at this time.
    Absent(u64),
    /// The store failed: serve without it.
    Failed(BackendError),
}

/// What waiting for another request's fill came to.
pub(crate) enum Waited {
    /// This request took the lease; what the key held once it had it.
    Lease(LockGuard, Look),
    /// The key holds something usable now (or the store failed): no lease.
    Found(Look),
    /// No lease and no fill (the lock failed, or the wait ran out): compute alone, the key
    /// read at this time.
    Alone(u64),
}

/// One request's work, with the layer's settings and the key's digest.
#[derive(Clone)]
pub(crate) struct Call {
    pub(crate) shared: Arc<Shared>,
    pub(crate) digest: String,
}

type Reply<B, E> = Result<Response<ResponseBody<B>>, E>;

impl Call {
    pub(crate) async fn serve<S, ReqBody, ResBody>(
        self,
        inner: S,
        mut req: Request<ReqBody>,
    ) -> Reply<ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send,
        S::Error: Send + 'static,
        ReqBody: Send + 'static,
        ResBody: http_body::Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Send,
    {
        let method = req.method().clone();
        let asks = Condition::take(&method, req.headers_mut());
        match self.look().await {
            Look::Fresh(entry, now) => {
                if self.early(&entry, now) {
                    return self.compute(inner, req, Some(now), false).await;
                }
                Ok(self.respond(entry, now, &asks))
            }
            Look::Stale(entry, now) => {
                self.refresh(inner, req).await;
                Ok(self.respond(entry, now, &asks))
            }
            Look::Pass(now) => self.compute(inner, req, Some(now), false).await,
            Look::Failed(_) => self.compute(inner, req, None, false).await,
            Look::Absent(now) if self.shared.stampede.xfetch.is_some() => {
                self.compute(inner, req, Some(now), false).await
            }
            Look::Absent(now) => self.wait_or_compute(inner, req, now, &asks).await,
        }
    }

    fn lock_name(&self) -> String {
        format!("c:{}", self.digest)
    }

    /// Reads the key and judges what it holds.
    pub(crate) async fn look(&self) -> Look {
        let store = &self.shared.store.0;
        let read = match store.read(&self.digest).await {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(error = %e, "cache store unavailable: serving without it");
                return Look::Failed(e);
            }
        };
        let now = read.now;
        if read.foreign {
            tracing::warn!(key = %self.digest, "a cache key holds a value of another type: a miss, overwritten on fill");
            return Look::Absent(now);
        }
        let Some(raw) = read.value else {
            return Look::Absent(now);
        };
        let entry = match decode(&raw) {
            Some(Stored::Entry(entry)) if entry.digest == self.digest => entry,
            Some(Stored::Pass(t)) if now < t.fresh_until => return Look::Pass(now),
            Some(Stored::Pass(_)) => return Look::Absent(now),
            _ => {
                tracing::warn!(key = %self.digest, "a cache key holds a value that is not this entry: a miss, overwritten on fill");
                return Look::Absent(now);
            }
        };
        if now >= entry.times.stale_until {
            return Look::Absent(now);
        }
        if !entry.tags.is_empty() {
            let tags: Vec<String> = entry
                .tags
                .iter()
                .map(|t| self.shared.tag_digest(t))
                .collect();
            match store.tag_times(&tags).await {
                Ok(times) if times.iter().flatten().any(|&t| t >= entry.times.started) => {
                    return Look::Absent(now);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cache store unavailable: serving without it");
                    return Look::Failed(e);
                }
            }
        }
        if now < entry.times.fresh_until {
            Look::Fresh(entry, now)
        } else {
            Look::Stale(entry, now)
        }
    }

    /// XFetch: whether this hit recomputes early.
    pub(crate) fn early(&self, entry: &Entry, now: u64) -> bool {
        let Some(beta) = self.shared.stampede.xfetch else {
            return false;
        };
        #[allow(clippy::cast_precision_loss)]
        let gap = entry.times.delta as f64 * beta * -self.shared.random.draw().ln();
        #[allow(clippy::cast_precision_loss)]
        let early = now as f64 + gap >= entry.times.fresh_until as f64;
        early
    }

    /// A response from a stored entry (fresh or stale): `304 Not Modified` when the request's
    /// condition says the client has it already.
    fn respond<B: http_body::Body>(
        &self,
        entry: Entry,
        now: u64,
        asks: &Condition,
    ) -> Response<ResponseBody<B>> {
        let (status, mut headers, body) = if asks.unchanged(entry.status, &entry.headers) {
            let mut headers = entry.headers;
            not_modified(&mut headers);
            (StatusCode::NOT_MODIFIED, headers, Bytes::new())
        } else {
            (entry.status, entry.headers, entry.body)
        };
        let filled = entry.times.started.saturating_add(entry.times.delta);
        let age = now.saturating_sub(filled) / 1_000_000;
        headers.insert(AGE, HeaderValue::from(age));
        Outcome::served(entry.times.fresh_until, now).mark(&self.shared.header, &mut headers);
        let mut res = Response::new(ResponseBody::full(body));
        *res.status_mut() = status;
        *res.headers_mut() = headers;
        res
    }

    /// Lock on miss: compute under the lease, or wait for whoever holds it.
    async fn wait_or_compute<S, ReqBody, ResBody>(
        &self,
        inner: S,
        req: Request<ReqBody>,
        now: u64,
        asks: &Condition,
    ) -> Reply<ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
        ResBody: http_body::Body<Data = Bytes>,
    {
        match self.wait(now, |_| true).await {
            Waited::Lease(guard, look) => {
                // Whoever held the lease before may have filled it since our read.
                let reply = match look {
                    Look::Fresh(entry, at) => Ok(self.respond(entry, at, asks)),
                    Look::Absent(at) | Look::Stale(_, at) | Look::Pass(at) => {
                        self.compute(inner, req, Some(at), true).await
                    }
                    Look::Failed(_) => self.compute(inner, req, None, false).await,
                };
                release(guard).await;
                reply
            }
            Waited::Found(Look::Fresh(entry, at) | Look::Stale(entry, at)) => {
                Ok(self.respond(entry, at, asks))
            }
            Waited::Found(Look::Pass(at) | Look::Absent(at)) | Waited::Alone(at) => {
                self.compute(inner, req, Some(at), false).await
            }
            Waited::Found(Look::Failed(_)) => self.compute(inner, req, None, false).await,
        }
    }

    /// Lock on miss: takes the lease, or polls the store (2 ms, doubling to 50 ms) for
    /// another request's fill, for up to the stampede's wait. An entry that is not `usable`
    /// (a value of another type) counts as no fill.
    pub(crate) async fn wait(&self, mut now: u64, usable: impl Fn(&Entry) -> bool) -> Waited {
        let stampede = self.shared.stampede;
        let lock = self.shared.store.0.lock();
        let name = self.lock_name();
        let until = tokio::time::Instant::now() + stampede.wait;
        let mut pause = Duration::from_millis(2);
        loop {
            match lock.try_acquire(&name, stampede.lease).await {
                Ok(Some(guard)) => return Waited::Lease(guard, self.look().await),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cache fill lock unavailable: computing without it");
                    return Waited::Alone(now);
                }
            }
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                tracing::debug!(key = %self.digest, "waited the whole bound for a fill: computing");
                return Waited::Alone(now);
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(Duration::from_millis(50));
            match self.look().await {
                Look::Fresh(entry, at) | Look::Stale(entry, at) if !usable(&entry) => now = at,
                Look::Absent(at) => now = at,
                found => return Waited::Found(found),
            }
        }
    }

    /// Serves a stale entry's refresh: the request that takes the lease recomputes in a
    /// spawned task; the others do nothing.
    async fn refresh<S, ReqBody, ResBody>(&self, inner: S, req: Request<ReqBody>)
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
        S::Future: Send,
        S::Error: Send + 'static,
        ReqBody: Send + 'static,
        ResBody: http_body::Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Send,
    {
        self.refresh_with(move |call, now| async move {
            // The body is read (and filled) inside compute; what is left is dropped.
            let _ = call.compute(inner, req, Some(now), true).await;
        })
        .await;
    }

    /// Stale-while-revalidate: when this call takes the key's lease, runs `job` (with the
    /// store's time of a fresh read) in a spawned task, unless another refresh landed first;
    /// the lease is released when it ends. Without the lease (or a runtime) it does nothing.
    pub(crate) async fn refresh_with<F, Fut>(&self, job: F)
    where
        F: FnOnce(Self, u64) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let lease = self.shared.stampede.lease;
        let guard = match self
            .shared
            .store
            .0
            .lock()
            .try_acquire(&self.lock_name(), lease)
            .await
        {
            Ok(Some(guard)) => guard,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cache refresh lock unavailable: not refreshing");
                return;
            }
        };
        let call = self.clone();
        runtime.spawn(async move {
            // Another refresh may have landed between our read and the lease.
            let now = match call.look().await {
                Look::Fresh(..) | Look::Failed(_) => None,
                Look::Stale(_, at) | Look::Absent(at) | Look::Pass(at) => Some(at),
            };
            if let Some(now) = now {
                job(call, now).await;
            }
            release(guard).await;
        });
    }

    /// Calls the inner service; fills the entry when the response is cacheable and `started`
    /// (the store's time when the key was read) is known; leaves a hit-for-pass marker when
    /// not cacheable and this request `holds` the lease (so that waiters stop waiting).
    async fn compute<S, ReqBody, ResBody>(
        &self,
        mut inner: S,
        req: Request<ReqBody>,
        started: Option<u64>,
        holds: bool,
    ) -> Reply<ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
        ResBody: http_body::Body<Data = Bytes>,
    {
        std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
        // A session layer outside marks the request; one inside marks the response. Either
        // way the mark says, once the handler is done, whether the page depends on a session.
        let asked = req.extensions().get::<SessionMark>().cloned();
        // A HEAD response has no body to hash: its ETag would not be the GET's.
        let head = req.method() == http::Method::HEAD;
        let res = inner.call(req).await?;
        let (mut parts, body) = res.into_parts();
        let tags = self.take_tags(&mut parts);
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
        } else {
            life(&parts, &shared.key, shared.life)
        };
        let leaves_marker = touched || !marks().any(SessionMark::carried);
        let (life, started) = match (verdict, started) {
            (Ok(life), Some(started)) => (life, started),
            (Err(why), started) => {
                tracing::debug!(key = %self.digest, why, "response not cacheable");
                if let (true, true, Some(started)) = (holds, leaves_marker, started) {
                    self.pass(started).await;
                }
                return Ok(self.finish(parts, ResponseBody::inner(body), false));
            }
            (Ok(_), None) => return Ok(self.finish(parts, ResponseBody::inner(body), false)),
        };
        let bytes = match collect(body, shared.body_limit).await {
            Ok(Collected::Whole(bytes)) => bytes,
            Ok(Collected::Partial(rest)) => {
                tracing::debug!(key = %self.digest, "response body over the entry limit: not cached");
                if holds {
                    self.pass(started).await;
                }
                return Ok(self.finish(parts, rest, false));
            }
            Err(e) => return Ok(self.finish(parts, ResponseBody::failed(e), false)),
        };
        if shared.etag
            && !head
            && !parts.headers.contains_key(ETAG)
            && let Some(tag) = etag_of(&bytes)
        {
            parts.headers.insert(ETAG, tag);
        }
        let jitter = life.fresh.mul_f64(shared.jitter * shared.random.draw());
        let write = Write {
            kind: Kind::Entry,
            started,
            fresh: life.fresh + jitter,
            stale: life.stale,
            blob: encode(&self.digest, parts.status, &parts.headers, &tags, &bytes),
        };
        let stored = match shared.store.0.write(&self.digest, write).await {
            Ok(()) => true,
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
            blob: Bytes::new(),
        };
        if let Err(e) = self.shared.store.0.write(&self.digest, write).await {
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

    /// The handler's response, marked a miss (`stored` when this request filled the entry).
    fn finish<B: http_body::Body>(
        &self,
        mut parts: response::Parts,
        body: ResponseBody<B>,
        stored: bool,
    ) -> Response<ResponseBody<B>> {
        Outcome::Miss { stored }.mark(&self.shared.header, &mut parts.headers);
        Response::from_parts(parts, body)
    }
}

/// Releases a fill or refresh lease; a failure only logs (the lease runs out).
pub(crate) async fn release(guard: LockGuard) {
    if let Err(e) = guard.release().await {
        tracing::warn!(error = %e, "releasing a cache fill lock failed; its lease will run out");
    }
}
