//! What the bench targets share: Criterion's settings, how a request is made, and how a layered
//! service is called once per iteration.

use std::convert::Infallible;
use std::time::Duration;

use criterion::{BatchSize, Bencher, Criterion};
use http::{HeaderName, HeaderValue, Request, Response};
use tokio::runtime::Runtime;
use tower::{Service, ServiceExt};

/// Short runs without plots: `cargo bench -p redis-guard` finishes in about a minute on a shared
/// 2-core machine. The paths measured take well under a microsecond to a few, so 2 s per
/// benchmark still gives Criterion tens of thousands of iterations per sample.
pub(crate) fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
        .without_plots()
}

/// A current-thread runtime: the layers' futures are all ready at once on the in-process
/// backends, so a single thread measures them without cross-thread wake-ups.
pub(crate) fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
}

/// `GET /` with `headers`, as a server hands it to the first layer.
pub(crate) fn request(headers: &[(&str, &str)]) -> Request<()> {
    let mut req = Request::new(());
    for &(name, value) in headers {
        req.headers_mut().append(
            HeaderName::from_bytes(name.as_bytes()).expect("a header name"),
            HeaderValue::from_str(value).expect("a header value"),
        );
    }
    req
}

/// Calls `svc` once with `req` and waits for the response: what a server does per request on a
/// connection, minus the I/O.
pub(crate) async fn call<S, B>(mut svc: S, req: Request<()>) -> Response<B>
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible>,
{
    svc.ready().await.expect("infallible");
    svc.call(req).await.expect("infallible")
}

/// Times [`call`] on `rt`, one request from `make_request` per iteration. The request is built
/// and the service cloned (as hyper does per connection) in Criterion's setup, outside the timed
/// part; the response is dropped outside it too.
pub(crate) fn bench_calls<S, B>(
    b: &mut Bencher<'_>,
    rt: &Runtime,
    svc: &S,
    make_request: impl Fn() -> Request<()>,
) where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible> + Clone,
{
    b.to_async(rt).iter_batched(
        || (svc.clone(), make_request()),
        |(svc, req)| call(svc, req),
        BatchSize::SmallInput,
    );
}
