//! `GET /report`: a slow call that holds a concurrency lease while it runs, so that one user
//! (or client IP) never has more than `REPORT_CONCURRENCY` reports in flight across every
//! instance of the app.

use std::time::Duration;

use axum::Json;
use axum::extract::Query;
use axum::response::{IntoResponse, Response};
use redis_guard::session::{Session, SessionError};
use serde::Deserialize;
use serde_json::json;

/// How long a report takes unless `?ms=` says otherwise.
const DEFAULT_MS: u64 = 1_000;
/// The longest `?ms=` honoured.
const MAX_MS: u64 = 60_000;

#[derive(Deserialize)]
pub(crate) struct Params {
    ms: Option<u64>,
}

/// `GET /report?ms=<n>`: "builds a report" for `n` ms (default 1000, at most 60000).
pub(crate) async fn report(
    session: Session,
    Query(params): Query<Params>,
) -> Result<Response, SessionError> {
    let ms = params.ms.unwrap_or(DEFAULT_MS).min(MAX_MS);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    let who = session
        .user()
        .await?
        .unwrap_or_else(|| "anonymous".to_owned());
    Ok(Json(json!({ "report": who, "took_ms": ms })).into_response())
}
