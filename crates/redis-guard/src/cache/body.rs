//! [`CacheBody`]: the response body of a cached route, and collecting a body up to a limit.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// The body of a response that went through a [`CacheService`](super::CacheService): the
/// cached bytes, or the handler's own body (after the part the layer read while deciding
/// whether it fits the entry size limit).
pub struct CacheBody<B: Body> {
    kind: Kind<B>,
}

enum Kind<B: Body> {
    Full(Option<Bytes>),
    /// Reading the handler's body failed while the layer read it: the same error, once.
    Failed(Option<B::Error>),
    Inner {
        pending: VecDeque<Frame<Bytes>>,
        body: Pin<Box<B>>,
    },
}

impl<B: Body> CacheBody<B> {
    pub(crate) fn failed(e: B::Error) -> Self {
        Self {
            kind: Kind::Failed(Some(e)),
        }
    }

    pub(crate) fn full(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Full((!bytes.is_empty()).then_some(bytes)),
        }
    }

    pub(crate) fn inner(body: B) -> Self {
        Self::resumed(VecDeque::new(), Box::pin(body))
    }

    fn resumed(pending: VecDeque<Frame<Bytes>>, body: Pin<Box<B>>) -> Self {
        Self {
            kind: Kind::Inner { pending, body },
        }
    }
}

// Nothing is pinned in place: the handler's body sits in its own `Pin<Box<_>>`, and the
// error is moved out by value.
impl<B: Body> Unpin for CacheBody<B> {}

impl<B: Body> fmt::Debug for CacheBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            Kind::Full(_) => "CacheBody::Cached",
            Kind::Failed(_) => "CacheBody::Failed",
            Kind::Inner { .. } => "CacheBody::Streamed",
        })
    }
}

impl<B> Body for CacheBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match &mut self.get_mut().kind {
            Kind::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Kind::Failed(e) => Poll::Ready(e.take().map(Err)),
            Kind::Inner { pending, body } => match pending.pop_front() {
                Some(frame) => Poll::Ready(Some(Ok(frame))),
                None => body.as_mut().poll_frame(cx),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(data) => data.is_none(),
            Kind::Failed(e) => e.is_none(),
            Kind::Inner { pending, body } => pending.is_empty() && body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(data) => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
            Kind::Failed(_) => SizeHint::default(),
            Kind::Inner { pending, body } => {
                let read: u64 = pending
                    .iter()
                    .filter_map(Frame::data_ref)
                    .map(|d| d.len() as u64)
                    .sum();
                let hint = body.size_hint();
                let mut out = SizeHint::new();
                out.set_lower(hint.lower() + read);
                if let Some(upper) = hint.upper() {
                    out.set_upper(upper + read);
                }
                out
            }
        }
    }
}

/// A body read up to a limit.
pub(crate) enum Collected<B: Body> {
    /// All of it, within the limit.
    Whole(Bytes),
    /// Too big, or with trailers: what was read, then the rest, to stream through.
    Partial(CacheBody<B>),
}

/// Reads `body` while it stays within `limit` bytes and carries no trailers. Never holds more
/// than `limit` bytes (plus one frame).
pub(crate) async fn collect<B>(body: B, limit: usize) -> Result<Collected<B>, B::Error>
where
    B: Body<Data = Bytes>,
{
    let mut body = Box::pin(body);
    if body.size_hint().lower() > limit as u64 {
        return Ok(Collected::Partial(CacheBody::resumed(
            VecDeque::new(),
            body,
        )));
    }
    let mut buf = BytesMut::new();
    loop {
        let frame = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await;
        let Some(frame) = frame.transpose()? else {
            return Ok(Collected::Whole(buf.freeze()));
        };
        match frame.into_data() {
            Ok(data) if buf.len() + data.len() <= limit => buf.extend_from_slice(&data),
            other => {
                let mut pending = VecDeque::new();
                if !buf.is_empty() {
                    pending.push_back(Frame::data(buf.freeze()));
                }
                pending.push_back(match other {
                    Ok(data) => Frame::data(data),
                    Err(trailers) => trailers,
                });
                return Ok(Collected::Partial(CacheBody::resumed(pending, body)));
            }
        }
    }
}
