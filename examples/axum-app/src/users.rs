//! `GET /users/{id}` and `PUT /users/{id}`: cache-aside for values
//! (`Cache::remember("user:$id", …)`), read through the [`ValueCache`] from a simulated user
//! store that takes ~100 ms per call.
//!
//! - `GET` answers `200 {"id", "name", "loaded_from"}`: `"db"` when this request's lookup ran
//!   (the closure of `get_or_compute`), `"cache"` when a copy from the cache was returned,
//!   and `Cache-Status: axum-app-users; fwd=miss` or `…; hit` (RFC 9211) to say the same
//!   (`…; fwd=stale` for a copy served because the lookup failed: `CACHE_STALE_IF_ERROR`). An
//!   unknown id is a `404`, with the same `Cache-Status`: "not found" is cached too, for
//!   5 seconds (`NOT_FOUND_TTL`, at most `CACHE_TTL`), so asking for unknown ids in a loop
//!   reaches the store once per id and per 5 s. An id that is not a whole number from 0 to
//!   4294967295 is a `400`. At most `USERS_LIMIT` requests per client IP (cache hits, unknown
//!   and malformed ids included): `429` past it.
//! - `PUT` `{"name": …}` renames a user in the store, then voids the cached copy by its tag
//!   `user:<id>` on every instance sharing the cache: `200 {"id", "name"}`. Only the user
//!   themselves may: each seeded user has a login that never changes (user 1 is `ada`, 2
//!   `grace`, 3 `alan`, 4 `katherine`, 5 `edsger`; the name is what a `PUT` changes), and a
//!   session logged in as that login renames that user — or the admin token
//!   (`Authorization: Bearer <ADMIN_TOKEN>`) renames anyone. Without either: `401`; logged in
//!   as someone else: `403`. With `ADMIN_TOKEN` set, a request carrying an `Authorization`
//!   header is judged by the token alone (`401`, or `429` after too many wrong ones). Then a
//!   body that is not that JSON object is a `400`, a blank name or one over 64 characters a
//!   `422`, an unknown id a `404`. The store only holds the seeded users: a `PUT` creates none
//!   (so a cached "not found" hides nothing it does).
//! - While `POST /admin/origin` makes the origin fail, both answer `503` (unless the cache
//!   holds a copy it may serve: `CACHE_STALE_IF_ERROR`).
//!
//! The store lives in each instance's memory (a stand-in for a database): two instances on one
//! Redis share the cached users, not the renames.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use bytes::Bytes;
use redis_guard::cache::{FillTimeout, ValueCache};
use redis_guard::rate_limit::RateLimitLayer;
use redis_guard::session::{Session, SessionLayer};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::admin::problem;
use crate::admin_auth::AdminAuth;
use crate::origin::{Origin, OriginDown};
use crate::stores::unique;

/// How long one call to the simulated store takes.
const LOOKUP: Duration = Duration::from_millis(100);

/// The longest name a `PUT` takes, in characters.
const MAX_NAME: usize = 64;

/// The users the store starts with: id, login (as `POST /login` normalizes it), name.
const SEED: [(u32, &str, &str); 5] = [
    (1, "ada", "Ada Lovelace"),
    (2, "grace", "Grace Hopper"),
    (3, "alan", "Alan Turing"),
    (4, "katherine", "Katherine Johnson"),
    (5, "edsger", "Edsger Dijkstra"),
];

/// The login of user `id`, who alone (besides the admin) may rename it. Logins never change.
fn login_of(id: u32) -> Option<&'static str> {
    SEED.iter()
        .find(|(seeded, _, _)| *seeded == id)
        .map(|(_, login, _)| *login)
}

/// What the routes share.
#[derive(Clone, Debug)]
struct Users {
    cache: ValueCache,
    db: Db,
    origin: Origin,
    ttl: Duration,
    admin: Option<AdminAuth>,
}

/// The simulated store: names by id, in this process.
#[derive(Clone, Debug)]
struct Db(Arc<Mutex<HashMap<u32, String>>>);

impl Db {
    fn seeded() -> Self {
        let users = SEED
            .iter()
            .map(|(id, _, name)| (*id, (*name).to_owned()))
            .collect();
        Self(Arc::new(Mutex::new(users)))
    }

    /// The name of user `id` after a slow lookup; `Err` while the origin fails.
    async fn find(&self, id: u32, origin: &Origin) -> Result<Option<String>, OriginDown> {
        tokio::time::sleep(LOOKUP).await;
        origin.check()?;
        Ok(self.lock().get(&id).cloned())
    }

    /// Renames user `id` after a slow write: `false` when there is no such user.
    async fn rename(&self, id: u32, name: String, origin: &Origin) -> Result<bool, OriginDown> {
        tokio::time::sleep(LOOKUP).await;
        origin.check()?;
        Ok(self.lock().get_mut(&id).map(|old| *old = name).is_some())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, String>> {
        // The map is whole after every statement: a panic elsewhere leaves nothing half-done.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the cache keeps of a user: the name, and which lookup produced it (so a request can
/// tell its own lookup's value from a cached one).
#[derive(Serialize, Deserialize)]
struct Loaded {
    name: String,
    load: u64,
}

/// Why a lookup has no user to show.
#[derive(Debug)]
enum Failed {
    /// The store fails (`POST /admin/origin`): `503`.
    Origin(OriginDown),
    /// The lookup outlasted the cache's hard fill timeout: `504`. The app sets none, so this
    /// is never made; the value cache asks every error type to have it.
    Timeout(FillTimeout),
}

impl From<OriginDown> for Failed {
    fn from(down: OriginDown) -> Self {
        Self::Origin(down)
    }
}

impl From<FillTimeout> for Failed {
    fn from(timeout: FillTimeout) -> Self {
        Self::Timeout(timeout)
    }
}

impl IntoResponse for Failed {
    fn into_response(self) -> Response {
        match self {
            Self::Origin(down) => down.into_response(),
            Self::Timeout(t) => problem(
                StatusCode::GATEWAY_TIMEOUT,
                &format!("the user store did not answer within {:?}", t.after()),
            ),
        }
    }
}

/// The routes; `limit` (`USERS_LIMIT`) guards `GET`; `sessions` tells `PUT` who is logged
/// in, `admin` (`ADMIN_TOKEN`) lets the admin rename anyone; `ttl` is `CACHE_TTL`.
pub(crate) fn routes(
    cache: ValueCache,
    limit: RateLimitLayer,
    sessions: SessionLayer,
    admin: Option<AdminAuth>,
    origin: Origin,
    ttl: Duration,
) -> Router {
    // `GET` stays outside the session layer: a cached answer never carries a cookie.
    let show = get(show).layer(limit);
    let rename = put(rename).layer(sessions);
    Router::new()
        .route("/users/{id}", show.merge(rename))
        .with_state(Users {
            cache,
            db: Db::seeded(),
            origin,
            ttl,
            admin,
        })
}

/// Whether the request may rename user `id`: with the admin token, or logged in as its login.
/// `Err` is the answer: `401` (neither), `403` (another user), or the token's own refusal.
async fn authorize(
    id: u32,
    head: &Parts,
    session: &Session,
    admin: Option<&AdminAuth>,
) -> Result<(), Response> {
    if let Some(admin) = admin
        && head.headers.contains_key(header::AUTHORIZATION)
    {
        let client = admin.check(head).await?;
        tracing::info!(client, id, "user renamed with the admin token");
        return Ok(());
    }
    let Some(user) = session.user().await.map_err(IntoResponse::into_response)? else {
        return Err(problem(
            StatusCode::UNAUTHORIZED,
            "log in as this user (POST /login) to rename it",
        ));
    };
    if login_of(id) == Some(user.as_str()) {
        Ok(())
    } else {
        Err(problem(
            StatusCode::FORBIDDEN,
            &format!("{user} may rename only their own user"),
        ))
    }
}

fn key(id: u32) -> String {
    format!("user:{id}")
}

/// The `400` for a path id that is not a `u32`.
fn bad_id() -> Response {
    problem(
        StatusCode::BAD_REQUEST,
        "the user id is a whole number from 0 to 4294967295",
    )
}

fn no_such_user(id: u32) -> Response {
    problem(StatusCode::NOT_FOUND, &format!("no user {id}"))
}

async fn show(State(users): State<Users>, id: Result<Path<u32>, PathRejection>) -> Response {
    let Ok(Path(id)) = id else {
        return bad_id();
    };
    // Set by this request's lookup only: a value whose `load` differs came from the cache
    // (filled by another request, or another instance), even when this request's closure
    // refreshes the entry in the background after returning the cached copy. A lookup tried
    // for this request that gave no value (it failed) and a user all the same: the cache's
    // copy, served stale in its place (`CACHE_STALE_IF_ERROR`).
    // For "no such user" (no `load` to compare), whether this request's lookup gave it:
    // nothing refreshes an entry in the background here (no stale window), so the closure
    // runs for this request or not at all.
    let this_load = Arc::new(AtomicU64::new(0));
    let tried = Arc::new(AtomicBool::new(false));
    let looked_up = Arc::new(AtomicBool::new(false));
    let (ran, trying, answered) = (
        Arc::clone(&this_load),
        Arc::clone(&tried),
        Arc::clone(&looked_up),
    );
    let Users {
        cache, db, origin, ..
    } = users.clone();
    let found = cache
        .get_or_compute_tagged(key(id), users.ttl, [key(id)], move || async move {
            trying.store(true, Ordering::SeqCst);
            let name = db.find(id, &origin).await?;
            answered.store(true, Ordering::SeqCst);
            let load = unique();
            ran.store(load, Ordering::SeqCst);
            Ok::<_, Failed>(name.map(|name| Loaded { name, load }))
        })
        .await;
    let source = |fresh: bool| {
        if fresh {
            ("db", "axum-app-users; fwd=miss")
        } else if tried.load(Ordering::SeqCst) {
            ("cache", "axum-app-users; fwd=stale")
        } else {
            ("cache", "axum-app-users; hit")
        }
    };
    let (mut res, status) = match found {
        Ok(Some(user)) => {
            let (from, status) = source(user.load == this_load.load(Ordering::SeqCst));
            let body = json!({ "id": id, "name": user.name, "loaded_from": from });
            (axum::Json(body).into_response(), status)
        }
        Ok(None) => (no_such_user(id), source(looked_up.load(Ordering::SeqCst)).1),
        Err(failed) => return failed.into_response(),
    };
    res.headers_mut()
        .insert("cache-status", HeaderValue::from_static(status));
    res
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rename {
    name: String,
}

async fn rename(
    State(users): State<Users>,
    id: Result<Path<u32>, PathRejection>,
    session: Session,
    head: Parts,
    body: Bytes,
) -> Response {
    let Ok(Path(id)) = id else {
        return bad_id();
    };
    if let Err(refusal) = authorize(id, &head, &session, users.admin.as_ref()).await {
        return refusal;
    }
    let Ok(Rename { name }) = serde_json::from_slice::<Rename>(&body) else {
        return problem(
            StatusCode::BAD_REQUEST,
            r#"expected a JSON body {"name": "…"}"#,
        );
    };
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("a name is 1 to {MAX_NAME} characters, not blank, no control characters"),
        );
    }
    match users.db.rename(id, name.to_owned(), &users.origin).await {
        Ok(true) => {}
        Ok(false) => return no_such_user(id),
        Err(down) => return down.into_response(),
    }
    // After the write, so that no fill from before it outlives the invalidation.
    if let Err(e) = users.cache.invalidate_tag(&key(id)).await {
        tracing::warn!(error = %e, id, "the renamed user's cached copy could not be voided");
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "the name was saved, but the cached copy could not be voided: it may be served until it expires; send the PUT again",
        );
    }
    axum::Json(json!({ "id": id, "name": name })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_store_renames_seeded_users_only() {
        let (db, origin) = (Db::seeded(), Origin::default());
        assert_eq!(
            db.find(2, &origin).await.unwrap().as_deref(),
            Some("Grace Hopper")
        );
        assert!(db.rename(2, "G. Hopper".into(), &origin).await.unwrap());
        assert_eq!(
            db.find(2, &origin).await.unwrap().as_deref(),
            Some("G. Hopper")
        );
        assert!(!db.rename(99, "Nobody".into(), &origin).await.unwrap());
        assert_eq!(db.find(99, &origin).await.unwrap(), None);
    }

    #[test]
    fn each_seeded_user_has_a_login_that_can_log_in() {
        for (id, login, _) in SEED {
            assert_eq!(login_of(id), Some(login));
            let normalized = example_shared::login::normalize_username(login);
            assert_eq!(normalized.as_deref(), Some(login));
        }
        assert_eq!(login_of(0), None);
        assert_eq!(login_of(6), None);
    }
}
