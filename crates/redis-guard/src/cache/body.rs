//! [`ResponseBody`]: the response body of a cached route, and collecting a body up to a limit.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

use crate::body::InnerOrBytes;

/// The response body of [`Cache`](super::Cache): the stored bytes, or the handler's own body
/// (after the part the layer read while deciding whether it fits the entry size limit).
pub struct ResponseBody<B: Body> {
    /// Reading the handler's body failed while the layer read it: the same error, once.
    failed: Option<B::Error>,
    /// The frames the layer read ahead, before the rest of `body`.
    read: VecDeque<Frame<Bytes>>,
    body: InnerOrBytes<Pin<Box<B>>>,
}

impl<B: Body> ResponseBody<B> {
    pub(crate) fn failed(e: B::Error) -> Self {
        Self {
            failed: Some(e),
            read: VecDeque::new(),
            body: InnerOrBytes::bytes(Bytes::new()),
        }
    }

    pub(crate) fn full(bytes: Bytes) -> Self {
        Self {
            failed: None,
            read: VecDeque::new(),
            body: InnerOrBytes::bytes(bytes),
        }
    }

    pub(crate) fn inner(body: B) -> Self {
        Self::resumed(VecDeque::new(), Box::pin(body))
    }

    fn resumed(read: VecDeque<Frame<Bytes>>, body: Pin<Box<B>>) -> Self {
        Self {
            failed: None,
            read,
            body: InnerOrBytes::inner(body),
        }
    }
}

// Nothing is pinned in place: the handler's body sits in its own `Pin<Box<_>>`, and the
// error is moved out by value.
impl<B: Body> Unpin for ResponseBody<B> {}

impl<B: Body> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseBody")
            .field("failed", &self.failed.is_some())
            .field("read", &self.read.len())
            .field("body", &self.body)
            .finish()
    }
}

impl_body! {
    ResponseBody,
    poll_frame(|this, cx| {
        let this = this.get_mut();
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Some(Err(e)));
        }
        match this.read.pop_front() {
            Some(frame) => Poll::Ready(Some(Ok(frame))),
            None => Pin::new(&mut this.body).poll_frame(cx),
        }
    }),
    is_end_stream(|this| { this.failed.is_none() && this.read.is_empty() && this.body.is_end_stream() }),
    size_hint(|this| {
        if this.failed.is_some() {
            return SizeHint::default();
        }
        let read: u64 = this
            .read
            .iter()
            .filter_map(Frame::data_ref)
            .map(|d| d.len() as u64)
            .sum();
        let hint = this.body.size_hint();
        let mut out = SizeHint::new();
        out.set_lower(hint.lower() + read);
        if let Some(upper) = hint.upper() {
            out.set_upper(upper + read);
        }
        out
    }),
}

/// A body read up to a limit.
pub(crate) enum Collected<B: Body> {
    /// All of it, within the limit.
    Whole(Bytes),
    /// Too big, or with trailers: what was read, then the rest, to stream through.
    Partial(ResponseBody<B>),
}

/// Reads `body` while it stays within `limit` bytes and carries no trailers. Never holds more
/// than `limit` bytes (plus one frame).
pub(crate) async fn collect<B>(body: B, limit: usize) -> Result<Collected<B>, B::Error>
where
    B: Body<Data = Bytes>,
{
    let mut body = Box::pin(body);
    if body.size_hint().lower() > limit as u64 {
        return Ok(Collected::Partial(ResponseBody::resumed(
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
                return Ok(Collected::Partial(ResponseBody::resumed(pending, body)));
            }
        }
    }
}
