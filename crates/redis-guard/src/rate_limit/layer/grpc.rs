//! gRPC answers for a rate-limited gRPC service (tonic, or any gRPC server on tower).
//!
//! A gRPC client reads the outcome of a call from `grpc-status`, not from the HTTP status: a
//! `429` from an HTTP middleware reaches a tonic client as `UNAVAILABLE` ("429 Too Many
//! Requests", by gRPC's [HTTP to gRPC status mapping]), with the retry delay lost among the
//! headers. [`RateLimitLayerBuilder::grpc`](crate::rate_limit::RateLimitLayerBuilder::grpc) makes the layer
//! answer in gRPC instead:
//!
//! - a denied call ([`Rejection::Limited`]) gets, from [`response`]: HTTP `200`, `content-type: application/grpc`,
//!   and, in the one header block of a *trailers-only* response, `grpc-status: 8`
//!   (`RESOURCE_EXHAUSTED`), a `grpc-message`, the retry delay as `retry-after` (whole seconds,
//!   rounded up) and as `grpc-retry-pushback-ms` (the header gRPC's [retry design] gives a
//!   server to delay a client's retries), and `grpc-status-details-bin`: a `google.rpc.Status`
//!   carrying a `google.rpc.RetryInfo` (the exact delay) and a `google.rpc.QuotaFailure` (the
//!   rule, as `rule:<name>`), as Google's [error model] prescribes. The `RateLimit` and
//!   `RateLimit-Policy` headers come along as metadata. A call refused a lease by a
//!   [`Rule::concurrency`](crate::rate_limit::Rule::concurrency) (a stream over its key's maximum in flight)
//!   gets the same answer, naming that rule, with its retry delay (one second);
//! - the answers the layer gives without a decision become the gRPC status of the same meaning
//!   ([`google.rpc.Code`]'s HTTP mapping): the limiter down under
//!   [`FailurePolicy::Closed`](crate::rate_limit::FailurePolicy::Closed) (`503`) is `UNAVAILABLE` (14) with
//!   a retry delay of one second, a misconfigured layer (`500`) is `INTERNAL` (13), a missing key
//!   rejected with `400` ([`MissingKey::Reject`](crate::rate_limit::MissingKey::Reject)) is
//!   `INVALID_ARGUMENT` (3), `401` `UNAUTHENTICATED` (16), `403` `PERMISSION_DENIED` (7), any
//!   other status `UNKNOWN` (2).
//!
//! The details are encoded here, field by field (a few bytes of protobuf): the library depends on
//! neither tonic nor prost. A tonic client reads them with `tonic_types::StatusExt`:
//!
//! ```ignore
//! use tonic_types::StatusExt;
//! let status = client.get(request).await.unwrap_err();
//! assert_eq!(status.code(), tonic::Code::ResourceExhausted);
//! let delay = status.get_details_retry_info().and_then(|r| r.retry_delay);
//! let pushback_ms = status.metadata().get("grpc-retry-pushback-ms");
//! ```
//!
//! [HTTP to gRPC status mapping]: https://github.com/grpc/grpc/blob/master/doc/http-grpc-status-mapping.md
//! [retry design]: https://github.com/grpc/proposal/blob/master/A6-client-retries.md#pushback
//! [error model]: https://cloud.google.com/apis/design/errors#error_details
//! [`google.rpc.Code`]: https://github.com/googleapis/googleapis/blob/master/google/rpc/code.proto

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};

use super::headers;
use super::rejection::Rejection;
use crate::rate_limit::ceil_secs;

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`: percent-encoded UTF-8.
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// `grpc-status-details-bin`: a base64 `google.rpc.Status`.
const GRPC_STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");
/// `grpc-retry-pushback-ms`: how long a retrying client waits, in milliseconds.
const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

const RESOURCE_EXHAUSTED: u8 = 8;
const UNAVAILABLE: u8 = 14;

const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";
const QUOTA_FAILURE_TYPE: &str = "type.googleapis.com/google.rpc.QuotaFailure";

/// The layer's answer to `rejection` in gRPC, as the [module docs](self) list them.
/// [`RateLimitLayerBuilder::grpc`](crate::rate_limit::RateLimitLayerBuilder::grpc) installs it; it is also a
/// `Fn(&Rejection) -> Response<Bytes>` of its own, for a
/// [`response`](crate::rate_limit::RateLimitLayerBuilder::response) hook that wraps it.
///
/// ```
/// use redis_guard::rate_limit::{Global, MemoryLimiter, Quota, RateLimitLayer, grpc};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = RateLimitLayer::builder(MemoryLimiter::new())
///     .rule("upstream", Global, Quota::per_second(100))
///     .response(|rejection| {
///         let mut res = grpc::response(rejection);
///         res.headers_mut().insert("x-upstream", http::HeaderValue::from_static("busy"));
///         res
///     })
///     .build()?;
/// # let _ = layer; Ok(()) }
/// ```
#[must_use]
pub fn response(rejection: &Rejection) -> Response<Bytes> {
    let message = rejection.to_string();
    let code = code_for(rejection.status());
    // A denial's wait; while the limiter is unavailable, the HTTP answer's `Retry-After: 1`.
    let retry = rejection.retry_after();
    // A trailers-only response: everything in the header block, no body.
    let mut res = Response::new(Bytes::new());
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert(GRPC_STATUS, HeaderValue::from(u16::from(code)));
    insert_encoded(h, GRPC_MESSAGE, percent_encode(&message));
    if let Some(delay) = retry {
        headers::insert_retry_after(h, ceil_secs(delay));
        h.insert(
            GRPC_RETRY_PUSHBACK_MS,
            HeaderValue::from(ceil_millis(delay)),
        );
    }
    let rule = rejection.decision().map(|d| &*d.rule);
    let status = encode_status(code, &message, retry, rule);
    insert_encoded(
        h,
        GRPC_STATUS_DETAILS,
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(status),
    );
    res
}

/// The gRPC status code of the same meaning as `status` (`google.rpc.Code`'s HTTP mapping).
fn code_for(status: StatusCode) -> u8 {
    match status.as_u16() {
        400 => 3,
        401 => 16,
        403 => 7,
        429 => RESOURCE_EXHAUSTED,
        500 => 13,
        503 => UNAVAILABLE,
        _ => 2,
    }
}

/// Inserts a value made only of visible ASCII (percent-encoded or base64): always a valid
/// header value.
fn insert_encoded(h: &mut HeaderMap, name: HeaderName, value: String) {
    if let Ok(v) = HeaderValue::try_from(value) {
        h.insert(name, v);
    }
}

fn ceil_millis(d: Duration) -> u64 {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    ms.saturating_add(u64::from(!d.subsec_nanos().is_multiple_of(1_000_000)))
}

/// `grpc-message` encoding: UTF-8 bytes outside `0x20..=0x7E`, and `%` itself, as `%XX`.
fn percent_encode(message: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `google.rpc.Status { code = 1; message = 2; repeated google.protobuf.Any details = 3 }`, its
/// details a `google.rpc.RetryInfo` of `retry` and a `google.rpc.QuotaFailure` naming `rule`.
fn encode_status(code: u8, message: &str, retry: Option<Duration>, rule: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + message.len());
    varint_field(&mut out, 1, u64::from(code));
    bytes_field(&mut out, 2, message.as_bytes());
    if let Some(delay) = retry {
        // RetryInfo { google.protobuf.Duration retry_delay = 1 }
        let mut retry_info = Vec::new();
        bytes_field(&mut retry_info, 1, &encode_duration(delay));
        bytes_field(&mut out, 3, &encode_any(RETRY_INFO_TYPE, &retry_info));
    }
    if let Some(rule) = rule {
        // QuotaFailure { repeated Violation violations = 1 }, Violation { subject = 1;
        // description = 2 }
        let mut violation = Vec::new();
        bytes_field(&mut violation, 1, format!("rule:{rule}").as_bytes());
        bytes_field(&mut violation, 2, message.as_bytes());
        let mut quota_failure = Vec::new();
        bytes_field(&mut quota_failure, 1, &violation);
        bytes_field(&mut out, 3, &encode_any(QUOTA_FAILURE_TYPE, &quota_failure));
    }
    out
}

/// `google.protobuf.Any { string type_url = 1; bytes value = 2 }`.
fn encode_any(type_url: &str, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(type_url.len() + value.len() + 4);
    bytes_field(&mut out, 1, type_url.as_bytes());
    bytes_field(&mut out, 2, value);
    out
}

/// `google.protobuf.Duration { int64 seconds = 1; int32 nanos = 2 }`.
fn encode_duration(d: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    // int64: a delay beyond i64::MAX seconds is not one a client can wait for anyway.
    varint_field(&mut out, 1, d.as_secs().min(i64::MAX.unsigned_abs()));
    varint_field(&mut out, 2, u64::from(d.subsec_nanos()));
    out
}

/// A varint field (wire type 0), left out when zero as proto3 does.
fn varint_field(out: &mut Vec<u8>, field: u8, value: u64) {
    if value != 0 {
        varint(out, u64::from(field) << 3);
        varint(out, value);
    }
}

/// A length-delimited field (wire type 2), left out when empty as proto3 does.
fn bytes_field(out: &mut Vec<u8>, field: u8, value: &[u8]) {
    if !value.is_empty() {
        varint(out, (u64::from(field) << 3) | 2);
        varint(out, value.len() as u64);
        out.extend_from_slice(value);
    }
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        // The low seven bits, with the continuation bit.
        out.push((value.to_le_bytes()[0] & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value.to_le_bytes()[0]);
}

#[cfg(test)]
mod tests {
    use super::super::response::tests::{collected as call, failing, keyed, x_key};
    use super::*;
    use crate::backend::ManualClock;
    use crate::rate_limit::{FailurePolicy, MemoryLimiter, MissingKey, Quota, RateLimitLayer};

    fn header<'a>(res: &'a Response<impl Sized>, name: &str) -> &'a str {
        res.headers()
            .get(name)
            .map_or("-", |v| v.to_str().unwrap_or("<bytes>"))
    }

    #[test]
    fn varints_and_durations_encode_as_protobuf() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        out.clear();
        varint(&mut out, u64::MAX);
        assert_eq!(out.len(), 10);
        assert_eq!(out[9], 0x01);
        // 1.5 s: seconds = 1, nanos = 500_000_000.
        assert_eq!(
            encode_duration(Duration::from_millis(1500)),
            [0x08, 0x01, 0x10, 0x80, 0xca, 0xb5, 0xee, 0x01]
        );
        assert_eq!(encode_duration(Duration::ZERO), [0u8; 0]);
        assert_eq!(
            encode_duration(Duration::MAX)[..2],
            [0x08, 0xff],
            "seconds clamped to i64::MAX"
        );
        assert_eq!(encode_duration(Duration::MAX)[9], 0x7f);
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encode("retry in 3 s."), "retry in 3 s.");
        assert_eq!(percent_encode("100% é\n"), "100%25 %C3%A9%0A");
    }

    #[test]
    fn delays_round_up_to_the_millisecond() {
        assert_eq!(ceil_millis(Duration::from_micros(1)), 1);
        assert_eq!(ceil_millis(Duration::from_millis(1500)), 1500);
        assert_eq!(ceil_millis(Duration::from_nanos(1_500_000_001)), 1501);
        assert_eq!(ceil_millis(Duration::MAX), u64::MAX);
    }

    #[tokio::test]
    async fn a_denied_call_is_resource_exhausted_byte_for_byte() {
        let clock = ManualClock::new();
        let layer = RateLimitLayer::builder(MemoryLimiter::builder().clock(clock).build())
            .rule("api", x_key(), Quota::per_minute(2))
            .grpc()
            .build()
            .unwrap();
        for _ in 0..2 {
            let res = call(&layer, Some("k")).await;
            assert_eq!(res.status(), 200);
            assert_eq!(res.body(), "ok");
            assert_eq!(header(&res, "grpc-status"), "-", "the service answers");
            assert_eq!(header(&res, "ratelimit-policy"), "\"api\";q=2;w=60");
        }
        let res = call(&layer, Some("k")).await;
        assert_eq!(res.status(), 200);
        assert!(res.body().is_empty(), "trailers-only: no body");
        let names = [
            "content-type",
            "grpc-status",
            "grpc-message",
            "retry-after",
            "grpc-retry-pushback-ms",
            "ratelimit",
        ];
        assert_eq!(
            names.map(|n| header(&res, n)),
            [
                "application/grpc",
                "8",
                "Rate limit `api` exceeded: retry in 30 s.",
                "30",
                "30000",
                "\"api\";r=0;t=60",
            ]
        );
        let details = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(header(&res, "grpc-status-details-bin"))
            .unwrap();
        let message = b"Rate limit `api` exceeded: retry in 30 s.";
        let mut expected = vec![0x08, 8, 0x12, 41];
        expected.extend_from_slice(message);
        // Any(RetryInfo { retry_delay: { seconds: 30 } })
        expected.extend_from_slice(&[0x1a, 48, 0x0a, 40]);
        expected.extend_from_slice(RETRY_INFO_TYPE.as_bytes());
        expected.extend_from_slice(&[0x12, 4, 0x0a, 2, 0x08, 30]);
        // Any(QuotaFailure { violations: [{ subject: "rule:api", description: message }] })
        expected.extend_from_slice(&[0x1a, 102, 0x0a, 43]);
        expected.extend_from_slice(QUOTA_FAILURE_TYPE.as_bytes());
        expected.extend_from_slice(&[0x12, 55, 0x0a, 53, 0x0a, 8]);
        expected.extend_from_slice(b"rule:api");
        expected.extend_from_slice(&[0x12, 41]);
        expected.extend_from_slice(message);
        assert_eq!(details, expected);
    }

    #[tokio::test]
    async fn the_layer_s_own_answers_become_grpc_statuses() {
        // The memory limiter cannot run Lua: every decision fails, as with Redis down.
        let closed = keyed(failing("api"))
            .failure_policy(FailurePolicy::Closed)
            .grpc()
            .build()
            .unwrap();
        let res = call(&closed, Some("k")).await;
        assert_eq!(
            [
                "grpc-status",
                "grpc-message",
                "retry-after",
                "grpc-retry-pushback-ms"
            ]
            .map(|n| header(&res, n)),
            [
                "14",
                "The rate limiter is unavailable; retry shortly.",
                "1",
                "1000"
            ]
        );
        assert_eq!(res.status(), 200);
        assert_eq!(
            header(&res, "content-type"),
            "application/grpc",
            "not problem+json"
        );
        // A missing key rejected: INVALID_ARGUMENT, no retry delay.
        let res = call(&closed, None).await;
        assert_eq!(
            ["grpc-status", "retry-after"].map(|n| header(&res, n)),
            ["3", "-"]
        );
        let unauthenticated = keyed(failing("api"))
            .missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED))
            .grpc()
            .build()
            .unwrap();
        assert_eq!(
            header(&call(&unauthenticated, None).await, "grpc-status"),
            "16"
        );
        for (status, code) in [(403, 7), (500, 13), (429, 8), (418, 2), (504, 2)] {
            assert_eq!(code_for(StatusCode::from_u16(status).unwrap()), code);
        }
    }
}
