//! A real headless Chromium for end-to-end tests, driven through chromedriver's W3C WebDriver API
//! by [`fantoccini`].
//!
//! Every [`Browser`] has its own chromedriver on a free loopback port and its own fresh profile
//! in a private temporary directory; dropping it kills whatever it started.

use std::fmt;
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::error::{CmdError, ErrorStatus};
use fantoccini::{Client, ClientBuilder, Locator};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::process::{fresh_dir, spawn_in};
use crate::server::TestkitError;

/// How long any single WebDriver command may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long chromedriver may take to answer `/status` with `ready: true`.
const DRIVER_READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one `/status` request may take.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// How long creating the session (which launches Chromium) may take.
const SESSION_TIMEOUT: Duration = Duration::from_secs(60);
/// How often [`Browser::wait_for`] looks again.
const POLL: Duration = Duration::from_millis(50);
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

impl From<&fantoccini::cookies::Cookie<'_>> for BrowserCookie {
    fn from(c: &fantoccini::cookies::Cookie<'_>) -> Self {
        Self {
            name: c.name().to_owned(),
            value: c.value().to_owned(),
            path: c.path().unwrap_or("/").to_owned(),
            domain: c.domain().map(str::to_owned),
            secure: c.secure().unwrap_or(false),
            http_only: c.http_only().unwrap_or(false),
            same_site: c.same_site().map(|s| s.to_string()),
            expiry: c
                .expires_datetime()
                .and_then(|at| u64::try_from(at.unix_timestamp()).ok()),
        }
    }
}

/// A headless Chromium under its own chromedriver, with a fresh profile. Kills chromedriver and
/// every Chromium process on drop, and removes its temporary directory.
///
/// The methods are `async` and need a Tokio runtime (any flavor); the runtime keeps serving the
/// application under test while a command runs. Every call is bounded (30 s), and a failure says
/// which command failed and carries the WebDriver error and message.
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
    // Dropped first: its background task asks chromedriver to end the session while
    // `Driver::drop` kills whatever is left.
    client: Client,
    driver: Driver,
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
            match Driver::spawn(&chromedriver).await {
                Ok(driver) => return Self::open_session(driver, &chromium).await,
                Err(e @ TestkitError::BrowserNotInstalled(_)) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| TestkitError::Browser("no attempt made".into())))
    }

    async fn open_session(driver: Driver, chromium: &Path) -> Result<Self, TestkitError> {
        // Chromium creates it.
        let profile = driver.dir.join("profile");
        let capabilities = json!({
            "browserName": "chrome",
            "pageLoadStrategy": "normal",
            // Below CALL_TIMEOUT, so a slow page is a WebDriver error, not a client timeout.
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
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("a JSON object literal")
        };
        let mut builder = ClientBuilder::new(HttpConnector::new());
        builder.capabilities(capabilities);
        let url = driver.url();
        match tokio::time::timeout(SESSION_TIMEOUT, builder.connect(&url)).await {
            Ok(Ok(client)) => Ok(Self { client, driver }),
            Ok(Err(e)) => Err(driver.fail(&format!("could not open a Chromium session: {e}"))),
            Err(_) => Err(driver.fail(&format!("no Chromium session within {SESSION_TIMEOUT:?}"))),
        }
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

    /// The underlying [`fantoccini::Client`], for what this type does not wrap (windows, frames,
    /// key presses, …). Its calls are not bounded by the 30 s limit of this type's methods.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Navigates to `url` and waits for the page to load.
    ///
    /// # Errors
    ///
    /// The navigation failed or timed out (the error carries the WebDriver message).
    pub async fn goto(&self, url: &str) -> Result<(), TestkitError> {
        bounded(self.client.goto(url))
            .await
            .map_err(|e| e.context(&format!("goto {url}")))
    }

    /// Reloads the current page and waits for it to load.
    ///
    /// # Errors
    ///
    /// The reload failed or timed out.
    pub async fn refresh(&self) -> Result<(), TestkitError> {
        bounded(self.client.refresh())
            .await
            .map_err(|e| e.context("refresh"))
    }

    /// The URL of the current page.
    ///
    /// # Errors
    ///
    /// The WebDriver command failed.
    pub async fn current_url(&self) -> Result<String, TestkitError> {
        bounded(self.client.current_url())
            .await
            .map(String::from)
            .map_err(|e| e.context("current_url"))
    }

    /// Clicks the first element matching the CSS selector `css`.
    ///
    /// # Errors
    ///
    /// No element matches, it cannot be clicked, or the command failed.
    pub async fn click(&self, css: &str) -> Result<(), TestkitError> {
        bounded(async { self.client.find(Locator::Css(css)).await?.click().await })
            .await
            .map_err(|e| e.context(&format!("click `{css}`")))
    }

    /// Clears the first element matching `css` (an input or text area), then types `text` into it.
    ///
    /// # Errors
    ///
    /// No element matches, it is not editable, or the command failed.
    pub async fn type_text(&self, css: &str, text: &str) -> Result<(), TestkitError> {
        bounded(async {
            let element = self.client.find(Locator::Css(css)).await?;
            element.clear().await?;
            element.send_keys(text).await
        })
        .await
        .map_err(|e| e.context(&format!("type into `{css}`")))
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
                Err(CallError::Command(CmdError::Standard(e)))
                    if matches!(
                        e.error,
                        ErrorStatus::NoSuchElement | ErrorStatus::StaleElementReference
                    ) =>
                {
                    last = format!("{}: {}", e.error, e.message);
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
        bounded(self.client.execute(script, Vec::new()))
            .await
            .map_err(|e| e.context("execute"))
    }

    /// Every cookie visible to the current page, `HttpOnly` ones included.
    ///
    /// # Errors
    ///
    /// The command failed or its answer was not a list of cookies.
    pub async fn cookies(&self) -> Result<Vec<BrowserCookie>, TestkitError> {
        let cookies = bounded(self.client.get_all_cookies())
            .await
            .map_err(|e| e.context("cookies"))?;
        Ok(cookies.iter().map(BrowserCookie::from).collect())
    }

    /// A PNG screenshot of the viewport.
    ///
    /// # Errors
    ///
    /// The command failed or its answer was not base64.
    pub async fn screenshot_png(&self) -> Result<Vec<u8>, TestkitError> {
        bounded(self.client.screenshot())
            .await
            .map_err(|e| e.context("screenshot"))
    }

    async fn try_text(&self, css: &str) -> Result<String, CallError> {
        bounded(async { self.client.find(Locator::Css(css)).await?.text().await }).await
    }
}

/// Runs one WebDriver command (or a few in a row), bounded by [`CALL_TIMEOUT`].
async fn bounded<T>(command: impl Future<Output = Result<T, CmdError>>) -> Result<T, CallError> {
    match tokio::time::timeout(CALL_TIMEOUT, command).await {
        Ok(result) => result.map_err(CallError::Command),
        Err(_) => Err(CallError::TimedOut),
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
    async fn spawn(bin: &Path) -> Result<Self, TestkitError> {
        let browser_err =
            |what: &str, e: std::io::Error| TestkitError::Browser(format!("{what}: {e}"));
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| browser_err("no free port", e))?
            .port();
        let dir = fresh_dir("browser", port)
            .map_err(|e| browser_err("could not create a temporary directory", e))?;
        let mut command = Command::new(bin);
        command.arg(format!("--port={port}")).arg(format!(
            "--log-path={}",
            dir.join("chromedriver.log").to_string_lossy()
        ));
        let child = spawn_in(&mut command, &dir, "chromedriver.out").map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                TestkitError::BrowserNotInstalled(format!("chromedriver ({})", bin.display()))
            } else {
                browser_err(&format!("could not run {}", bin.display()), e)
            }
        })?;
        let mut driver = Self { child, port, dir };
        driver.wait_ready().await?;
        Ok(driver)
    }

    /// `http://127.0.0.1:<port>/`, where chromedriver listens.
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// Waits until chromedriver answers `GET /status` with `ready: true`: a port taken by another
    /// server before chromedriver could bind it never does.
    async fn wait_ready(&mut self) -> Result<(), TestkitError> {
        let started = Instant::now();
        let http = HttpClient::builder(TokioExecutor::new()).build(HttpConnector::new());
        let status = format!("{}status", self.url());
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(self.fail(&format!("chromedriver exited with {status}")));
            }
            if tokio::time::timeout(STATUS_TIMEOUT, is_ready(&http, &status)).await == Ok(true) {
                return Ok(());
            }
            if started.elapsed() >= DRIVER_READY_TIMEOUT {
                return Err(self.fail(&format!(
                    "chromedriver was not ready within {DRIVER_READY_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(POLL).await;
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

/// Whether `GET status_url` answers a WebDriver status whose `ready` is `true`.
async fn is_ready(http: &HttpClient<HttpConnector, Empty<bytes::Bytes>>, status_url: &str) -> bool {
    let Ok(uri) = status_url.parse() else {
        return false;
    };
    let Ok(response) = http.get(uri).await else {
        return false;
    };
    let Ok(body) = response.into_body().collect().await else {
        return false;
    };
    serde_json::from_slice::<Value>(&body.to_bytes())
        .ok()
        .and_then(|status| status.pointer("/value/ready").and_then(Value::as_bool))
        == Some(true)
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
    /// fantoccini reported an error: a WebDriver error from chromedriver, or a transport failure.
    Command(CmdError),
    /// No answer within [`CALL_TIMEOUT`].
    TimedOut,
}

impl CallError {
    fn context(self, what: &str) -> TestkitError {
        TestkitError::Browser(format!("{what}: {self}"))
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Command(CmdError::Standard(e)) => {
                write!(f, "WebDriver error `{}`: {}", e.error, e.message)
            }
            Self::Command(e) => write!(f, "{e}"),
            Self::TimedOut => write!(f, "no answer within {CALL_TIMEOUT:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
