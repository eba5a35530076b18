//! [`ResponseBody`]: the response body of the session service.

use std::fmt;

use bytes::Bytes;

use crate::body::InnerOrBytes;

pin_project_lite::pin_project! {
    /// The response body of [`Sessions`](super::Sessions): the inner service's body, or the
    /// bytes of an answer the layer gave itself (a `503` when the store fails under
    /// [`FailurePolicy::Closed`](super::FailurePolicy::Closed)).
    pub struct ResponseBody<B> {
        #[pin]
        body: InnerOrBytes<B>,
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            body: InnerOrBytes::inner(body),
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            body: InnerOrBytes::bytes(data),
        }
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseBody")
            .field("body", &self.body)
            .finish()
    }
}

impl_body! {
    ResponseBody,
    poll_frame(|this, cx| { this.project().body.poll_frame(cx) }),
    is_end_stream(|this| { this.body.is_end_stream() }),
    size_hint(|this| { this.body.size_hint() }),
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http::{Request, Response};
    use http_body_util::{BodyExt, StreamBody};
    use tower::{Layer, ServiceExt, service_fn};

    use crate::session::{MemorySessionStore, Session, SessionLayer};

    /// The layer wraps any inner body, one without `Default` too (a stream), and passes it
    /// through with the cookie it sets.
    #[tokio::test]
    async fn any_inner_body_passes_through() {
        let layer = SessionLayer::new(MemorySessionStore::new()).unwrap();
        let svc = layer.layer(service_fn(|req: Request<String>| async move {
            let session = req.extensions().get::<Session>().cloned().unwrap();
            session.insert("k", &1).await.unwrap();
            let frames = futures_util::stream::iter([
                Ok::<_, Infallible>(http_body::Frame::data(bytes::Bytes::from("str"))),
                Ok(http_body::Frame::data(bytes::Bytes::from("eam"))),
            ]);
            Ok::<_, Infallible>(Response::new(StreamBody::new(frames)))
        }));
        let res = svc.oneshot(Request::new(String::new())).await.unwrap();
        assert_eq!(res.status(), 200);
        assert!(res.headers().contains_key("set-cookie"));
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "stream");
    }
}
