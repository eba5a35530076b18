//! [`ConnectOptions`]: how a [`RedisConnection`] is made, for every kind of Redis alike; and the
//! one place where redis-rs clients are built from URLs.

use redis::RedisResult;

use super::RedisConnection;

/// How to connect to Redis: the same options for a single server
/// ([`open`](Self::open)), a Redis Cluster ([`cluster`](Self::cluster), feature `cluster`) and
/// the primary behind Redis Sentinels ([`sentinel`](Self::sentinel), feature `sentinel`).
///
/// [`RedisConnection::open`], [`RedisConnection::open_lazy`], [`RedisConnection::cluster`] and
/// [`RedisConnection::sentinel`] are shortcuts for the common cases.
///
/// ```no_run
/// use redis_guard::backend::ConnectOptions;
/// # async fn f() -> redis::RedisResult<()> {
/// // Starts even while Redis is down; calls go to Redis once it answers.
/// let conn = ConnectOptions::new().lazy(true).open("redis://redis:6379/").await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct ConnectOptions {
    lazy: bool,
}

impl ConnectOptions {
    /// The defaults: connect before returning, and fail when Redis cannot be reached.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a Redis that cannot be reached yet is an error (`false`, the default) or a
    /// connection that a background task keeps making (`true`), so that an application starts
    /// and serves before Redis does, in whichever order the two (re)start.
    ///
    /// Lazily, the first attempt is still made before the connection is returned (at once when
    /// nothing listens; up to 2 s for an address that does not answer): a server that answers
    /// but is not Redis, or refuses the credentials, is a configuration mistake that waiting
    /// does not fix, and stays an error. Anything else (connection refused, a host or name
    /// that cannot be reached yet, a server that does not answer) returns a connection whose
    /// every call fails at once with an I/O error that says why (kind
    /// [`Io`](redis::ErrorKind::Io), so each layer answers by its failure policy and the
    /// circuit breaker opens as for any outage; no call waits for a connection attempt), while
    /// a task tries again every 25 ms, backing off to 250 ms (plus jitter). Once Redis
    /// answers, the calls go to it: within about half a second, the breaker's cool-down
    /// included. Scripts are loaded by their first call, as after a restart.
    ///
    /// - A single server: the same [`ConnectionManager`](redis::aio::ConnectionManager) as
    ///   [`open`](Self::open) once connected.
    /// - A Cluster: a cluster found at once gets one circuit breaker per master, as
    ///   [`RedisConnection::cluster`] does; one found later by the task gets a single
    ///   circuit for all its masters (the slot map is not known when the backend is built).
    /// - Sentinel: the background task that follows failovers looks for the primary.
    ///
    /// ```
    /// use redis_guard::backend::ConnectOptions;
    /// let options = ConnectOptions::new().lazy(true);
    /// assert!(options.is_lazy());
    /// ```
    pub fn lazy(mut self, lazy: bool) -> Self {
        self.lazy = lazy;
        self
    }

    /// Whether the connection is made [lazily](Self::lazy).
    #[must_use]
    pub fn is_lazy(&self) -> bool {
        self.lazy
    }

    /// Connects to the Redis at `url` (`redis://[[user]:password@]host[:port][/db]`), as
    /// [`RedisConnection::open`] describes.
    ///
    /// # Errors
    ///
    /// As [`RedisConnection::open`]; when [lazy](Self::lazy), only an invalid URL, a server that
    /// is not Redis and refused credentials.
    pub async fn open(&self, url: &str) -> RedisResult<RedisConnection> {
        RedisConnection::open_with(url, self).await
    }

    /// Connects to a Redis Cluster through any of its `nodes` (`redis://host:port/` URLs or
    /// `host:port`), as [`RedisConnection::cluster`] describes (feature `cluster`).
    ///
    /// # Errors
    ///
    /// No node URL is valid, or (unless [lazy](Self::lazy)) the cluster cannot be reached.
    #[cfg(feature = "cluster")]
    pub async fn cluster(&self, nodes: &[impl AsRef<str>]) -> RedisResult<RedisConnection> {
        RedisConnection::cluster_with(nodes, self).await
    }

    /// Connects to the primary that the Redis Sentinels at `sentinels` monitor as `master`,
    /// as [`RedisConnection::sentinel`] describes (feature `sentinel`).
    ///
    /// # Errors
    ///
    /// The configuration is invalid, or (unless [lazy](Self::lazy)) no sentinel names a primary
    /// that answers as one.
    #[cfg(feature = "sentinel")]
    pub async fn sentinel(
        &self,
        sentinels: &[impl AsRef<str>],
        master: &str,
    ) -> RedisResult<RedisConnection> {
        RedisConnection::sentinel_with(sentinels, master, self).await
    }

    /// A client for the server at `url` (or `ConnectionInfo`), with these options.
    pub(crate) fn client(&self, url: impl redis::IntoConnectionInfo) -> RedisResult<redis::Client> {
        redis::Client::open(url)
    }

    /// A client for the cluster whose nodes are `urls`, with these options.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster_client(
        &self,
        urls: Vec<String>,
    ) -> RedisResult<redis::cluster::ClusterClient> {
        redis::cluster::ClusterClient::new(urls)
    }
}
