//! `RateLimitLayerBuilder::replicas`: the layer says, when it is built, what each replica
//! admits while Redis is unavailable, and while it is, each admits its share of the quota.

use std::cell::RefCell;
use std::convert::Infallible;
use std::sync::Once;

use http::{Request, Response, StatusCode};
use redis_guard::ConfigErrorKind;
use redis_guard::backend::{RedisBackend, RedisConnection};
use redis_guard::rate_limit::{
    FailurePolicy, HeaderKey, MemoryLimiter, MissingKey, Quota, RateLimitLayer,
    RateLimitLayerBuilder, RedisLimiter, Rule,
};
use redis_guard_testkit::{RedisServer, unique_prefix};
use tower::{Layer, ServiceExt, service_fn};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

thread_local! {
    /// The messages of the `info` events this thread logged since it last took them.
    static INFOS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Keeps the message of every `info` event in the logging thread's `INFOS`.
struct Infos;

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Infos {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::INFO {
            let mut m = Message(String::new());
            event.record(&mut m);
            INFOS.with(|infos| infos.borrow_mut().push(m.0));
        }
    }
}

/// Every test of this binary calls this first. A subscriber set per test with
/// `with_default` can miss an event: a test on another thread may register the callsite
/// while the scoped subscriber is being added, which caches "not interested" for good. One
/// global subscriber, set before any event, is interested from the start; each test reads
/// only what its own thread logged.
fn listen() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Infos))
            .expect("the only global subscriber");
    });
}

/// The `info` lines logged while `build` builds a layer.
fn logged_building(build: impl FnOnce() -> RateLimitLayer) -> Vec<String> {
    listen();
    INFOS.with(|infos| infos.borrow_mut().clear());
    let _layer = build();
    INFOS.with(RefCell::take)
}

fn by_client() -> HeaderKey {
    HeaderKey::new(http::HeaderName::from_static("x-client"))
}

async fn limiter_on(server: &RedisServer) -> RedisLimiter {
    let conn = RedisConnection::open(&server.url()).await.expect("connect");
    RedisLimiter::new(RedisBackend::new(conn).prefix(unique_prefix("fallback")))
}

fn layer(limiter: RedisLimiter) -> RateLimitLayerBuilder {
    RateLimitLayer::builder(limiter).rule("login", by_client(), Quota::per_hour(30))
}

#[tokio::test]
async fn the_share_of_each_replica_is_logged_when_the_layer_is_built() {
    listen();
    let server = RedisServer::start().expect("redis-server");
    let limiter = limiter_on(&server).await;

    let stated = logged_building(|| layer(limiter.clone()).replicas(3).build().unwrap());
    assert_eq!(stated.len(), 1, "{stated:?}");
    assert!(
        stated[0].contains(
            "while Redis is unavailable each of 3 replicas admits up to 10/hour of rule `login`"
        ),
        "{}",
        stated[0]
    );

    // Nothing said: the line tells that each replica admits the whole quota, and the fix.
    let assumed = logged_building(|| layer(limiter.clone()).build().unwrap());
    assert_eq!(assumed.len(), 1, "{assumed:?}");
    for part in [
        "each replica admits up to 30/hour of rule `login`, its whole quota",
        "assumes 1 replica",
        "RateLimitLayerBuilder::replicas(N)",
    ] {
        assert!(assumed[0].contains(part), "{part}: {}", assumed[0]);
    }

    // A policy that does not fall back has no share to state.
    let closed = logged_building(|| {
        layer(limiter.clone())
            .failure_policy(FailurePolicy::Closed)
            .build()
            .unwrap()
    });
    assert!(closed.is_empty(), "{closed:?}");

    // An in-process limiter never loses its store: nothing to say.
    let memory = logged_building(|| {
        RateLimitLayer::builder(MemoryLimiter::new())
            .rule("login", by_client(), Quota::per_hour(30))
            .build()
            .unwrap()
    });
    assert!(memory.is_empty(), "{memory:?}");
}

#[tokio::test]
async fn replicas_is_one_count_for_the_layer_and_its_rules() {
    listen();
    let build = |failure: FailurePolicy, replicas: u32| {
        RateLimitLayer::builder(MemoryLimiter::new())
            .rule_with(
                Rule::new("login", Quota::per_hour(30)).on_failure(FailurePolicy::default()),
                by_client(),
            )
            .failure_policy(failure)
            .replicas(replicas)
            .build()
    };
    assert!(build(FailurePolicy::default(), 3).is_ok());
    assert!(build(FailurePolicy::fallback(3).unwrap(), 3).is_ok());
    let err = build(FailurePolicy::fallback(2).unwrap(), 3).unwrap_err();
    assert_eq!(err.kind(), ConfigErrorKind::Fallback);
    assert!(err.to_string().contains("contradicts"), "{err}");
    let err = build(FailurePolicy::default(), 0).unwrap_err();
    assert_eq!(err.kind(), ConfigErrorKind::Fallback);
    assert_eq!(err.value(), Some("0"));
}

/// Redis stopped: the layer with `replicas(3)` decides in process and admits 30 / 3 = 10 an
/// hour per client, for the layer's policy and for a rule's own `Fallback` policy alike.
#[tokio::test]
async fn while_redis_is_down_each_replica_admits_its_share() {
    listen();
    let mut server = RedisServer::start().expect("redis-server");
    let limiter = limiter_on(&server).await;
    let svc = RateLimitLayer::builder(limiter)
        .rule("login", by_client(), Quota::per_hour(30))
        .rule_with(
            Rule::new("signup", Quota::per_hour(60)).on_failure(FailurePolicy::default()),
            HeaderKey::new(http::HeaderName::from_static("x-signup")),
        )
        .missing_key(MissingKey::Skip)
        .replicas(3)
        .build()
        .expect("valid")
        .layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
    let send = |header: &'static str, client: &str| {
        let req = Request::get("/")
            .header(header, client)
            .body(())
            .expect("request");
        svc.clone().oneshot(req)
    };
    assert_eq!(
        send("x-client", "a").await.unwrap().status(),
        StatusCode::OK
    );
    server.stop();

    for i in 0..10 {
        let res = send("x-client", "b").await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "request {i}");
        let policy = res.headers()["ratelimit-policy"].to_str().unwrap();
        assert!(policy.contains(";q=10;"), "{policy}");
    }
    let res = send("x-client", "b").await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);

    for i in 0..20 {
        let res = send("x-signup", "c").await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "signup {i}");
    }
    let res = send("x-signup", "c").await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
}
