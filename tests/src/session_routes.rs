//! The session routes the suites share: one handler per path over the [`Session`] API, so a
//! suite's app is a few lines plus its own special routes.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use redis_guard::session::{Session, SessionError};

/// The session a [`SessionLayer`](redis_guard::session::SessionLayer) gave `req`, and its path's
/// segments (`/login/alice` → `["login", "alice"]`), as the suites' routers match them.
///
/// # Panics
///
/// Without the session layer.
pub fn session_and_path<B>(req: &http::Request<B>) -> (Session, Vec<String>) {
    let session = req.extensions().get::<Session>().cloned().expect("layer");
    let path = req
        .uri()
        .path()
        .split('/')
        .skip(1)
        .map(str::to_owned)
        .collect();
    (session, path)
}

/// A response with `status` and a text body.
pub fn text(status: StatusCode, body: impl Into<String>) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::from(body.into()));
    *res.status_mut() = status;
    res
}

/// A handler's error as a response: `503` for the store, `400` for the rest.
pub fn error(e: &SessionError) -> Response<Full<Bytes>> {
    let status = if e.is_store_error() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::BAD_REQUEST
    };
    text(status, e.to_string())
}

/// Runs the route `path` names (the path's segments) on `session`, or `None` when it names
/// none of these:
///
/// | path | does | answers |
/// | --- | --- | --- |
/// | `get/{key}` | reads a string | `200` value, `404` |
/// | `set/{key}/{value}` | inserts a string | `200` |
/// | `incr/{key}` | adds 1 | `200` the new value |
/// | `login/{user}` | `cycle_id`, then `set_user` | `200` |
/// | `whoami` | reads the user | `200` user, `401` |
/// | `logout` | `destroy` | `204` |
/// | `cycle` | `cycle_id` | `200` |
/// | `revoke/{user}` | `revoke_user` | `200` how many ended |
pub async fn route(
    session: &Session,
    path: &[&str],
) -> Option<Result<Response<Full<Bytes>>, SessionError>> {
    Some(match path {
        ["get", key] => session.get::<String>(key).await.map(|v| match v {
            Some(v) => text(StatusCode::OK, v),
            None => text(StatusCode::NOT_FOUND, ""),
        }),
        ["set", key, value] => session
            .insert(key, &(*value).to_owned())
            .await
            .map(|()| text(StatusCode::OK, "set")),
        ["incr", key] => session
            .increment(key, 1)
            .await
            .map(|n| text(StatusCode::OK, n.to_string())),
        ["login", user] => {
            async {
                session.cycle_id().await?;
                session.set_user(user).await?;
                Ok(text(StatusCode::OK, "in"))
            }
            .await
        }
        ["whoami"] => session.user().await.map(|u| match u {
            Some(u) => text(StatusCode::OK, u),
            None => text(StatusCode::UNAUTHORIZED, ""),
        }),
        ["logout"] => session
            .destroy()
            .await
            .map(|()| text(StatusCode::NO_CONTENT, "")),
        ["cycle"] => session
            .cycle_id()
            .await
            .map(|()| text(StatusCode::OK, "cycled")),
        ["revoke", user] => session
            .revoke_user(user)
            .await
            .map(|n| text(StatusCode::OK, n.to_string())),
        _ => return None,
    })
}
