use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::{Node, connect_sync, fresh_dir, installed, spawn_watched};
use crate::server::{LOG_FILE, OUTPUT_FILE, TestkitError, redis_server_binary};
use crate::tls::TestTls;

/// How often the sentinels' view is polled.
const POLL: Duration = Duration::from_millis(25);
/// How long a sentinel gets to answer, once started.
const UP_TIMEOUT: Duration = Duration::from_secs(10);

/// Redis Sentinels on free `127.0.0.1` ports watching one primary as [`MASTER`](Self::MASTER),
/// each a `redis-server <conf> --sentinel` child process (the same binary as the servers, so
/// `REDIS_SERVER_BIN=valkey-server` runs Valkey's sentinels), killed when dropped.
///
/// For failover tests, start a replica of the primary
/// (`RedisServer::start_with(&["--replicaof", "127.0.0.1", &port])`), three sentinels with a
/// short `down_after`, wait for [`wait_watching`](Self::wait_watching), then stop the primary
/// and [`wait_failover`](Self::wait_failover).
///
/// [`start_tls`](Self::start_tls) starts sentinels that speak only TLS, watching a primary
/// started with [`RedisServer::start_tls`](crate::RedisServer::start_tls).
#[derive(Debug)]
pub struct RedisSentinels {
    nodes: Vec<Node>,
    /// The certificates of TLS sentinels ([`start_tls`](Self::start_tls)).
    tls: Option<TestTls>,
}

impl RedisSentinels {
    /// The name the sentinels monitor the primary under.
    pub const MASTER: &'static str = "mymaster";

    /// Starts `count` sentinels watching the primary on `127.0.0.1:primary_port`, with a quorum
    /// of a majority, `down-after-milliseconds` of `down_after` and a failover timeout of four
    /// times as long (at least 1 s), and waits until each names the primary.
    ///
    /// # Errors
    ///
    /// `redis-server` is missing, or a sentinel did not come up (the error carries its log).
    pub fn start(
        primary_port: u16,
        count: usize,
        down_after: Duration,
    ) -> Result<Self, TestkitError> {
        Self::start_on(primary_port, count, down_after, None)
    }

    /// As [`start`](Self::start), for sentinels that speak only TLS with the certificates of
    /// `tls`, watching a TLS primary (one started with
    /// [`RedisServer::start_tls`](crate::RedisServer::start_tls) and the same certificates):
    /// each sentinel has a TLS port and no plain one, verifies its clients (a client
    /// certificate of the same authority is required), and reaches the primary, its replicas
    /// and the other sentinels over TLS (`tls-replication yes`), presenting the server
    /// certificate as its own. [`urls`](Self::urls) are `rediss://127.0.0.1:<port>/`.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_tls(
        primary_port: u16,
        count: usize,
        down_after: Duration,
        tls: &TestTls,
    ) -> Result<Self, TestkitError> {
        Self::start_on(primary_port, count, down_after, Some(tls))
    }

    fn start_on(
        primary_port: u16,
        count: usize,
        down_after: Duration,
        tls: Option<&TestTls>,
    ) -> Result<Self, TestkitError> {
        let quorum = count / 2 + 1;
        let mut sentinels = Self {
            nodes: Vec::with_capacity(count),
            tls: tls.cloned(),
        };
        for _ in 0..count {
            // A port found free can be taken before the sentinel binds it: try again.
            let mut last = None;
            for _ in 0..5 {
                match Node::spawn_sentinel(primary_port, quorum, down_after, tls) {
                    Ok(node) => {
                        last = None;
                        sentinels.nodes.push(node);
                        break;
                    }
                    Err(TestkitError::NotInstalled(bin)) => {
                        return Err(TestkitError::NotInstalled(bin));
                    }
                    Err(e) => last = Some(e),
                }
            }
            if let Some(e) = last {
                return Err(e);
            }
        }
        Ok(sentinels)
    }

    /// `127.0.0.1:<port>` of each sentinel.
    #[must_use]
    pub fn addrs(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect()
    }

    /// The URL of each sentinel: `redis://127.0.0.1:<port>/`, or `rediss://…` for
    /// [TLS sentinels](Self::start_tls).
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        self.nodes
            .iter()
            .map(|n| format!("{scheme}://127.0.0.1:{}/", n.port))
            .collect()
    }

    /// The port each sentinel listens on.
    #[must_use]
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// Waits until every sentinel knows `replicas` replicas of the primary and the other
    /// sentinels: only then can they agree on a failover.
    ///
    /// # Errors
    ///
    /// Not so within `timeout` (the error says what each sentinel knows).
    pub fn wait_watching(&self, replicas: usize, timeout: Duration) -> Result<(), TestkitError> {
        let others = self.nodes.len() - 1;
        self.wait_until(timeout, "know the replicas and each other", |conn| {
            let mut count = |what: &str| {
                redis::cmd("SENTINEL")
                    .arg(what)
                    .arg(Self::MASTER)
                    .query::<Vec<redis::Value>>(conn)
                    .map_or(0, |v| v.len())
            };
            count("REPLICAS") >= replicas && count("SENTINELS") >= others
        })
    }

    /// Waits until every sentinel names a primary on another port than `old`: its port.
    ///
    /// # Errors
    ///
    /// No failover within `timeout` (the error says what each sentinel names).
    pub fn wait_failover(&self, old: u16, timeout: Duration) -> Result<u16, TestkitError> {
        let mut new = 0;
        self.wait_until(timeout, "name a new primary", |conn| match named(conn) {
            Some(port) if port != old => {
                new = port;
                true
            }
            _ => false,
        })?;
        Ok(new)
    }

    /// Kills sentinel `i` (`SIGKILL`): a sentinel that is down.
    ///
    /// # Panics
    ///
    /// When there is no sentinel `i`.
    pub fn stop(&mut self, i: usize) {
        self.nodes[i].process.stop();
    }

    /// Polls every sentinel with `check` until it holds for all of them.
    fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        mut check: impl FnMut(&mut redis::Connection) -> bool,
    ) -> Result<(), TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            let all = self
                .nodes
                .iter()
                .all(|n| connect_sync(n.port, self.tls.as_ref()).is_ok_and(|mut c| check(&mut c)));
            if all {
                return Ok(());
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = self.nodes.iter().map(Node::sentinel_log).collect();
                return Err(TestkitError::NotReady(format!(
                    "the sentinels did not {what} within {timeout:?}; logs:\n{}",
                    logs.join("\n---\n")
                )));
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Node {
    fn spawn_sentinel(
        primary: u16,
        quorum: usize,
        down_after: Duration,
        tls: Option<&TestTls>,
    ) -> Result<Self, TestkitError> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = fresh_dir("sentinel", port)?;
        let down = down_after.as_millis().max(1);
        let conf = dir.join("sentinel.conf");
        let listen = match tls {
            Some(tls) => {
                let mut lines: String = tls
                    .server_config(&dir, port, "yes")?
                    .into_iter()
                    .map(|(name, value)| format!("{name} {value}\n"))
                    .collect();
                // The primary, its replicas and the other sentinels are reached over TLS too.
                lines.push_str("tls-replication yes\n");
                lines
            }
            None => format!("port {port}\n"),
        };
        // The sentinel rewrites its file as it learns the topology: it must be its own.
        std::fs::write(
            &conf,
            format!(
                "{listen}bind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile {log}\n\
                 sentinel monitor {master} 127.0.0.1 {primary} {quorum}\n\
                 sentinel down-after-milliseconds {master} {down}\n\
                 sentinel failover-timeout {master} {failover}\n\
                 sentinel parallel-syncs {master} 1\n",
                dir = dir.display(),
                log = dir.join(LOG_FILE).display(),
                master = RedisSentinels::MASTER,
                failover = (down * 4).max(1000),
            ),
        )?;
        let bin = redis_server_binary();
        let mut command = Command::new(&bin);
        command.arg(&conf).arg("--sentinel");
        // The watchdog's shell would start even without the binary: look for it first.
        if !installed(&bin) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(TestkitError::NotInstalled(bin));
        }
        let process = spawn_watched(&command, &dir, OUTPUT_FILE)?;
        let mut node = Self { process, port, dir };
        node.wait_naming(primary, tls)?;
        Ok(node)
    }

    /// Waits until the sentinel names `primary` (which it reads from its file at start).
    fn wait_naming(&mut self, primary: u16, tls: Option<&TestTls>) -> Result<(), TestkitError> {
        let deadline = Instant::now() + UP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.process.child.try_wait() {
                return Err(TestkitError::NotReady(format!(
                    "the sentinel exited with {status}; log:\n{}",
                    self.sentinel_log()
                )));
            }
            if connect_sync(self.port, tls).is_ok_and(|mut c| named(&mut c) == Some(primary)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(TestkitError::NotReady(format!(
                    "the sentinel did not name the primary within {UP_TIMEOUT:?}; log:\n{}",
                    self.sentinel_log()
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    fn sentinel_log(&self) -> String {
        let read = |f| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        format!("{}{}", read(OUTPUT_FILE), read(LOG_FILE))
    }
}

/// The port of the primary the sentinel behind `conn` names.
fn named(conn: &mut redis::Connection) -> Option<u16> {
    redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(RedisSentinels::MASTER)
        .query::<Option<(String, u16)>>(conn)
        .ok()
        .flatten()
        .map(|(_, port)| port)
}
