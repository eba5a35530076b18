//! One `get_or_compute`: look the key up, then return, wait, or compute and fill, with the
//! response cache's stampede protection ([`Call::wait`], [`Call::refresh_with`], XFetch).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::backend::LockGuard;
use crate::cache::entry::{Entry, Kind, encode};
use crate::cache::fail_safe::FillTimeout;
use crate::cache::lookup::{Call, Look, Waited, holding, patiently};
use crate::cache::store::Write;

/// How a computed value is kept: its TTL and tags, and the cache's negative TTL.
#[derive(Clone, Debug)]
pub(crate) struct Fill {
    pub(crate) ttl: Duration,
    pub(crate) tags: Vec<String>,
    pub(crate) negative: Option<Duration>,
}

/// The value an entry holds, if it is a `T` (a value of another type, or JSON that no longer
/// decodes after a type change, is `None`: a miss). `key`: the entry's digest, for the log.
pub(crate) fn parse<T: DeserializeOwned>(key: &str, entry: &Entry) -> Option<T> {
    match serde_json::from_slice(&entry.body) {
        Ok(value) => Some(value),
        Err(e) => {
            tracing::warn!(%key, error = %e, "a cached value does not decode as the type asked for: a miss, overwritten on fill");
            None
        }
    }
}

/// The key's value, computed by `f` when it is missing (lock on miss or XFetch), early (XFetch)
/// or stale (returned at once; one caller recomputes in a spawned task); with
/// `stale_if_error`, a copy stands in for a closure that fails or is too slow.
pub(crate) async fn get_or_compute<T, E, F, Fut>(call: Call, fill: Fill, f: F) -> Result<T, E>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    E: Debug + Send + 'static + From<FillTimeout>,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
{
    let job = Job { call, fill, f };
    let key = &job.call.digest;
    match job.call.look().await {
        Look::Fresh(entry, now) => match parse(key, &entry) {
            Some(value) if !job.call.early(&entry, now) => Ok(value),
            Some(value) => {
                job.fetch(Some(now), None, Some(value), Instant::now())
                    .await
            }
            None => job.miss(now, None).await,
        },
        Look::Stale(entry, now) => match parse(key, &entry) {
            Some(value) => {
                job.refresh().await;
                Ok(value)
            }
            None => job.miss(now, None).await,
        },
        Look::Failing { entry, at, due } => match parse(key, &entry) {
            Some(value) => {
                tracing::debug!(key = %job.call.digest, "the last computation failed: returning the stale copy (stale_if_error)");
                if due {
                    // One caller per interval tries again, in the background.
                    job.refresh().await;
                }
                Ok(value)
            }
            None => job.miss(at, None).await,
        },
        Look::Expired(entry, now) => {
            let copy = parse(key, &entry);
            job.miss(now, copy).await
        }
        Look::Pass(now) | Look::Absent(now) => job.miss(now, None).await,
        Look::Failed(_) => job.fetch(None, None, None, Instant::now()).await,
    }
}

/// One computation of a key: the call, how its value is kept, the closure.
struct Job<F> {
    call: Call,
    fill: Fill,
    f: F,
}

impl<T, E, F, Fut> Job<F>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    E: Debug + Send + 'static + From<FillTimeout>,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
{
    /// Recomputes in a spawned task when this caller takes the key's lease (stale while
    /// revalidate, or the due retry of a failing closure); a failure is logged, and recorded
    /// when a copy stands in (`stale_if_error`).
    async fn refresh(self) {
        let Job { call, fill, f } = self;
        let kept = !call.fail_safe().stale_if_error.is_zero();
        let refresh = move |call: Call, now| async move {
            if let Err(e) = attempt(&call, &fill, f, Some(now), kept).await {
                tracing::warn!(key = %call.digest, error = ?e, "recomputing a stale value failed: the copy stays until its window ends");
            }
        };
        call.refresh_with(refresh).await;
    }

    /// A miss: XFetch computes at once; lock on miss computes under the lease, or waits for
    /// the caller that holds it and reads its fill (with a `copy`, until the soft fill
    /// timeout; without, until the hard one). The timeout counts from the call's start,
    /// whether it waits, computes, or both.
    async fn miss(self, now: u64, copy: Option<T>) -> Result<T, E> {
        let since = Instant::now();
        if self.call.shared.stampede.xfetch.is_some() {
            return self.fetch(Some(now), None, copy, since).await;
        }
        let fail_safe = self.call.fail_safe();
        let deadline = fail_safe.deadline(copy.is_some(), since);
        let usable = |entry: &Entry| serde_json::from_slice::<T>(&entry.body).is_ok();
        match self.call.wait(now, deadline, usable).await {
            Waited::Lease {
                guard, at, copy, ..
            } => {
                let copy = copy.and_then(|entry| parse(&self.call.digest, &entry));
                self.fetch(Some(at), Some(guard), copy, since).await
            }
            Waited::Filled(entry, at) | Waited::Rescued(entry, at) => {
                match parse(&self.call.digest, &entry) {
                    Some(value) => Ok(value),
                    None => self.fetch(Some(at), None, copy, since).await,
                }
            }
            Waited::GaveUp => {
                let after = fail_safe.patience(copy.is_some()).unwrap_or_default();
                stand_in(copy, after)
            }
            Waited::Alone(at) => self.fetch(at, None, copy, since).await,
        }
    }

    /// Computes (see [`compute`]) under `guard` when this caller holds the lease (released
    /// when the computation ends). With fill timeouts the computation runs in a spawned task
    /// that the caller stops waiting for at the soft timeout (with a `copy`) or the hard one,
    /// counted from `since` (the call's start). With a `copy`, the closure's error is answered
    /// with the copy.
    async fn fetch(
        self,
        started: Option<u64>,
        guard: Option<LockGuard>,
        copy: Option<T>,
        since: Instant,
    ) -> Result<T, E> {
        let fail_safe = self.call.fail_safe();
        let patience = fail_safe.patience(copy.is_some());
        let deadline = fail_safe.deadline(copy.is_some(), since);
        let Self { call, fill, f } = self;
        let key = call.digest.clone();
        let kept = copy.is_some();
        let job = holding(guard, async move {
            attempt(&call, &fill, f, started, kept).await
        });
        let Some(value) = patiently(&key, deadline, job).await else {
            return stand_in(copy, patience.unwrap_or_default());
        };
        match (value, copy) {
            (Err(e), Some(copy)) => {
                tracing::warn!(%key, error = ?e, "computing a value failed: returning the stale copy (stale_if_error)");
                Ok(copy)
            }
            (value, _) => value,
        }
    }
}

/// What a caller that stopped waiting at a fill timeout (`after`) gets: the copy, else the
/// timeout as the closure's error.
fn stand_in<T, E: From<FillTimeout>>(copy: Option<T>, after: Duration) -> Result<T, E> {
    copy.ok_or_else(|| FillTimeout { after }.into())
}

/// [`compute`]; when a copy is `kept` and the closure failed, records the failure before the
/// lease goes back, so that the next callers get the copy at once instead of queueing behind
/// the closure.
async fn attempt<T, E, F, Fut>(
    call: &Call,
    fill: &Fill,
    f: F,
    started: Option<u64>,
    kept: bool,
) -> Result<T, E>
where
    T: Serialize,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let value = compute(call, fill, f, started).await;
    if kept && value.is_err() {
        call.failed(Duration::ZERO).await;
    }
    value
}

/// Runs `f`; keeps its value when `started` (the store's time when the key was read) is known.
/// An error is returned and never kept.
async fn compute<T, E, F, Fut>(call: &Call, fill: &Fill, f: F, started: Option<u64>) -> Result<T, E>
where
    T: Serialize,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let value = f().await?;
    if let Some(write) = started.and_then(|started| kept(call, fill, &value, started))
        && let Err(e) = call.shared.store.0.write(call.key(), write).await
    {
        tracing::warn!(key = %call.digest, error = %e, "value cache fill failed");
    }
    Ok(value)
}

/// The write that keeps a computed value, if it is kept (a JSON `null` only with a negative
/// TTL; a value without a JSON form never).
fn kept<T: Serialize>(call: &Call, fill: &Fill, value: &T, started: u64) -> Option<Write> {
    let json = match serde_json::to_vec(value) {
        Ok(json) => json,
        Err(e) => {
            tracing::warn!(key = %call.digest, error = %e, "a computed value has no JSON form: returned, not cached");
            return None;
        }
    };
    let (ttl, stale) = if json == b"null" {
        match fill.negative {
            Some(ttl) => (ttl, Duration::ZERO),
            None => return None,
        }
    } else {
        (fill.ttl, call.shared.life.stale)
    };
    Some(value_write(call, &fill.tags, &json, ttl, stale, started))
}

/// The write of a value's `json` under the call's key: fresh for `ttl` plus jitter, then
/// stale for `stale`.
pub(crate) fn value_write(
    call: &Call,
    tags: &[String],
    json: &[u8],
    ttl: Duration,
    stale: Duration,
    started: u64,
) -> Write {
    let shared = &call.shared;
    let jitter = ttl.mul_f64(shared.jitter * shared.random.draw());
    Write {
        kind: Kind::Entry,
        started,
        fresh: ttl + jitter,
        stale,
        grace: shared.fail_safe.stale_if_error,
        // The response cache's encoding: status 200, no headers, the JSON as the body.
        blob: encode(&call.digest, StatusCode::OK, &HeaderMap::new(), tags, json),
    }
}
