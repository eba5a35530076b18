//! [`Rejection`]: why a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) answered a
//! request itself, and its default answer.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};

use super::headers::{self, Digits};
use crate::problem::{Member, problem, problem_of_pieces};
use crate::rate_limit::Decision;

/// Why a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) answered a request itself
/// instead of calling the inner service.
///
/// The layer puts it in its answer's extensions, so an outer layer or a test can read why;
/// [`RateLimitLayerBuilder::response`](crate::rate_limit::RateLimitLayerBuilder::response)
/// gets it to write the answer's body.
///
/// ```
/// use http::{Request, Response};
/// use redis_guard::rate_limit::{Global, MemoryLimiter, Quota, RateLimitLayer, Rejection};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = RateLimitLayer::new(MemoryLimiter::new(), "api", Global, Quota::per_minute(1))?;
/// let svc = layer.layer(service_fn(|_: Request<String>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::from("ok")))
/// }));
/// let first = svc.clone().oneshot(Request::new(String::new())).await?;
/// assert!(first.extensions().get::<Rejection>().is_none());
/// let second = svc.oneshot(Request::new(String::new())).await?;
/// let why = second.extensions().get::<Rejection>().expect("answered by the layer");
/// assert_eq!(why.status(), 429);
/// assert_eq!(why.decision().map(|d| &*d.rule), Some("api"));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// A rule denied the request: `429 Too Many Requests` with `Retry-After`. The decision
    /// names the rule and the wait.
    Limited(Decision),
    /// The limiter could not decide (Redis down or too slow, the breaker open) and a rule's
    /// [`FailurePolicy`](crate::rate_limit::FailurePolicy) is `Closed`: `503` with
    /// `Retry-After: 1`.
    Unavailable,
    /// A rule's key is missing and [`MissingKey::Reject`](crate::rate_limit::MissingKey::Reject)
    /// answers with `status` (`400` by default).
    #[non_exhaustive]
    KeyMissing {
        /// The rule whose key is missing.
        rule: Arc<str>,
        /// The status the policy answers with.
        status: StatusCode,
    },
    /// The layer cannot decide as it is set up: a cost function asked for more than the burst,
    /// a quota lookup failed or gave a quota that cannot work, or a key extractor cannot work
    /// (e.g. no `ConnectInfo`; it logs the fix once). `500`.
    Misconfigured,
}

impl Rejection {
    /// The status of the layer's answer: `429`, `503`, the missing key's, or `500`.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Limited(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::KeyMissing { status, .. } => *status,
            Self::Misconfigured => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The denial's decision (rule, limit, wait), for [`Limited`](Self::Limited).
    #[must_use]
    pub fn decision(&self) -> Option<&Decision> {
        match self {
            Self::Limited(decision) => Some(decision),
            _ => None,
        }
    }

    /// How long the client should wait before it retries: the denial's wait, one second while
    /// the limiter is unavailable, else `None`.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Limited(decision) => Some(decision.retry_after),
            Self::Unavailable => Some(Duration::from_secs(1)),
            _ => None,
        }
    }

    /// The layer's default answer: an `application/problem+json` document (RFC 9457) whose
    /// `detail` is this rejection's text, a denial's also with `retry_after` and `rule`, and
    /// `Retry-After` when [`retry_after`](Self::retry_after) says one. The layer adds the
    /// `RateLimit` headers to a denial. A
    /// [`response`](crate::rate_limit::RateLimitLayerBuilder::response) hook that replaces only
    /// some answers returns this for the others.
    #[must_use]
    pub fn response(&self) -> Response<Bytes> {
        let mut res = match self {
            Self::Limited(decision) => {
                let secs = decision.retry_after_secs();
                problem_of_pieces(
                    StatusCode::TOO_MANY_REQUESTS,
                    &limited_pieces(decision, &Digits::new(secs)),
                    &[
                        ("retry_after", Member::Uint(secs)),
                        ("rule", Member::Str(&decision.rule)),
                    ],
                )
            }
            other => problem(other.status(), other.detail(), &[]),
        };
        if let Some(wait) = self.retry_after() {
            headers::insert_retry_after(res.headers_mut(), crate::rate_limit::ceil_secs(wait));
        }
        res
    }

    /// The text of an answer without a decision.
    fn detail(&self) -> &'static str {
        match self {
            Self::Limited(_) => "Rate limit exceeded.",
            Self::Unavailable => "The rate limiter is unavailable; retry shortly.",
            Self::KeyMissing { .. } => "The request lacks the rate-limit key.",
            Self::Misconfigured => "The rate limiter is misconfigured.",
        }
    }
}

/// What the client is told: the answer's `detail` (and a gRPC answer's `grpc-message`).
impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Limited(decision) => {
                let secs = Digits::new(decision.retry_after_secs());
                limited_pieces(decision, &secs)
                    .iter()
                    .try_for_each(|p| f.write_str(p))
            }
            other => f.write_str(other.detail()),
        }
    }
}

/// A denial's text in pieces, `secs` the wait in seconds: the default `429` writes them into
/// its problem document as they are (no formatter, no string of its own: an abusive client is
/// all denials).
fn limited_pieces<'a>(decision: &'a Decision, secs: &'a Digits) -> [&'a str; 5] {
    [
        "Rate limit `",
        &decision.rule,
        "` exceeded: retry in ",
        secs.as_str(),
        " s.",
    ]
}
