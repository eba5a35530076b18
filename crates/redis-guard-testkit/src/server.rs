use std::fmt;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::process::{Watched, fresh_dir, installed, spawn_in, spawn_watched};
use crate::tls::TestTls;

/// Makes `ring` the process' rustls provider unless one is installed (redis-rs uses the
/// process default).
pub(crate) fn install_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        #[allow(deprecated)]
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A `redis-server`'s log file, in its directory.
pub(crate) const LOG_FILE: &str = "redis.log";
/// Where a `redis-server`'s stdout and stderr go, next to its log.
pub(crate) const OUTPUT_FILE: &str = "output.log";

/// Why a Redis server (or the [`Browser`](crate::Browser)) could not be started or driven.
#[derive(Debug)]
#[non_exhaustive]
pub enum TestkitError {
    /// `redis-server` is not installed.
    NotInstalled(String),
    /// It started but did not become ready.
    NotReady(String),
    /// An I/O error while preparing or starting it.
    Io(std::io::Error),
    /// Chromium or chromedriver is not installed (says which, and where it was looked for).
    BrowserNotInstalled(String),
    /// The browser did not start, or a WebDriver command failed (says which, and why).
    Browser(String),
}

impl fmt::Display for TestkitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotInstalled(bin) => write!(
                f,
                "`{bin}` was not found. The tests start their own Redis: install it \
                 (Debian/Ubuntu: `sudo apt-get install redis-server`; Fedora: `sudo dnf install redis`; \
                 macOS: `brew install redis`) or point REDIS_SERVER_BIN at a redis-server binary"
            ),
            Self::NotReady(why) => write!(f, "redis-server did not become ready: {why}"),
            Self::Io(e) => write!(f, "could not start redis-server: {e}"),
            Self::BrowserNotInstalled(what) => write!(
                f,
                "{what} was not found. Browser tests drive a headless Chromium through chromedriver: \
                 install both (Debian: `sudo apt-get install chromium chromium-driver`) or \
                 point CHROME_BIN and CHROMEDRIVER_BIN at them"
            ),
            Self::Browser(why) => write!(f, "browser: {why}"),
        }
    }
}

impl std::error::Error for TestkitError {}

impl From<std::io::Error> for TestkitError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// The `redis-server` binary: `$REDIS_SERVER_BIN`, or `redis-server` on `PATH`.
#[must_use]
pub fn redis_server_binary() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_owned())
}

/// A key prefix unique within this process, for tests that share a server.
#[must_use]
pub fn unique_prefix(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("t{}-{name}:", N.fetch_add(1, Ordering::Relaxed))
}

/// A `redis-server` child process on `127.0.0.1:<port>`, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    /// The extra arguments it was started with, for [`restart`](Self::restart).
    extra: Vec<String>,
    /// The certificates of a TLS server ([`start_tls`](Self::start_tls)).
    tls: Option<TestTls>,
}

impl RedisServer {
    /// Starts a server with no persistence on a free port and waits until it answers `PING`.
    ///
    /// # Errors
    ///
    /// `redis-server` is missing, or did not come up (the error carries its log).
    pub fn start() -> Result<Self, TestkitError> {
        Self::start_with(&[])
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments (e.g. `["--maxmemory", "1mb"]`).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_with(extra: &[&str]) -> Result<Self, TestkitError> {
        let mut last = None;
        // A port found free can be taken by someone else before redis binds it: try again.
        for _ in 0..5 {
            match Self::try_start(extra) {
                Ok(server) => return Ok(server),
                Err(TestkitError::NotInstalled(bin)) => {
                    return Err(TestkitError::NotInstalled(bin));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| TestkitError::NotReady("no attempt made".into())))
    }

    /// Starts a server on `port` (on 127.0.0.1), e.g. one a client was told to connect to
    /// before anything listened there, with extra arguments; waits until it answers `PING`.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); also when the port is taken (no other port is tried).
    pub fn start_on(port: u16, extra: &[&str]) -> Result<Self, TestkitError> {
        Self::try_start_on(port, extra, None)
    }

    /// Starts a TLS-only server (no plain port) on a free port with the certificates of `tls`,
    /// verifying clients as `auth_clients` says (`"no"`, `"optional"`, `"yes"`: a client
    /// certificate signed by the same authority is then required). [`url`](Self::url) is
    /// `rediss://127.0.0.1:<port>/`, and [`client`](Self::client) trusts the authority and
    /// presents its client certificate.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_tls(tls: &TestTls, auth_clients: &str) -> Result<Self, TestkitError> {
        let mut last = None;
        for _ in 0..5 {
            match Self::try_start_on(free_port()?, &[], Some((tls, auth_clients))) {
                Ok(server) => return Ok(server),
                Err(TestkitError::NotInstalled(bin)) => {
                    return Err(TestkitError::NotInstalled(bin));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| TestkitError::NotReady("no attempt made".into())))
    }

    fn try_start(extra: &[&str]) -> Result<Self, TestkitError> {
        Self::try_start_on(free_port()?, extra, None)
    }

    fn try_start_on(
        port: u16,
        extra: &[&str],
        tls: Option<(&TestTls, &str)>,
    ) -> Result<Self, TestkitError> {
        let dir = fresh_dir("testkit", port)?;
        let mut args = match tls {
            Some((tls, auth_clients)) => tls.server_args(&dir, port, auth_clients)?,
            None => Vec::new(),
        };
        args.extend(extra.iter().map(|&a| a.to_owned()));
        let child = spawn_redis(port, &dir, &args)?;
        let mut server = Self {
            child,
            port,
            dir,
            extra: args,
            tls: tls.map(|(tls, _)| tls.clone()),
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), TestkitError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = self.client();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(TestkitError::NotReady(format!(
                    "exited with {status}; log:\n{}",
                    self.log()
                )));
            }
            if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200))
                && answers(&mut conn)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(TestkitError::NotReady(format!(
                    "no PONG within 10 s; log:\n{}",
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Freezes the server with `SIGSTOP` (through `kill`): connections stay open and the kernel
    /// still accepts new ones, but nothing is answered until [`thaw`](Self::thaw). This is a
    /// Redis that hangs, as opposed to one that is gone. Dropping a frozen server kills it.
    ///
    /// # Errors
    ///
    /// `kill` could not be run or failed.
    pub fn freeze(&self) -> Result<(), TestkitError> {
        self.signal("STOP")
    }

    /// Lets a [frozen](Self::freeze) server run again (`SIGCONT`): it then answers everything
    /// it received meanwhile, in order.
    ///
    /// # Errors
    ///
    /// As [`freeze`](Self::freeze).
    pub fn thaw(&self) -> Result<(), TestkitError> {
        self.signal("CONT")
    }

    fn signal(&self, name: &str) -> Result<(), TestkitError> {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(TestkitError::Io(std::io::Error::other(format!(
                "kill -{name} {} failed: {status}",
                self.child.id()
            ))))
        }
    }

    /// Kills the server (`SIGKILL`, as a crash would) and starts a new, empty one on the same
    /// port, with the same arguments, waiting until it answers `PING`: clients that reconnect
    /// find it at the address they had. Between the two, connections are refused.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); also when the port was taken by another process in between
    /// (no retry on another port: the point is the same port).
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        self.stop();
        self.child = spawn_redis(self.port, &self.dir, &self.extra)?;
        self.wait_ready()
    }

    /// Kills the server (`SIGKILL`) and waits for it to exit; the port and directory are kept
    /// for [`restart`](Self::restart). Stopping a stopped server does nothing.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's log so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(LOG_FILE)).unwrap_or_default()
    }

    /// The port it listens on (on 127.0.0.1).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`, or `rediss://…` for a TLS server.
    #[must_use]
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// The certificates of a server started with [`start_tls`](Self::start_tls).
    #[must_use]
    pub fn tls(&self) -> Option<&TestTls> {
        self.tls.as_ref()
    }

    /// A client for this server.
    ///
    /// # Panics
    ///
    /// Never: the URL is always valid.
    #[must_use]
    pub fn client(&self) -> redis::Client {
        #[allow(clippy::expect_used)]
        match &self.tls {
            Some(tls) => {
                install_provider();
                redis::Client::build_with_tls(self.url(), tls.certificates())
                    .expect("a loopback URL and test certificates are valid")
            }
            None => redis::Client::open(self.url()).expect("a loopback URL is valid"),
        }
    }

    /// A multiplexed connection to the server, for a test's own commands.
    ///
    /// # Panics
    ///
    /// When the server refuses the connection.
    pub async fn connect(&self) -> redis::aio::MultiplexedConnection {
        #[allow(clippy::expect_used)]
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test's redis-server")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `redis-server` on `127.0.0.1:port` with no persistence, its files in `dir`: the log in
/// [`LOG_FILE`], what it prints before it logs (bad arguments, early failures) in
/// [`OUTPUT_FILE`]. `extra` arguments come last.
pub(crate) fn spawn_redis(
    port: u16,
    dir: &Path,
    extra: &[impl AsRef<std::ffi::OsStr>],
) -> Result<Child, TestkitError> {
    let (mut command, bin) = redis_command(port, dir, extra);
    spawn_in(&mut command, dir, OUTPUT_FILE).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            TestkitError::NotInstalled(bin)
        } else {
            e.into()
        }
    })
}

/// [`spawn_redis`] under a watchdog that kills the server when this process exits (see
/// [`spawn_watched`]).
pub(crate) fn spawn_redis_watched(
    port: u16,
    dir: &Path,
    extra: &[impl AsRef<std::ffi::OsStr>],
) -> Result<Watched, TestkitError> {
    let (command, bin) = redis_command(port, dir, extra);
    // The shell would start even without the binary: look for it first, for the same error.
    if !installed(&bin) {
        let _ = std::fs::remove_dir_all(dir);
        return Err(TestkitError::NotInstalled(bin));
    }
    Ok(spawn_watched(&command, dir, OUTPUT_FILE)?)
}

/// The command line of a `redis-server` on `127.0.0.1:port` with no persistence, its files in
/// `dir`, and the binary's name.
fn redis_command(
    port: u16,
    dir: &Path,
    extra: &[impl AsRef<std::ffi::OsStr>],
) -> (Command, String) {
    let bin = redis_server_binary();
    let mut command = Command::new(&bin);
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join(LOG_FILE))
        .args(extra);
    (command, bin)
}

/// Whether the server behind `conn` answers `PING`: a `PONG`, or (started with
/// `--requirepass`) the `NOAUTH` error that says it is up and wants a password.
fn answers(conn: &mut redis::Connection) -> bool {
    match redis::cmd("PING").query::<String>(conn) {
        Ok(_) => true,
        Err(e) => e.kind() == redis::ErrorKind::AuthenticationFailed || e.code() == Some("NOAUTH"),
    }
}

/// A port on 127.0.0.1 where nothing listens now.
///
/// # Errors
///
/// No port could be bound.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
