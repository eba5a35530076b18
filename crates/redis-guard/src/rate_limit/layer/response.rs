//! Responses the layer makes itself, and the body type that carries them.

use std::fmt;
use std::task::{Poll, ready};

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body::{Body, Frame};
use pin_project_lite::pin_project;

use super::config::Config;
use super::headers::{self, RateLimitHeaders};
use super::rejection::Rejection;
use crate::body::InnerOrBytes;
use crate::problem::problem;
use crate::rate_limit::Holding;

pin_project! {
    /// The response body of [`RateLimit`](crate::rate_limit::RateLimit): the inner service's body, or the
    /// bytes of an answer the layer gave itself (a `429`, a `503`).
    ///
    /// When the request holds concurrency leases ([`Rule::concurrency`](crate::rate_limit::Rule::concurrency))
    /// or its cost is settled after the response
    /// ([`Rule::charged_after_response`](crate::rate_limit::Rule::charged_after_response)), the body holds
    /// them too: it renews the leases while it is polled, and settles the cost and releases the
    /// leases when it ends (before it reports its end) or, in the background, when it is dropped.
    pub struct ResponseBody<B> {
        #[pin]
        body: InnerOrBytes<B>,
        held: Option<Box<Holding>>,
        // The inner body's last frame, kept back until the cost is settled and the leases
        // released.
        last: Option<Frame<Bytes>>,
    }
}

impl<B> ResponseBody<B> {
    /// The inner service's `body`, passed on as it is.
    pub fn new(body: B) -> Self {
        Self::holding(body, None)
    }

    /// A body of `data`: an answer of the layer's own.
    pub fn full(data: Bytes) -> Self {
        Self {
            body: InnerOrBytes::bytes(data),
            held: None,
            last: None,
        }
    }

    /// The inner service's body, holding `held` until it ends or is dropped.
    pub(super) fn holding(body: B, held: Option<Box<Holding>>) -> Self {
        Self {
            body: InnerOrBytes::inner(body),
            held,
            last: None,
        }
    }
}

/// A response body [`RateLimit`](crate::rate_limit::RateLimit) can answer with: the type the
/// layer's responses have over an inner service whose responses have this body, how it passes
/// the inner body on, and how it writes its own answers (a `429`, a `503`).
///
/// axum's `Body` answers with axum's `Body` itself (the `axum` feature): a request none of
/// whose rules holds a lease or settles its cost after the response gets the inner service's
/// body back untouched, and axum does not box it again; a `429` is one `Body` of bytes. A body
/// that carries the request's leases and settlement ([`Rule::concurrency`],
/// [`Rule::charged_after_response`]) is boxed into a `Body` once.
///
/// Every other body type answers with a [`ResponseBody`] around it. Implemented for
/// `String`, `http_body_util`'s `Full`, `Empty`, `BoxBody`, `UnsyncBoxBody`, `Either`,
/// `Limited`, `StreamBody` and `Channel`, and the response bodies of this crate's layers. A body type of your own implements
/// it in a few lines:
///
/// ```
/// use bytes::Bytes;
/// use redis_guard::rate_limit::{RateLimitBody, ResponseBody};
/// # use std::{pin::Pin, task::{Context, Poll}};
///
/// struct MyBody(Bytes);
/// # impl http_body::Body for MyBody {
/// #     type Data = Bytes;
/// #     type Error = std::convert::Infallible;
/// #     fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>)
/// #         -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> { Poll::Ready(None) }
/// # }
///
/// impl RateLimitBody for MyBody {
///     type Out = ResponseBody<Self>;
///
///     fn passed(body: Self) -> Self::Out {
///         ResponseBody::new(body)
///     }
///
///     fn holding(body: ResponseBody<Self>) -> Self::Out {
///         body
///     }
///
///     fn answer(bytes: Bytes) -> Self::Out {
///         ResponseBody::full(bytes)
///     }
/// }
/// ```
///
/// A body type of another crate (tonic's, for one) is boxed below the layer:
/// `ServiceBuilder::new().layer(rate_limit).map_response_body(UnsyncBoxBody::new)`.
///
/// [`Rule::concurrency`]: crate::rate_limit::Rule::concurrency
/// [`Rule::charged_after_response`]: crate::rate_limit::Rule::charged_after_response
#[diagnostic::on_unimplemented(
    message = "`RateLimit` cannot answer in a body of type `{Self}`",
    label = "the inner service answers with `{Self}`",
    note = "box the inner service's body below the layer: \
            `ServiceBuilder::new().layer(rate_limit).map_response_body(UnsyncBoxBody::new)`, \
            or implement `RateLimitBody` for `{Self}` (see its documentation)"
)]
pub trait RateLimitBody: Body<Data = Bytes> + Sized {
    /// The body of the layer's responses.
    type Out: Body<Data = Bytes>;

    /// The inner service's `body`, nothing held: its request holds no lease and settles
    /// nothing.
    fn passed(body: Self) -> Self::Out;

    /// The inner service's body with what its request holds (leases, a cost to settle), which
    /// it releases and settles when it ends or is dropped.
    fn holding(body: ResponseBody<Self>) -> Self::Out;

    /// A body of `bytes`: an answer of the layer's own.
    fn answer(bytes: Bytes) -> Self::Out;
}

#[cfg(feature = "axum")]
impl RateLimitBody for axum::body::Body {
    type Out = Self;

    fn passed(body: Self) -> Self {
        body
    }

    fn holding(body: ResponseBody<Self>) -> Self {
        Self::new(body)
    }

    fn answer(bytes: Bytes) -> Self {
        Self::from(bytes)
    }
}

/// [`RateLimitBody`] for body types answered in a [`ResponseBody`] around them.
macro_rules! wrapped_bodies {
    ($([$($generics:tt)*] $ty:ty;)*) => {
        $(
            impl<$($generics)*> RateLimitBody for $ty
            where
                $ty: Body<Data = Bytes>,
            {
                type Out = ResponseBody<Self>;

                fn passed(body: Self) -> Self::Out {
                    ResponseBody::new(body)
                }

                fn holding(body: ResponseBody<Self>) -> Self::Out {
                    body
                }

                fn answer(bytes: Bytes) -> Self::Out {
                    ResponseBody::full(bytes)
                }
            }
        )*
    };
}

wrapped_bodies! {
    [] String;
    [] http_body_util::Full<Bytes>;
    [] http_body_util::Empty<Bytes>;
    [E] http_body_util::combinators::BoxBody<Bytes, E>;
    [E] http_body_util::combinators::UnsyncBoxBody<Bytes, E>;
    [L, R] http_body_util::Either<L, R>;
    [B] http_body_util::Limited<B>;
    [S] http_body_util::StreamBody<S>;
    [E] http_body_util::Channel<Bytes, E>;
    [B] ResponseBody<B>;
}

#[cfg(feature = "session")]
wrapped_bodies! {
    [B] crate::session::ResponseBody<B>;
}

#[cfg(feature = "cache")]
wrapped_bodies! {
    [B: Body] crate::cache::ResponseBody<B>;
}

#[cfg(feature = "idempotency")]
wrapped_bodies! {
    [B: Body] crate::idempotency::ResponseBody<B>;
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseBody")
            .field("body", &self.body)
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

impl_body! {
    ResponseBody,
    poll_frame(|this, cx| {
        let this = this.project();
        let Some(held) = this.held.as_mut().filter(|h| !h.is_finished()) else {
            return this.body.poll_frame(cx);
        };
        let Some(mut body) = this.body.inner_mut() else {
            // Only the inner service's bodies hold anything.
            return Poll::Ready(None);
        };
        // The cost is settled and the slot freed before the end reaches the client: before the
        // last frame when the body knows which one that is (hyper stops polling a body once its
        // length is sent), else before reporting the end.
        if held.ended() || body.is_end_stream() {
            held.end();
            ready!(held.poll_finish(cx));
            return Poll::Ready(this.last.take().map(Ok));
        }
        held.poll_renew(cx);
        match ready!(body.as_mut().poll_frame(cx)) {
            Some(Ok(frame)) => {
                if body.is_end_stream() {
                    held.end();
                    if held.poll_finish(cx).is_pending() {
                        *this.last = Some(frame);
                        return Poll::Pending;
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            None => {
                held.end();
                ready!(held.poll_finish(cx));
                Poll::Ready(None)
            }
            Some(Err(e)) => {
                // A failed body is over too: settled and released in the background, the error
                // at once.
                held.finish_detached();
                Poll::Ready(Some(Err(e)))
            }
        }
    }),
    is_end_stream(|this| {
        if this.held.as_ref().is_some_and(|h| !h.is_finished()) {
            // Not before the cost is settled and the leases released: the last poll does it.
            return false;
        }
        this.body.is_end_stream()
    }),
    size_hint(|this| { this.body.size_hint() }),
}

/// The layer's own answer for `rejection`: the
/// [`response`](crate::rate_limit::RateLimitLayerBuilder::response) hook's, else the default;
/// `Retry-After` and, on a denial, the `RateLimit` headers added where it has none; the
/// rejection in its extensions.
pub(crate) fn answer<B: RateLimitBody>(config: &Config, rejection: Rejection) -> Response<B::Out> {
    // The default answer has its `Retry-After` and no `RateLimit` headers: only a hook's is
    // looked into (an abusive client is all denials).
    let (mut res, hooked) = match &config.response {
        Some(hook) => (hook.call(&rejection), true),
        None => (config.default_response(&rejection), false),
    };
    let h = res.headers_mut();
    if hooked
        && let Some(wait) = rejection.retry_after()
        && !h.contains_key(header::RETRY_AFTER)
    {
        headers::insert_retry_after(h, crate::rate_limit::ceil_secs(wait));
    }
    if let Rejection::Limited(decision) = &rejection {
        let policy =
            (!hooked || !h.contains_key(headers::RATELIMIT)).then(|| config.policy(decision));
        RateLimitHeaders::new(decision, policy, config.legacy).insert(h);
    }
    if config.extensions {
        res.extensions_mut().insert(rejection);
    }
    res.map(B::answer)
}

/// The answer of a future polled again after it completed (only reachable by a caller's bug).
pub(crate) fn after_completion<B: RateLimitBody>() -> Response<B::Out> {
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "rate-limit future polled after completion",
        &[],
    )
    .map(B::answer)
}

#[cfg(test)]
pub(super) mod tests {
    use std::convert::Infallible;

    use http::Request;
    use http_body_util::BodyExt;
    use tower::{Layer, ServiceExt, service_fn};

    use super::*;
    use crate::backend::ManualClock;
    use crate::rate_limit::{
        Algorithm, CustomAlgorithm, FailurePolicy, Global, HeaderKey, MemoryLimiter, MissingKey,
        Quota, RateLimitLayer, Rejection, Rule,
    };

    /// The answer of `layer` (as [`answered`]), its body collected.
    pub(in crate::rate_limit) async fn collected(
        layer: &RateLimitLayer,
        key: Option<&str>,
    ) -> Response<Bytes> {
        let (parts, body) = answered(layer, key).await.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Response::from_parts(parts, body)
    }

    /// A rule the memory limiter cannot decide (custom Lua): every evaluation fails, as with
    /// Redis down.
    pub(in crate::rate_limit) fn failing(name: &str) -> Rule {
        Rule::new(name, Quota::per_minute(10)).with_algorithm(Algorithm::Custom(
            CustomAlgorithm::new("lua", "return function() end"),
        ))
    }

    /// The key from `x-key`, the header [`answered`] sends it in.
    pub(in crate::rate_limit) fn x_key() -> HeaderKey {
        HeaderKey::new("x-key")
    }

    /// A layer builder over a new memory limiter, of `rule` keyed by [`x_key`].
    pub(in crate::rate_limit) fn keyed(rule: Rule) -> crate::rate_limit::RateLimitLayerBuilder {
        RateLimitLayer::builder(MemoryLimiter::new()).rule_with(rule, x_key())
    }

    /// Status, the headers the layer writes (in a fixed order, absent ones as `-`) and the body.
    async fn answer(layer: &RateLimitLayer, key: Option<&str>) -> (u16, Vec<String>, String) {
        let res = collected(layer, key).await;
        let headers = [
            "ratelimit-policy",
            "ratelimit",
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "retry-after",
            "content-type",
        ]
        .iter()
        .map(|name| {
            res.headers()
                .get(*name)
                .map_or("-".to_owned(), |v| v.to_str().unwrap().to_owned())
        })
        .collect();
        let status = res.status().as_u16();
        (
            status,
            headers,
            String::from_utf8(res.body().to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn headers_and_bodies_byte_for_byte() {
        let clock = ManualClock::new();
        let layer = |missing| {
            RateLimitLayer::builder(MemoryLimiter::builder().clock(clock.clone()).build())
                .rule("burst", Global, Quota::per_second(2))
                .rule("key", x_key(), Quota::per_minute(3))
                .missing_key(missing)
                .legacy_headers(true)
                .build()
                .unwrap()
        };
        let skip = layer(MissingKey::Skip);
        // The headers in `answer`'s order, ` | ` between two.
        let expect = |status, headers: &str, body: &str| {
            let headers = headers.split(" | ").map(str::to_owned).collect();
            (status, headers, body.to_owned())
        };
        assert_eq!(
            answer(&skip, Some("k")).await,
            expect(
                200,
                r#""burst";q=2;w=1, "key";q=3;w=60 | "burst";r=1;t=1, "key";r=2;t=20 | 2 | 1 | 1 | - | -"#,
                "ok"
            )
        );
        // The key's rule is skipped: the headers name the burst rule alone.
        assert_eq!(
            answer(&skip, None).await,
            expect(
                200,
                r#""burst";q=2;w=1 | "burst";r=0;t=1 | 2 | 0 | 1 | - | -"#,
                "ok"
            )
        );
        assert_eq!(
            answer(&skip, Some("k")).await,
            expect(
                429,
                r#""burst";q=2;w=1, "key";q=3;w=60 | "burst";r=0;t=1, "key";r=1;t=40 | 2 | 0 | 1 | 1 | application/problem+json"#,
                "{\"detail\":\"Rate limit `burst` exceeded: retry in 1 s.\",\"retry_after\":1,\"rule\":\"burst\",\"status\":429,\"title\":\"Too Many Requests\",\"type\":\"about:blank\"}"
            )
        );
        assert_eq!(
            answer(&layer(MissingKey::default()), None).await,
            expect(
                400,
                "- | - | - | - | - | - | application/problem+json",
                "{\"detail\":\"The request lacks the rate-limit key.\",\"status\":400,\"title\":\"Bad Request\",\"type\":\"about:blank\"}"
            )
        );
    }

    /// The answer of `layer` over an inner service that says `ok`, to a request with `x-key:
    /// key` (none: without the header).
    async fn answered(layer: &RateLimitLayer, key: Option<&str>) -> Response<ResponseBody<String>> {
        let svc = layer.layer(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::from("ok")))
        }));
        let mut req = Request::new(String::new());
        if let Some(key) = key {
            req.headers_mut().insert("x-key", key.parse().unwrap());
        }
        svc.oneshot(req).await.unwrap()
    }

    /// A layer over a limiter that fails every decision (the memory limiter runs no Lua, as
    /// with Redis down), its key from `x-key`.
    fn failing_layer(policy: FailurePolicy) -> crate::rate_limit::RateLimitLayerBuilder {
        keyed(failing("api"))
            .failure_policy(policy)
            .extensions(true)
    }

    /// The limiter down and a key missing; a denial's is the `Rejection` docs' example.
    #[tokio::test]
    async fn every_own_answer_carries_its_rejection() {
        let layer = failing_layer(FailurePolicy::Closed).build().unwrap();
        let why =
            |res: &Response<ResponseBody<String>>| res.extensions().get::<Rejection>().cloned();
        let res = answered(&layer, Some("k")).await;
        assert_eq!(
            (res.status().as_u16(), why(&res)),
            (503, Some(Rejection::Unavailable))
        );
        let res = answered(&layer, None).await;
        let missing = Rejection::KeyMissing {
            rule: "api".into(),
            status: StatusCode::BAD_REQUEST,
        };
        assert_eq!((res.status().as_u16(), why(&res)), (400, Some(missing)));
    }

    /// One hook writes every answer of the layer; the layer adds the headers it lacks.
    #[tokio::test]
    async fn a_hook_writes_every_own_answer() {
        let layer = failing_layer(FailurePolicy::Closed)
            .response(|why| {
                let mut res =
                    Response::new(Bytes::from(format!("{}: {why}", why.status().as_u16())));
                *res.status_mut() = why.status();
                res
            })
            .build()
            .unwrap();
        let res = collected(&layer, Some("k")).await;
        assert_eq!(
            res.body(),
            "503: The rate limiter is unavailable; retry shortly."
        );
        assert_eq!(res.headers()["retry-after"], "1", "added");
        let res = collected(&layer, None).await;
        assert_eq!(res.body(), "400: The request lacks the rate-limit key.");
        assert!(!res.headers().contains_key("retry-after"));
        // Leaving an answer alone: the rejection's default is the layer's, byte for byte.
        let default = failing_layer(FailurePolicy::Closed).build().unwrap();
        let alone = failing_layer(FailurePolicy::Closed)
            .response(Rejection::response)
            .build()
            .unwrap();
        for key in [Some("k"), None] {
            let (a, b) = (collected(&default, key).await, collected(&alone, key).await);
            assert_eq!(
                (a.status(), a.headers(), a.body()),
                (b.status(), b.headers(), b.body())
            );
        }
    }

    /// Over an inner service answering axum's `Body`, the layer answers in that `Body` itself
    /// (axum boxes any other body type once more): the inner body passed on as it is, its own
    /// `429` as bytes, and a body that holds a lease until it ends.
    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn over_axum_the_layer_answers_in_axum_s_body() {
        use axum::body::Body;

        async fn status_and_body(
            svc: &mut (
                     impl tower::Service<Request<String>, Response = Response<Body>, Error = Infallible>
                     + Clone
                 ),
        ) -> (u16, Bytes) {
            let res = svc.clone().oneshot(Request::new(String::new())).await;
            let (parts, body) = res.unwrap().into_parts();
            (
                parts.status.as_u16(),
                body.collect().await.unwrap().to_bytes(),
            )
        }

        let inner = service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(Body::from("ok")))
        });
        let mut svc = RateLimitLayer::new(MemoryLimiter::new(), "api", Global, Quota::per_hour(1))
            .unwrap()
            .layer(inner);
        assert_eq!(status_and_body(&mut svc).await, (200, Bytes::from("ok")));
        let (status, body) = status_and_body(&mut svc).await;
        assert_eq!(status, 429);
        assert!(
            body.starts_with(b"{\"detail\":\"Rate limit `api` exceeded"),
            "{body:?}"
        );

        // A lease is held by the body until it ends, in the `Body` too.
        let leased = RateLimitLayer::builder(MemoryLimiter::new())
            .rule_with(crate::rate_limit::Rule::concurrency("one", 1), Global)
            .build()
            .unwrap()
            .layer(inner);
        let held = leased.clone().oneshot(Request::new(String::new())).await;
        let held: Response<Body> = held.unwrap();
        let (status, _) = status_and_body(&mut leased.clone()).await;
        assert_eq!(status, 429, "the first body holds the only lease");
        assert_eq!(held.into_body().collect().await.unwrap().to_bytes(), "ok");
        let (status, _) = status_and_body(&mut leased.clone()).await;
        assert_eq!(status, 200, "released when the body ended");
    }
}
