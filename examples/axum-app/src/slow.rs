//! `GET /slow/{n}`: a response that takes ~200 ms to compute, cached `CACHE_TTL` (30 s) by
//! `CacheLayer` with the tag `slow`; `POST /slow/invalidate` (admin token) drops every entry
//! with that tag. The `x-cache` response header says `MISS` (computed now), `HIT` (from the
//! cache) or `STALE`, RFC 9211 `Cache-Status` the same; the `ETag` (computed from the body by
//! the cache) answers `If-None-Match` with a `304` from the cache. While `POST /admin/origin`
//! makes the origin fail, the computation answers `503` (`origin.rs`), and a copy past its
//! freshness is served `STALE` instead for up to `CACHE_STALE_IF_ERROR` (`stores.rs`).
//!
//! Every `n` and every query string is its own cache entry, so the cache alone does not bound
//! how often the handler runs: `SLOW_LIMIT` (per client IP, hits included) does. `n` is at most
//! `4294967295` (`u32::MAX`), whose square still fits a JSON number; a larger one is a `400`.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use redis_guard::cache::{CacheLayer, CacheTags};
use redis_guard::rate_limit::RateLimitLayer;
use serde_json::json;

use crate::admin_auth::{self, AdminAuth};
use crate::origin::Origin;

/// How long one computation takes.
const COMPUTE: Duration = Duration::from_millis(200);

/// The routes; `cache` caches `GET /slow/{n}` and is what the invalidation reaches; `limit`
/// (`SLOW_LIMIT`) sits in front of the cache; `auth` guards the invalidation (a `404` without
/// `ADMIN_TOKEN`); `origin` fails the computation on demand; `ttl` (`CACHE_TTL`) is the
/// responses' `max-age`.
pub(crate) fn routes(
    cache: CacheLayer,
    limit: RateLimitLayer,
    auth: Option<AdminAuth>,
    origin: Origin,
    ttl: Duration,
) -> Router {
    let invalidate = match auth {
        Some(auth) => post(invalidate).layer(axum::middleware::from_fn_with_state(
            auth,
            admin_auth::require,
        )),
        None => post(admin_auth::not_found),
    };
    let max_age = HeaderValue::try_from(format!("public, max-age={}", ttl.as_secs()))
        .unwrap_or(HeaderValue::from_static("public, max-age=30"));
    let slow = Router::new()
        .route("/slow/{n}", get(slow).layer(cache.clone()))
        .layer(limit)
        .with_state((origin, max_age));
    Router::new()
        .route("/slow/invalidate", invalidate)
        .with_state(cache)
        .merge(slow)
}

async fn slow(
    State((origin, max_age)): State<(Origin, HeaderValue)>,
    Path(n): Path<u32>,
) -> Response {
    tokio::time::sleep(COMPUTE).await;
    if let Err(down) = origin.check() {
        return down.into_response();
    }
    (
        [(header::CACHE_CONTROL, max_age)],
        CacheTags::new(["slow"]),
        Json(json!({ "n": n, "square": u64::from(n) * u64::from(n) })),
    )
        .into_response()
}

async fn invalidate(State(cache): State<CacheLayer>) -> StatusCode {
    match cache.invalidate_tag("slow").await {
        Ok(()) => StatusCode::NO_CONTENT,
        Err(e) => {
            tracing::warn!(error = %e, "invalidating the slow tag failed");
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}
