//! Counting the admitted requests of a rate-limit suite.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;

use crate::{Reply, call};

/// Sends `n` requests made by `request` through `svcs` in turn (replicas of one layer): how
/// many were admitted (`200`), and the last reply.
///
/// # Panics
///
/// When `svcs` is empty, `n` is 0, or a reply is neither `200` nor `429`.
pub async fn admitted<S, B>(
    svcs: &[S],
    n: usize,
    request: impl Fn() -> Request<Full<Bytes>>,
) -> (usize, Reply)
where
    S: tower::Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let mut count = 0;
    let mut last = None;
    for i in 0..n {
        let reply = call(svcs[i % svcs.len()].clone(), request()).await;
        match reply.status {
            200 => count += 1,
            429 => {}
            other => panic!("unexpected status {other}: {}", reply.body),
        }
        last = Some(reply);
    }
    (count, last.expect("at least one request"))
}
