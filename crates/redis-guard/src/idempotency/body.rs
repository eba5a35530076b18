//! [`ResponseBody`]: the body of a response that went through the layer, and reading a body up
//! to a limit.

use std::fmt;
use std::pin::Pin;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

use crate::body::InnerOrBytes;

pin_project_lite::pin_project! {
    /// The body of a response from an [`Idempotency`](super::Idempotency) service: the inner
    /// service's own body (a request the layer does not guard, a response it does not store),
    /// or bytes (a stored or replayed response, the layer's own answers).
    pub struct ResponseBody<B: Body> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<B: Body> {
        // The inner body or bytes, as every layer's body is.
        Plain { #[pin] body: InnerOrBytes<B> },
        // What was read while deciding (data, then trailers), then the rest of the inner body.
        Resumed { read: Option<Bytes>, trailers: Option<Frame<Bytes>>, rest: Pin<Box<B>> },
        // Reading the inner body failed while the layer read it: the same error, once.
        Failed { error: Option<B::Error> },
    }
}

impl<B: Body> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self::plain(InnerOrBytes::inner(body))
    }

    pub(crate) fn bytes(data: Bytes) -> Self {
        Self::plain(InnerOrBytes::bytes(data))
    }

    fn plain(body: InnerOrBytes<B>) -> Self {
        Self {
            kind: Kind::Plain { body },
        }
    }
}

impl<B: Body> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match &self.kind {
            Kind::Plain {
                body: InnerOrBytes::Inner { .. },
            }
            | Kind::Resumed { .. } => "ResponseBody::Inner",
            Kind::Plain {
                body: InnerOrBytes::Bytes { .. },
            } => "ResponseBody::Bytes",
            Kind::Failed { .. } => "ResponseBody::Failed",
        })
    }
}

impl_body! {
    ResponseBody,
    poll_frame(|this, cx| {
        match this.project().kind.project() {
            KindProj::Plain { body } => body.poll_frame(cx),
            KindProj::Resumed {
                read,
                trailers,
                rest,
            } => match read.take().map(Frame::data).or_else(|| trailers.take()) {
                Some(frame) => Poll::Ready(Some(Ok(frame))),
                None => rest.as_mut().poll_frame(cx),
            },
            KindProj::Failed { error } => Poll::Ready(error.take().map(Err)),
        }
    }),
    is_end_stream(|this| {
        match &this.kind {
            Kind::Plain { body } => body.is_end_stream(),
            Kind::Resumed {
                read,
                trailers,
                rest,
            } => read.is_none() && trailers.is_none() && rest.is_end_stream(),
            Kind::Failed { error } => error.is_none(),
        }
    }),
    size_hint(|this| {
        match &this.kind {
            Kind::Plain { body } => body.size_hint(),
            Kind::Resumed { read, rest, .. } => {
                let read = read.as_ref().map_or(0, |d| d.len() as u64);
                let hint = rest.size_hint();
                let mut out = SizeHint::new();
                out.set_lower(hint.lower().saturating_add(read));
                if let Some(upper) = hint.upper() {
                    out.set_upper(upper.saturating_add(read));
                }
                out
            }
            Kind::Failed { .. } => SizeHint::default(),
        }
    }),
}

/// A body read up to a limit.
pub(crate) enum Read<B: Body> {
    /// All of it, within the limit.
    Whole(Bytes),
    /// Larger than the limit: what was read, then the rest, to pass on.
    TooLarge(ResponseBody<B>),
    /// It has trailers (which the layer does not store): the same, to pass on.
    Trailers(ResponseBody<B>),
    /// Reading it failed.
    Failed(ResponseBody<B>),
}

/// Reads `body` while it stays within `limit` bytes. Holds at most `limit` bytes plus one frame.
pub(crate) async fn read<B: Body<Data = Bytes>>(body: B, limit: usize) -> Read<B> {
    let mut rest = Box::pin(body);
    let resumed = |read: BytesMut, trailers, rest| ResponseBody {
        kind: Kind::Resumed {
            read: (!read.is_empty()).then(|| read.freeze()),
            trailers,
            rest,
        },
    };
    if rest.size_hint().lower() > limit as u64 {
        return Read::TooLarge(resumed(BytesMut::new(), None, rest));
    }
    let mut buf = BytesMut::new();
    loop {
        let frame = match std::future::poll_fn(|cx| rest.as_mut().poll_frame(cx)).await {
            None => return Read::Whole(buf.freeze()),
            Some(Ok(frame)) => frame,
            Some(Err(error)) => {
                return Read::Failed(ResponseBody {
                    kind: Kind::Failed { error: Some(error) },
                });
            }
        };
        match frame.into_data() {
            Ok(data) if buf.len() + data.len() <= limit => buf.extend_from_slice(&data),
            Ok(data) => {
                buf.extend_from_slice(&data);
                return Read::TooLarge(resumed(buf, None, rest));
            }
            Err(trailers) => return Read::Trailers(resumed(buf, Some(trailers), rest)),
        }
    }
}
