//! `GET /slow/{n}`: a response that takes ~200 ms to compute, cached 30 s by `CacheLayer` with
//! the tag `slow`; `POST /slow/invalidate` drops every entry with that tag. The `x-cache`
//! response header says `MISS` (computed now), `HIT` (from the cache) or `STALE`.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use redis_guard::cache::{CacheLayer, CacheTags};
use serde_json::json;

/// How long one computation takes.
const COMPUTE: Duration = Duration::from_millis(200);

/// The routes; `cache` caches `GET /slow/{n}` and is what the invalidation reaches.
pub(crate) fn routes(cache: CacheLayer) -> Router {
    Router::new()
        .route("/slow/{n}", get(slow).layer(cache.clone()))
        .route("/slow/invalidate", post(invalidate))
        .with_state(cache)
}

async fn slow(Path(n): Path<u64>) -> impl IntoResponse {
    tokio::time::sleep(COMPUTE).await;
    (
        [("cache-control", "public, max-age=30")],
        CacheTags::new(["slow"]),
        Json(json!({ "n": n, "square": u128::from(n) * u128::from(n) })),
    )
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
