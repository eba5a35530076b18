//! A response cache in one file: `GET /report` takes a second to compute, then is served from
//! the cache for 30 s (`x-cache: MISS`, then `HIT`); `POST /invalidate` drops it at once. In
//! process; on Redis when `REDIS_URL` is set.

use axum::routing::{get, post};
use axum::{Router, extract::State, http::StatusCode, response::IntoResponse};
use redis_guard::backend::RedisConnection;
use redis_guard::cache::{CacheLayer, CacheTags, MemoryCacheStore, RedisCacheStore};
use std::{process::ExitCode, time::Duration};

async fn report() -> impl IntoResponse {
    tokio::time::sleep(Duration::from_secs(1)).await; // the expensive part
    let headers = [("cache-control", "public, max-age=30")];
    (headers, CacheTags::new(["reports"]), "a report\n")
}

async fn invalidate(State(cache): State<CacheLayer>) -> impl IntoResponse {
    match cache.invalidate_tag("reports").await {
        Ok(()) => (StatusCode::OK, "invalidated\n".to_owned()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
}

async fn run() -> Result<(), String> {
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let (cache, backend) = match std::env::var("REDIS_URL") {
        Ok(url) if !url.trim().is_empty() => {
            let conn = RedisConnection::open_lazy(&url)
                .await
                .map_err(|e| format!("cannot connect to REDIS_URL: {e}"))?;
            (CacheLayer::new(RedisCacheStore::new(conn)), "Redis")
        }
        _ => (CacheLayer::new(MemoryCacheStore::new()), "memory"),
    };
    let cache = cache.map_err(|e| e.to_string())?;
    let app = Router::new()
        .route("/report", get(report).layer(cache.clone()))
        .route("/invalidate", post(invalidate))
        .with_state(cache);
    let listener = tokio::net::TcpListener::bind(&bind)
        .await
        .map_err(|e| format!("cannot listen on BIND={bind:?}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{addr} (response cache, backend: {backend})");
    axum::serve(listener, app).await.map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    if let Err(e) = run().await {
        eprintln!("example-cache: {e}");
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}
