use std::fmt;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{RedisResult, Value};

#[cfg(any(feature = "rate-limit", feature = "session"))]
use super::LuaScript;

/// The longest pause between two reconnection attempts of a connection made by
/// [`RedisConnection::open`], before jitter.
pub const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(250);

/// A handle to Redis shared by the middlewares. Cheap to clone: clones share the connection.
///
/// Three sources, one behaviour:
///
/// - a redis-rs [`ConnectionManager`] (the default): one multiplexed connection that pipelines
///   concurrent requests and reconnects on its own;
/// - a `bb8` pool of multiplexed connections (feature `bb8`), for deployments that standardize
///   on pools;
/// - a Redis Cluster connection (feature `cluster`).
///
/// Scripts run with `EVALSHA`; on `NOSCRIPT` (a restarted node, a `SCRIPT FLUSH`) the same call
/// runs once more as `EVAL` with the script's source, on the node that owns its keys.
///
/// ```no_run
/// use redis_guard::backend::RedisConnection;
/// # async fn f() -> redis::RedisResult<()> {
/// // Connects now, and reconnects on its own later.
/// let conn = RedisConnection::open("redis://127.0.0.1:6379/").await?;
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
    Cluster(redis::cluster_async::ClusterConnection),
}

impl RedisConnection {
    /// Connects to the Redis at `url` (`redis://[:password@]host[:port][/db]`) with a
    /// [`ConnectionManager`].
    ///
    /// When the connection drops (Redis restarted, the network failed) it reconnects in the
    /// background: up to six attempts, the first after 100 ms, then at most every
    /// [`RECONNECT_MAX_DELAY`] plus a random jitter of up to as much again, and another round
    /// when a call finds the last one failed. redis-rs' own default doubles the delay up to
    /// 3.2 s, which could leave a Redis that is back unused for seconds. Build a
    /// [`ConnectionManager`] yourself and convert it to choose otherwise.
    ///
    /// # Errors
    ///
    /// The URL is invalid or the first connection fails (after the same attempts: about two
    /// seconds).
    pub async fn open(url: &str) -> RedisResult<Self> {
        let client = redis::Client::open(url)?;
        let config = redis::aio::ConnectionManagerConfig::new().set_max_delay(RECONNECT_MAX_DELAY);
        Ok(ConnectionManager::new_with_config(client, config)
            .await?
            .into())
    }

    /// Connects to a Redis Cluster through any of its `nodes` (`redis://host:port/` URLs or
    /// `host:port`).
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
        let client = redis::cluster::ClusterClient::new(urls)?;
        Ok(client.get_async_connection().await?.into())
    }

    /// Whether keys of one call must share a hash slot.
    #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
    pub(crate) fn is_cluster(&self) -> bool {
        match self.kind {
            #[cfg(feature = "cluster")]
            Kind::Cluster(_) => true,
            _ => false,
        }
    }

    /// Runs `evalsha`, an `EVALSHA` of `script` (see
    /// [`ScriptCall`](super::redis_backend::ScriptCall)); on `NOSCRIPT` runs the same call as
    /// `EVAL` with the script's source, which also caches it on that node.
    #[cfg(any(feature = "rate-limit", feature = "session"))]
    pub(crate) async fn evalsha(
        &self,
        script: &LuaScript,
        evalsha: &redis::Cmd,
    ) -> RedisResult<Value> {
        match self.query(evalsha).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
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
            outcome => outcome,
        }
    }
}

impl RedisConnection {
    /// Runs one plain command (routed by its key on a cluster).
    pub(crate) async fn query(&self, cmd: &redis::Cmd) -> RedisResult<Value> {
        match &self.kind {
            Kind::Manager(manager) => cmd.query_async(&mut manager.clone()).await,
            #[cfg(feature = "bb8")]
            Kind::Pool(pool) => {
                let mut conn = pool.get().await.map_err(pool_error)?;
                cmd.query_async(&mut *conn).await
            }
            #[cfg(feature = "cluster")]
            Kind::Cluster(cluster) => cmd.query_async(&mut cluster.clone()).await,
        }
    }
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
            kind: Kind::Cluster(conn),
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
            Kind::Cluster(_) => "ClusterConnection",
        };
        f.debug_struct("RedisConnection")
            .field("kind", &kind)
            .finish()
    }
}
