//! A real browser: headless Chromium drives the example's page, against a real Redis.

use std::time::Duration;

use redis_guard_testkit::app::spawn;
use redis_guard_testkit::{Browser, RedisServer};

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_in_reload_and_log_out_in_chromium() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let app = spawn(
        env!("CARGO_BIN_EXE_axum-app"),
        &[("REDIS_URL", &url), ("REDIS_TIMEOUT_MS", "5000")],
    )
    .await;
    let addr = app.addr;

    let browser = Browser::start().await.unwrap_or_else(|e| panic!("{e}"));
    let url = format!("http://{addr}/");
    browser.goto(&url).await.expect("open the page");
    browser
        .wait_for("#who", |t| t == "Not logged in", WAIT)
        .await
        .expect("logged out at first");

    browser.type_text("#username", "alice").await.expect("type");
    browser
        .type_text("#password", "password")
        .await
        .expect("type");
    browser.click("#login-button").await.expect("log in");
    browser
        .wait_for("#who", |t| t.starts_with("Logged in as alice"), WAIT)
        .await
        .expect("logged in");

    // The cookie, as the browser keeps it.
    let cookies = browser.cookies().await.expect("cookies");
    let id = cookies
        .iter()
        .find(|c| c.name == "__Host-id")
        .expect("session cookie");
    assert!(id.http_only && id.secure, "{id:?}");
    assert_eq!(id.same_site.as_deref(), Some("Lax"));
    assert_eq!(id.path, "/");
    assert_eq!(id.value.len(), 43);
    // HttpOnly: the page's scripts cannot read it.
    let visible = browser
        .execute("return document.cookie")
        .await
        .expect("script");
    assert_eq!(visible, serde_json::json!(""));

    browser.refresh().await.expect("reload");
    browser
        .wait_for("#who", |t| t.starts_with("Logged in as alice"), WAIT)
        .await
        .expect("still logged in after a reload");

    browser.click("#api-button").await.expect("call the API");
    let headers = browser
        .wait_for("#api-headers", |t| t.contains("ratelimit"), WAIT)
        .await
        .expect("rate-limit headers shown");
    assert!(
        headers.contains("ratelimit-policy: \"api\";q=60;w=60"),
        "{headers}"
    );
    assert!(
        browser
            .text("#api-body")
            .await
            .expect("body")
            .contains("alice")
    );

    browser.click("#logout-button").await.expect("log out");
    browser
        .wait_for("#who", |t| t == "Not logged in", WAIT)
        .await
        .expect("logged out");
    assert!(
        browser
            .cookies()
            .await
            .expect("cookies")
            .iter()
            .all(|c| c.name != "id"),
        "the removal cookie deleted it"
    );
    browser.refresh().await.expect("reload");
    browser
        .wait_for("#who", |t| t == "Not logged in", WAIT)
        .await
        .expect("still logged out after a reload");
}
