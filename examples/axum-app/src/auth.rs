//! `/login`, `/me`, `/logout`, `/logout-all`, `/logout-others`, `/flash`, `/csrf`, `/profile`
//! and `/sessions`: the session routes.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Redirect;
use axum::response::{IntoResponse, Response};
use redis_guard::rate_limit::{ClientIp, Limiter};
use redis_guard::session::{CsrfForm, Session, SessionError};
use serde::Deserialize;
use serde_json::json;

use example_shared::login::{LoginRules, Throttle, normalize_username};

#[derive(Clone, Debug)]
pub(crate) struct Login {
    pub(crate) limiter: Arc<dyn Limiter>,
    pub(crate) rules: LoginRules,
    pub(crate) client_ip: ClientIp,
    /// "Remember me": a remembered session's absolute lifetime and idle timeout.
    pub(crate) remember: (Duration, Duration),
}

#[derive(Deserialize)]
struct Credentials {
    username: String,
    password: String,
    /// "Remember me": this session lives 30 days (a week idle) instead of the layer's lifetimes,
    /// and its cookie survives a browser restart.
    #[serde(default)]
    remember: bool,
}

/// A remembered session's lifetimes: 30 days, a week idle (never shorter than the layer's own).
pub(crate) fn remember(idle: Duration, max: Duration) -> (Duration, Duration) {
    let day = Duration::from_secs(86_400);
    ((30 * day).max(max), (7 * day).max(idle))
}

fn json_error(status: StatusCode, detail: &str) -> Response {
    (status, Json(json!({ "error": detail }))).into_response()
}

/// `POST /login {"username", "password"}`: throttled per client IP, per username and per both
/// (see `shared/login.rs`), then a new session id and the user recorded on the session.
pub(crate) async fn login(
    State(login): State<Login>,
    session: Session,
    req: Request<Body>,
) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 16 * 1024).await else {
        return json_error(StatusCode::PAYLOAD_TOO_LARGE, "the body is too large");
    };
    let Ok(creds) = serde_json::from_slice::<Credentials>(&body) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            r#"expected a JSON body {"username": "…", "password": "…"}"#,
        );
    };
    // A name that can never log in is refused before it becomes a rate-limit key.
    let Some(user) = normalize_username(&creds.username) else {
        return json_error(StatusCode::UNAUTHORIZED, "wrong username or password");
    };
    let ip = match login.client_ip.client_ip(&parts) {
        Ok(ip) => login.client_ip.key_for(ip),
        Err(_) => return json_error(StatusCode::INTERNAL_SERVER_ERROR, "no client address"),
    };
    // Throttle every attempt, good or bad, before checking the password.
    match login.rules.throttle(&*login.limiter, &ip, &user).await {
        Throttle::Allowed => {}
        Throttle::Limited { retry_after_secs } => {
            let mut res = json_error(StatusCode::TOO_MANY_REQUESTS, "too many login attempts");
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            return res;
        }
        Throttle::Unavailable => {
            return json_error(StatusCode::SERVICE_UNAVAILABLE, "try again shortly");
        }
    }
    if creds.password != "password" {
        return json_error(StatusCode::UNAUTHORIZED, "wrong username or password");
    }
    let result: Result<(), SessionError> = async {
        session.cycle_id().await?;
        session.set_user(&user).await?;
        if creds.remember {
            let (max, idle) = login.remember;
            session.set_max_lifetime(max).await?;
            session.set_idle_timeout(idle).await?;
        }
        session
            .insert("flash", &format!("Welcome, {user}."))
            .await?;
        session.insert("visits", &0).await
    }
    .await;
    match result {
        Ok(()) => Json(json!({ "user": user })).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /me`: who is logged in, and how often this session called `/me`.
pub(crate) async fn me(session: Session) -> Result<Response, SessionError> {
    let Some(user) = session.user().await? else {
        return Ok(json_error(StatusCode::UNAUTHORIZED, "not logged in"));
    };
    let visits = session.increment("visits", 1).await?;
    let name: Option<String> = session.get("name").await?;
    Ok(Json(json!({ "user": user, "visits": visits, "name": name })).into_response())
}

/// `POST /logout`: ends this session; a new anonymous one carries the message for the next page.
pub(crate) async fn logout(session: Session) -> Result<StatusCode, SessionError> {
    session.flush().await?;
    session
        .insert("flash", &"You have been logged out.")
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /flash`: the message left for this page, shown once (`{"flash": null}` when none): read
/// and deleted in one store step, so two tabs loading at once do not both show it.
pub(crate) async fn flash(session: Session) -> Result<Response, SessionError> {
    let flash: Option<String> = session.take("flash").await?;
    Ok(Json(json!({ "flash": flash })).into_response())
}

/// `GET /csrf`: this session's CSRF token, for the page's form (`{"token": "…"}`).
pub(crate) async fn csrf(session: Session) -> Result<Response, SessionError> {
    Ok(Json(json!({ "token": session.csrf_token().await? })).into_response())
}

#[derive(Deserialize)]
pub(crate) struct Profile {
    name: String,
}

/// The longest display name kept, in characters.
const MAX_NAME: usize = 40;

/// `POST /profile` (an HTML form: `name`, `csrf_token`): the display name, saved after the CSRF
/// token is checked against the session (`403` otherwise, before this runs); back to the page
/// with a message.
pub(crate) async fn profile(
    session: Session,
    CsrfForm(profile): CsrfForm<Profile>,
) -> Result<Response, SessionError> {
    if session.user().await?.is_none() {
        return Ok(json_error(StatusCode::UNAUTHORIZED, "not logged in"));
    }
    let name: String = profile.name.trim().chars().take(MAX_NAME).collect();
    if name.is_empty() {
        session.remove("name").await?;
    } else {
        session.insert("name", &name).await?;
    }
    session.insert("flash", &"Saved your display name.").await?;
    Ok(Redirect::to("/").into_response())
}

/// Seconds since the Unix epoch, `ago` before now.
fn unix_secs(ago: Duration) -> u64 {
    SystemTime::now()
        .checked_sub(ago)
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

/// `GET /sessions`: the logged-in user's sessions ("your devices"), the caller's own marked
/// `"current": true`; times in seconds since the Unix epoch.
pub(crate) async fn sessions(session: Session) -> Result<Response, SessionError> {
    if session.user().await?.is_none() {
        return Ok(json_error(StatusCode::UNAUTHORIZED, "not logged in"));
    }
    let list: Vec<serde_json::Value> = session
        .sessions()
        .await?
        .into_iter()
        .map(|s| {
            json!({
                "handle": s.handle,
                "user_agent": s.user_agent,
                "ip": s.ip.map(|ip| ip.to_string()),
                "created": unix_secs(s.age),
                "last_seen": unix_secs(s.idle_for),
                "expires": unix_secs(Duration::ZERO) + s.expires_in.as_secs(),
                "current": s.current,
            })
        })
        .collect();
    Ok(Json(list).into_response())
}

/// `POST /sessions/{handle}/revoke`: logs out one of the user's sessions (`404` for a handle
/// that is not one of theirs); revoking the current one logs this browser out.
pub(crate) async fn revoke(
    session: Session,
    Path(handle): Path<String>,
) -> Result<Response, SessionError> {
    if session.user().await?.is_none() {
        return Ok(json_error(StatusCode::UNAUTHORIZED, "not logged in"));
    }
    if session.revoke_session(&handle).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Ok(json_error(StatusCode::NOT_FOUND, "no such session"))
    }
}

/// `POST /logout-others`: ends every other session of the logged-in user, keeping this one.
pub(crate) async fn logout_others(session: Session) -> Result<Response, SessionError> {
    if session.user().await?.is_none() {
        return Ok(json_error(StatusCode::UNAUTHORIZED, "not logged in"));
    }
    let ended = session.revoke_other_sessions().await?;
    Ok(Json(json!({ "ended": ended })).into_response())
}

/// `POST /logout-all`: ends every session of the logged-in user.
pub(crate) async fn logout_all(session: Session) -> Result<Response, SessionError> {
    let Some(user) = session.user().await? else {
        return Ok(json_error(StatusCode::UNAUTHORIZED, "not logged in"));
    };
    session.revoke_user(&user).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /api/hello`: hello to the logged-in user, or to "anonymous".
pub(crate) async fn hello(session: Session) -> Result<Response, SessionError> {
    Ok(Json(json!({ "hello": who(&session).await? })).into_response())
}

/// The logged-in user, or "anonymous".
async fn who(session: &Session) -> Result<String, SessionError> {
    Ok(session
        .user()
        .await?
        .unwrap_or_else(|| "anonymous".to_owned()))
}

/// `GET /export`: an expensive call, counted as ten `/api/*` requests by the API rule.
pub(crate) async fn export(session: Session) -> Result<Response, SessionError> {
    Ok(Json(json!({ "export": who(&session).await?, "rows": [] })).into_response())
}
