//! One `get_or_compute`: look the key up, then return, wait, or compute and fill, with the
//! response cache's stampede protection ([`Call::wait`], [`Call::refresh_with`], XFetch).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cache::entry::{Entry, Kind, encode};
use crate::cache::flow::{Call, Look, Waited, release};
use crate::cache::store::Write;

/// How a computed value is kept: its TTL and tags, and the cache's negative TTL.
#[derive(Clone, Debug)]
pub(crate) struct Fill {
    pub(crate) ttl: Duration,
    pub(crate) tags: Vec<String>,
    pub(crate) negative: Option<Duration>,
}

/// The value an entry holds, if it is a `T` (a value of another type, or JSON that no longer
/// decodes after a type change, is `None`: a miss).
pub(crate) fn parse<T: DeserializeOwned>(entry: &Entry) -> Option<T> {
    match serde_json::from_slice(&entry.body) {
        Ok(value) => Some(value),
        Err(e) => {
            tracing::warn!(key = %entry.digest, error = %e, "a cached value does not decode as the type asked for: a miss, overwritten on fill");
            None
        }
    }
}

/// The key's value, computed by `f` when it is missing (lock on miss or XFetch), early (XFetch)
/// or stale (returned at once; one caller recomputes in a spawned task).
pub(crate) async fn get_or_compute<T, E, F, Fut>(call: Call, fill: Fill, f: F) -> Result<T, E>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    E: Debug + Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
{
    match call.look().await {
        Look::Fresh(entry, now) => match parse(&entry) {
            Some(value) if !call.early(&entry, now) => Ok(value),
            Some(_) => compute(&call, &fill, f, Some(now)).await,
            None => miss(&call, &fill, f, now).await,
        },
        Look::Stale(entry, now) => match parse(&entry) {
            Some(value) => {
                let refresh = move |call: Call, now| async move {
                    if let Err(e) = compute(&call, &fill, f, Some(now)).await {
                        tracing::warn!(key = %call.digest, error = ?e, "refreshing a stale value failed: it stays until its stale window ends");
                    }
                };
                call.refresh_with(refresh).await;
                Ok(value)
            }
            None => miss(&call, &fill, f, now).await,
        },
        Look::Pass(now) | Look::Absent(now) => miss(&call, &fill, f, now).await,
        Look::Failed(_) => compute(&call, &fill, f, None).await,
    }
}

/// A miss: XFetch computes at once; lock on miss computes under the lease, or waits for the
/// caller that holds it and reads its fill.
async fn miss<T, E, F, Fut>(call: &Call, fill: &Fill, f: F, now: u64) -> Result<T, E>
where
    T: Serialize + DeserializeOwned,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    if call.shared.stampede.xfetch.is_some() {
        return compute(call, fill, f, Some(now)).await;
    }
    let usable = |entry: &Entry| serde_json::from_slice::<T>(&entry.body).is_ok();
    match call.wait(now, usable).await {
        Waited::Lease(guard, look) => {
            // Whoever held the lease before may have filled it since our read.
            let value = match look {
                Look::Fresh(entry, at) => match parse(&entry) {
                    Some(value) => Ok(value),
                    None => compute(call, fill, f, Some(at)).await,
                },
                Look::Absent(at) | Look::Stale(_, at) | Look::Pass(at) => {
                    compute(call, fill, f, Some(at)).await
                }
                Look::Failed(_) => compute(call, fill, f, None).await,
            };
            release(guard).await;
            value
        }
        Waited::Found(Look::Fresh(entry, at) | Look::Stale(entry, at)) => match parse(&entry) {
            Some(value) => Ok(value),
            None => compute(call, fill, f, Some(at)).await,
        },
        Waited::Found(Look::Pass(at) | Look::Absent(at)) | Waited::Alone(at) => {
            compute(call, fill, f, Some(at)).await
        }
        Waited::Found(Look::Failed(_)) => compute(call, fill, f, None).await,
    }
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
        && let Err(e) = call.shared.store.0.write(&call.digest, write).await
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
        // The response cache's encoding: status 200, no headers, the JSON as the body.
        blob: encode(&call.digest, StatusCode::OK, &HeaderMap::new(), tags, json),
    }
}
