//! The settings and stores of the caching and retry routes: the response cache of
//! `GET /slow/{n}`, the value cache of `GET /users/{id}` and the idempotency store of
//! `POST /payments`, all on the backend the rest of the app uses (memory, Redis or a Redis
//! Cluster).
//!
//! | env | default | meaning |
//! | --- | --- | --- |
//! | `CACHE_TTL` | `30s` | how long a `/slow/{n}` response and a `/users/{id}` value stay fresh |
//! | `CACHE_STALE_IF_ERROR` | `5m` | how long past that a cached copy is served while its origin fails; `0` or `off`: not at all |
//! | `PAYMENTS_LIMIT` | `30/minute` | `POST /payments` requests per user (logged in) or client IP, retries included |
//! | `PAYMENTS_DELAY_MS` | `200` | how long `POST /payments` takes (`0` to `10000`), so a retry can arrive while it runs |
//! | `USERS_LIMIT` | `120/minute` | `GET /users/{id}` requests per client IP, cache hits and unknown ids included |

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis_guard::cache::{CacheLayer, CacheStore, ValueCache};
use redis_guard::idempotency::{IdempotencyLayer, IdempotencyStore};
use redis_guard::rate_limit::Quota;

use example_shared::settings::{self, Lookup};

/// The settings of the caching and retry routes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StoreSettings {
    /// `CACHE_TTL`.
    pub(crate) ttl: Duration,
    /// `CACHE_STALE_IF_ERROR`: `None` when turned off.
    pub(crate) stale_if_error: Option<Duration>,
    /// `PAYMENTS_DELAY_MS`.
    pub(crate) payments_delay: Duration,
    /// `PAYMENTS_LIMIT`.
    pub(crate) payments_limit: Quota,
    /// `USERS_LIMIT`.
    pub(crate) users_limit: Quota,
}

/// How long the value cache keeps a "no such user" (never longer than `CACHE_TTL`): lookups
/// of an unknown id reach the store once per this, not once per request, and a user created
/// in the store meanwhile shows within it.
pub(crate) const NOT_FOUND_TTL: Duration = Duration::from_secs(5);

impl StoreSettings {
    /// Reads `CACHE_TTL`, `CACHE_STALE_IF_ERROR`, `PAYMENTS_DELAY_MS`, `PAYMENTS_LIMIT` and
    /// `USERS_LIMIT`.
    pub(crate) fn from_lookup(get: Lookup<'_>) -> Result<Self, String> {
        let ttl = settings::duration(get, "CACHE_TTL", "30s", settings::MAX_DURATION)?;
        let stale_if_error = match get("CACHE_STALE_IF_ERROR") {
            Some(v) if matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "0s" | "off") => None,
            Some(v) => Some(settings::parse_duration(
                "CACHE_STALE_IF_ERROR",
                &v,
                settings::MAX_DURATION,
            )?),
            None => Some(Duration::from_secs(300)),
        };
        let delay = settings::number(get, "PAYMENTS_DELAY_MS", 200, 0..=10_000, "milliseconds")?;
        Ok(Self {
            ttl,
            stale_if_error,
            payments_delay: Duration::from_millis(delay),
            payments_limit: settings::quota(get, "PAYMENTS_LIMIT", "30/minute")?,
            users_limit: settings::quota(get, "USERS_LIMIT", "120/minute")?,
        })
    }
}

/// The caches and the idempotency store, on one backend.
#[derive(Clone, Debug)]
pub(crate) struct Stores {
    /// The response cache of `GET /slow/{n}` (and what `POST /slow/invalidate` reaches).
    pub(crate) responses: CacheLayer,
    /// The value cache of `GET /users/{id}`.
    pub(crate) values: ValueCache,
    /// The layer of `POST /payments`.
    pub(crate) payments: IdempotencyLayer,
}

impl Stores {
    /// Both caches on `cache` (one store: the keys of responses and of values never meet),
    /// the idempotency records in `idempotency`.
    pub(crate) fn new(
        cache: impl CacheStore + Clone,
        idempotency: IdempotencyStore,
        settings: &StoreSettings,
    ) -> Result<Self, String> {
        // `CACHE_STALE_IF_ERROR`, applied here to both caches (zero: off).
        let grace = settings.stale_if_error.unwrap_or(Duration::ZERO);
        // The route never reads cookies, so a browser's session cookie does not keep it from
        // being cached; a strong ETag from the body answers `If-None-Match` with a `304`.
        let responses = CacheLayer::builder(cache.clone())
            .ignore_cookies(true)
            .etag(true)
            .stale_if_error(grace)
            .build()
            .map_err(|e| format!("cache settings: {e}"))?;
        // "No such user" is kept too, briefly: `PUT` creates no users, so nothing it does is
        // hidden by it.
        let values = ValueCache::builder(cache)
            .namespace("users")
            .negative_ttl(NOT_FOUND_TTL.min(settings.ttl))
            .stale_if_error(grace)
            .build()
            .map_err(|e| format!("value cache settings: {e}"))?;
        // Keys scoped to the session's user (the default scope): `main.rs` mounts `/payments`
        // inside the session layer, without which every payment would be a `500`. Anonymous
        // visitors (a session without a user) share one scope, where the key alone tells them
        // apart: fine for clients that send fresh random keys, as the page and the README do.
        let payments =
            IdempotencyLayer::new(idempotency).map_err(|e| format!("idempotency settings: {e}"))?;
        Ok(Self {
            responses,
            values,
            payments,
        })
    }
}

/// A number no other call returns, in this process or another (in practice: 64 random bits),
/// never 0: the ids of payments and of user lookups.
pub(crate) fn unique() -> u64 {
    use std::hash::BuildHasher;
    static CALLS: AtomicU64 = AtomicU64::new(0);
    // Each `RandomState` has fresh random keys (std seeds them from the OS once per thread,
    // then steps them), so the hash of a counter is unpredictable across processes.
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    std::hash::RandomState::new().hash_one(n) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<StoreSettings, String> {
        StoreSettings::from_lookup(&|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn defaults_and_bounds() {
        let c = with(&[]).unwrap();
        assert_eq!(c.ttl, Duration::from_secs(30));
        assert_eq!(c.stale_if_error, Some(Duration::from_secs(300)));
        assert_eq!(c.payments_delay, Duration::from_millis(200));
        assert_eq!(c.payments_limit, Quota::per_minute(30));
        assert_eq!(c.users_limit, Quota::per_minute(120));
        for off in ["0", "0s", "off", " OFF "] {
            assert_eq!(
                with(&[("CACHE_STALE_IF_ERROR", off)])
                    .unwrap()
                    .stale_if_error,
                None
            );
        }
        let c = with(&[
            ("CACHE_STALE_IF_ERROR", "90s"),
            ("CACHE_TTL", "2s"),
            ("PAYMENTS_DELAY_MS", "0"),
            ("USERS_LIMIT", "10/10s"),
        ])
        .unwrap();
        assert_eq!(c.users_limit, Quota::new(10, Duration::from_secs(10)));
        assert_eq!(c.stale_if_error, Some(Duration::from_secs(90)));
        assert_eq!(c.ttl, Duration::from_secs(2));
        assert_eq!(c.payments_delay, Duration::ZERO);
        for (name, bad) in [
            ("CACHE_STALE_IF_ERROR", "soon"),
            ("CACHE_STALE_IF_ERROR", "1.5s"),
            ("CACHE_STALE_IF_ERROR", "3651d"),
            ("CACHE_TTL", "0s"),
            ("CACHE_TTL", "off"),
            ("PAYMENTS_DELAY_MS", "10001"),
            ("PAYMENTS_DELAY_MS", "-1"),
            ("PAYMENTS_LIMIT", "0/minute"),
            ("USERS_LIMIT", "0/minute"),
            ("USERS_LIMIT", "lots"),
            ("USERS_LIMIT", "5/0s"),
        ] {
            let e = with(&[(name, bad)]).unwrap_err();
            assert!(e.starts_with(&format!("{name}=")), "{e}");
        }
    }
}
