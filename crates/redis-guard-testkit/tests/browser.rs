//! `Browser` drives a real headless Chromium against a page served by a hand-written HTTP server:
//! typing, clicking, waiting for a JavaScript update, cookies, reload, screenshots, and cleanup.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_guard_testkit::{Browser, BrowserCookie};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>login</title><link rel="icon" href="data:,"></head>
<body>
<input id="name">
<button id="go" onclick="fetch('/login', {method: 'POST', body: document.getElementById('name').value})
  .then(r => r.text()).then(t => { document.getElementById('out').textContent = t; })">Log in</button>
<div id="out"></div>
</body></html>"#;

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// What the server saw: `(method, path, Cookie header, body)` per request.
type Seen = Arc<Mutex<Vec<(String, String, Option<String>, String)>>>;

/// Serves `GET /` (the page) and `POST /login` (`hello`, and an `id` cookie) on 127.0.0.1:0.
async fn serve() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream, Arc::clone(&log)));
        }
    });
    (addr, seen)
}

/// Answers one request, then closes the connection.
async fn answer(mut stream: TcpStream, seen: Seen) {
    let mut buf = Vec::new();
    let mut chunk = [0_u8; 4096];
    let head_len = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_len]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    let length: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
    while buf.len() < head_len + 4 + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[head_len + 4..head_len + 4 + length]).into_owned();
    seen.lock()
        .unwrap()
        .push((method.clone(), path.clone(), header("cookie"), body));
    let (status, extra, content_type, content) = match (method.as_str(), path.as_str()) {
        ("GET", "/") => ("200 OK", "", "text/html; charset=utf-8", PAGE),
        ("POST", "/login") => (
            "200 OK",
            "Set-Cookie: id=abc; HttpOnly; Secure; SameSite=Lax; Path=/\r\n",
            "text/plain",
            "hello",
        ),
        _ => ("404 Not Found", "", "text/plain", "not found"),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n{content}",
        content.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Processes whose command line mentions `needle` (zombies have none).
fn processes_naming(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != std::process::id())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .count()
}

async fn start() -> Browser {
    let started = Instant::now();
    let browser = Browser::start().await.unwrap_or_else(|e| panic!("{e}"));
    eprintln!("browser started in {:?}", started.elapsed());
    browser
}

fn cookie<'a>(cookies: &'a [BrowserCookie], name: &str) -> Option<&'a BrowserCookie> {
    cookies.iter().find(|c| c.name == name)
}

/// Logs in on `http://{host}:{port}/` and returns the `id` cookie the browser kept, if any, and
/// whether the reload sent it back to the server.
async fn log_in(browser: &Browser, host: &str) -> (Option<BrowserCookie>, bool) {
    let (addr, seen) = serve().await;
    let url = format!("http://{host}:{}/", addr.port());
    browser.goto(&url).await.unwrap();
    assert_eq!(browser.current_url().await.unwrap(), url);
    browser.type_text("#name", "junk").await.unwrap();
    browser.type_text("#name", "alice").await.unwrap();
    let typed = browser
        .execute("return document.getElementById('name').value")
        .await
        .unwrap();
    assert_eq!(typed, "alice", "type_text clears first");
    assert_eq!(browser.text("#out").await.unwrap(), "");
    browser.click("#go").await.unwrap();
    let out = browser
        .wait_for("#out", |t| t == "hello", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(out, "hello");
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|(m, p, _, body)| m == "POST" && p == "/login" && body == "alice"),
        "the server got the typed name"
    );

    let before = browser.cookies().await.unwrap();
    let id = cookie(&before, "id").cloned();
    browser.refresh().await.unwrap();
    assert_eq!(browser.text("#out").await.unwrap(), "", "the page reloaded");
    let after = browser.cookies().await.unwrap();
    assert_eq!(cookie(&after, "id"), id.as_ref(), "reload keeps the cookie");
    let sent_back = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, p, ..)| m == "GET" && p == "/")
        .nth(1)
        .expect("the reload reached the server")
        .2
        .as_deref()
        == Some("id=abc");
    (id, sent_back)
}

fn assert_login_cookie(id: Option<&BrowserCookie>, host: &str) {
    let id = id.unwrap_or_else(|| panic!("no `id` cookie on http://{host}"));
    assert_eq!(id.value, "abc");
    assert!(id.http_only, "{id:?}");
    assert!(id.secure, "{id:?}");
    assert_eq!(id.same_site.as_deref(), Some("Lax"), "{id:?}");
    assert_eq!(id.path, "/");
    assert_eq!(id.expiry, None, "a session cookie: {id:?}");
    assert!(
        id.domain.as_deref().is_some_and(|d| d.contains(host)),
        "{id:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_in_and_keeps_a_secure_http_only_cookie() {
    let started = Instant::now();
    let browser = start().await;
    let dir = browser.dir().to_string_lossy().into_owned();
    assert!(
        processes_naming(&dir) >= 2,
        "chromedriver and chromium run with {dir} on their command lines"
    );

    for host in ["127.0.0.1", "localhost"] {
        let (id, sent_back) = log_in(&browser, host).await;
        eprintln!("http://{host}: id cookie {id:?}, sent back on reload: {sent_back}");
        assert_login_cookie(id.as_ref(), host);
        assert!(sent_back, "http://{host}: the reload sends the cookie");
    }

    let png = browser.screenshot_png().await.unwrap();
    assert!(
        png.starts_with(PNG_SIGNATURE),
        "not a PNG: {:?}",
        &png[..png.len().min(16)]
    );
    assert!(png.len() > 100);

    drop(browser);
    assert_eq!(processes_naming(&dir), 0, "processes left after drop");
    assert!(
        !std::path::Path::new(&dir).exists(),
        "{dir} left after drop"
    );
    eprintln!("start + test + drop took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_carry_the_webdriver_message_and_waits_time_out() {
    let browser = start().await;
    let dir = browser.dir().to_string_lossy().into_owned();
    let (addr, _) = serve().await;
    browser
        .goto(&format!("http://127.0.0.1:{}/", addr.port()))
        .await
        .unwrap();

    let missing = browser.click("#nope").await.unwrap_err().to_string();
    assert!(missing.contains("click `#nope`"), "{missing}");
    assert!(missing.contains("no such element"), "{missing}");

    let thrown = browser
        .execute("throw new Error('boom')")
        .await
        .unwrap_err()
        .to_string();
    assert!(thrown.contains("boom"), "{thrown}");

    let waited = Instant::now();
    let timed_out = browser
        .wait_for("#out", |t| t == "never", Duration::from_millis(300))
        .await
        .unwrap_err()
        .to_string();
    assert!(timed_out.contains("did not hold"), "{timed_out}");
    assert!(timed_out.contains(r#"last """#), "{timed_out}");
    assert!(waited.elapsed() < Duration::from_secs(5));

    let absent = browser
        .wait_for("#absent", |_| true, Duration::from_millis(200))
        .await
        .unwrap_err()
        .to_string();
    assert!(absent.contains("no such element"), "{absent}");

    // A failing test unwinds through the drop too: nothing may be left behind.
    let outcome = tokio::spawn(async move {
        let _browser = browser;
        panic!("intentional: a failing test still cleans up its Browser");
    })
    .await;
    assert!(outcome.is_err());
    assert_eq!(processes_naming(&dir), 0, "processes left after a panic");
}
