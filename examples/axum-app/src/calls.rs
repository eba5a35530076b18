//! `POST /calls`: the seeds' call auto-reject. More than `CALLS_LIMIT` calls from one number are
//! rejected; the number comes from the JSON body, so the handler asks the limiter itself.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use redis_guard::rate_limit::{Key, Limiter, Rule};
use serde::Deserialize;
use serde_json::json;

#[derive(Clone, Debug)]
pub(crate) struct Calls {
    pub(crate) limiter: Arc<dyn Limiter>,
    pub(crate) rule: Rule,
}

#[derive(Deserialize)]
struct CallRequest {
    from: String,
    to: String,
}

/// Digits with an optional leading `+`; spaces, dashes, dots and parentheses are dropped.
/// 3 to 15 digits (E.164 allows at most 15; short codes exist). Anything else is malformed.
pub(crate) fn normalize_phone(raw: &str) -> Option<String> {
    let raw = raw.trim();
    if raw.len() > 64 {
        return None;
    }
    let (plus, rest) = match raw.strip_prefix('+') {
        Some(rest) => ("+", rest),
        None => ("", raw),
    };
    let mut digits = String::with_capacity(rest.len());
    for c in rest.chars() {
        match c {
            '0'..='9' => digits.push(c),
            ' ' | '-' | '.' | '(' | ')' => {}
            _ => return None,
        }
    }
    (3..=15)
        .contains(&digits.len())
        .then(|| format!("{plus}{digits}"))
}

fn bad_request(detail: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({ "error": detail }))).into_response()
}

pub(crate) async fn handler(State(calls): State<Calls>, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<CallRequest>(&body) else {
        return bad_request(r#"expected a JSON body {"from": "<phone>", "to": "<phone>"}"#);
    };
    let Some(from) = normalize_phone(&req.from) else {
        return bad_request("`from` is not a phone number");
    };
    if normalize_phone(&req.to).is_none() {
        return bad_request("`to` is not a phone number");
    }
    match calls.limiter.check(&calls.rule, Key::from(from)).await {
        Ok(d) if d.allowed => Json(json!({ "status": "connected" })).into_response(),
        Ok(d) => {
            let mut res = (
                StatusCode::TOO_MANY_REQUESTS,
                Json(json!({ "status": "rejected" })),
            )
                .into_response();
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(d.retry_after_secs()));
            res
        }
        Err(e) => {
            tracing::warn!(error = %e, "calls limiter unavailable: rejecting (fail closed)");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "status": "unavailable" })),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::normalize_phone;

    #[test]
    fn normalizes_and_rejects() {
        assert_eq!(
            normalize_phone("+1 (555) 010-0000").as_deref(),
            Some("+15550100000")
        );
        assert_eq!(
            normalize_phone(" 0501234567 ").as_deref(),
            Some("0501234567")
        );
        for bad in [
            "",
            "+",
            "12",
            "+1 555 abc",
            "++15550100",
            "1234567890123456",
            "١٢٣٤٥",
            "+1\u{0}5",
        ] {
            assert_eq!(normalize_phone(bad), None, "{bad:?}");
        }
    }
}
