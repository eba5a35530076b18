//! [`Rejection`]: why the layer answered a request itself, and its default answer.

use std::fmt;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header::RETRY_AFTER};

/// Why an [`IdempotencyLayer`](super::IdempotencyLayer) answered a request itself instead of
/// running it. The answer carries it in its extensions; a
/// [`response`](super::IdempotencyLayerBuilder::response) builder replaces the default answer
/// (an RFC 9457 `application/problem+json` document).
///
/// ```
/// use http::StatusCode;
/// use redis_guard::idempotency::Rejection;
///
/// assert_eq!(Rejection::MissingKey.status(), StatusCode::BAD_REQUEST);
/// assert_eq!(Rejection::InFlight.status(), StatusCode::CONFLICT);
/// assert_eq!(Rejection::KeyReused.status(), StatusCode::UNPROCESSABLE_ENTITY);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// The route requires an `Idempotency-Key` and the request has none: `400`.
    MissingKey,
    /// The `Idempotency-Key` cannot be used (empty, longer than 255 bytes, neither a quoted
    /// string nor a bare token, sent twice): `400`, with what is wrong.
    MalformedKey(&'static str),
    /// A request with this key is still running (here or on another replica): `409`, with
    /// `Retry-After: 1`.
    InFlight,
    /// The key was used for another request (another method, path, query or body): `422`.
    KeyReused,
    /// The request body is larger than the layer's
    /// [`body_limit`](super::IdempotencyLayerBuilder::body_limit) (the limit, in bytes): `413`.
    BodyTooLarge(usize),
    /// The request body could not be read (the client went away, a broken stream): `400`.
    BodyUnreadable,
    /// The store failed (Redis unreachable or too slow, a value under the key that is not a
    /// record), or the session that scopes the key could not be loaded, and the layer does not
    /// [`fail_open`](super::IdempotencyLayerBuilder::fail_open): `503`, with `Retry-After: 1`.
    Unavailable,
    /// The memory store ([`MemoryIdempotencyStore`](super::MemoryIdempotencyStore)) holds
    /// as many running requests as its capacity, and this request's key is new: `503`, with
    /// `Retry-After: 1`, whatever [`fail_open`](super::IdempotencyLayerBuilder::fail_open)
    /// says. A running request's claim is never evicted to make room: that would let its
    /// retries run again.
    StoreFull,
    /// Keys are scoped by the session's user (the default) and the request went through no
    /// session layer: `500`, and the handler does not run. Without this answer every client
    /// would share one scope, and one could be replayed another's response. The layers are in
    /// the wrong order (the session layer must sit outside this one), or the route needs
    /// another scope ([`scope_header`](super::IdempotencyLayerBuilder::scope_header),
    /// [`scope`](super::IdempotencyLayerBuilder::scope),
    /// [`shared_scope`](super::IdempotencyLayerBuilder::shared_scope)).
    NoSession,
}

impl Rejection {
    /// The status of the default answer.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MissingKey | Self::MalformedKey(_) | Self::BodyUnreadable => {
                StatusCode::BAD_REQUEST
            }
            Self::InFlight => StatusCode::CONFLICT,
            Self::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unavailable | Self::StoreFull => StatusCode::SERVICE_UNAVAILABLE,
            Self::NoSession => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The layer's default answer: an `application/problem+json` document (RFC 9457) whose
    /// `detail` is this rejection's text, with `Retry-After: 1` on `409` and `503`. A
    /// [`response`](super::IdempotencyLayerBuilder::response) hook that replaces only some
    /// answers returns this for the others.
    #[must_use]
    pub fn response(&self) -> Response<Bytes> {
        let detail = self.to_string();
        let mut res = crate::problem::problem(self.status(), &detail, &[]);
        if matches!(self, Self::InFlight | Self::Unavailable | Self::StoreFull) {
            res.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        res
    }
}

/// The layer's default answer ([`response`](Rejection::response)), the rejection in its
/// extensions: a handler that checks keys itself can answer as the layer would.
///
/// ```
/// use axum::{Router, http::HeaderMap, response::IntoResponse, routing::post};
/// use redis_guard::idempotency::Rejection;
///
/// async fn pay(headers: HeaderMap) -> axum::response::Response {
///     if !headers.contains_key("idempotency-key") {
///         return Rejection::MissingKey.into_response(); // 400, problem+json
///     }
///     "paid".into_response()
/// }
/// let app: Router = Router::new().route("/payments", post(pay));
/// # let _ = app;
/// ```
#[cfg(feature = "axum")]
impl axum::response::IntoResponse for Rejection {
    fn into_response(self) -> axum::response::Response {
        let mut res = self.response();
        res.extensions_mut().insert(self);
        res.map(axum::body::Body::from)
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingKey => f.write_str("this request requires an Idempotency-Key header"),
            Self::MalformedKey(why) => f.write_str(why),
            Self::InFlight => {
                f.write_str("a request with this Idempotency-Key is still being processed")
            }
            Self::KeyReused => f.write_str("this Idempotency-Key was used for a different request"),
            Self::BodyTooLarge(limit) => {
                write!(f, "the request body is larger than {limit} bytes")
            }
            Self::BodyUnreadable => f.write_str("the request body could not be read"),
            Self::Unavailable => f.write_str("idempotency keys cannot be checked right now"),
            Self::NoSession => {
                f.write_str("the server cannot tell which client this Idempotency-Key belongs to")
            }
            Self::StoreFull => {
                f.write_str("too many requests with an Idempotency-Key are running right now")
            }
        }
    }
}

#[cfg(all(test, feature = "axum"))]
mod tests {
    use axum::{Router, body::Body, routing::post};
    use http::{Method, Request, StatusCode, header};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::Rejection;

    /// A handler that returns a rejection answers what the layer answers by default: status,
    /// `Retry-After` where the layer sends it, the problem document, the rejection in the
    /// extensions.
    #[tokio::test]
    async fn a_handler_returning_a_rejection_answers_as_the_layer() {
        let every = [
            (Rejection::MissingKey, StatusCode::BAD_REQUEST, false),
            (
                Rejection::MalformedKey("the key is empty"),
                StatusCode::BAD_REQUEST,
                false,
            ),
            (Rejection::InFlight, StatusCode::CONFLICT, true),
            (
                Rejection::KeyReused,
                StatusCode::UNPROCESSABLE_ENTITY,
                false,
            ),
            (
                Rejection::BodyTooLarge(1024),
                StatusCode::PAYLOAD_TOO_LARGE,
                false,
            ),
            (Rejection::BodyUnreadable, StatusCode::BAD_REQUEST, false),
            (
                Rejection::Unavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                true,
            ),
            (Rejection::StoreFull, StatusCode::SERVICE_UNAVAILABLE, true),
            (
                Rejection::NoSession,
                StatusCode::INTERNAL_SERVER_ERROR,
                false,
            ),
        ];
        for (rejection, status, retry) in every {
            let default = rejection.response();
            let returned = rejection.clone();
            let app: Router = Router::new().route("/", post(move || async move { returned }));
            let req = Request::builder()
                .method(Method::POST)
                .uri("/")
                .body(Body::empty())
                .unwrap();
            let mut res = app.oneshot(req).await.unwrap();
            assert_eq!(res.status(), status, "{rejection:?}");
            res.headers_mut().remove(header::CONTENT_LENGTH); // axum's
            assert_eq!(res.headers(), default.headers(), "{rejection:?}");
            assert_eq!(
                res.headers().get(header::RETRY_AFTER).is_some(),
                retry,
                "{rejection:?}"
            );
            assert_eq!(
                res.headers()[header::CONTENT_TYPE],
                "application/problem+json"
            );
            assert_eq!(res.extensions().get::<Rejection>(), Some(&rejection));
            let body = res.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, default.into_body(), "{rejection:?}");
        }
    }
}
