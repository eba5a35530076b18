//! Micro-benchmarks of the session layer's pure-Rust paths, through the public API only:
//!
//! - `session_id`: a fresh id from the OS CSPRNG, its cookie value (base64url), parsing a cookie
//!   value back, and the SHA-256 storage key that every load and save computes;
//! - `session_layer`: one request through a `SessionLayer` on the in-process store, carrying a
//!   valid session cookie among other cookies, whose handler reads one value: reading the
//!   `Cookie` header, parsing and hashing the id, the store's load and the response future. The
//!   cookie reader is private, so it is measured here, as part of the layer.
//!
//! With the Redis store the load is a script call; its cost is the harness's
//! (`docs/benchmarks.md`).

mod common;

use std::convert::Infallible;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use http::header::SET_COOKIE;
use http::{Request, Response};
use http_body_util::BodyExt;
use redis_guard::session::{MemorySessionStore, Session, SessionId, SessionLayer, Transport};
use tower::Layer;

fn session_id(c: &mut Criterion) {
    let id = SessionId::generate().expect("OS randomness");
    let cookie = id.encode();
    assert_eq!(SessionId::parse(&cookie).as_ref(), Some(&id));
    let mut group = c.benchmark_group("session_id");
    group.bench_function("generate", |b| b.iter(SessionId::generate));
    group.bench_function("encode", |b| b.iter(|| black_box(&id).encode()));
    group.bench_function("parse", |b| {
        b.iter(|| SessionId::parse(black_box(&cookie)));
    });
    group.bench_function("storage_key", |b| {
        b.iter(|| black_box(&id).storage_key());
    });
    group.finish();
}

fn session_layer(c: &mut Criterion) {
    let rt = common::runtime();
    // Reads the user, logging "alice" in when there is none: the first request creates the
    // session, every later one with its cookie only loads it.
    let app = tower::service_fn(|req: Request<()>| async move {
        let session = req.extensions().get::<Session>().cloned().expect("layer");
        let user = match session.get::<String>("user").await.expect("a load") {
            Some(user) => user,
            None => {
                session.insert("user", &"alice").await.expect("an insert");
                String::new()
            }
        };
        Ok::<_, Infallible>(Response::new(user))
    });
    let svc = SessionLayer::new(MemorySessionStore::new())
        .expect("a valid layer")
        .layer(app);
    let name = Transport::cookie()
        .cookie_name()
        .expect("a cookie")
        .to_owned();
    let header = rt.block_on(async {
        let created = common::call(svc.clone(), common::request(&[])).await;
        let set = created.headers()[SET_COOKIE].to_str().expect("ASCII");
        let ours = set.split(';').next().expect("name=value");
        assert!(ours.starts_with(&format!("{name}=")), "{set}");
        // Ours among a site's usual cookies, as a browser sends them.
        format!("_ga=GA1.2.1234567890.1700000000; theme=dark; {ours}; csrftoken=Jx8rYw0kq3LzTf2N5")
    });
    let req = || common::request(&[("cookie", &header)]);
    rt.block_on(async {
        let (loaded, body) = common::call(svc.clone(), req()).await.into_parts();
        assert!(!loaded.headers.contains_key(SET_COOKIE));
        let body = body.collect().await.expect("a body").to_bytes();
        assert_eq!(body, "alice");
    });
    let mut group = c.benchmark_group("session_layer");
    group.bench_function("load_from_cookie", |b| {
        common::bench_calls(b, &rt, &svc, req);
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = session_id, session_layer
}
criterion_main!(benches);
