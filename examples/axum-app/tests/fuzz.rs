//! No request reaches a panic: generated paths, queries, bodies and headers on every route of
//! the `axum-app` binary, over real HTTP (see `example_shared::testing::route_fuzz`); nor does
//! a generated setting (`example_shared::testing::settings_fuzz`).

use redis_guard_testkit::app::spawn;

use example_shared::testing::route_fuzz::{ADMIN_TOKEN, Route, no_route_reaches_a_panic};
use example_shared::testing::settings_fuzz::no_setting_reaches_a_panic;

const ROUTES: &[Route] = &[
    ("GET", "/"),
    ("GET", "/healthz"),
    ("POST", "/login"),
    ("GET", "/me"),
    ("POST", "/logout"),
    ("POST", "/logout-all"),
    ("POST", "/logout-others"),
    ("GET", "/flash"),
    ("GET", "/csrf"),
    ("POST", "/profile"),
    ("GET", "/sessions"),
    ("POST", "/sessions/{}/revoke"),
    ("GET", "/api/hello"),
    ("GET", "/export"),
    ("GET", "/report"),
    ("POST", "/calls"),
    ("GET", "/slow/{}"),
    ("POST", "/slow/invalidate"),
    ("GET", "/users/{}"),
    ("PUT", "/users/{}"),
    ("POST", "/admin/origin"),
    ("POST", "/payments"),
    ("GET", "/metrics"),
    ("GET", "/admin/limits/{}/{}"),
    ("DELETE", "/admin/limits/{}/{}"),
    ("POST", "/admin/limits/{}/{}/penalize"),
    ("POST", "/admin/limits/{}/{}/allow"),
    ("GET", "/{}"),
    ("PUT", "/{}/{}"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_reaches_a_panic_on_the_memory_backend() {
    let app = spawn(
        env!("CARGO_BIN_EXE_axum-app"),
        &[
            ("ADMIN_TOKEN", ADMIN_TOKEN),
            // Generated requests, not the limits, are under test: room for all of them.
            ("API_LIMIT", "100000/minute"),
            ("SLOW_LIMIT", "100000/minute"),
            ("SESSION_CREATE_LIMIT", "100000/minute"),
        ],
    )
    .await;
    let addr = app.addr;
    tokio::task::spawn_blocking(move || no_route_reaches_a_panic(addr, ROUTES, 300))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
}

/// The connection caps and the limits of the routes: each generated value starts the app or
/// stops it with an error naming the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_setting_reaches_a_panic_at_start() {
    const NAMES: &[&str] = &[
        "MAX_CONNECTIONS",
        "MAX_CONNECTIONS_PER_IP",
        "USERS_LIMIT",
        "PAYMENTS_LIMIT",
        "SLOW_LIMIT",
        "API_LIMIT",
    ];
    tokio::task::spawn_blocking(|| {
        no_setting_reaches_a_panic(env!("CARGO_BIN_EXE_axum-app"), NAMES, &[], 48);
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
}
