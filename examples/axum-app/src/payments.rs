//! `POST /payments` `{"amount": n}` with an `Idempotency-Key` header, behind the
//! [`IdempotencyLayer`]: the handler runs once per key and client, on every instance sharing
//! Redis. The client is the session's user (the layer's default scope; the session layer sits
//! outside this route, see `main.rs`); anonymous visitors share one scope, where the key alone
//! tells them apart.
//!
//! - The first request: `201 {"payment_id": "pay_…", "amount": n}` after `PAYMENTS_DELAY_MS`.
//! - The same key and body again: that response replayed, with `idempotent-replayed: true`.
//! - The same key with another body: `422`; while the first still runs: `409`; no key: `400`.
//! - More than `PAYMENTS_LIMIT` requests (`30/minute`) per user or client IP: `429`.
//! - `amount` is a whole number of cents from 1 to 100000000; anything else is a `400` (kept
//!   and replayed for the key too, as the draft says of every completed response).

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use redis_guard::idempotency::IdempotencyLayer;
use redis_guard::rate_limit::RateLimitLayer;
use serde::Deserialize;
use serde_json::json;

use crate::admin::problem;
use crate::stores::unique;

/// The largest amount taken, in cents.
const MAX_AMOUNT: u64 = 100_000_000;

/// The route; `limit` (`PAYMENTS_LIMIT`) sits outside the idempotency layer and counts
/// retries too; `delay` is how long a payment takes (`PAYMENTS_DELAY_MS`). The caller mounts it
/// inside the session layer: `layer` scopes keys by the session's user.
pub(crate) fn routes(layer: IdempotencyLayer, limit: RateLimitLayer, delay: Duration) -> Router {
    Router::new()
        .route("/payments", post(pay).layer(layer))
        .layer(limit)
        .with_state(delay)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Payment {
    amount: u64,
}

async fn pay(State(delay): State<Duration>, body: Bytes) -> Response {
    let amount = match serde_json::from_slice::<Payment>(&body) {
        Ok(Payment { amount }) if (1..=MAX_AMOUNT).contains(&amount) => amount,
        _ => {
            return problem(
                StatusCode::BAD_REQUEST,
                &format!(r#"expected a JSON body {{"amount": n}}, n cents from 1 to {MAX_AMOUNT}"#),
            );
        }
    };
    // The payment provider's round trip: a retry sent meanwhile is the `409` case.
    tokio::time::sleep(delay).await;
    let id = format!("pay_{:016x}", unique());
    tracing::info!(payment_id = %id, amount, "payment made");
    (
        StatusCode::CREATED,
        axum::Json(json!({ "payment_id": id, "amount": amount })),
    )
        .into_response()
}
