//! [`Rejection`]: why a [`SessionLayer`](super::SessionLayer) answered a request itself, and
//! its default answer.

use std::fmt;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use super::shared::Shared;
use crate::problem::problem;

/// Why a [`SessionLayer`](super::SessionLayer) answered a request itself, replacing the inner
/// service's answer or instead of calling it.
///
/// The layer puts it in its answer's extensions, so an outer layer or a test can read why;
/// [`SessionLayerBuilder::response`](super::SessionLayerBuilder::response) gets it to write the
/// answer's body.
///
/// ```
/// use http::StatusCode;
/// use redis_guard::session::Rejection;
///
/// let why = Rejection::StoreUnavailable;
/// assert_eq!(why.status(), StatusCode::SERVICE_UNAVAILABLE);
/// assert_eq!(why.response().headers()["retry-after"], "1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// The store failed (Redis down, too slow) under
    /// [`FailurePolicy::Closed`](super::FailurePolicy::Closed): loading the session before the
    /// handler ([`expose_user`](super::SessionLayerBuilder::expose_user)), or during the request,
    /// or saving what the handler changed (its answer is dropped: it believed the change
    /// stored). `503` with `Retry-After: 1`.
    StoreUnavailable,
}

impl Rejection {
    /// The status of the layer's answer: `503`.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            Self::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The layer's default answer: an `application/problem+json` document (RFC 9457) whose
    /// `detail` is this rejection's text, with `Retry-After: 1`. A
    /// [`response`](super::SessionLayerBuilder::response) hook that replaces only some answers
    /// returns this for the others.
    #[must_use]
    pub fn response(&self) -> Response<Bytes> {
        let mut res = problem(self.status(), self.detail(), &[]);
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        res
    }

    fn detail(&self) -> &'static str {
        match self {
            Self::StoreUnavailable => "The session store is unavailable; retry shortly.",
        }
    }
}

/// What the client is told: the answer's `detail`.
impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.detail())
    }
}

/// The layer's default answer ([`response`](Rejection::response)), the rejection in its
/// extensions: a handler that finds the store down can answer as the layer would.
///
/// ```
/// use axum::{Router, response::IntoResponse, routing::get};
/// use redis_guard::session::{Rejection, Session};
///
/// async fn visits(session: Session) -> axum::response::Response {
///     match session.increment("visits", 1).await {
///         Ok(n) => n.to_string().into_response(),
///         Err(e) if e.is_store_error() => Rejection::StoreUnavailable.into_response(), // 503
///         Err(e) => e.into_response(),
///     }
/// }
/// let app: Router = Router::new().route("/visits", get(visits));
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

/// The layer's own answer for `rejection`: the hook's, else the default; `Retry-After: 1` added
/// where it has none; the rejection in its extensions.
pub(crate) fn answer(shared: &Shared, rejection: Rejection) -> Response<Bytes> {
    let mut res = match &shared.response {
        Some(hook) => hook.call(&rejection),
        None => rejection.response(),
    };
    res.headers_mut()
        .entry(header::RETRY_AFTER)
        .or_insert(HeaderValue::from_static("1"));
    res.extensions_mut().insert(rejection);
    res
}

#[cfg(all(test, feature = "axum"))]
mod tests {
    use axum::{Router, body::Body, routing::get};
    use http::{Request, StatusCode, header};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::Rejection;

    /// A handler that returns the rejection answers what the layer answers by default.
    #[tokio::test]
    async fn a_handler_returning_a_rejection_answers_as_the_layer() {
        let default = Rejection::StoreUnavailable.response();
        let app: Router = Router::new().route("/", get(|| async { Rejection::StoreUnavailable }));
        let mut res = app.oneshot(Request::new(Body::empty())).await.unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        res.headers_mut().remove(header::CONTENT_LENGTH); // axum's
        assert_eq!(res.headers(), default.headers());
        assert_eq!(res.headers()[header::RETRY_AFTER], "1");
        assert_eq!(
            res.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        assert_eq!(
            res.extensions().get::<Rejection>(),
            Some(&Rejection::StoreUnavailable)
        );
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, default.into_body());
    }
}
