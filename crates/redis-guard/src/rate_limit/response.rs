//! Responses the layer makes itself, and the body type that carries them.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::Decision;
use super::headers;
use super::layer::Config;

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

/// An RFC 9457 problem document.
fn problem(
    status: StatusCode,
    detail: &str,
    extra: &[(&str, serde_json::Value)],
) -> Response<Bytes> {
    let mut doc = serde_json::Map::new();
    doc.insert("type".into(), "about:blank".into());
    doc.insert(
        "title".into(),
        status.canonical_reason().unwrap_or("Error").into(),
    );
    doc.insert("status".into(), status.as_u16().into());
    doc.insert("detail".into(), detail.into());
    for (k, v) in extra {
        doc.insert((*k).to_owned(), v.clone());
    }
    let body = serde_json::Value::Object(doc).to_string();
    let mut res = Response::new(Bytes::from(body));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    res
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
