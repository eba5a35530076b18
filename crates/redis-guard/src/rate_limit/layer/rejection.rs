//! [`Rejection`]: why a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) answered a
//! request itself, and its default answer.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::headers::{self, LastWritten, RateLimitHeaders};
use crate::problem::{problem, write_str};
use crate::rate_limit::{Decision, RuleState, ceil_secs};

/// Why a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) answered a request itself
/// instead of calling the inner service.
///
/// The layer puts it in its answer's extensions when asked
/// ([`RateLimitLayerBuilder::extensions`](crate::rate_limit::RateLimitLayerBuilder::extensions)),
/// so an outer layer or a test can read why;
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
/// let layer = RateLimitLayer::builder(MemoryLimiter::new())
///     .rule("api", Global, Quota::per_minute(1))
///     .extensions(true)
///     .build()?;
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
        if let Self::Limited(decision) = self {
            let prepared = PreparedDenial::new(&decision.rule);
            return prepared.response_after(decision.retry_after_secs());
        }
        let mut res = problem(self.status(), self.detail(), &[]);
        if let Some(wait) = self.retry_after() {
            headers::insert_retry_after(res.headers_mut(), crate::rate_limit::ceil_secs(wait));
        }
        res
    }

    fn detail(&self) -> &'static str {
        match self {
            Self::Limited(_) => "Rate limit exceeded.",
            Self::Unavailable => "The rate limiter is unavailable; retry shortly.",
            Self::KeyMissing { .. } => "The request lacks the rate-limit key.",
            Self::Misconfigured => "The rate limiter is misconfigured.",
        }
    }
}

/// The layer's default answer, for a handler that limits with the limiter itself
/// ([`MemoryLimiter::check`](crate::rate_limit::MemoryLimiter::check),
/// [`RedisLimiter::check`](crate::rate_limit::RedisLimiter::check)) and answers a denial as the layer
/// would: [`response`](Rejection::response), and on a denial the `RateLimit` headers
/// ([`Decision::headers`]); the rejection in its extensions.
///
/// ```
/// use axum::{Router, response::{IntoResponse, Response}, routing::post};
/// use redis_guard::rate_limit::{Key, MemoryLimiter, Quota, Rejection, Rule};
///
/// async fn export(limiter: MemoryLimiter) -> Response {
///     let rule = Rule::new("export", Quota::per_hour(3));
///     match limiter.check(&rule, Key::from("tenant-7")).await {
///         Ok(decision) if decision.allowed => (decision.headers(), "exported").into_response(),
///         Ok(decision) => Rejection::Limited(decision).into_response(), // 429, Retry-After
///         Err(_) => Rejection::Unavailable.into_response(),              // 503, Retry-After: 1
///     }
/// }
/// let limiter = MemoryLimiter::new();
/// let app: Router = Router::new().route("/export", post(move || export(limiter.clone())));
/// # let _ = app;
/// ```
#[cfg(feature = "axum")]
impl axum::response::IntoResponse for Rejection {
    fn into_response(self) -> axum::response::Response {
        let mut res = self.response();
        if let Self::Limited(decision) = &self {
            insert_headers(decision, res.headers_mut());
        }
        res.extensions_mut().insert(self);
        res.map(axum::body::Body::from)
    }
}

impl Decision {
    /// The headers a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) with the default
    /// header settings writes for this decision: `RateLimit-Policy` and `RateLimit` for its
    /// rules (none for concurrency rules only), `RateLimit-Exceeded` when a soft rule was
    /// exceeded, and `Retry-After` when it is a denial. For a decision of a direct call
    /// ([`MemoryLimiter::check`](crate::rate_limit::MemoryLimiter::check),
    /// [`RedisLimiter::check`](crate::rate_limit::RedisLimiter::check), `check_all`), whose
    /// answer the handler writes: `(decision.headers(), body)` is an axum response.
    ///
    /// ```
    /// use redis_guard::rate_limit::{Key, MemoryLimiter, Quota, Rule};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = MemoryLimiter::new();
    /// let rule = Rule::new("export", Quota::per_hour(1));
    /// let admitted = limiter.check(&rule, Key::from("tenant-7")).await?;
    /// let headers = admitted.headers();
    /// assert_eq!(headers["ratelimit-policy"], r#""export";q=1;w=3600"#);
    /// assert_eq!(headers["ratelimit"], r#""export";r=0;t=3600"#);
    /// assert!(!headers.contains_key("retry-after"));
    ///
    /// let denied = limiter.check(&rule, Key::from("tenant-7")).await?;
    /// assert_eq!(denied.headers()["retry-after"], "3600");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn headers(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        insert_headers(self, &mut map);
        if !self.allowed {
            headers::insert_retry_after(&mut map, self.retry_after_secs());
        }
        map
    }
}

/// The `RateLimit` headers of `decision`, as a layer with the default header settings writes them.
fn insert_headers(decision: &Decision, map: &mut HeaderMap) {
    let policy = headers::decision_policy(decision);
    RateLimitHeaders::new(decision, Some(policy), false).insert(map);
}

/// What the client is told: the answer's `detail` (and a gRPC answer's `grpc-message`).
impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Limited(decision) => write!(
                f,
                "{LIMITED_BEFORE_RULE}{}{LIMITED_AFTER_RULE}{}{LIMITED_END}",
                decision.rule,
                decision.retry_after_secs()
            ),
            other => f.write_str(other.detail()),
        }
    }
}

/// The constant pieces of a denial's text, around the rule's name and the wait.
const LIMITED_BEFORE_RULE: &str = "Rate limit `";
const LIMITED_AFTER_RULE: &str = "` exceeded: retry in ";
const LIMITED_END: &str = " s.";

/// The default `429` of one rule ([`Rejection::response`]), prepared when the layer is built: a
/// denial writes only its wait into it. Byte for byte the problem document `problem` writes.
#[derive(Clone, Debug)]
pub(crate) struct PreparedDenial {
    rule: Arc<str>,
    /// The document up to the wait in `detail`.
    head: Box<[u8]>,
    /// The document after the `retry_after` number.
    tail: Box<[u8]>,
    /// The last document and `Retry-After`, by wait: the denials of one second share them.
    last: LastWritten<u64, (Bytes, HeaderValue)>,
    /// The last whole answer of a one-rule layer, by wait and the rule's limit, remaining and
    /// reset (seconds).
    last_whole: LastWritten<(u64, u32, u32, u64), (Bytes, HeaderMap)>,
}

/// Between the wait in `detail` and the `retry_after` number.
const PREPARED_MIDDLE: &str = " s.\",\"retry_after\":";

impl PreparedDenial {
    pub(crate) fn new(rule: &Arc<str>) -> Self {
        // The members sorted by name, as `problem` writes them: detail, retry_after, rule,
        // status, title, type. A JSON string escapes character by character, so the rule's
        // name escaped alone is the detail's part of it.
        let mut name = Vec::new();
        write_str(&mut name, rule);
        let inner = &name[1..name.len() - 1];
        let mut head = Vec::new();
        head.extend_from_slice(b"{\"detail\":\"");
        head.extend_from_slice(LIMITED_BEFORE_RULE.as_bytes());
        head.extend_from_slice(inner);
        head.extend_from_slice(LIMITED_AFTER_RULE.as_bytes());
        let status = StatusCode::TOO_MANY_REQUESTS;
        let mut tail = Vec::new();
        tail.extend_from_slice(b",\"rule\":");
        tail.extend_from_slice(&name);
        tail.extend_from_slice(b",\"status\":");
        tail.extend_from_slice(status.as_str().as_bytes());
        tail.extend_from_slice(b",\"title\":");
        write_str(&mut tail, status.canonical_reason().unwrap_or("Error"));
        tail.extend_from_slice(b",\"type\":\"about:blank\"}");
        Self {
            rule: Arc::clone(rule),
            head: head.into(),
            tail: tail.into(),
            last: LastWritten::default(),
            last_whole: LastWritten::default(),
        }
    }

    pub(crate) fn is_of(&self, rule: &str) -> bool {
        *self.rule == *rule
    }

    /// The `429` of a denial by this rule that may be retried after `secs` seconds (at least 1).
    pub(crate) fn response_after(&self, secs: u64) -> Response<Bytes> {
        let (body, retry_after) = self.last.get_or(secs, || self.write(secs));
        let mut res = Response::new(body);
        *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        let headers = res.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        headers.insert(http::header::RETRY_AFTER, retry_after);
        res
    }

    /// The `429` of a one-rule layer: `headers` writes the rate-limit headers for `state`.
    pub(crate) fn response_of_one(
        &self,
        secs: u64,
        state: &RuleState,
        headers: impl FnOnce(&mut HeaderMap),
    ) -> Response<Bytes> {
        let whole = (
            secs,
            state.limit,
            state.remaining,
            ceil_secs(state.reset_after),
        );
        let (body, map) = self.last_whole.get_or(whole, || {
            let (mut parts, body) = self.response_after(secs).into_parts();
            headers(&mut parts.headers);
            (body, parts.headers)
        });
        let mut res = Response::new(body);
        *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        *res.headers_mut() = map;
        res
    }

    /// The document and `Retry-After` of a wait of `secs`.
    fn write(&self, secs: u64) -> (Bytes, HeaderValue) {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(secs).as_bytes();
        let mut body = Vec::with_capacity(
            self.head.len() + PREPARED_MIDDLE.len() + self.tail.len() + 2 * digits.len(),
        );
        body.extend_from_slice(&self.head);
        body.extend_from_slice(digits);
        body.extend_from_slice(PREPARED_MIDDLE.as_bytes());
        body.extend_from_slice(digits);
        body.extend_from_slice(&self.tail);
        (Bytes::from(body), headers::uint_value(secs.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http::{HeaderMap, Request, Response, StatusCode, header};
    use http_body_util::BodyExt;
    use tower::{Layer, ServiceExt, service_fn};

    use super::Rejection;
    use crate::rate_limit::{Decision, Global, MemoryLimiter, Mode, Quota, RateLimitLayer, Rule};

    /// A layer of a windowed rule (2 a minute), a soft one (1 a minute) and a concurrency one:
    /// every kind of header a decision can carry.
    fn layer() -> RateLimitLayer {
        RateLimitLayer::builder(MemoryLimiter::new())
            .rule_with(Rule::new("api", Quota::per_minute(2)), Global)
            .rule_with(
                Rule::new("soft", Quota::per_minute(1)).with_mode(Mode::Soft),
                Global,
            )
            .rule_with(Rule::concurrency("jobs", 5), Global)
            .extensions(true)
            .build()
            .unwrap()
    }

    /// `n` answers of [`layer`]: the status, the headers, the body, and the decision (an
    /// admitted request's, which the inner service hands back in its answer's extensions, or
    /// the rejection's).
    async fn answers(n: usize) -> Vec<(StatusCode, HeaderMap, Bytes, Option<Rejection>, Decision)> {
        let svc = layer().layer(service_fn(|req: Request<String>| async move {
            let mut res = Response::new(String::new());
            if let Some(d) = req.extensions().get::<Decision>() {
                res.extensions_mut().insert(d.clone());
            }
            Ok::<_, Infallible>(res)
        }));
        let mut out = Vec::new();
        for _ in 0..n {
            let res = svc
                .clone()
                .oneshot(Request::new(String::new()))
                .await
                .unwrap();
            let (parts, body) = res.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            let rejection = parts.extensions.get::<Rejection>().cloned();
            let decision = parts
                .extensions
                .get::<Decision>()
                .or_else(|| rejection.as_ref().and_then(Rejection::decision))
                .cloned()
                .expect("a decision");
            out.push((parts.status, parts.headers, body, rejection, decision));
        }
        out
    }

    /// A rule's prepared `429` is the document the problem writer writes for it, byte for
    /// byte: status, headers and document, for names that need escaping and for waits of every
    /// length.
    #[test]
    fn a_prepared_denial_is_the_problem_writers_document() {
        use std::sync::Arc;

        use super::{PreparedDenial, headers};
        use crate::problem::{Member, problem};

        let waits = [1, 2, 59, 86_400 * 365, u64::MAX];
        for name in ["api", "login-1s", "a\"b\\c\n\t\u{1}\u{7f}é🙂/", ""] {
            let rule: Arc<str> = name.into();
            let prepared = PreparedDenial::new(&rule);
            assert!(prepared.is_of(name));
            assert!(!prepared.is_of("other"));
            // Each wait twice (the second from the last one written), and back.
            for &secs in waits.iter().chain(&waits).chain(waits.iter().rev()) {
                let detail = format!("Rate limit `{name}` exceeded: retry in {secs} s.");
                let extra = [
                    ("retry_after", Member::Uint(secs)),
                    ("rule", Member::Str(name)),
                ];
                let mut b = problem(StatusCode::TOO_MANY_REQUESTS, &detail, &extra);
                headers::insert_retry_after(b.headers_mut(), secs);
                let a = prepared.response_after(secs);
                assert_eq!(
                    (a.status(), a.headers(), a.body()),
                    (b.status(), b.headers(), b.body()),
                    "{name:?} {secs}"
                );
                assert_eq!(
                    a.headers().keys().collect::<Vec<_>>(),
                    b.headers().keys().collect::<Vec<_>>(),
                    "the headers' order"
                );
            }
        }
    }

    /// A decision's headers are those the layer writes for it: admitted (the soft rule
    /// exceeded on the second request) and denied, the body's `Content-Type` aside.
    #[tokio::test]
    async fn a_decisions_headers_are_the_layers() {
        let all = answers(3).await;
        assert_eq!(
            all.iter().map(|a| a.0.as_u16()).collect::<Vec<_>>(),
            [200, 200, 429]
        );
        for (status, mut written, _, _, decision) in all {
            written.remove(header::CONTENT_TYPE);
            assert!(written.contains_key("ratelimit"), "{status}: {written:?}");
            assert_eq!(decision.headers(), written, "{status}");
        }
    }

    /// A handler that returns a rejection answers what the layer answers by default: status,
    /// headers (`Retry-After`, the `RateLimit` ones), problem document, and the rejection in the
    /// extensions.
    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn a_handler_returning_a_rejection_answers_as_the_layer() {
        use axum::{Router, routing::get};

        let (status, headers, body, rejection, _) = answers(3).await.pop().unwrap();
        let rejection = rejection.expect("the third request is denied");
        let mut answered = vec![(status, headers, body, rejection.clone())];
        for other in [Rejection::Unavailable, Rejection::Misconfigured] {
            let res = other.response();
            let (parts, body) = res.into_parts();
            answered.push((parts.status, parts.headers, body, other));
        }
        for (status, headers, body, rejection) in answered {
            let returned = rejection.clone();
            let app: Router = Router::new().route("/", get(move || async move { returned }));
            let mut res = app
                .oneshot(Request::new(axum::body::Body::empty()))
                .await
                .unwrap();
            assert_eq!(res.status(), status, "{rejection:?}");
            // axum's router adds the body's length, to the layer's answer as to this one.
            let length = res.headers_mut().remove(header::CONTENT_LENGTH);
            assert_eq!(length, Some(body.len().into()), "{rejection:?}");
            assert_eq!(res.headers(), &headers, "{rejection:?}");
            assert_eq!(
                res.headers()[header::CONTENT_TYPE],
                "application/problem+json"
            );
            assert_eq!(res.extensions().get::<Rejection>(), Some(&rejection));
            let got = res.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(got, body, "{rejection:?}");
        }
    }
}
