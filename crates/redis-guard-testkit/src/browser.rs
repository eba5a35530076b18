//! A real headless Chromium for end-to-end tests, driven through chromedriver's W3C WebDriver
//! HTTP API by a tiny HTTP/1.1 JSON client.
//!
//! Every [`Browser`] has its own chromedriver on a free loopback port and its own fresh profile
//! in a private temporary directory; dropping it ends the session and kills whatever it started.

use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::server::TestkitError;

/// How long any single WebDriver command may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long chromedriver may take to answer `/status` with `ready: true`.
const DRIVER_READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long creating the session (which launches Chromium) may take.
const SESSION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long ending the session may take when the browser is dropped.
const QUIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often [`Browser::wait_for`] looks again.
const POLL: Duration = Duration::from_millis(50);
/// The key of a W3C web element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How many chromedriver starts to try (a free port can be taken before chromedriver binds it).
const ATTEMPTS: usize = 3;

/// A cookie as the browser stores it (a WebDriver cookie object).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrowserCookie {
    /// The cookie's name.
    pub name: String,
    /// The cookie's value.
    pub value: String,
    /// Its `Path`.
    pub path: String,
    /// Its domain, when the browser reports one.
    pub domain: Option<String>,
    /// Whether it is `Secure`.
    pub secure: bool,
    /// Whether it is `HttpOnly`.
    pub http_only: bool,
    /// Its `SameSite` policy (`"Strict"`, `"Lax"` or `"None"`), when the browser reports one.
    pub same_site: Option<String>,
    /// When it expires, in seconds since the Unix epoch; `None` for a session cookie.
    pub expiry: Option<u64>,
}

/// A headless Chromium under its own chromedriver, with a fresh profile. Ends the session and kills
/// chromedriver and any Chromium process left on drop, and removes its temporary directory.
///
/// The methods are `async` and need a Tokio runtime (any flavor): each WebDriver call runs on
/// Tokio's blocking pool, so the runtime keeps serving the application under test meanwhile.
/// Every call is bounded (30 s), and a failure says which command failed and carries the WebDriver
/// error and message.
///
/// ```no_run
/// # async fn demo() -> Result<(), redis_guard_testkit::TestkitError> {
/// use std::time::Duration;
/// let browser = redis_guard_testkit::Browser::start().await?;
/// browser.goto("http://127.0.0.1:8080/").await?;
/// browser.click("#login").await?;
/// browser.wait_for("#status", |t| t == "ok", Duration::from_secs(5)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Browser {
    // Dropped after `Browser::drop` has ended the session.
    driver: Driver,
    session: String,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a session in a new headless Chromium
    /// with a fresh profile.
    ///
    /// Chromium is `$CHROME_BIN`, else `chromium` or `chromium-browser` on `PATH`; chromedriver is
    /// `$CHROMEDRIVER_BIN`, else `chromedriver` on `PATH` (Debian: `apt-get install chromium
    /// chromium-driver`). Chromium runs with `--headless=new --no-sandbox --disable-gpu` and with
    /// background networking, component updates and sync off, so it reaches nothing but what a
    /// test points it at.
    ///
    /// # Errors
    ///
    /// [`TestkitError::BrowserNotInstalled`] when a binary is missing; [`TestkitError::Browser`]
    /// when chromedriver or Chromium did not come up in time (with chromedriver's output and log).
    pub async fn start() -> Result<Self, TestkitError> {
        tokio::task::spawn_blocking(Self::start_blocking)
            .await
            .map_err(|e| TestkitError::Browser(format!("the start task failed: {e}")))?
    }

    fn start_blocking() -> Result<Self, TestkitError> {
        let chromium = find_binary(
            "CHROME_BIN",
            &["chromium", "chromium-browser"],
            "Chromium ($CHROME_BIN, or `chromium` / `chromium-browser` on PATH)",
        )?;
        let chromedriver = find_binary(
            "CHROMEDRIVER_BIN",
            &["chromedriver"],
            "chromedriver ($CHROMEDRIVER_BIN, or `chromedriver` on PATH)",
        )?;
        let mut last = None;
        for _ in 0..ATTEMPTS {
            match Driver::spawn(&chromedriver) {
                Ok(driver) => return Self::open_session(driver, &chromium),
                Err(e @ TestkitError::BrowserNotInstalled(_)) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| TestkitError::Browser("no attempt made".into())))
    }

    fn open_session(driver: Driver, chromium: &Path) -> Result<Self, TestkitError> {
        let profile = driver.dir.join("profile");
        let capabilities = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "pageLoadStrategy": "normal",
                    // Below CALL_TIMEOUT, so a slow page is a WebDriver error, not a socket timeout.
                    "timeouts": { "implicit": 0, "pageLoad": 20_000, "script": 20_000 },
                    "goog:chromeOptions": {
                        "binary": chromium.to_string_lossy(),
                        "args": [
                            "--headless=new",
                            "--no-sandbox",
                            "--disable-gpu",
                            "--disable-quic",
                            "--no-first-run",
                            "--disable-background-networking",
                            "--disable-component-update",
                            "--disable-sync",
                            "--disable-dev-shm-usage",
                            format!("--user-data-dir={}", profile.to_string_lossy()),
                        ],
                    },
                },
            },
        });
        let value = webdriver(
            driver.port,
            "POST",
            "/session",
            Some(&capabilities),
            SESSION_TIMEOUT,
        )
        .map_err(|e| driver.fail(&format!("could not open a Chromium session: {e}")))?;
        let Some(session) = value.get("sessionId").and_then(Value::as_str) else {
            return Err(driver.fail(&format!(
                "no sessionId in the new session's answer: {value}"
            )));
        };
        Ok(Self {
            session: session.to_owned(),
            driver,
        })
    }

    /// The private temporary directory: the Chromium profile (`profile/`) and chromedriver's log.
    /// Every process this browser starts has it on its command line. Removed on drop.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.driver.dir
    }

    /// chromedriver's log so far (every command and Chromium's startup), for failure messages.
    #[must_use]
    pub fn log(&self) -> String {
        self.driver.log()
    }

    /// Navigates to `url` and waits for the page to load.
    ///
    /// # Errors
    ///
    /// The navigation failed or timed out (the error carries the WebDriver message).
    pub async fn goto(&self, url: &str) -> Result<(), TestkitError> {
        self.call("POST", "/url", Some(json!({ "url": url })))
            .await
            .map_err(|e| e.context(&format!("goto {url}")))?;
        Ok(())
    }

    /// Reloads the current page and waits for it to load.
    ///
    /// # Errors
    ///
    /// The reload failed or timed out.
    pub async fn refresh(&self) -> Result<(), TestkitError> {
        self.call("POST", "/refresh", None)
            .await
            .map_err(|e| e.context("refresh"))?;
        Ok(())
    }

    /// The URL of the current page.
    ///
    /// # Errors
    ///
    /// The WebDriver command failed.
    pub async fn current_url(&self) -> Result<String, TestkitError> {
        let value = self
            .call("GET", "/url", None)
            .await
            .map_err(|e| e.context("current_url"))?;
        expect_string(value, "current_url")
    }

    /// Clicks the first element matching the CSS selector `css`.
    ///
    /// # Errors
    ///
    /// No element matches, it cannot be clicked, or the command failed.
    pub async fn click(&self, css: &str) -> Result<(), TestkitError> {
        let what = || format!("click `{css}`");
        let element = self.find(css).await.map_err(|e| e.context(&what()))?;
        self.call("POST", &format!("/element/{element}/click"), None)
            .await
            .map_err(|e| e.context(&what()))?;
        Ok(())
    }

    /// Clears the first element matching `css` (an input or text area), then types `text` into it.
    ///
    /// # Errors
    ///
    /// No element matches, it is not editable, or the command failed.
    pub async fn type_text(&self, css: &str, text: &str) -> Result<(), TestkitError> {
        let what = || format!("type into `{css}`");
        let element = self.find(css).await.map_err(|e| e.context(&what()))?;
        self.call("POST", &format!("/element/{element}/clear"), None)
            .await
            .map_err(|e| e.context(&what()))?;
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        )
        .await
        .map_err(|e| e.context(&what()))?;
        Ok(())
    }

    /// The rendered text of the first element matching `css`.
    ///
    /// # Errors
    ///
    /// No element matches, or the command failed.
    pub async fn text(&self, css: &str) -> Result<String, TestkitError> {
        self.try_text(css)
            .await
            .map_err(|e| e.context(&format!("text of `{css}`")))
    }

    /// Waits until the first element matching `css` exists and its rendered text satisfies
    /// `predicate`, looking every 50 ms; returns that text as soon as it does. This is how a test
    /// waits for a page that JavaScript updates.
    ///
    /// # Errors
    ///
    /// `timeout` passed first (the error says what the text was last, or that nothing matched), or
    /// a command failed for another reason than the element being absent or replaced.
    pub async fn wait_for(
        &self,
        css: &str,
        mut predicate: impl FnMut(&str) -> bool,
        timeout: Duration,
    ) -> Result<String, TestkitError> {
        let started = Instant::now();
        let mut last;
        loop {
            match self.try_text(css).await {
                Ok(text) if predicate(&text) => return Ok(text),
                Ok(text) => last = format!("its text was last {text:?}"),
                Err(CallError::WebDriver { error, message, .. })
                    if error == "no such element" || error == "stale element reference" =>
                {
                    last = format!("{error}: {message}");
                }
                Err(e) => return Err(e.context(&format!("wait for `{css}`"))),
            }
            if started.elapsed() >= timeout {
                return Err(TestkitError::Browser(format!(
                    "wait for `{css}`: the predicate did not hold within {timeout:?}; {last}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Runs `script` in the page as the body of a synchronous function (so it should `return`
    /// what it wants back) and returns that value as JSON.
    ///
    /// # Errors
    ///
    /// The script threw (the error carries the JavaScript message), or the command failed.
    pub async fn execute(&self, script: &str) -> Result<Value, TestkitError> {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
        .map_err(|e| e.context("execute"))
    }

    /// Every cookie visible to the current page, `HttpOnly` ones included.
    ///
    /// # Errors
    ///
    /// The command failed or its answer was not a list of cookies.
    pub async fn cookies(&self) -> Result<Vec<BrowserCookie>, TestkitError> {
        let value = self
            .call("GET", "/cookie", None)
            .await
            .map_err(|e| e.context("cookies"))?;
        let Value::Array(list) = value else {
            return Err(TestkitError::Browser(format!(
                "cookies: expected a list, got {value}"
            )));
        };
        list.iter()
            .map(|c| {
                parse_cookie(c).ok_or_else(|| {
                    TestkitError::Browser(format!("cookies: not a cookie object: {c}"))
                })
            })
            .collect()
    }

    /// A PNG screenshot of the viewport.
    ///
    /// # Errors
    ///
    /// The command failed or its answer was not base64.
    pub async fn screenshot_png(&self) -> Result<Vec<u8>, TestkitError> {
        let value = self
            .call("GET", "/screenshot", None)
            .await
            .map_err(|e| e.context("screenshot"))?;
        let encoded = expect_string(value, "screenshot")?;
        decode_base64(&encoded)
            .ok_or_else(|| TestkitError::Browser("screenshot: the answer is not base64".into()))
    }

    /// The WebDriver element id of the first element matching `css`.
    async fn find(&self, css: &str) -> Result<String, CallError> {
        let value = self
            .call(
                "POST",
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await?;
        match value.get(ELEMENT_KEY).and_then(Value::as_str) {
            Some(id) => Ok(id.to_owned()),
            None => Err(CallError::Transport(format!(
                "not an element reference: {value}"
            ))),
        }
    }

    async fn try_text(&self, css: &str) -> Result<String, CallError> {
        let element = self.find(css).await?;
        match self
            .call("GET", &format!("/element/{element}/text"), None)
            .await?
        {
            Value::String(text) => Ok(text),
            other => Err(CallError::Transport(format!("not a string: {other}"))),
        }
    }

    /// Sends a command of this session (`path` is relative to `/session/{id}`).
    async fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, CallError> {
        let port = self.driver.port;
        let path = format!("/session/{}{path}", self.session);
        tokio::task::spawn_blocking(move || {
            webdriver(port, method, &path, body.as_ref(), CALL_TIMEOUT)
        })
        .await
        .map_err(|e| CallError::Transport(format!("the command task failed: {e}")))?
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Chromedriver quits Chromium; whatever survives is killed by `Driver::drop`. Blocking here
        // is brief (loopback, bounded) and never waits on the caller's runtime.
        let path = format!("/session/{}", self.session);
        let _ = webdriver(self.driver.port, "DELETE", &path, None, QUIT_TIMEOUT);
    }
}

/// A chromedriver process and its temporary directory. Kills both, and every process that names
/// the directory, on drop.
#[derive(Debug)]
struct Driver {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Driver {
    fn spawn(bin: &Path) -> Result<Self, TestkitError> {
        static N: AtomicU64 = AtomicU64::new(0);
        let browser_err =
            |what: &str, e: std::io::Error| TestkitError::Browser(format!("{what}: {e}"));
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| browser_err("no free port", e))?
            .port();
        let dir = std::env::temp_dir().join(format!(
            "redis-guard-browser-{}-{}-{port}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        // Fresh: a directory left by an earlier process with the same pid is not reused.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("profile"))
            .map_err(|e| browser_err(&format!("could not create {}", dir.display()), e))?;
        let output = File::create(dir.join("chromedriver.out"))
            .and_then(|out| Ok((out.try_clone()?, out)))
            .map_err(|e| browser_err("could not create chromedriver's output file", e));
        let (stdout, stderr) = match output {
            Ok(files) => files,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let child = match Command::new(bin)
            .arg(format!("--port={port}"))
            .arg(format!(
                "--log-path={}",
                dir.join("chromedriver.log").to_string_lossy()
            ))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(if e.kind() == std::io::ErrorKind::NotFound {
                    TestkitError::BrowserNotInstalled(format!("chromedriver ({})", bin.display()))
                } else {
                    browser_err(&format!("could not run {}", bin.display()), e)
                });
            }
        };
        let mut driver = Self { child, port, dir };
        driver.wait_ready()?;
        Ok(driver)
    }

    fn wait_ready(&mut self) -> Result<(), TestkitError> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(self.fail(&format!("chromedriver exited with {status}")));
            }
            if let Ok(value) = webdriver(self.port, "GET", "/status", None, Duration::from_secs(2))
                && value.get("ready").and_then(Value::as_bool) == Some(true)
            {
                return Ok(());
            }
            if started.elapsed() >= DRIVER_READY_TIMEOUT {
                return Err(self.fail(&format!(
                    "chromedriver was not ready within {DRIVER_READY_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("chromedriver.log")).unwrap_or_default()
    }

    /// An error saying `why`, with chromedriver's output and the end of its log.
    fn fail(&self, why: &str) -> TestkitError {
        let output = std::fs::read_to_string(self.dir.join("chromedriver.out")).unwrap_or_default();
        let log = self.log();
        let tail = log
            .char_indices()
            .rev()
            .nth(8_000)
            .map_or(log.as_str(), |(i, _)| &log[i..]);
        TestkitError::Browser(format!(
            "{why}\nchromedriver output:\n{}\nchromedriver log (end):\n{}",
            output.trim_end(),
            tail.trim_end()
        ))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        kill_processes_naming(&self.dir.to_string_lossy());
        // Chromium may still be flushing its profile for a moment.
        for _ in 0..20 {
            match std::fs::remove_dir_all(&self.dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    std::thread::sleep(Duration::from_millis(25));
                }
                _ => break,
            }
        }
    }
}

/// Kills (SIGKILL) every process whose command line contains `needle` and waits up to 2 s for them
/// to go. Reads `/proc`: elsewhere it does nothing.
fn kill_processes_naming(needle: &str) {
    let started = Instant::now();
    loop {
        let pids = processes_naming(needle);
        if pids.is_empty() || started.elapsed() > Duration::from_secs(2) {
            return;
        }
        // `kill` is a shell builtin: no signal-sending dependency (and no unsafe code) needed.
        let _ = Command::new("sh")
            .args(["-c", "kill -KILL \"$@\" 2>/dev/null", "sh"])
            .args(pids.iter().map(u32::to_string))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The live processes (zombies have no command line) whose command line contains `needle`.
fn processes_naming(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id();
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
        })
        .collect()
}

/// `$var` if set (a path, or a name looked up on `PATH`), else the first of `names` on `PATH`.
fn find_binary(var: &str, names: &[&str], what: &str) -> Result<PathBuf, TestkitError> {
    if let Some(value) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(&value);
        let found = if path.components().count() > 1 {
            path.is_file().then_some(path)
        } else {
            on_path(&path)
        };
        return found.ok_or_else(|| {
            TestkitError::BrowserNotInstalled(format!("{what}: ${var}={}", value.to_string_lossy()))
        });
    }
    names
        .iter()
        .find_map(|name| on_path(Path::new(name)))
        .ok_or_else(|| TestkitError::BrowserNotInstalled(what.to_owned()))
}

fn on_path(name: &Path) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Why a WebDriver call failed.
#[derive(Debug)]
enum CallError {
    /// chromedriver answered with a WebDriver error.
    WebDriver {
        status: u16,
        error: String,
        message: String,
    },
    /// chromedriver did not answer (in time), or not with what was expected.
    Transport(String),
}

impl CallError {
    fn context(self, what: &str) -> TestkitError {
        TestkitError::Browser(format!("{what}: {self}"))
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WebDriver {
                status,
                error,
                message,
            } => write!(f, "WebDriver error `{error}` (HTTP {status}): {message}"),
            Self::Transport(why) => write!(f, "{why}"),
        }
    }
}

fn expect_string(value: Value, what: &str) -> Result<String, TestkitError> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(TestkitError::Browser(format!(
            "{what}: expected a string, got {other}"
        ))),
    }
}

fn parse_cookie(c: &Value) -> Option<BrowserCookie> {
    let string = |key: &str| c.get(key).and_then(Value::as_str).map(str::to_owned);
    let flag = |key: &str| c.get(key).and_then(Value::as_bool).unwrap_or(false);
    Some(BrowserCookie {
        name: string("name")?,
        value: string("value")?,
        path: string("path").unwrap_or_else(|| "/".to_owned()),
        domain: string("domain"),
        secure: flag("secure"),
        http_only: flag("httpOnly"),
        same_site: string("sameSite"),
        expiry: c.get("expiry").and_then(Value::as_u64),
    })
}

/// One WebDriver call: the `value` of chromedriver's answer, or its WebDriver error.
fn webdriver(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<Value, CallError> {
    let (status, answer) = http_json(port, method, path, body, timeout)
        .map_err(|why| CallError::Transport(format!("{method} {path}: {why}")))?;
    let value = match answer {
        Value::Object(mut fields) => fields.remove("value").unwrap_or(Value::Null),
        other => other,
    };
    let error = value.get("error").and_then(Value::as_str);
    if (200..300).contains(&status) && error.is_none() {
        return Ok(value);
    }
    Err(CallError::WebDriver {
        status,
        error: error.unwrap_or("unknown error").to_owned(),
        message: value
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| value.to_string(), str::to_owned),
    })
}

/// Sends one HTTP/1.1 request with a JSON body (`{}` for a bodiless POST) to `127.0.0.1:port` and
/// returns the status and the JSON answer (`null` when empty), all within `timeout`.
fn http_json(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<(u16, Value), String> {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    let payload = match body {
        Some(body) => body.to_string(),
        None if method == "POST" => "{}".to_owned(),
        None => String::new(),
    };
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n\
         Connection: close\r\n"
    );
    if !payload.is_empty() {
        request.push_str(&format!(
            "Content-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n",
            payload.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(&payload);
    stream
        .set_write_timeout(Some(timeout))
        .and_then(|()| stream.write_all(request.as_bytes()))
        .map_err(|e| format!("send: {e}"))?;

    let mut received = Vec::new();
    let mut chunk = [0_u8; 16 * 1024];
    let (status, body) = loop {
        if let Some(done) = parse_response(&received, false)? {
            break done;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no complete answer within {timeout:?}"));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| format!("receive: {e}"))?;
        match stream.read(&mut chunk) {
            Ok(0) => match parse_response(&received, true)? {
                Some(done) => break done,
                None => return Err("the connection closed mid-answer".to_owned()),
            },
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(format!("receive: {e}")),
        }
    };
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((status, Value::Null));
    }
    let json = serde_json::from_slice(&body).map_err(|e| {
        format!(
            "HTTP {status} with a body that is not JSON ({e}): {}",
            String::from_utf8_lossy(&body)
        )
    })?;
    Ok((status, json))
}

/// The status and body of the response in `buf`, or `None` while it is incomplete (`eof`: no more
/// bytes will come).
fn parse_response(buf: &[u8], eof: bool) -> Result<Option<(u16, Vec<u8>)>, String> {
    let Some(head_len) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if eof && !buf.is_empty() {
            Err("the connection closed inside the response head".to_owned())
        } else {
            Ok(None)
        };
    };
    let head = String::from_utf8_lossy(&buf[..head_len]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP status line: {status_line:?}"))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    let body = &buf[head_len + 4..];
    let complete = if chunked {
        dechunk(body)
    } else if let Some(length) = length {
        (body.len() >= length).then(|| body[..length].to_vec())
    } else {
        eof.then(|| body.to_vec())
    };
    match complete {
        None if eof => Err("the connection closed inside the response body".to_owned()),
        complete => Ok(complete.map(|body| (status, body))),
    }
}

/// A complete chunked body, decoded; `None` while incomplete.
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_field = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size_hex = size_field.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            // Trailers (none expected) end with an empty line.
            return rest.windows(2).any(|w| w == b"\r\n").then_some(out);
        }
        if rest.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// Standard base64 (with or without padding; line breaks ignored); `None` on any other byte.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut bits: u32 = 0;
    let mut count = 0;
    for byte in text.bytes() {
        let sextet = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            b'\r' | b'\n' => continue,
            _ => return None,
        };
        bits = (bits << 6) | u32::from(sextet);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push(u8::try_from(bits >> count).ok()?);
            bits &= (1 << count) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes() {
        assert_eq!(decode_base64("").as_deref(), Some(&b""[..]));
        assert_eq!(decode_base64("Zg==").as_deref(), Some(&b"f"[..]));
        assert_eq!(decode_base64("Zm8=").as_deref(), Some(&b"fo"[..]));
        assert_eq!(decode_base64("Zm9v").as_deref(), Some(&b"foo"[..]));
        assert_eq!(
            decode_base64("iVBORw0KGgo=").as_deref(),
            Some(&b"\x89PNG\r\n\x1a\n"[..])
        );
        assert_eq!(decode_base64("Zm9v!"), None);
    }

    #[test]
    fn responses_parse() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(
            parse_response(plain, false),
            Ok(Some((200, b"{}".to_vec())))
        );
        assert_eq!(parse_response(&plain[..plain.len() - 1], false), Ok(None));
        assert!(parse_response(&plain[..plain.len() - 1], true).is_err());
        let chunked =
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(chunked, false),
            Ok(Some((404, b"{\"a\":1}".to_vec())))
        );
        let until_close = b"HTTP/1.1 200 OK\r\n\r\nnull";
        assert_eq!(parse_response(until_close, false), Ok(None));
        assert_eq!(
            parse_response(until_close, true),
            Ok(Some((200, b"null".to_vec())))
        );
    }

    #[test]
    fn missing_binaries_name_the_debian_packages() {
        let Err(e) = find_binary(
            "REDIS_GUARD_TESTKIT_UNSET_VARIABLE",
            &["no-such-browser-binary-anywhere"],
            "Chromium",
        ) else {
            panic!("found a binary that does not exist");
        };
        assert!(matches!(e, TestkitError::BrowserNotInstalled(_)));
        assert!(
            e.to_string()
                .contains("apt-get install chromium chromium-driver"),
            "{e}"
        );
    }
}
