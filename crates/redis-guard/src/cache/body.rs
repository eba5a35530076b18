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
    state: State<B>,
}

/// What a [`ResponseBody`] holds: the layer's bytes or the handler's body as it is (a hit
/// has nothing else to drop or count), a read that failed, or the handler's body after the
/// frames the layer read ahead.
enum State<B: Body> {
    Plain(InnerOrBytes<Pin<Box<B>>>),
    /// Reading the handler's body failed while the layer read it: the same error, once.
    Failed(Option<B::Error>),
    /// The frames the layer read ahead, before the rest of `body`.
    Resumed {
        read: VecDeque<Frame<Bytes>>,
        body: Pin<Box<B>>,
    },
}

impl<B: Body> ResponseBody<B> {
    pub(crate) fn failed(e: B::Error) -> Self {
        Self {
            state: State::Failed(Some(e)),
        }
    }

    pub(crate) fn full(bytes: Bytes) -> Self {
        Self {
            state: State::Plain(InnerOrBytes::bytes(bytes)),
        }
    }

    pub(crate) fn inner(body: B) -> Self {
        Self {
            state: State::Plain(InnerOrBytes::inner(Box::pin(body))),
        }
    }

    fn resumed(read: VecDeque<Frame<Bytes>>, body: Pin<Box<B>>) -> Self {
        Self {
            state: State::Resumed { read, body },
        }
    }
}

// Nothing is pinned in place: the handler's body sits in its own `Pin<Box<_>>`, and the
// error is moved out by value.
impl<B: Body> Unpin for ResponseBody<B> {}

impl<B: Body> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("ResponseBody");
        match &self.state {
            State::Plain(body) => out.field("body", body),
            State::Failed(e) => out.field("failed", &e.is_some()),
            State::Resumed { read, .. } => out.field("read", &read.len()),
        };
        out.finish()
    }
}

impl_body! {
    ResponseBody,
    poll_frame(|this, cx| {
        match &mut this.get_mut().state {
            State::Plain(body) => Pin::new(body).poll_frame(cx),
            State::Failed(e) => Poll::Ready(e.take().map(Err)),
            State::Resumed { read, body } => match read.pop_front() {
                Some(frame) => Poll::Ready(Some(Ok(frame))),
                None => body.as_mut().poll_frame(cx),
            },
        }
    }),
    is_end_stream(|this| {
        match &this.state {
            State::Plain(body) => body.is_end_stream(),
            // Until the error is out.
            State::Failed(e) => e.is_none(),
            State::Resumed { read, body } => read.is_empty() && body.is_end_stream(),
        }
    }),
    size_hint(|this| {
        match &this.state {
            State::Plain(body) => body.size_hint(),
            State::Failed(Some(_)) => SizeHint::default(),
            State::Failed(None) => SizeHint::with_exact(0),
            State::Resumed { read, body } => {
                let read: u64 = read
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
