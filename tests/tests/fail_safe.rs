//! The response cache's fail-safe on every backend: a failing handler
//! (503, or an error of the inner service) answered from the stale copy within
//! `stale_if_error` and with its failure after, a soft purge answered stale at once and
//! recomputed once for a crowd on two replicas, the soft fill timeout serving the copy while
//! the computation goes on and fills, the hard one answering 504 without a second
//! computation, and a TTL on every key.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use redis_guard::cache::{CacheLayer, CacheLayerBuilder, CacheTags, Stampede};
use redis_guard_tests::fail_safe::{
    ANSWER_MARGIN, Gate, assert_kept, crowd, frozen_cache, timed_crowd, within,
};
use redis_guard_tests::{Harness, Reply, backend_suite, call};
use tower::{Layer, ServiceExt};

/// What the handler does.
const OK: u8 = 0;
const UNAVAILABLE: u8 = 1;
const BROKEN: u8 = 2;

/// The origin behind the cache: answers `v<version>` (fresh 10 s, tagged `products`), or
/// 503 (saying nothing of its freshness, so never stored), or an error of the service, once
/// through its gate (which counts its calls), after its delay.
#[derive(Clone, Default)]
struct Origin {
    mode: Arc<AtomicU8>,
    gate: Gate,
    delay_ms: Arc<AtomicU64>,
}

impl Origin {
    fn new() -> Self {
        Self::default()
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    fn calls(&self) -> usize {
        self.gate.arrived()
    }

    /// Every answer takes `d` (a slow origin: one that fails only after a while).
    fn slow(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).expect("a short delay");
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    async fn answer(self) -> Result<Response<Full<Bytes>>, std::io::Error> {
        self.gate.pass().await;
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let body = format!("v{}", self.gate.version());
        let res = Response::builder();
        match self.mode.load(Ordering::SeqCst) {
            OK => {
                let mut res = res
                    .header("cache-control", "max-age=10")
                    .body(Full::new(Bytes::from(body)))
                    .expect("response");
                res.extensions_mut().insert(CacheTags::new(["products"]));
                Ok(res)
            }
            UNAVAILABLE => Ok(res
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .body(Full::new(Bytes::from_static(b"down")))
                .expect("response")),
            _ => Err(std::io::Error::other("the origin broke")),
        }
    }

    fn service(
        &self,
    ) -> impl tower::Service<
        Request<Full<Bytes>>,
        Response = Response<Full<Bytes>>,
        Error = std::io::Error,
        Future: Send,
    > + Clone
    + Send
    + 'static {
        let origin = self.clone();
        tower::service_fn(move |_: Request<Full<Bytes>>| origin.clone().answer())
    }
}

/// Exact times: no jitter, a fixed random number.
async fn builder(h: &Harness) -> CacheLayerBuilder {
    h.cache()
        .await
        .ttl(Duration::from_secs(60))
        .jitter(0.0)
        .random(|| 1.0)
}

fn get(uri: &str) -> Request<Full<Bytes>> {
    Request::get(uri).body(Full::default()).expect("request")
}

async fn send(layer: &CacheLayer, origin: &Origin, uri: &str) -> Reply {
    call(layer.layer(origin.service()), get(uri)).await
}

/// `(status, x-cache, body)`.
fn seen(r: &Reply) -> (u16, &str, &str) {
    (r.status, r.header("x-cache"), r.body.as_str())
}

/// The `ttl` of a `Cache-Status: redis-guard; fwd=stale; ttl=<n>` member.
fn stale_ttl(r: &Reply) -> i64 {
    let status = r.header("cache-status");
    let ttl = status
        .strip_prefix("redis-guard; fwd=stale; ttl=")
        .unwrap_or_else(|| panic!("not a fwd=stale member: {status:?}"));
    ttl.parse().expect("ttl")
}

/// Polls (bounded) until `uri` is a hit, and returns it.
async fn until_hit(layer: &CacheLayer, origin: &Origin, uri: &str) -> Reply {
    let wait = async {
        loop {
            let r = send(layer, origin, uri).await;
            if r.header("x-cache") == "HIT" {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    within("the background fill never landed", wait).await
}

const MINUTE: Duration = Duration::from_secs(60);

/// A layer with `stale_if_error` 60 s and `more`, its `/p` computed and stored (`v1`).
async fn primed(
    h: &Harness,
    origin: &Origin,
    more: impl FnOnce(CacheLayerBuilder) -> CacheLayerBuilder,
) -> CacheLayer {
    let layer = more(builder(h).await.stale_if_error(MINUTE))
        .build()
        .expect("layer");
    let r = send(&layer, origin, "/p").await;
    assert_eq!(seen(&r), (200, "MISS", "v1"));
    layer
}

async fn a_failing_origin_is_answered_stale_within_stale_if_error(h: Harness) {
    let origin = Origin::new();
    let layer = primed(&h, &origin, |b| b).await;
    assert_eq!(
        seen(&send(&layer, &origin, "/q").await),
        (200, "MISS", "v1")
    );
    // 10 s past their freshness (they have no stale window): the origin fails both ways.
    h.wait(Duration::from_secs(20)).await;
    origin.gate.change();
    for (mode, uri) in [(UNAVAILABLE, "/p"), (BROKEN, "/q")] {
        origin.set(mode);
        let r = send(&layer, &origin, uri).await;
        assert_eq!(seen(&r), (200, "STALE", "v1"));
        assert!((-12..=-10).contains(&stale_ttl(&r)), "{r:?}");
    }
    // The last fill failed: the copy answers at once, and the origin is not called again
    // before the retry interval.
    let r = send(&layer, &origin, "/p").await;
    assert_eq!(seen(&r), (200, "STALE", "v1"));
    assert_eq!(origin.calls(), 4);
    // The 503 left the copy in place: 55 s past its freshness it still stands in, at once,
    // while one retry runs in the background.
    h.wait(Duration::from_secs(45)).await;
    origin.set(UNAVAILABLE);
    let r = send(&layer, &origin, "/p").await;
    assert_eq!(seen(&r), (200, "STALE", "v1"));
    assert!(stale_ttl(&r) <= -54, "{r:?}");
    origin.gate.until_arrived(5).await;
    // Past the window: the failure as without the fail-safe.
    h.wait(Duration::from_secs(10)).await;
    let r = send(&layer, &origin, "/p").await;
    assert_eq!(seen(&r), (503, "MISS", "down"));
    assert_eq!(r.header("cache-status"), "redis-guard; fwd=miss");
    origin.set(BROKEN);
    let failed = layer.layer(origin.service()).oneshot(get("/p")).await;
    assert!(failed.is_err(), "the inner error is the caller's");
    // The origin back: computed and stored again.
    origin.set(OK);
    assert_eq!(
        seen(&send(&layer, &origin, "/p").await),
        (200, "MISS", "v2")
    );
    assert_eq!(seen(&send(&layer, &origin, "/p").await), (200, "HIT", "v2"));
    assert_eq!(origin.calls(), 8);
}

/// How long the failing origin takes to fail.
const FAILING: Duration = Duration::from_millis(800);

/// How soon every answer of a crowd comes (from its start, or from the first answer when
/// one fill runs for all), at most: half the failing call's time, so that no request waited
/// on a call of its own (a queue adds `FAILING` per request ahead). Loose on purpose: a
/// loaded machine answers 20 requests in well under that, a queue never does.
const PROMPT: Duration = Duration::from_millis(400);

/// 20 concurrent requests for `/p` on the `replicas` (in turn): each is the stale copy, and
/// how long after the start of the crowd it came.
async fn stale_crowd(replicas: &[CacheLayer; 2], origin: &Origin) -> Vec<Duration> {
    let replies = timed_crowd(20, |i| {
        let (layer, origin) = (replicas[i % 2].clone(), origin.clone());
        async move { send(&layer, &origin, "/p").await }
    });
    let mut times = Vec::new();
    for (r, took) in replies.await {
        assert_eq!(seen(&r), (200, "STALE", "v1"));
        assert!(stale_ttl(&r) <= -10, "{r:?}");
        times.push(took);
    }
    times
}

/// While an entry's last fill failed, every request on every replica is answered with the
/// stale copy at once, and one request a second tries the origin (in the background): a
/// crowd never queues behind a failing origin.
async fn a_failing_origin_is_tried_once_a_second_and_nobody_queues(h: Harness) {
    let origin = Origin::new();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let b = frozen_cache(&h).await.jitter(0.0).random(|| 1.0);
        replicas.push(b.stale_if_error(MINUTE).build().expect("layer"));
    }
    let replicas: [CacheLayer; 2] = replicas.try_into().expect("two");
    assert_eq!(seen(&send(&replicas[0], &origin, "/p").await).1, "MISS");
    // Past its freshness; the origin now fails, and takes `FAILING` to do it.
    h.wait(Duration::from_secs(20)).await;
    origin.set(UNAVAILABLE);
    origin.slow(FAILING);
    // One request calls the origin; the others wait for its fill, and all are answered
    // together when it fails, not one failure after another.
    let times = stale_crowd(&replicas, &origin).await;
    let (first, last) = (times.iter().min(), times.iter().max());
    let spread = *last.expect("20") - *first.expect("20");
    assert!(spread <= PROMPT, "answered over {spread:?}: {times:?}");
    assert_eq!(origin.calls(), 2, "one call of the failing origin");
    // Within the retry interval: the copy at once, the origin not called.
    let times = stale_crowd(&replicas, &origin).await;
    assert!(times.iter().all(|t| *t <= PROMPT), "{times:?}");
    assert_eq!(origin.calls(), 2);
    // Just over a second later: the copy at once, and one request tries the origin in the
    // background.
    h.wait(Duration::from_millis(1_100)).await;
    let times = stale_crowd(&replicas, &origin).await;
    assert!(times.iter().all(|t| *t <= PROMPT), "{times:?}");
    origin.gate.until_arrived(3).await;
    // That try failed too: the next crowd does not call the origin either.
    let times = stale_crowd(&replicas, &origin).await;
    assert!(times.iter().all(|t| *t <= PROMPT), "{times:?}");
    assert_eq!(origin.calls(), 3, "one call a second");
}

async fn a_soft_purge_answers_stale_at_once_and_recomputes_once(h: Harness) {
    let origin = Origin::new();
    let replicas = [builder(&h).await, builder(&h).await]
        .map(|b| b.stampede(Stampede::lock().wait(Duration::from_secs(60))))
        .map(|b| b.build().expect("layer"));
    assert_eq!(seen(&send(&replicas[0], &origin, "/p").await).1, "MISS");
    assert_eq!(seen(&send(&replicas[1], &origin, "/p").await).1, "HIT");
    replicas[1]
        .invalidate_tag_soft("products")
        .await
        .expect("purge");
    origin.gate.stall();
    let replies = crowd(50, |i| {
        let (layer, origin) = (replicas[i % 2].clone(), origin.clone());
        async move { send(&layer, &origin, "/p").await }
    });
    // Every request is answered while the recomputation is blocked.
    for r in replies.await {
        assert_eq!(seen(&r), (200, "STALE", "v1"));
        assert_eq!(stale_ttl(&r), 0, "{r:?}");
    }
    origin.gate.open_once_arrived(2).await;
    let r = until_hit(&replicas[0], &origin, "/p").await;
    assert_eq!(seen(&r), (200, "HIT", "v2"));
    assert_eq!(
        seen(&send(&replicas[1], &origin, "/p").await),
        (200, "HIT", "v2")
    );
    assert_eq!(origin.calls(), 2, "one recomputation for the crowd");
    // A hard invalidation still voids at once.
    replicas[0]
        .invalidate_tag("products")
        .await
        .expect("invalidate");
    assert_eq!(seen(&send(&replicas[1], &origin, "/p").await).1, "MISS");
}

async fn the_soft_timeout_serves_the_copy_and_the_fill_lands_after(h: Harness) {
    let origin = Origin::new();
    let soft = Duration::from_millis(100);
    let layer = primed(&h, &origin, |b| b.fill_timeout(soft, MINUTE)).await;
    h.wait(Duration::from_secs(20)).await;
    origin.gate.stall();
    // The handler is blocked: the computing request and a waiting one get the copy.
    let replies = crowd(2, |_| {
        let (layer, origin) = (layer.clone(), origin.clone());
        async move { send(&layer, &origin, "/p").await }
    });
    for r in replies.await {
        assert_eq!(seen(&r), (200, "STALE", "v1"));
        assert!(stale_ttl(&r) <= -10, "{r:?}");
    }
    // The computation reached the handler (a spawned task: under load, perhaps only now).
    origin.gate.open_once_arrived(2).await;
    let r = until_hit(&layer, &origin, "/p").await;
    assert_eq!(r.body, "v2");
    assert_eq!(
        origin.calls(),
        2,
        "the background computation filled the entry"
    );
}

async fn the_hard_timeout_answers_504_and_computes_once(h: Harness) {
    let origin = Origin::new();
    let ms = Duration::from_millis;
    let replicas = [builder(&h).await, builder(&h).await]
        .map(|b| b.fill_timeout(ms(50), ms(300)).build().expect("layer"));
    origin.gate.close();
    // One request on each replica: one computes, the other waits for its lease.
    let replies = crowd(2, |i| {
        let (layer, origin) = (replicas[i].clone(), origin.clone());
        async move { send(&layer, &origin, "/cold").await }
    });
    for r in replies.await {
        assert_eq!(seen(&r).0, 504);
        assert_eq!(r.header("cache-status"), "redis-guard; fwd=miss");
    }
    origin.gate.open_once_arrived(1).await;
    let r = until_hit(&replicas[1], &origin, "/cold").await;
    assert_eq!(seen(&r).2, "v1");
    assert_eq!(origin.calls(), 1, "one computation");
}

/// Fill timeouts count from a request's arrival, whatever the stampede's wait says: a request
/// waiting for another one's computation waits until its own hard timeout (it never starts a
/// second computation of its own), and nobody answers later than that.
async fn the_hard_timeout_bounds_every_answer_and_computes_once(h: Harness) {
    let origin = Origin::new();
    let ms = Duration::from_millis;
    let hard = ms(1000);
    // The stampede's wait is shorter than the hard timeout: it must not end the waiting.
    let layer = builder(&h)
        .await
        .stampede(Stampede::lock().wait(ms(300)))
        .fill_timeout(ms(100), hard)
        .build()
        .expect("layer");
    // The handler is slower than the hard timeout.
    origin.gate.close();
    let replies = crowd(5, |_| {
        let (layer, origin) = (layer.clone(), origin.clone());
        async move {
            // From the request's own start, as its hard timeout counts: not from before its
            // task was spawned, which a loaded machine may run late.
            let start = Instant::now();
            let r = send(&layer, &origin, "/cold").await;
            (r, start.elapsed())
        }
    });
    for (r, took) in replies.await {
        assert_eq!(seen(&r).0, 504, "{r:?}");
        assert!(took <= hard + ANSWER_MARGIN, "answered after {took:?}");
    }
    assert_eq!(origin.calls(), 1, "one computation");
    origin.gate.open_once_arrived(1).await;
    let r = until_hit(&layer, &origin, "/cold").await;
    assert_eq!(seen(&r).2, "v1");
    assert_eq!(origin.calls(), 1, "one computation");
}

/// Entries live past their freshness for `stale_if_error`, every key with a TTL.
async fn every_fail_safe_key_has_a_ttl(h: Harness) {
    let origin = Origin::new();
    let layer = primed(&h, &origin, |b| b.stale_if_error(5 * MINUTE)).await;
    layer.invalidate_tag_soft("products").await.expect("purge");
    layer.invalidate_tag("other").await.expect("invalidate");
    assert_eq!(seen(&send(&layer, &origin, "/p").await).1, "STALE");
    until_hit(&layer, &origin, "/p").await;
    // Fresh 10 s, kept 300 s past that.
    assert_kept(&h, 3, 300_000..=310_000).await;
}

backend_suite!(
    a_failing_origin_is_answered_stale_within_stale_if_error,
    a_soft_purge_answers_stale_at_once_and_recomputes_once,
    the_soft_timeout_serves_the_copy_and_the_fill_lands_after,
    the_hard_timeout_answers_504_and_computes_once,
    the_hard_timeout_bounds_every_answer_and_computes_once,
    a_failing_origin_is_tried_once_a_second_and_nobody_queues,
);

backend_suite!(redis_only: every_fail_safe_key_has_a_ttl);
