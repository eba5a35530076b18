use std::fmt;

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script, Value};

/// A handle to Redis shared by the middlewares. Cheap to clone: clones share the connection.
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
}

impl RedisConnection {
    /// Connects to the Redis at `url` (`redis://[:password@]host[:port][/db]`) with a
    /// [`ConnectionManager`].
    ///
    /// # Errors
    ///
    /// The URL is invalid or the first connection fails.
    pub async fn open(url: &str) -> RedisResult<Self> {
        let client = redis::Client::open(url)?;
        Ok(ConnectionManager::new(client).await?.into())
    }

    /// Runs `script` with `keys` and `args` through `EVALSHA`, loading it on `NOSCRIPT`.
    pub(crate) async fn invoke(
        &self,
        script: &Script,
        keys: &[String],
        args: &[u64],
    ) -> RedisResult<Value> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        match &self.kind {
            Kind::Manager(manager) => invocation.invoke_async(&mut manager.clone()).await,
        }
    }
}

impl From<ConnectionManager> for RedisConnection {
    fn from(manager: ConnectionManager) -> Self {
        Self {
            kind: Kind::Manager(manager),
        }
    }
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Manager(_) => "ConnectionManager",
        };
        f.debug_struct("RedisConnection")
            .field("kind", &kind)
            .finish()
    }
}
