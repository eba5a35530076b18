//! A missing peer address is logged once, at error level, with the fix; requests get a 500.
//! (Alone in its test binary: the "logged once" flag is process-wide.)

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use redis_guard::rate_limit::{ClientIp, MemoryLimiter, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt, service_fn};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

#[derive(Clone, Default)]
struct Errors(Arc<Mutex<Vec<String>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Errors {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::ERROR {
            let mut m = Message(String::new());
            event.record(&mut m);
            self.0.lock().unwrap().push(m.0);
        }
    }
}

#[tokio::test]
async fn logged_once_with_the_fix_and_answered_with_500() {
    let errors = Errors::default();
    let subscriber = tracing_subscriber::registry().with(errors.clone());
    let _guard = tracing::subscriber::set_default(subscriber);

    let layer = RateLimitLayer::new(
        MemoryLimiter::new(),
        "api",
        ClientIp::peer(),
        Quota::per_minute(10),
    )
    .unwrap();
    let svc = layer.layer(service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    for _ in 0..3 {
        let res = svc
            .clone()
            .oneshot(Request::new(String::new()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    let logged = errors.0.lock().unwrap().clone();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(
        logged[0].contains("into_make_service_with_connect_info"),
        "{}",
        logged[0]
    );
}
