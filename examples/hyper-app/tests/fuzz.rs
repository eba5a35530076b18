//! No request reaches a panic: generated paths, queries, bodies and headers on every route of
//! the `hyper-app` binary, over real HTTP (see `example_shared::testing::route_fuzz`).

use redis_guard_testkit::app::spawn;

use example_shared::testing::route_fuzz::{Route, no_route_reaches_a_panic};

const ROUTES: &[Route] = &[
    ("GET", "/healthz"),
    ("GET", "/api/hello"),
    ("POST", "/login"),
    ("GET", "/me"),
    ("POST", "/logout"),
    ("GET", "/{}"),
    ("POST", "/{}/{}"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_reaches_a_panic_on_the_memory_backend() {
    let app = spawn(
        env!("CARGO_BIN_EXE_hyper-app"),
        &[("API_LIMIT", "100000/minute")],
    )
    .await;
    let addr = app.addr;
    tokio::task::spawn_blocking(move || no_route_reaches_a_panic(addr, ROUTES, 200))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
}
