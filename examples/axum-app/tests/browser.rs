//! A real browser: headless Chromium drives the example's page, against a real Redis.

use std::time::Duration;

use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::{Browser, RedisServer};

const WAIT: Duration = Duration::from_secs(15);

/// The admin token the live panel's apps run with: `/metrics` needs it.
const TOKEN: &str = "browser-test-admin-token-0123456789abcdef";

/// Opens `url` and gives the live panel the admin token, as an operator types it.
async fn open_panel(browser: &Browser, url: &str) -> Result<(), redis_guard_testkit::TestkitError> {
    browser.goto(url).await?;
    browser.type_text("#admin-token", TOKEN).await?;
    browser.click("#token-button").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_in_reload_and_log_out_in_chromium() {
    let (_server, app) = app_on_redis().await;
    let browser = Browser::start().await.unwrap_or_else(|e| panic!("{e}"));
    log_in(&browser, &format!("http://{}/", app.addr), "alice").await;

    // The cookie, as the browser keeps it (`__Host-id` when the library uses the prefix).
    let is_session = |name: &str| name == "id" || name == "__Host-id";
    let cookies = browser.cookies().await.expect("cookies");
    let id = cookies
        .iter()
        .find(|c| is_session(&c.name))
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
    // The logged-in id is gone; what is left names the anonymous session holding the logout
    // message.
    let logged_in = id.value.clone();
    assert!(
        browser
            .cookies()
            .await
            .expect("cookies")
            .iter()
            .all(|c| !is_session(&c.name) || c.value != logged_in),
        "the logged-in id was replaced"
    );
    browser.refresh().await.expect("reload");
    browser
        .wait_for("#who", |t| t == "Not logged in", WAIT)
        .await
        .expect("still logged out after a reload");
}

/// Chromium with the window the panel is laid out for: 1280×800.
async fn panel_browser() -> Browser {
    let browser = Browser::start().await.unwrap_or_else(|e| panic!("{e}"));
    browser
        .client()
        .set_window_size(1280, 800)
        .await
        .expect("window size");
    browser
}

/// The live panel after "send 20 requests" with `API_LIMIT=5/minute`, at 1280×800. Always
/// leaves a screenshot in the target directory (`tmp/panel-<backend>.png`) for a person to look at.
/// `shown` lists what else the panel must show at the end: `(CSS selector, text)`.
async fn panel_after_a_burst(backend: &str, env: &[(&str, &str)], shown: &[(&str, &str)]) {
    let mut env = env.to_vec();
    env.extend([
        ("API_LIMIT", "5/minute"),
        ("REDIS_TIMEOUT_MS", "5000"),
        ("ADMIN_TOKEN", TOKEN),
    ]);
    let app = spawn(env!("CARGO_BIN_EXE_axum-app"), &env).await;
    let browser = panel_browser().await;
    let outcome = burst(&browser, &format!("http://{}/", app.addr), shown).await;
    verdict(&browser, &format!("panel-{backend}"), outcome).await;
}

/// Saves the page as `tmp/<name>.png` in the target directory, then fails with `outcome`'s
/// error (and the screenshot's path), if any.
async fn verdict(browser: &Browser, name: &str, outcome: Result<(), String>) {
    let png = browser.screenshot_png().await.expect("screenshot");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.png"));
    std::fs::write(&path, png).expect("write the screenshot");
    eprintln!("screenshot: {}", path.display());
    if let Err(e) = outcome {
        panic!("{name}: {e}\nscreenshot: {}", path.display());
    }
}

async fn burst(browser: &Browser, url: &str, shown: &[(&str, &str)]) -> Result<(), String> {
    let fail = |e: redis_guard_testkit::TestkitError| e.to_string();
    open_panel(browser, url).await.map_err(fail)?;
    // The first poll is the chart's baseline: the burst must come after it to be counted.
    browser
        .wait_for("#live", |t| t.starts_with("live"), WAIT)
        .await
        .map_err(fail)?;

    browser.click("#burst-button").await.map_err(fail)?;
    browser
        .wait_for(
            "#burst-summary",
            |t| t == "20 answers: 5 × 200, 15 × 429",
            WAIT,
        )
        .await
        .map_err(fail)?;
    let rows = browser
        .execute(
            "return [...document.querySelectorAll('#burst-results li')].map((li) => [
               li.dataset.status, li.querySelector('.rl').textContent,
               li.querySelector('.countdown').textContent])",
        )
        .await
        .map_err(fail)?;
    let rows: Vec<(String, String, String)> =
        serde_json::from_value(rows).map_err(|e| e.to_string())?;
    if rows.len() != 20 {
        return Err(format!("{} rows: {rows:?}", rows.len()));
    }
    for (i, (status, ratelimit, countdown)) in rows.iter().enumerate() {
        let expected = if i < 5 { "200" } else { "429" };
        let remaining = 4_usize.saturating_sub(i);
        // `Retry-After: 12` at most: 5/minute gives one request back every 12 s.
        let seconds = countdown
            .strip_prefix("retry in ")
            .and_then(|s| s.strip_suffix(" s"))
            .and_then(|s| s.parse::<u32>().ok());
        let ok = status == expected
            && ratelimit.starts_with(&format!("\"api\";r={remaining};t="))
            && if i < 5 {
                countdown.is_empty()
            } else {
                seconds.is_some_and(|s| (1..=12).contains(&s))
            };
        if !ok {
            return Err(format!("row {}: {:?}", i + 1, rows[i]));
        }
    }

    for (css, expected) in [
        // First: the gauge refills, one request back every 12 s.
        ("#quota-remaining", "0"),
        // The next poll of /metrics puts the burst in the chart.
        ("#rules [data-rule=\"api\"] .n-allowed", "5"),
        ("#rules [data-rule=\"api\"] .n-limited", "15"),
    ]
    .iter()
    .chain(shown)
    {
        browser
            .wait_for(css, |t| t == *expected, WAIT)
            .await
            .map_err(fail)?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_panel_on_the_memory_backend() {
    let candidate = "#rules [data-rule=\"api.candidate\"]";
    panel_after_a_burst(
        "memory",
        &[("API_CANDIDATE_LIMIT", "3/minute")],
        &[
            ("#breaker-state", "no Redis"),
            // A candidate rule beside `api`: decided on every request, never blocking.
            (&format!("{candidate} .n-allowed"), "3"),
            (&format!("{candidate} .n-shadow"), "17"),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_panel_on_redis() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    panel_after_a_burst(
        "redis",
        &[("REDIS_URL", &url)],
        &[("#breaker-state", "closed")],
    )
    .await;
}

/// The breaker card follows the circuit: Redis frozen (`SIGSTOP`) under "send 20 requests"
/// opens it (the answers come from the fallback), and once Redis runs again the next burst's
/// probe closes it. Leaves `tmp/panel-breaker.png` in the target directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_state_in_the_panel_follows_a_frozen_redis() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let env = [
        ("REDIS_URL", url.as_str()),
        ("REDIS_TIMEOUT_MS", "100"),
        ("ADMIN_TOKEN", TOKEN),
    ];
    let app = spawn(env!("CARGO_BIN_EXE_axum-app"), &env).await;
    let browser = panel_browser().await;
    let outcome = freeze_and_thaw(&browser, &format!("http://{}/", app.addr), &server).await;
    // Never leave the server stopped, whatever happened.
    let _ = server.thaw();
    verdict(&browser, "panel-breaker", outcome).await;
}

async fn freeze_and_thaw(browser: &Browser, url: &str, server: &RedisServer) -> Result<(), String> {
    let fail = |e: redis_guard_testkit::TestkitError| e.to_string();
    let burst_done = |t: &str| t.starts_with("20 answers:");
    open_panel(browser, url).await.map_err(fail)?;
    browser
        .wait_for("#breaker-state", |t| t == "closed", WAIT)
        .await
        .map_err(fail)?;
    server.freeze().map_err(fail)?;
    browser.click("#burst-button").await.map_err(fail)?;
    browser
        .wait_for("#burst-summary", burst_done, WAIT)
        .await
        .map_err(fail)?;
    // Open, or half-open while a background probe is out (it alternates with open every
    // cool-down while Redis stays frozen): either way no longer closed.
    browser
        .wait_for("#breaker-state", |t| t == "open" || t == "half-open", WAIT)
        .await
        .map_err(fail)?;
    browser
        .wait_for(
            "#breaker-note",
            |t| t.contains("Opened 1 time since start"),
            WAIT,
        )
        .await
        .map_err(fail)?;
    server.thaw().map_err(fail)?;
    // After a cool-down the background probe finds Redis running; bursts until the panel
    // shows the circuit closed.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        browser.click("#burst-button").await.map_err(fail)?;
        browser
            .wait_for("#burst-summary", burst_done, WAIT)
            .await
            .map_err(fail)?;
        let closed = browser
            .wait_for("#breaker-state", |t| t == "closed", Duration::from_secs(3))
            .await
            .is_ok();
        if closed {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err("the breaker never closed after Redis was thawed".into());
        }
    }
}

/// A real Redis and the example app on it (the server lives as long as the first value).
async fn app_on_redis() -> (RedisServer, RunningApp) {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let app = spawn(
        env!("CARGO_BIN_EXE_axum-app"),
        &[("REDIS_URL", &url), ("REDIS_TIMEOUT_MS", "5000")],
    )
    .await;
    (server, app)
}

/// Logs `browser` in as `user` on the page at `url`.
async fn log_in(browser: &Browser, url: &str, user: &str) {
    browser.goto(url).await.expect("open the page");
    browser
        .wait_for("#who", |t| t == "Not logged in", WAIT)
        .await
        .expect("logged out at first");
    browser.type_text("#username", user).await.expect("type");
    browser
        .type_text("#password", "password")
        .await
        .expect("type");
    browser.click("#login-button").await.expect("log in");
    browser
        .wait_for(
            "#who",
            |t| t.starts_with(&format!("Logged in as {user}")),
            WAIT,
        )
        .await
        .expect("logged in");
}

/// Reloads the page until who is logged in (`#who`) says what `expected` accepts.
async fn reload(browser: &Browser, expected: impl FnMut(&str) -> bool) {
    browser.refresh().await.expect("reload");
    browser
        .wait_for("#who", expected, WAIT)
        .await
        .expect("who is logged in, after a reload");
}

/// Whether the page shows no flash message.
async fn flash_hidden(browser: &Browser) -> bool {
    let hidden = browser
        .execute("return document.getElementById('flash').hidden")
        .await
        .expect("script");
    hidden == serde_json::json!(true)
}

/// How many devices the page lists.
async fn devices(browser: &Browser) -> usize {
    let n = browser
        .execute("return document.querySelectorAll('#devices li').length")
        .await
        .expect("script");
    usize::try_from(n.as_u64().expect("a count")).expect("small")
}

/// "Your devices": two browsers (two cookie jars) logged in as one user. The first sees both devices,
/// logs the second out from its list, and the second is logged out on reload; the flash
/// messages after login and logout show once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn your_devices_in_two_chromium_profiles() {
    let (_server, app) = app_on_redis().await;
    let url = format!("http://{}/", app.addr);
    let (first, second) = tokio::join!(Browser::start(), Browser::start());
    let first = first.unwrap_or_else(|e| panic!("{e}"));
    let second = second.unwrap_or_else(|e| panic!("{e}"));

    log_in(&first, &url, "alice").await;
    first
        .wait_for("#flash", |t| t == "Welcome, alice.", WAIT)
        .await
        .expect("the welcome flash");
    // Shown once: a reload does not bring it back.
    reload(&first, |t| t.starts_with("Logged in as alice")).await;
    assert!(flash_hidden(&first).await, "the flash showed twice");

    log_in(&second, &url, "alice").await;
    first.refresh().await.expect("reload");
    first
        .wait_for(
            "#devices li.current .here",
            |t| t.contains("this device"),
            WAIT,
        )
        .await
        .expect("its own device marked");
    assert_eq!(devices(&first).await, 2, "both browsers listed");
    let listed = first.text("#devices").await.expect("devices");
    assert!(listed.contains("127.0.0.1"), "{listed}");
    assert!(listed.contains("Chrome"), "the user agent: {listed}");

    // Log the other browser out from this one.
    first
        .click("#devices li:not(.current) button.revoke")
        .await
        .expect("revoke the second device");
    first
        .wait_for("#message", |t| t == "That device is logged out.", WAIT)
        .await
        .expect("revoked");
    // The page re-reads the list before it says so.
    assert_eq!(devices(&first).await, 1, "one device left");
    reload(&second, |t| t == "Not logged in").await;
    reload(&first, |t| t.starts_with("Logged in as alice")).await;

    // A CSRF-protected HTML form: the page's hidden field carries the session's token.
    first
        .type_text("#display-name", "Alice A.")
        .await
        .expect("type a name");
    first
        .click("#profile-button")
        .await
        .expect("submit the form");
    first
        .wait_for("#flash", |t| t == "Saved your display name.", WAIT)
        .await
        .expect("saved, back on the page");
    first
        .wait_for("#who", |t| t.ends_with("name: Alice A."), WAIT)
        .await
        .expect("the name shown");
    // The same form with another token is refused.
    let forged = first
        .execute(
            "const xhr = new XMLHttpRequest(); xhr.open('POST', '/profile', false); \
             xhr.setRequestHeader('content-type', 'application/x-www-form-urlencoded'); \
             xhr.send('name=Mallory&csrf_token=' + 'A'.repeat(43)); return xhr.status;",
        )
        .await
        .expect("script");
    assert_eq!(forged, serde_json::json!(403));
    // The forged form changed nothing.
    reload(&first, |t| t.ends_with("name: Alice A.")).await;

    // Logging out leaves a message for the next page, once.
    first.click("#logout-button").await.expect("log out");
    first
        .wait_for("#flash", |t| t == "You have been logged out.", WAIT)
        .await
        .expect("the logout flash");
    reload(&first, |t| t == "Not logged in").await;
    assert!(flash_hidden(&first).await, "the logout flash showed twice");
}
