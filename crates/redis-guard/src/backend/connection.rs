use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::{RedisResult, Value};

use super::ConnectOptions;
use super::pending::{Pending, reason, tried};

#[cfg(feature = "sentinel")]
use super::sentinel::Sentinel;
#[cfg(feature = "cluster")]
use super::cluster::Cluster;
#[cfg(feature = "cluster")]
use super::slot::Masters;
cfg_middleware! {
    use super::LuaScript;
}

/// The longest pause between two reconnection attempts of a connection made by
/// [`RedisConnection::open`], before jitter.
pub(crate) const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(250);

/// How long [`RedisConnection::open`] waits for the server to accept a connection and answer its
/// first `PING`, before it gives up on an address that is not a working Redis.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long [`RedisConnection::open`] keeps trying an address where nothing listens yet.
const OPEN_ATTEMPTS: Duration = Duration::from_secs(2);

/// A handle to Redis shared by the middlewares. Cheap to clone: clones share the connection.
///
/// Three sources, one behaviour:
///
/// - a redis-rs [`ConnectionManager`] (the default): one multiplexed connection that pipelines
///   concurrent requests and reconnects on its own;
/// - a `bb8` pool of multiplexed connections (feature `bb8`), for deployments that standardize
///   on pools;
/// - a Redis Cluster connection (feature `cluster`);
/// - the primary that a group of Redis Sentinels names, found again after a failover
///   (feature `sentinel`, [`RedisConnection::sentinel`]).
///
/// Scripts run with `EVALSHA`; on `NOSCRIPT` (a restarted node, a `SCRIPT FLUSH`) the same call
/// runs once more as `EVAL` with the script's source, on the node that owns its keys.
///
/// ```no_run
/// use redis_guard::backend::RedisConnection;
/// # async fn f() -> redis::RedisResult<()> {
/// // Connects now, and reconnects on its own later.
/// let conn = RedisConnection::open("redis://127.0.0.1:6379/").await?;
/// // Starts even while Redis is down, and connects in the background:
/// let conn = RedisConnection::open_lazy("redis://127.0.0.1:6379/").await?;
/// // Or from a connection manager you already have:
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let conn = RedisConnection::from(redis::aio::ConnectionManager::new(client).await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisConnection {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Manager(ConnectionManager),
    #[cfg(feature = "bb8")]
    Pool(bb8::Pool<bb8_redis::RedisConnectionManager>),
    #[cfg(feature = "cluster")]
    Cluster(Arc<Cluster>),
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<Sentinel>),
    /// Not connected yet ([`ConnectOptions::lazy`]): one of the kinds above once a background
    /// task has connected; whether that will be a cluster.
    Pending(Arc<Pending<Kind>>, bool),
}

impl RedisConnection {
    /// Connects to the Redis at `url` (`redis://[[user]:password@]host[:port][/db]`) with a
    /// [`ConnectionManager`]. To start while Redis is unreachable, use
    /// [`open_lazy`](Self::open_lazy).
    ///
    /// When the connection drops (Redis restarted, the network failed) it reconnects in the
    /// background: up to six attempts, the first after 100 ms, then at most every
    /// 250 ms plus a random jitter of up to as much again, and another round
    /// when a call finds the last one failed. redis-rs' own default doubles the delay up to
    /// 3.2 s, which could leave a Redis that is back unused for seconds. Build a
    /// [`ConnectionManager`] yourself and convert it to choose otherwise.
    ///
    /// Before that, one connection must answer `PING` within 2 s: a port
    /// where something else listens (a web server, a process that accepts and never answers)
    /// or a Redis that wants a password the URL does not carry fails here, at once and with an
    /// error that says which, instead of starting an application whose every call then fails.
    ///
    /// # Errors
    ///
    /// Each names the address (`host:port`, never the credentials):
    ///
    /// - the URL is invalid;
    /// - nothing listens at the address (connection refused), still after about two seconds
    ///   of attempts, so a Redis starting beside the application is found: "cannot connect to
    ///   Redis at 127.0.0.1:6390 (connection refused) after 6 attempts over 2.0 s" (kind
    ///   [`Io`](redis::ErrorKind::Io), [`is_connection_refusal`](redis::RedisError::is_connection_refusal));
    /// - the address cannot be reached (kind [`Io`](redis::ErrorKind::Io));
    /// - the server does not answer `PING` as Redis does within 2 s (kind
    ///   [`Io`](redis::ErrorKind::Io) for silence, [`Parse`](redis::ErrorKind::Parse) for
    ///   anything else), or refuses the connection's password or its absence (kind
    ///   [`AuthenticationFailed`](redis::ErrorKind::AuthenticationFailed)): no retry.
    pub async fn open(url: &str) -> RedisResult<Self> {
        Self::open_with(url, &ConnectOptions::new()).await
    }

    /// Connects to the Redis at `url` as [`open`](Self::open) does, except that a Redis that
    /// cannot be reached yet is not an error: the application starts and serves (each layer
    /// answering by its failure policy, at once), and a background task keeps connecting; once
    /// Redis answers, calls go to it within about half a second. A server that answers but is
    /// not Redis, or refuses the credentials, is still an error here. See
    /// [`ConnectOptions::lazy`], which also applies to a Cluster and to Sentinel.
    ///
    /// ```no_run
    /// use redis_guard::backend::RedisConnection;
    /// # async fn f() -> redis::RedisResult<()> {
    /// // Returns at once when nothing listens there yet.
    /// let conn = RedisConnection::open_lazy("redis://redis:6379/").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The URL is invalid, the server at the address is not Redis (kind
    /// [`Parse`](redis::ErrorKind::Parse)), or it refused the credentials (kind
    /// [`AuthenticationFailed`](redis::ErrorKind::AuthenticationFailed)).
    pub async fn open_lazy(url: &str) -> RedisResult<Self> {
        Self::open_with(url, &ConnectOptions::new().lazy(true)).await
    }

    /// [`open`](Self::open) or [`open_lazy`](Self::open_lazy), by `options`.
    pub(crate) async fn open_with(url: &str, options: &ConnectOptions) -> RedisResult<Self> {
        let client = options.client(url)?;
        let addr = client.get_connection_info().addr().to_string();
        let started = Instant::now();
        if options.is_lazy() {
            return match manager(&client).await {
                Ok(manager) => Ok(manager.into()),
                Err(e) if is_misconfigured(&e) => Err(e),
                Err(e) => {
                    let pending = Pending::start(addr, &e, started, move || {
                        let client = client.clone();
                        async move { manager(&client).await.map(Kind::Manager) }
                    });
                    Ok(Self {
                        kind: Kind::Pending(pending, false),
                    })
                }
            };
        }
        // Nothing listens yet: a Redis starting at the same time (docker compose, a test) gets
        // its couple of seconds.
        let mut attempts = 1;
        let mut pause = Duration::from_millis(100);
        loop {
            match handshake(&client).await {
                Ok(()) => break,
                Err(e) if e.is_connection_refusal() && started.elapsed() < OPEN_ATTEMPTS => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RECONNECT_MAX_DELAY);
                    attempts += 1;
                }
                Err(e) if e.is_io_error() => {
                    let kind = if e.is_connection_refusal() {
                        std::io::ErrorKind::ConnectionRefused
                    } else {
                        std::io::ErrorKind::NotConnected
                    };
                    return Err(std::io::Error::new(
                        kind,
                        format!(
                            "cannot connect to Redis at {addr} ({}) after {}",
                            reason(&e),
                            tried(attempts, started.elapsed())
                        ),
                    )
                    .into());
                }
                Err(e) => return Err(e),
            }
        }
        let config = manager_config();
        Ok(ConnectionManager::new_with_config(client, config)
            .await?
            .into())
    }

    /// Connects to a Redis Cluster through any of its `nodes` (`redis://host:port/` URLs or
    /// `host:port`). [`ConnectOptions::cluster`] with [`lazy`](ConnectOptions::lazy) starts
    /// while the cluster is unreachable.
    ///
    /// When no call has had a reply for a second, the next call starts a new connection to the
    /// cluster in the background, and calls go to it once it is made. redis-rs' cluster client
    /// can stop answering for good after a node dies (its slot refresh and the requests queued
    /// behind it wait for each other); a new connection finds the surviving masters at once.
    /// A connection converted from a [`ClusterConnection`](redis::cluster_async::ClusterConnection)
    /// of your own is kept as it is.
    ///
    /// ```no_run
    /// # async fn f() -> redis::RedisResult<()> {
    /// let conn = redis_guard::backend::RedisConnection::cluster(&[
    ///     "redis://10.0.0.1:6379/",
    ///     "redis://10.0.0.2:6379/",
    /// ])
    /// .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// No node URL is valid, or the cluster cannot be reached.
    #[cfg(feature = "cluster")]
    pub async fn cluster(nodes: &[impl AsRef<str>]) -> RedisResult<Self> {
        Self::cluster_with(nodes, &ConnectOptions::new()).await
    }

    #[cfg(feature = "cluster")]
    pub(crate) async fn cluster_with(
        nodes: &[impl AsRef<str>],
        options: &ConnectOptions,
    ) -> RedisResult<Self> {
        use redis::IntoConnectionInfo;
        let urls: Vec<String> = nodes
            .iter()
            .map(|n| {
                let n = n.as_ref().trim();
                if n.contains("://") {
                    n.to_owned()
                } else {
                    format!("redis://{n}/")
                }
            })
            .collect();
        // The nodes' addresses, without credentials, for errors and logs.
        let addrs = urls
            .iter()
            .filter_map(|u| u.as_str().into_connection_info().ok())
            .map(|info| info.addr().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let client = options.cluster_client(urls)?;
        let started = Instant::now();
        match client.get_async_connection().await {
            Ok(mut conn) => {
                let masters = match redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async::<Value>(&mut conn)
                    .await
                {
                    Ok(slots) => Masters::parse(&slots),
                    // Not fatal: every master then shares one circuit breaker.
                    Err(_) => Masters::default(),
                };
                Ok(Self {
                    kind: Kind::Cluster(Cluster::new(conn, Some(client), masters)),
                })
            }
            Err(e) if options.is_lazy() && !is_misconfigured(&e) => {
                let addr = format!("the Redis Cluster at {addrs}");
                let pending = Pending::start(addr, &e, started, move || {
                    let client = client.clone();
                    async move {
                        let conn = client.get_async_connection().await?;
                        Ok(Kind::Cluster(Cluster::new(
                            conn,
                            Some(client),
                            Masters::default(),
                        )))
                    }
                });
                Ok(Self {
                    kind: Kind::Pending(pending, true),
                })
            }
            Err(e) if e.is_io_error() || e.is_connection_refusal() => Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!(
                    "cannot connect to the Redis Cluster at {addrs} ({})",
                    reason(&e)
                ),
            )
            .into()),
            Err(e) => Err(e),
        }
    }

    /// Connects to the primary that the Redis Sentinels at `sentinels` monitor as `master`,
    /// and follows it through failovers (feature `sentinel`). [`ConnectOptions::sentinel`] with
    /// [`lazy`](ConnectOptions::lazy) starts while no sentinel names a primary yet.
    ///
    /// - `sentinels`: `host:port`, or `redis://[[user]:password@]host:port` for a sentinel that
    ///   wants credentials of its own. One that is down, does not know `master` or names a
    ///   server that is not a primary (`ROLE`) is skipped; the others are asked in turn.
    /// - `master`: the name the sentinels monitor, or `redis://[[user]:password@]name[/db]` for
    ///   the credentials and database of the primary (and of whichever replica is promoted).
    ///
    /// TLS (feature `tls`): a sentinel written `rediss://host:port` is reached over TLS, and a
    /// master written `rediss://[[user]:password@]name[/db]` makes the primary (and any server
    /// promoted later) reached over TLS; the two may differ (sentinels in plain TCP on a private
    /// network, the primary over TLS, or the other way round). The
    /// [`TlsOptions`](super::TlsOptions) of [`ConnectOptions::tls`] apply to both. After a failover the connection finds the new primary on its
    /// own: a background task asks the sentinels again as soon as a call finds the connection
    /// broken or the server demoted (`READONLY`), and once a second whether they name another
    /// primary, with a backoff of 25 ms up to 400 ms while none is found. Until then calls
    /// fail at once with an I/O error (the circuit breaker sees one outage, and the failure
    /// policies answer), never each waiting for the sentinels. Every script the connection has
    /// run is loaded on the new primary before it takes calls, so requests do not meet
    /// `NOSCRIPT` after the switch. Each step of asking (a sentinel's answer, the primary's
    /// `ROLE`) has 1 s.
    ///
    /// ```no_run
    /// # async fn f() -> redis::RedisResult<()> {
    /// use redis_guard::backend::RedisConnection;
    /// let conn = RedisConnection::sentinel(
    ///     &["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"],
    ///     "mymaster",
    /// )
    /// .await?;
    /// // A primary that wants a password, database 2:
    /// let conn = RedisConnection::sentinel(&["10.0.0.1:26379"], "redis://:secret@mymaster/2").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// - no sentinel is given, one is not `host:port` or a `redis://` URL, or `master` is empty
    ///   or not a name (kind [`InvalidClientConfig`](redis::ErrorKind::InvalidClientConfig));
    /// - no sentinel names a primary that answers as one (kind [`Io`](redis::ErrorKind::Io)):
    ///   the error says, for each sentinel, why (never a password).
    #[cfg(feature = "sentinel")]
    pub async fn sentinel(sentinels: &[impl AsRef<str>], master: &str) -> RedisResult<Self> {
        Self::sentinel_with(sentinels, master, &ConnectOptions::new()).await
    }

    #[cfg(feature = "sentinel")]
    pub(crate) async fn sentinel_with(
        sentinels: &[impl AsRef<str>],
        master: &str,
        options: &ConnectOptions,
    ) -> RedisResult<Self> {
        Ok(Self {
            kind: Kind::Sentinel(Sentinel::connect(sentinels, master, options).await?),
        })
    }

    /// How many circuit breakers calls on this connection are spread over: one per master of a
    /// cluster whose slot map is known, else one.
    pub(crate) fn circuits(&self) -> usize {
        match &self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(cluster) => cluster.masters.count.max(1),
            _ => 1,
        }
    }

    /// The circuit (below [`circuits`](Self::circuits)) of the calls on `key`: the index of the
    /// master that served its hash slot when the connection was made; 0 outside a cluster.
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    pub(crate) fn circuit_of(&self, key: &[u8]) -> usize {
        match &self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(cluster) => cluster.masters.of(key),
            _ => 0,
        }
    }

    /// Whether keys of one call must share a hash slot.
    #[cfg_attr(not(any(feature = "rate-limit", feature = "cache")), allow(dead_code))]
    pub(crate) fn is_cluster(&self) -> bool {
        match self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(..) => true,
            Kind::Pending(_, cluster) => cluster,
            _ => false,
        }
    }

    /// Runs `evalsha`, an `EVALSHA` of `script` (see
    /// [`ScriptCall`](super::redis_backend::ScriptCall)); on `NOSCRIPT` runs the same call as
    /// `EVAL` with the script's source, which also caches it on that node.
    #[cfg(any(
        feature = "rate-limit",
        feature = "session",
        feature = "cache",
        feature = "idempotency"
    ))]
    pub(crate) async fn evalsha(
        &self,
        script: &LuaScript,
        evalsha: &redis::Cmd,
    ) -> RedisResult<Value> {
        #[cfg(feature = "sentinel")]
        if let Kind::Sentinel(sentinel) = &self.kind {
            sentinel.remember(script.get_hash(), script.code());
        }
        match self.query(evalsha).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                // Boxed: the rare second call does not double the size of every call's future
                // (which the backend pins and polls in place).
                Box::pin(self.eval(script, evalsha)).await
            }
            outcome => outcome,
        }
    }

    /// `evalsha` (an `EVALSHA` of `script`) sent as `EVAL` with the script's source.
    #[cfg(any(
        feature = "rate-limit",
        feature = "session",
        feature = "cache",
        feature = "idempotency"
    ))]
    async fn eval(&self, script: &LuaScript, evalsha: &redis::Cmd) -> RedisResult<Value> {
        let mut eval = redis::cmd("EVAL");
        eval.arg(script.code());
        // After `EVALSHA <sha>`: the key count, the keys and ARGV, as they were.
        for arg in evalsha.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        self.query(&eval).await
    }
}

impl RedisConnection {
    /// The connection a call goes to: this one, or the one a lazy connection has made by now
    /// (an I/O error while it has none).
    fn live(&self) -> RedisResult<std::borrow::Cow<'_, Kind>> {
        match &self.kind {
            Kind::Pending(pending, _) => pending.ready().map(std::borrow::Cow::Owned),
            kind => Ok(std::borrow::Cow::Borrowed(kind)),
        }
    }

    /// The breaker's probe of circuit `circuit`: a `PING`; on a cluster, an `EXISTS` of a key
    /// whose slot that circuit's master serves, so that the probe reaches that master.
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    pub(crate) async fn probe(&self, circuit: usize) -> RedisResult<Value> {
        let kind = self.live()?;
        match &*kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(cluster) => {
                let mut cmd = redis::cmd("EXISTS");
                cmd.arg(cluster.masters.key_on(circuit));
                let (mut conn, watch) = cluster.checkout();
                watch.outcome(cmd.query_async(&mut conn).await)
            }
            _ => self.query(&redis::cmd("PING")).await,
        }
    }

    /// Runs `pipe` in one round trip: its commands' replies, as an array, in order. On a
    /// cluster the commands must share a slot (it goes to the node of the first key).
    #[cfg(any(feature = "rate-limit", feature = "cache"))]
    pub(crate) async fn pipeline(&self, pipe: &redis::Pipeline) -> RedisResult<Value> {
        self.send(Request::Pipeline(pipe)).await
    }

    /// Runs `pipe` (not atomic) in one round trip without redis-rs' pass over the replies
    /// (which copies them to look for errors): each command's reply as Redis sent it, an error
    /// reply as a [`Value::ServerError`] in its place, for the caller to check.
    #[cfg(feature = "session")]
    pub(crate) async fn pipeline_replies(&self, pipe: &redis::Pipeline) -> RedisResult<Value> {
        self.send(Request::Replies(pipe)).await
    }

    /// Runs one plain command (routed by its key on a cluster).
    pub(crate) async fn query(&self, cmd: &redis::Cmd) -> RedisResult<Value> {
        self.send(Request::Cmd(cmd)).await
    }

    async fn send(&self, request: Request<'_>) -> RedisResult<Value> {
        let kind = self.live()?;
        match &*kind {
            Kind::Manager(manager) => request.on_manager(&mut manager.clone()).await,
            #[cfg(feature = "bb8")]
            // Boxed: a pool's checkout future is large, and a call's future is as large as its
            // largest branch (the multiplexed ones are a few hundred bytes).
            Kind::Pool(pool) => {
                Box::pin(async move {
                    let mut conn = pool.get().await.map_err(pool_error)?;
                    request.on(&mut *conn).await
                })
                .await
            }
            #[cfg(feature = "cluster")]
            Kind::Cluster(cluster) => {
                let (mut conn, watch) = cluster.checkout();
                watch.outcome(request.on(&mut conn).await)
            }
            #[cfg(feature = "sentinel")]
            Kind::Sentinel(sentinel) => {
                let (mut conn, generation) = sentinel.primary()?;
                let outcome = request.on(&mut conn).await;
                sentinel.check(generation, &outcome);
                outcome
            }
            // `Pending::ready` gives a connected kind, never another pending one.
            Kind::Pending(..) => Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "not connected to Redis yet",
            ))),
        }
    }
}

/// What [`RedisConnection::send`] sends: one command, or a pipeline.
enum Request<'a> {
    Cmd(&'a redis::Cmd),
    #[cfg(any(feature = "rate-limit", feature = "cache"))]
    Pipeline(&'a redis::Pipeline),
    #[cfg(feature = "session")]
    Replies(&'a redis::Pipeline),
}

impl Request<'_> {
    /// [`on`](Self::on) a connection manager: a command goes straight to its
    /// `send_packed_command`, since through redis-rs' `ConnectionLike` (what `query_async`
    /// takes) every command would be boxed once more.
    async fn on_manager(self, manager: &mut ConnectionManager) -> RedisResult<Value> {
        match self {
            Self::Cmd(cmd) => manager
                .send_packed_command(cmd)
                .await
                .and_then(Value::extract_error),
            #[cfg(any(feature = "rate-limit", feature = "cache", feature = "session"))]
            request => request.on(manager).await,
        }
    }

    #[cfg_attr(
        not(any(
            feature = "rate-limit",
            feature = "cache",
            feature = "session",
            feature = "bb8",
            feature = "cluster",
            feature = "sentinel"
        )),
        allow(dead_code)
    )]
    async fn on(self, conn: &mut impl redis::aio::ConnectionLike) -> RedisResult<Value> {
        match self {
            Self::Cmd(cmd) => cmd.query_async(conn).await,
            #[cfg(any(feature = "rate-limit", feature = "cache"))]
            Self::Pipeline(pipe) => pipe.query_async(conn).await.map(Value::Array),
            #[cfg(feature = "session")]
            Self::Replies(pipe) => conn
                .req_packed_commands(pipe, 0, pipe.len())
                .await
                .map(Value::Array),
        }
    }
}

/// How redis-guard's managers reconnect and wait: the backend's timeout bounds every call
/// ([`RedisBackend::timeout`](super::RedisBackend::timeout)), so redis-rs' own response timeout
/// (a second timer per call) is off. A timeout of redis-rs never reconnected either: only an
/// error that drops the connection does.
fn manager_config() -> redis::aio::ConnectionManagerConfig {
    redis::aio::ConnectionManagerConfig::new()
        .set_max_delay(RECONNECT_MAX_DELAY)
        .set_response_timeout(None)
}

/// A [`ConnectionManager`] for `client`, once one connection answered `PING` as Redis
/// ([`handshake`]).
async fn manager(client: &redis::Client) -> RedisResult<ConnectionManager> {
    handshake(client).await?;
    let config = manager_config();
    ConnectionManager::new_with_config(client.clone(), config).await
}

/// Whether `e`, from a first attempt to connect, is a mistake of configuration that waiting
/// does not fix (a server that is not Redis, refused credentials) rather than a Redis that
/// cannot be reached yet.
fn is_misconfigured(e: &redis::RedisError) -> bool {
    use redis::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::AuthenticationFailed
            | ErrorKind::Parse
            | ErrorKind::InvalidClientConfig
            | ErrorKind::UnexpectedReturnType
    ) || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// Connects once to the server of `client` and checks that it answers `PING` as Redis does,
/// within [`HANDSHAKE_TIMEOUT`]. redis-rs retries every failed attempt (a wrong password, an HTTP
/// reply) and gives a silent server a timeout per attempt; this one attempt says what is wrong,
/// once, in words an operator can act on.
async fn handshake(client: &redis::Client) -> RedisResult<()> {
    use redis::ErrorKind;
    let addr = client.get_connection_info().addr().to_string();
    // The outer timeout bounds the whole attempt, whatever redis-rs sends while it connects.
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(None)
        .set_response_timeout(None);
    let attempt = async {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("PING").query_async::<Value>(&mut conn).await
    };
    let Ok(reply) = tokio::time::timeout(HANDSHAKE_TIMEOUT, attempt).await else {
        return Err(redis::RedisError::from((
            ErrorKind::Io,
            "not a Redis server",
            format!(
                "{addr} accepted the connection but did not answer PING within \
                 {HANDSHAKE_TIMEOUT:?}: is a Redis server listening there?"
            ),
        )));
    };
    let e = match reply {
        Ok(Value::SimpleString(pong)) if pong == "PONG" => return Ok(()),
        Ok(other) => {
            return Err(redis::RedisError::from((
                ErrorKind::Parse,
                "not a Redis server",
                format!("{addr} answered PING with {other:?}, not PONG"),
            )));
        }
        Err(e) => e,
    };
    if e.kind() == ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        return Err(redis::RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Redis refused the credentials",
            format!(
                "{addr} wants a password (and user) that the URL does not carry, or refused the \
                 one it does (redis://[user]:password@host:port/): {e}"
            ),
        )));
    }
    if matches!(e.kind(), ErrorKind::Parse | ErrorKind::UnexpectedReturnType) {
        return Err(redis::RedisError::from((
            ErrorKind::Parse,
            "not a Redis server",
            // The parser's first line says enough; the rest lists every byte it rejected.
            format!(
                "{addr} does not speak the Redis protocol: {}",
                e.to_string().lines().next().unwrap_or_default()
            ),
        )));
    }
    Err(e)
}

#[cfg(feature = "bb8")]
fn pool_error(e: bb8::RunError<redis::RedisError>) -> redis::RedisError {
    match e {
        bb8::RunError::User(e) => e,
        bb8::RunError::TimedOut => redis::RedisError::from((
            redis::ErrorKind::Io,
            "timed out waiting for a pooled connection",
        )),
    }
}

impl From<ConnectionManager> for RedisConnection {
    fn from(manager: ConnectionManager) -> Self {
        Self {
            kind: Kind::Manager(manager),
        }
    }
}

/// A `bb8` pool of multiplexed connections (feature `bb8`).
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = bb8_redis::RedisConnectionManager::new("redis://127.0.0.1/")?;
/// let pool = bb8::Pool::builder().max_size(8).build(manager).await?;
/// let conn = redis_guard::backend::RedisConnection::from(pool);
/// # Ok(()) }
/// ```
#[cfg(feature = "bb8")]
impl From<bb8::Pool<bb8_redis::RedisConnectionManager>> for RedisConnection {
    fn from(pool: bb8::Pool<bb8_redis::RedisConnectionManager>) -> Self {
        Self {
            kind: Kind::Pool(pool),
        }
    }
}

#[cfg(feature = "cluster")]
impl From<redis::cluster_async::ClusterConnection> for RedisConnection {
    fn from(conn: redis::cluster_async::ClusterConnection) -> Self {
        Self {
            kind: Kind::Cluster(Cluster::new(conn, None, Masters::default())),
        }
    }
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Manager(_) => "ConnectionManager",
            #[cfg(feature = "bb8")]
            Kind::Pool(_) => "bb8::Pool",
            #[cfg(feature = "cluster")]
            Kind::Cluster(..) => "ClusterConnection",
            #[cfg(feature = "sentinel")]
            Kind::Sentinel(_) => "Sentinel",
            Kind::Pending(..) => "Pending",
        };
        f.debug_struct("RedisConnection")
            .field("kind", &kind)
            .finish()
    }
}
