//! redis-guard on a tonic gRPC service: every call counts against a quota per API key (the
//! `x-api-key` metadata) or, without one, per client IP; a limited call gets gRPC's
//! `RESOURCE_EXHAUSTED` with the retry delay in its metadata and status details.
//!
//! Env: see README.md beside this file (`BIND` defaults to `127.0.0.1:50051`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use example_shared::settings;
use http::HeaderName;
use redis_guard::backend::RedisBackend;
use redis_guard::rate_limit::{
    HeaderKey, KeyExtractorExt, Limiter, MemoryLimiter, PeerAddr, RateLimitLayer, RedisLimiter,
    ResponseBody, Route, Rule,
};
use tonic::transport::Server;
use tonic::transport::server::{TcpConnectInfo, TcpIncoming};
use tonic_app::QuotesService;
use tonic_app::pb::quotes_server::QuotesServer;
use tower::ServiceBuilder;

/// `STREAM_INTERVAL_MS` bounds: a stream of 1000 quotes lasts at most 10 s × 1000.
const STREAM_INTERVAL_MS: std::ops::RangeInclusive<u64> = 0..=10_000;

/// `STREAM_CONCURRENCY` bounds.
const STREAM_CONCURRENCY: std::ops::RangeInclusive<u64> = 1..=10_000;

#[tokio::main]
async fn main() -> ExitCode {
    settings::main_of("tonic-app", run()).await
}

async fn run() -> Result<(), String> {
    let get: settings::Lookup<'_> = &settings::from_process_env;
    let bind = settings::bind(get, "127.0.0.1:50051")?;
    let api_limit = settings::quota(get, "API_LIMIT", "60/minute")?;
    let limit_on_error = settings::failure_policy(get)?;
    let client_ip = settings::client_ip(get)?;
    let redis_timeout = settings::redis_timeout(get)?;
    let interval = Duration::from_millis(whole_number(
        get,
        "STREAM_INTERVAL_MS",
        200,
        STREAM_INTERVAL_MS,
    )?);
    let streams = whole_number(get, "STREAM_CONCURRENCY", 2, STREAM_CONCURRENCY)?;
    let streams = u32::try_from(streams).map_err(|e| format!("STREAM_CONCURRENCY: {e}"))?;
    let (limiter, backend): (Arc<dyn Limiter>, &str) = match get("REDIS_URL") {
        None => (Arc::new(MemoryLimiter::new()), "in-process memory"),
        Some(url) => {
            let conn = settings::redis_connect_options()?
                .open(&url)
                .await
                .map_err(|e| format!("cannot connect to REDIS_URL: {e}"))?;
            let redis = RedisBackend::new(conn).timeout(redis_timeout);
            (Arc::new(RedisLimiter::new(redis)), "redis")
        }
    };

    // The API key a caller sends, else its address. The example takes the key on trust; a real
    // service keys by the identity its authentication layer established.
    let caller = HeaderKey::new(HeaderName::from_static("x-api-key")).or(client_ip);
    // Every call counts against the quota; a stream also holds one of the caller's leases
    // from the call until its last message is sent or the client cancels it. Decided in one
    // limiter call: a stream refused a lease consumes no quota.
    let rate_limit = RateLimitLayer::builder(limiter)
        .rule("api", caller.clone(), api_limit)
        .rule_with(
            Rule::concurrency("streams", streams).for_route(Route::path(tonic_app::STREAM_PATH)),
            caller,
        )
        .failure_policy(limit_on_error)
        .grpc()
        .build()
        .map_err(|e| format!("API_LIMIT / STREAM_CONCURRENCY: {e}"))?;
    // tonic's body is another crate's type: wrapped in the layer's `ResponseBody` (no
    // allocation) so that the layer can answer in it.
    let layers = ServiceBuilder::new()
        .map_request(peer_addr::<tonic::body::Body>)
        .layer(rate_limit)
        .map_response(|res: http::Response<tonic::body::Body>| res.map(ResponseBody::new));

    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("tonic-app listening on http://{addr} (rate limits: {backend})");
    Server::builder()
        .layer(layers)
        .add_service(QuotesServer::new(QuotesService::new(interval)))
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), shutdown())
        .await
        .map_err(|e| format!("server: {e}"))
}

/// Hands tonic's peer address to the limiter's [`ClientIp`](redis_guard::rate_limit::ClientIp),
/// which reads a [`PeerAddr`] (redis-guard does not depend on tonic).
fn peer_addr<B>(mut req: http::Request<B>) -> http::Request<B> {
    let peer = req
        .extensions()
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr);
    if let Some(peer) = peer {
        req.extensions_mut().insert(PeerAddr(peer));
    }
    req
}

/// The whole number in `name`, or `default`, within `range`.
fn whole_number(
    get: settings::Lookup<'_>,
    name: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, String> {
    let Some(v) = get(name) else {
        return Ok(default);
    };
    match v.trim().parse::<u64>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(format!(
            "{name}={v:?} must be a whole number from {} to {}",
            range.start(),
            range.end()
        )),
    }
}

/// Ctrl-C or SIGTERM: tonic stops accepting and lets calls in flight finish.
async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
