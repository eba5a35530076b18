//! `POST /calls`: a phone service's call auto-reject. More than `CALLS_LIMIT` calls from one number are
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

/// One canonical form per number, so that formatting cannot open a new bucket
/// (`+15550100000`, `0015550100000` and `1 (555) 010-0000`… are one caller):
///
/// 1. Spaces, `-`, `.`, `(` and `)` are dropped; any other character but ASCII digits and one
///    leading `+` makes the number malformed.
/// 2. The `00` international call prefix becomes `+`.
/// 3. A number of 11 to 15 digits with neither, not starting with `0`, is taken as an
///    international number written without its `+`.
/// 4. International numbers (`+`, a country code not starting with `0`) have 7 to 15 digits
///    (E.164); anything else is kept as a national number or short code of 3 to 10 digits, or
///    11 to 15 digits starting with the trunk prefix `0`.
///
/// Rule 3 guesses: a national number of 11+ digits without a trunk `0` (Chinese mobiles) is read
/// as international. A service that knows its users' region should parse with that region
/// (libphonenumber) instead.
pub(crate) fn normalize_phone(raw: &str) -> Option<String> {
    let raw = raw.trim();
    if raw.len() > 64 {
        return None;
    }
    let (plus, rest) = match raw.strip_prefix('+') {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    let mut digits = String::with_capacity(rest.len());
    for c in rest.chars() {
        match c {
            '0'..='9' => digits.push(c),
            ' ' | '-' | '.' | '(' | ')' => {}
            _ => return None,
        }
    }
    let international = if plus {
        Some(digits.as_str())
    } else if let Some(after_prefix) = digits.strip_prefix("00") {
        Some(after_prefix)
    } else if digits.len() >= 11 && !digits.starts_with('0') {
        Some(digits.as_str())
    } else {
        None
    };
    match international {
        Some(n) => ((7..=15).contains(&n.len()) && !n.starts_with('0')).then(|| format!("+{n}")),
        None => (3..=15).contains(&digits.len()).then_some(digits),
    }
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
        for same in [
            "+15550100000",
            "15550100000",
            "0015550100000",
            "00 1 555 010 0000",
            "1-555-010-0000",
        ] {
            assert_eq!(
                normalize_phone(same).as_deref(),
                Some("+15550100000"),
                "{same}"
            );
        }
        // National numbers and short codes stay as they are.
        assert_eq!(
            normalize_phone("07700 900123").as_deref(),
            Some("07700900123")
        );
        assert_eq!(normalize_phone("112").as_deref(), Some("112"));
        assert_eq!(normalize_phone("5550100").as_deref(), Some("5550100"));
        for bad in [
            "+0 555 010 0000",
            "000",
            "0015",
            "+1555",
            "00015550100000",
            "+1234567890123456",
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
