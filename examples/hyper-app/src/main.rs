//! redis-guard on plain hyper + tower: the same rate limits and sessions as the axum example,
//! with no axum. Shows the tower-only API: layers composed with `tower::ServiceBuilder`, the
//! peer address passed as a `PeerAddr` extension, the `Session` taken from the extensions.
//!
//! Env: see README.md beside this file (`BIND` defaults to `127.0.0.1:3001`).

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use example_shared::{csrf, serve, settings};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use redis_guard::backend::RedisBackend;
use redis_guard::rate_limit::{ClientIp, Limiter, MemoryLimiter, RateLimitLayer, RedisLimiter};
use redis_guard::session::{
    MemorySessionStore, RedisSessionStore, Session, SessionError, SessionLayer, SessionStore,
    Transport,
};
use serde::Deserialize;
use serde_json::json;
use tower::{ServiceBuilder, ServiceExt, service_fn};

use example_shared::login::{LoginRules, Throttle, normalize_username};
use example_shared::serve::RequestBody;

#[tokio::main]
async fn main() -> ExitCode {
    settings::main_of("hyper-app", run()).await
}

/// What the routes need besides the request.
#[derive(Clone, Debug)]
struct State {
    limiter: Arc<dyn Limiter>,
    login: LoginRules,
    client_ip: ClientIp,
}

async fn run() -> Result<(), String> {
    let get: settings::Lookup<'_> = &settings::from_process_env;
    let bind = settings::bind(get, "127.0.0.1:3001")?;
    let api_limit = settings::quota(get, "API_LIMIT", "60/minute")?;
    let limit_on_error = settings::failure_policy(get)?;
    let login = LoginRules::from_env(get)?;
    let client_ip = settings::client_ip(get)?;
    let redis_timeout = settings::redis_timeout(get)?;
    let server_limits = serve::Limits::from_env(get)?;
    let (session_idle, session_max) = settings::session_lifetimes(get)?;
    let secure = !matches!(get("COOKIE_SECURE").as_deref(), Some("false" | "0"));
    let (limiter, sessions, backend): (Arc<dyn Limiter>, Arc<dyn SessionStore>, String) =
        match get("REDIS_URL") {
            None => (
                Arc::new(MemoryLimiter::new()),
                Arc::new(MemorySessionStore::new()),
                "in-process memory".to_owned(),
            ),
            Some(url) => {
                let conn = settings::redis_connect_options()?
                    .open(&url)
                    .await
                    .map_err(|e| format!("cannot connect to REDIS_URL: {e}"))?;
                let redis = RedisBackend::new(conn).timeout(redis_timeout);
                (
                    Arc::new(RedisLimiter::new(redis.clone())),
                    Arc::new(RedisSessionStore::new(redis)),
                    "redis".to_owned(),
                )
            }
        };

    let rate_limit = RateLimitLayer::builder(Arc::clone(&limiter))
        .rule("api", client_ip.clone(), api_limit)
        .failure_policy(limit_on_error)
        .build()
        .map_err(|e| format!("API_LIMIT: {e}"))?;
    let session = SessionLayer::builder(sessions)
        .transport(Transport::cookie().secure(secure))
        .idle_timeout(session_idle)
        .max_lifetime(session_max)
        .build()
        .map_err(|e| format!("session settings: {e}"))?;
    let state = State {
        limiter,
        login,
        client_ip,
    };
    let route = move |req| route(state.clone(), req);
    // Sessions everywhere; the rate limit only on /api/*.
    let api = ServiceBuilder::new()
        .layer(rate_limit)
        .service(service_fn(route.clone()));
    let app = ServiceBuilder::new().layer(session).service(service_fn(
        move |req: Request<RequestBody>| {
            let api = api.clone();
            let route = route.clone();
            async move {
                // Before any route: a cross-site or non-JSON write touches nothing.
                if let Some(refusal) = csrf::refusal(req.method(), req.headers()) {
                    return Ok(refusal.map(|body| Full::from(body).map_err(|e| match e {}).boxed()));
                }
                if req.uri().path().starts_with("/api/") {
                    let res = api.oneshot(req).await?;
                    Ok::<_, Infallible>(res.map(BodyExt::boxed))
                } else {
                    Ok(route(req).await?.map(BodyExt::boxed))
                }
            }
        },
    ));

    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("hyper-app listening on http://{addr} (rate limits and sessions: {backend})");
    serve::serve(listener, app, server_limits, serve::shutdown_signal()).await;
    Ok(())
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

async fn route(
    state: State,
    req: Request<RequestBody>,
) -> Result<Response<Full<Bytes>>, Infallible> {
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
        (Method::POST, "/login") => return Ok(login(&state, req).await),
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

/// `POST /login`: throttled per client IP, per username and per both (`shared/login.rs`).
async fn login(state: &State, req: Request<RequestBody>) -> Response<Full<Bytes>> {
    let error = |status, detail: &str| json_response(status, &json!({ "error": detail }));
    let Some(session) = req.extensions().get::<Session>().cloned() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no session layer");
    };
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, 16 * 1024).collect().await {
        Ok(body) => body,
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return error(StatusCode::PAYLOAD_TOO_LARGE, "too large");
        }
        // Too slow (`shared/serve.rs`), or the connection failed.
        Err(_) => return error(StatusCode::REQUEST_TIMEOUT, "the body did not arrive"),
    };
    let Ok(creds) = serde_json::from_slice::<Credentials>(&body.to_bytes()) else {
        return error(StatusCode::BAD_REQUEST, "expected JSON credentials");
    };
    // A name that can never log in is refused before it becomes a rate-limit key.
    let Some(user) = normalize_username(&creds.username) else {
        return error(StatusCode::UNAUTHORIZED, "wrong username or password");
    };
    let Ok(ip) = state.client_ip.client_ip(&parts) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no client address");
    };
    let ip = state.client_ip.key_for(ip);
    match state.login.throttle(&*state.limiter, &ip, &user).await {
        Throttle::Allowed => {}
        Throttle::Limited { retry_after_secs } => {
            let mut res = error(StatusCode::TOO_MANY_REQUESTS, "too many login attempts");
            res.headers_mut().insert(
                header::RETRY_AFTER,
                http::HeaderValue::from(retry_after_secs),
            );
            return res;
        }
        Throttle::Unavailable => {
            return error(StatusCode::SERVICE_UNAVAILABLE, "try again shortly");
        }
    }
    if creds.password != "password" {
        return error(StatusCode::UNAUTHORIZED, "wrong username or password");
    }
    let logged_in: Result<(), SessionError> = async {
        session.cycle_id().await?;
        session.set_user(&user).await
    }
    .await;
    match logged_in {
        Ok(()) => json_response(StatusCode::OK, &json!({ "user": user })),
        Err(e) => session_error(&e),
    }
}
