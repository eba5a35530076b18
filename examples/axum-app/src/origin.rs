//! The origins behind the caches (`GET /slow/{n}`'s computation, `GET /users/{id}`'s store),
//! and `POST /admin/origin` `{"fail": true|false}` (admin token) to make them fail with `503`
//! while set: what the caches' stale-if-error (`CACHE_STALE_IF_ERROR`) is there for.
//!
//! The switch belongs to this instance: with several behind one Redis, each is switched on its
//! own (an outage of one replica's database connection, say).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use crate::admin::problem;
use crate::admin_auth::{self, AdminAuth};

/// Whether the origins fail; cheap to clone, every clone sees the same switch.
#[derive(Clone, Debug, Default)]
pub(crate) struct Origin(Arc<AtomicBool>);

/// What a failing origin answers: turned into a `503` (see [`OriginDown::into_response`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OriginDown;

impl Origin {
    /// `Err` while `POST /admin/origin` says the origins fail.
    pub(crate) fn check(&self) -> Result<(), OriginDown> {
        if self.0.load(Ordering::Relaxed) {
            Err(OriginDown)
        } else {
            Ok(())
        }
    }
}

impl IntoResponse for OriginDown {
    /// `503` with `Retry-After: 5`, a problem document.
    fn into_response(self) -> Response {
        let mut res = problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "the origin is failing (POST /admin/origin) and no cached copy can stand in",
        );
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        res
    }
}

/// `POST /admin/origin` behind `auth` (a `404` without `ADMIN_TOKEN`).
pub(crate) fn routes(auth: Option<AdminAuth>, origin: Origin) -> Router {
    let set = match auth {
        Some(auth) => post(set).layer(axum::middleware::from_fn_with_state(
            auth,
            admin_auth::require,
        )),
        None => post(admin_auth::not_found),
    };
    Router::new().route("/admin/origin", set).with_state(origin)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Switch {
    fail: bool,
}

/// `200 {"fail": b}`, or `400` for a body that is not `{"fail": true|false}`.
async fn set(State(origin): State<Origin>, body: Bytes) -> Response {
    let Ok(Switch { fail }) = serde_json::from_slice::<Switch>(&body) else {
        return problem(
            StatusCode::BAD_REQUEST,
            r#"expected a JSON body {"fail": true} or {"fail": false}"#,
        );
    };
    origin.0.store(fail, Ordering::Relaxed);
    tracing::info!(fail, "origins switched");
    axum::Json(json!({ "fail": fail })).into_response()
}
