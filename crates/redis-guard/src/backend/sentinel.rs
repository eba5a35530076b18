//! A connection to the primary that a group of Redis Sentinels names (feature `sentinel`).
//!
//! The sentinels are asked for the primary's address (`SENTINEL GET-MASTER-ADDR-BY-NAME`), and
//! the address they give is trusted only once the server there says it is a primary (`ROLE`):
//! a sentinel that is down, does not know the name or names a replica is skipped.
//!
//! One background task per connection keeps the primary current: woken at once when a call
//! finds the connection broken or the server demoted (`READONLY`), and every
//! [`CHECK_EVERY`] otherwise, to notice a failover before a call does. While no primary is
//! known, calls fail at once with an I/O error (which the circuit breaker counts as Redis being
//! unavailable) instead of each asking the sentinels: the task asks, with a bounded backoff.
//! Before a new primary takes calls, every script this connection has run is loaded there, so
//! that no request meets `NOSCRIPT` after a failover.
//! See <https://redis.io/docs/latest/develop/reference/sentinel-clients/>.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError};
use redis::{RedisConnectionInfo, RedisResult, Value};
use tokio::sync::Notify;

use super::ConnectOptions;

/// How long one step of a discovery may take: connecting to a sentinel and its answer, or
/// connecting to the primary it names and its `ROLE`.
const STEP_TIMEOUT: Duration = Duration::from_secs(1);

/// How often the task asks a sentinel whether the primary moved, while calls succeed.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The first and the longest pause between two discoveries that found no primary.
const RETRY_FIRST: Duration = Duration::from_millis(25);
const RETRY_MAX: Duration = Duration::from_millis(400);

/// What a Sentinel connection shares between its clones and its background task.
pub(crate) struct Sentinel {
    /// The sentinels, with their own credentials.
    sentinels: Vec<ConnectionInfo>,
    /// The name the sentinels monitor the primary under.
    master: String,
    /// The credentials and database of the primary (and of any server promoted later).
    node: RedisConnectionInfo,
    /// Whether the primary is reached over TLS (`rediss://name`).
    tls: bool,
    /// The primary calls go to; `None` while the task looks for one.
    current: RwLock<Option<Primary>>,
    /// Bumped at every switch, so that a late failure of a replaced connection drops nothing.
    generation: AtomicU64,
    /// The sentinel that answered last: asked first next time.
    preferred: AtomicUsize,
    /// Wakes the task when a call found the primary gone.
    lost: Arc<Notify>,
    /// The scripts this connection has run, by SHA-1: loaded on every new primary.
    scripts: RwLock<HashMap<String, Arc<str>>>,
    /// How clients to the sentinels and the primary are made.
    options: ConnectOptions,
}

#[derive(Clone)]
struct Primary {
    addr: ConnectionAddr,
    conn: MultiplexedConnection,
    generation: u64,
}

impl Sentinel {
    /// Finds the primary named `master` through `sentinels` (`host:port` or
    /// `redis://[[user]:password@]host:port`), and starts the task that keeps it current. When
    /// `options` are [lazy](ConnectOptions::lazy), a primary not found now is not an error: the
    /// task looks for it.
    pub(crate) async fn connect(
        sentinels: &[impl AsRef<str>],
        master: &str,
        options: &ConnectOptions,
    ) -> RedisResult<Arc<Self>> {
        let sentinels = sentinels
            .iter()
            .map(|s| sentinel_info(s.as_ref()))
            .collect::<RedisResult<Vec<_>>>()?;
        if sentinels.is_empty() {
            return Err(config_error("no sentinel address given".to_owned()));
        }
        let (master, node, tls) = master_info(master)?;
        let shared = Arc::new(Self {
            sentinels,
            master,
            node,
            tls,
            current: RwLock::new(None),
            generation: AtomicU64::new(0),
            preferred: AtomicUsize::new(0),
            lost: Arc::new(Notify::new()),
            scripts: RwLock::new(HashMap::new()),
            options: options.clone(),
        });
        match shared.discover().await {
            Ok((addr, conn)) => shared.install(addr, conn),
            Err(e) if options.is_lazy() => {
                tracing::warn!(master = %shared.master, error = %e, "redis-guard: no Redis primary found yet; calls fail (each layer answers by its failure policy) until the sentinels name one");
            }
            Err(e) => return Err(e),
        }
        tokio::spawn(watch(Arc::downgrade(&shared)));
        Ok(shared)
    }

    /// The connection to the primary, or the error a call gets while none is known.
    pub(crate) fn primary(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        match &*current {
            Some(p) => Ok((p.conn.clone(), p.generation)),
            None => Err(RedisError::from((
                ErrorKind::Io,
                "no Redis primary known",
                format!(
                    "asking the sentinels for the primary of '{}' (a failover may be under way)",
                    self.master
                ),
            ))),
        }
    }

    /// Looks at the outcome of a call made on connection `generation`: a broken connection or a
    /// demoted primary drops it (if still current) and wakes the task.
    pub(crate) fn check<T>(&self, generation: u64, outcome: &RedisResult<T>) {
        let Err(e) = outcome else { return };
        let demoted = e.kind() == ErrorKind::Server(redis::ServerErrorKind::ReadOnly);
        let broken = e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error();
        if !demoted && !broken {
            return;
        }
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|p| p.generation == generation) {
            tracing::warn!(master = %self.master, error = %e, "redis-guard: lost the Redis primary; asking the sentinels");
            *current = None;
            self.lost.notify_one();
        }
    }

    /// Remembers `code` (SHA-1 `sha`) to load it on the next primary.
    pub(crate) fn remember(&self, sha: &str, code: &str) {
        let known = self.scripts.read().unwrap_or_else(PoisonError::into_inner);
        if known.contains_key(sha) {
            return;
        }
        drop(known);
        self.scripts
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(sha.to_owned(), Arc::from(code));
    }

    /// Asks the sentinels in turn, the one that answered last first, until one names a server
    /// that is a primary: its address and a connection to it. Else an error that says what
    /// each sentinel did.
    async fn discover(&self) -> RedisResult<(ConnectionAddr, MultiplexedConnection)> {
        let first = self.preferred.load(Ordering::Relaxed);
        let mut why = String::new();
        for i in (0..self.sentinels.len()).map(|i| (first + i) % self.sentinels.len()) {
            let sentinel = &self.sentinels[i];
            match self.ask(sentinel).await {
                Ok(found) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(found);
                }
                Err(e) => {
                    let _ = write!(why, "; {}: {e}", sentinel.addr());
                }
            }
        }
        Err(RedisError::from((
            ErrorKind::Io,
            "no sentinel named a reachable Redis primary",
            format!("master '{}'{why}", self.master),
        )))
    }

    /// Asks `sentinel` for the primary, then checks that the server it names is one.
    async fn ask(
        &self,
        sentinel: &ConnectionInfo,
    ) -> RedisResult<(ConnectionAddr, MultiplexedConnection)> {
        let addr = self.named_by(sentinel).await?;
        let info =
            ConnectionInfo::set_redis_settings(self.over_tls(&addr)?, self.node.clone());
        let step = async {
            let mut conn = self.connect_to(info).await?;
            let role: Value = redis::cmd("ROLE").query_async(&mut conn).await?;
            match role {
                Value::Array(items) if matches!(items.first(), Some(Value::BulkString(r)) if r == b"master") => {
                    Ok(conn)
                }
                Value::Array(items) if matches!(items.first(), Some(Value::BulkString(_))) => {
                    Err(RedisError::from((
                        ErrorKind::Io,
                        "the sentinel named a server that is not a primary",
                        format!("{addr} is a replica"),
                    )))
                }
                other => Err(RedisError::from((
                    ErrorKind::Parse,
                    "unexpected ROLE reply",
                    format!("{addr} answered ROLE with {other:?}"),
                ))),
            }
        };
        let conn = within(step, "the primary it names").await?;
        Ok((addr, conn))
    }

    /// Where to connect to reach the primary at `addr`: over TLS when the master's URL is
    /// `rediss://`.
    fn over_tls(&self, addr: &ConnectionAddr) -> RedisResult<ConnectionInfo> {
        #[cfg(feature = "tls")]
        if self.tls
            && let ConnectionAddr::Tcp(host, port) = addr
        {
            return ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: false,
                tls_params: None,
            }
            .into_connection_info();
        }
        debug_assert!(!self.tls, "a TLS master is refused without the `tls` feature");
        addr.clone().into_connection_info()
    }

    /// The address `sentinel` gives for the primary.
    async fn named_by(&self, sentinel: &ConnectionInfo) -> RedisResult<ConnectionAddr> {
        let mut conn = within(self.connect_to(sentinel.clone()), "the sentinel").await?;
        self.named_on(&mut conn).await
    }

    /// The address the sentinel behind `conn` gives for the primary.
    async fn named_on(&self, conn: &mut MultiplexedConnection) -> RedisResult<ConnectionAddr> {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(&self.master);
        let ask = cmd.query_async::<Option<(String, u16)>>(conn);
        match within(ask, "the sentinel").await? {
            Some((host, port)) => Ok(ConnectionAddr::Tcp(host, port)),
            None => Err(RedisError::from((
                ErrorKind::Io,
                "the sentinel does not monitor this master name",
                self.master.clone(),
            ))),
        }
    }

    /// Loads every remembered script on `conn`, then makes it the primary calls go to.
    async fn switch(&self, addr: ConnectionAddr, mut conn: MultiplexedConnection) {
        let scripts: Vec<Arc<str>> = self
            .scripts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for code in scripts {
            let mut cmd = redis::cmd("SCRIPT");
            let load = cmd.arg("LOAD").arg(&*code).query_async::<Value>(&mut conn);
            // Not fatal: a script that did not load is loaded by its first call's `EVAL`.
            if let Err(e) = within(load, "SCRIPT LOAD").await {
                tracing::debug!(error = %e, "redis-guard: could not load a script on the new primary");
            }
        }
        self.install(addr, conn);
    }

    fn install(&self, addr: ConnectionAddr, conn: MultiplexedConnection) {
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        tracing::info!(master = %self.master, primary = %addr, "redis-guard: Redis primary found");
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(Primary {
            addr,
            conn,
            generation,
        });
    }

    /// A multiplexed connection to `info` with no timeouts of its own: the caller bounds the
    /// step, and the backend every call.
    async fn connect_to(&self, info: ConnectionInfo) -> RedisResult<MultiplexedConnection> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        self.options
            .client_for(info)?
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    fn current_addr(&self) -> Option<ConnectionAddr> {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        current.as_ref().map(|p| p.addr.clone())
    }
}

/// The background task: finds a primary when none is known (with a backoff), and checks every
/// [`CHECK_EVERY`] that the sentinels still name the current one. Ends when the last clone of
/// the connection is dropped.
async fn watch(shared: Weak<Sentinel>) {
    let mut pause = RETRY_FIRST;
    // The checks' connection to the preferred sentinel (its index), kept between checks.
    let mut asking: Option<(usize, MultiplexedConnection)> = None;
    loop {
        let Some(s) = shared.upgrade() else { return };
        let Some(addr) = s.current_addr() else {
            match s.discover().await {
                Ok((addr, conn)) => {
                    s.switch(addr, conn).await;
                    pause = RETRY_FIRST;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "redis-guard: no Redis primary yet");
                    drop(s);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
            continue;
        };
        // Wait for a lost connection or the next check, without keeping the connection alive.
        let lost = Arc::clone(&s.lost);
        drop(s);
        let _ = tokio::time::timeout(CHECK_EVERY, lost.notified()).await;
        let Some(s) = shared.upgrade() else { return };
        if s.current_addr().is_none() {
            continue;
        }
        let first = s.preferred.load(Ordering::Relaxed) % s.sentinels.len();
        let named = match &mut asking {
            Some((i, conn)) if *i == first => s.named_on(conn).await,
            _ => match within(s.connect_to(s.sentinels[first].clone()), "the sentinel").await {
                Ok(mut conn) => {
                    let named = s.named_on(&mut conn).await;
                    asking = Some((first, conn));
                    named
                }
                Err(e) => Err(e),
            },
        };
        if named.is_err() {
            asking = None;
        }
        let moved = named.is_ok_and(|named| named != addr);
        if moved {
            // Keep serving on the current primary until the new one is confirmed.
            if let Ok((new, conn)) = s.discover().await
                && new != addr
            {
                s.switch(new, conn).await;
            }
        }
    }
}

async fn within<T>(step: impl Future<Output = RedisResult<T>>, what: &str) -> RedisResult<T> {
    tokio::time::timeout(STEP_TIMEOUT, step)
        .await
        .unwrap_or_else(|_| {
            Err(RedisError::from((
                ErrorKind::Io,
                "no answer in time",
                format!("{what} did not answer within {STEP_TIMEOUT:?}"),
            )))
        })
}

fn config_error(detail: String) -> RedisError {
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "invalid Sentinel configuration",
        detail,
    ))
}

/// A sentinel's address: `host:port` or a `redis://` URL (for its own credentials), `rediss://`
/// for one reached over TLS.
fn sentinel_info(s: &str) -> RedisResult<ConnectionInfo> {
    let s = s.trim();
    super::options::tls_available(s)?;
    let has_port = |s: &str| s.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok());
    if !s.contains("://") && !has_port(s) {
        return Err(config_error(format!(
            "'{s}' is not a sentinel address: host:port (a sentinel has no default port)"
        )));
    }
    let url = if s.contains("://") {
        s.to_owned()
    } else {
        format!("redis://{s}/")
    };
    let info = url.as_str().into_connection_info().map_err(|e| {
        config_error(format!(
            "'{s}' is not a sentinel address (host:port or redis://host:port): {e}"
        ))
    })?;
    match info.addr() {
        ConnectionAddr::Tcp(..) => Ok(info),
        #[cfg(feature = "tls")]
        ConnectionAddr::TcpTls { .. } => Ok(info),
        _ => Err(config_error(format!(
            "'{s}': a sentinel is reached over TCP or TLS"
        ))),
    }
}

/// The master name, the primary's settings and whether it is reached over TLS, from `name`,
/// `redis://[[user]:password@]name[/db]` or `rediss://…`.
fn master_info(master: &str) -> RedisResult<(String, RedisConnectionInfo, bool)> {
    let master = master.trim();
    super::options::tls_available(master)?;
    let tls = super::options::is_tls(master);
    let rest = master
        .strip_prefix("redis://")
        .or_else(|| master.strip_prefix("rediss://"));
    let Some(rest) = rest else {
        return match master {
            "" => Err(config_error("the master name is empty".to_owned())),
            name if name.contains(['/', '@', ' ']) => Err(config_error(format!(
                "'{name}' is not a master name; credentials go in redis://[user]:password@name/db"
            ))),
            name => Ok((name.to_owned(), RedisConnectionInfo::default(), false)),
        };
    };
    let (userinfo, host) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let (name, db) = host.split_once('/').unwrap_or((host, ""));
    if name.is_empty() {
        return Err(config_error(format!(
            "no master name in '{}'",
            redact(master)
        )));
    }
    // The URL parser reads the credentials and the database; the host is the name's place.
    let info = format!("redis://{userinfo}127.0.0.1/{db}")
        .as_str()
        .into_connection_info()
        .map_err(|e| config_error(format!("'{}': {e}", redact(master))))?;
    Ok((name.to_owned(), info.redis_settings().clone(), tls))
}

/// `master` without its password, for an error message.
fn redact(master: &str) -> String {
    match master.rfind('@') {
        Some(at) => format!(
            "{}://…@{}",
            master.split("://").next().unwrap_or("redis"),
            &master[at + 1..]
        ),
        None => master.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{master_info, sentinel_info};

    #[test]
    fn master_names_carry_the_primarys_credentials_and_database() {
        let (name, info, tls) = master_info("mymaster").expect("a name");
        assert_eq!(
            (name.as_str(), info.db(), info.password(), tls),
            ("mymaster", 0, None, false)
        );
        let (name, info, _) = master_info("redis://app:p%40ss@cache-A/3").expect("a URL");
        assert_eq!(name, "cache-A");
        assert_eq!(
            (info.username(), info.password(), info.db()),
            (Some("app"), Some("p@ss"), 3)
        );
        let (_, info, _) = master_info("redis://:secret@m").expect("password only");
        assert_eq!((info.username(), info.password()), (None, Some("secret")));
        for bad in ["", "  ", "a/1", "redis://", "redis://:pw@/2", "redis://m/x"] {
            let e = master_info(bad).expect_err(bad);
            assert!(!e.to_string().contains("pw"), "{e}");
        }
    }

    #[test]
    fn sentinel_addresses_are_host_port_or_urls() {
        assert!(sentinel_info("127.0.0.1:26379").is_ok());
        assert!(sentinel_info(" redis://:pw@10.0.0.1:26379/ ").is_ok());
        for bad in ["", "host", "host:port", "redis://[::1", "unix:///tmp/s.sock"] {
            assert!(sentinel_info(bad).is_err(), "{bad}");
        }
    }
}
