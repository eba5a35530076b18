//! redis-guard on plain hyper + tower: the same rate limits and sessions as the axum example,
//! with no axum. Shows the tower-only API: layers composed with `tower::ServiceBuilder`, the
//! peer address passed as a `PeerAddr` extension, the `Session` taken from the extensions.
//!
//! Env: `BIND` (default `127.0.0.1:3001`), `REDIS_URL` (unset: in-process memory),
//! `API_LIMIT` (default `60/minute`), `COOKIE_SECURE` (default `true`).

#[path = "../../shared/csrf.rs"]
mod csrf;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use redis_guard::backend::RedisConnection;
use redis_guard::rate_limit::{
    ClientIp, Limiter, MemoryLimiter, PeerAddr, Quota, RateLimitLayer, RedisLimiter,
};
use redis_guard::session::{
    CookieConfig, MemorySessionStore, RedisSessionStore, Session, SessionError, SessionLayer,
    SessionStore,
};
use serde::Deserialize;
use serde_json::json;
use tower::{ServiceBuilder, ServiceExt, service_fn};

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hyper-app: {e}");
            ExitCode::from(2)
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

async fn run() -> Result<(), String> {
    let bind: SocketAddr = env("BIND")
        .unwrap_or_else(|| "127.0.0.1:3001".to_owned())
        .parse()
        .map_err(|e| format!("BIND is not a socket address: {e}"))?;
    let api_limit: Quota = env("API_LIMIT")
        .unwrap_or_else(|| "60/minute".to_owned())
        .parse()
        .map_err(|e| format!("API_LIMIT: {e}"))?;
    let secure = !matches!(env("COOKIE_SECURE").as_deref(), Some("false" | "0"));
    let (limiter, sessions, backend): (Arc<dyn Limiter>, Arc<dyn SessionStore>, String) =
        match env("REDIS_URL") {
            None => (
                Arc::new(MemoryLimiter::new()),
                Arc::new(MemorySessionStore::new()),
                "in-process memory".to_owned(),
            ),
            Some(url) => {
                let conn = RedisConnection::open(&url)
                    .await
                    .map_err(|e| format!("cannot connect to REDIS_URL: {e}"))?;
                (
                    Arc::new(RedisLimiter::new(conn.clone())),
                    Arc::new(RedisSessionStore::new(conn)),
                    "redis".to_owned(),
                )
            }
        };

    let rate_limit = RateLimitLayer::builder(limiter)
        .rule("api", ClientIp::peer(), api_limit)
        .build()
        .map_err(|e| format!("API_LIMIT: {e}"))?;
    let session = SessionLayer::builder(sessions)
        .cookie(CookieConfig::default().secure(secure))
        .build()
        .map_err(|e| format!("session settings: {e}"))?;
    // Sessions everywhere; the rate limit only on /api/*.
    let api = ServiceBuilder::new()
        .layer(rate_limit)
        .service(service_fn(route));
    let app =
        ServiceBuilder::new()
            .layer(session)
            .service(service_fn(move |req: Request<Incoming>| {
                let api = api.clone();
                async move {
                    // Before any route: a cross-site or non-JSON write touches nothing.
                    if let Some(refusal) = csrf::refusal(req.method(), req.headers()) {
                        return Ok(
                            refusal.map(|body| Full::from(body).map_err(|e| match e {}).boxed())
                        );
                    }
                    if req.uri().path().starts_with("/api/") {
                        let res = api.oneshot(req).await?;
                        Ok::<_, Infallible>(res.map(BodyExt::boxed))
                    } else {
                        Ok(route(req).await?.map(BodyExt::boxed))
                    }
                }
            }));

    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("hyper-app listening on http://{addr} (rate limits and sessions: {backend})");
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        let app = app.clone();
        // Hand the peer address to ClientIp through the request extensions.
        let svc = service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(PeerAddr(peer));
            app.clone().oneshot(req)
        });
        tokio::spawn(async move {
            let io = TokioIo::new(stream);
            if let Err(e) = Builder::new(TokioExecutor::new())
                .serve_connection(io, TowerToHyperService::new(svc))
                .await
            {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
}

fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::from(value.to_string()));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    res
}

fn session_error(e: &SessionError) -> Response<Full<Bytes>> {
    let status = if e.is_store_error() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::BAD_REQUEST
    };
    json_response(status, &json!({ "error": e.to_string() }))
}

#[derive(Deserialize)]
struct Credentials {
    username: String,
    password: String,
}

async fn route(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let Some(session) = req.extensions().get::<Session>().cloned() else {
        return Ok(json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({"error": "no session layer"}),
        ));
    };
    let res = match (req.method().clone(), req.uri().path()) {
        (Method::GET, "/healthz") => Ok(Response::new(Full::from("ok"))),
        (Method::GET, "/api/hello") => session.user().await.map(|u| {
            json_response(
                StatusCode::OK,
                &json!({ "hello": u.unwrap_or_else(|| "anonymous".into()) }),
            )
        }),
        (Method::POST, "/login") => {
            let body = match Limited::new(req.into_body(), 16 * 1024).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return Ok(json_response(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        &json!({"error": "too large"}),
                    ));
                }
            };
            match serde_json::from_slice::<Credentials>(&body) {
                Ok(c)
                    if c.password == "password"
                        && !c.username.is_empty()
                        && c.username.len() <= 64 =>
                {
                    async {
                        session.cycle_id().await?;
                        session.set_user(&c.username).await?;
                        Ok(json_response(
                            StatusCode::OK,
                            &json!({ "user": c.username }),
                        ))
                    }
                    .await
                }
                Ok(_) => Ok(json_response(
                    StatusCode::UNAUTHORIZED,
                    &json!({"error": "wrong username or password"}),
                )),
                Err(_) => Ok(json_response(
                    StatusCode::BAD_REQUEST,
                    &json!({"error": "expected JSON credentials"}),
                )),
            }
        }
        (Method::GET, "/me") => {
            async {
                let Some(user) = session.user().await? else {
                    return Ok(json_response(
                        StatusCode::UNAUTHORIZED,
                        &json!({"error": "not logged in"}),
                    ));
                };
                let visits = session.increment("visits", 1).await?;
                Ok(json_response(
                    StatusCode::OK,
                    &json!({ "user": user, "visits": visits }),
                ))
            }
            .await
        }
        (Method::POST, "/logout") => session.destroy().await.map(|()| {
            let mut res = Response::new(Full::default());
            *res.status_mut() = StatusCode::NO_CONTENT;
            res
        }),
        _ => Ok(json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": "no such route"}),
        )),
    };
    Ok(res.unwrap_or_else(|e| session_error(&e)))
}
