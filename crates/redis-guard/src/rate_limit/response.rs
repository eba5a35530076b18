//! Responses the layer makes itself, and the body type that carries them.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::Decision;
use super::config::Config;
use super::headers;
use crate::problem::problem;

pin_project! {
    /// The response body of a rate-limited service: the inner service's body, or a body the
    /// layer wrote (a `429`, a `503`).
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
        },
        Full {
            data: Option<Bytes>,
        },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B> Default for ResponseBody<B> {
    /// An empty body made by the layer.
    fn default() -> Self {
        Self::full(Bytes::new())
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

/// The answer to a denied request.
pub(crate) fn limited<B>(config: &Config, decision: &Decision) -> Response<ResponseBody<B>> {
    let secs = decision.retry_after_secs();
    let mut res = match &config.response {
        Some(build) => build(decision),
        None => problem(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "Rate limit `{}` exceeded: retry in {secs} s.",
                decision.rule
            ),
            &[
                ("rule", decision.rule.as_ref().into()),
                ("retry_after", secs.into()),
            ],
        ),
    };
    let h = res.headers_mut();
    if !h.contains_key(header::RETRY_AFTER) {
        headers::insert_retry_after(h, secs);
    }
    if !h.contains_key(headers::RATELIMIT) {
        headers::insert_ietf(h, decision);
    }
    if config.legacy_headers() {
        headers::insert_legacy(h, decision);
    }
    res.map(ResponseBody::full)
}

/// An answer the layer gives without a decision (missing key, misconfiguration, Redis down with
/// [`FailurePolicy::Closed`](super::FailurePolicy::Closed)).
pub(crate) fn error<B>(status: StatusCode, detail: &str) -> Response<ResponseBody<B>> {
    let mut res = problem(status, detail, &[]);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        headers::insert_retry_after(res.headers_mut(), 1);
    }
    res.map(ResponseBody::full)
}
