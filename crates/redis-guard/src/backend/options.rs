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
    #[cfg(feature = "tls")]
    tls: Option<super::TlsOptions>,
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

    /// The certificates of `rediss://` connections (feature `tls`): a certificate authority of
    /// your own, a client certificate. Without them a `rediss://` URL trusts the platform's
    /// roots. They apply to every TLS connection these options make: the server, every node of
    /// a Cluster, and the sentinels and the primary that are reached over TLS. Plain
    /// `redis://` addresses ignore them.
    ///
    /// ```no_run
    /// use redis_guard::backend::{ConnectOptions, TlsOptions};
    /// # async fn f(ca: Vec<u8>) -> redis::RedisResult<()> {
    /// let conn = ConnectOptions::new()
    ///     .tls(TlsOptions::new().ca_pem(ca))
    ///     .cluster(&["rediss://10.0.0.1:6380/", "rediss://10.0.0.2:6380/"])
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: super::TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// A `bb8` connection manager for the server at `url` with these options (TLS included), to
    /// build a pool with (feature `bb8`). `bb8::Builder::build_unchecked` makes a pool that
    /// starts while Redis is unreachable; its calls then wait for a connection up to the
    /// backend's timeout, and the circuit breaker opens after a few.
    ///
    /// ```no_run
    /// use redis_guard::backend::{ConnectOptions, RedisConnection};
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ConnectOptions::new().pool_manager("redis://127.0.0.1/")?;
    /// let pool = bb8::Pool::builder().max_size(8).build(manager).await?;
    /// let conn = RedisConnection::from(pool);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The URL is invalid, or is `rediss://` without the `tls` feature.
    #[cfg(feature = "bb8")]
    pub fn pool_manager(&self, url: &str) -> RedisResult<bb8_redis::RedisConnectionManager> {
        let info = self.client(url)?.get_connection_info().clone();
        bb8_redis::RedisConnectionManager::new(info)
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

    /// A client for the server at `url`, with these options.
    pub(crate) fn client(&self, url: &str) -> RedisResult<redis::Client> {
        tls_available(url)?;
        self.client_for(redis::IntoConnectionInfo::into_connection_info(url)?)
    }

    /// A client for the server `info` describes (a `rediss://` URL already checked by
    /// [`tls_available`]), with these options.
    pub(crate) fn client_for(&self, info: redis::ConnectionInfo) -> RedisResult<redis::Client> {
        #[cfg(feature = "tls")]
        if matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            super::tls::install_provider();
            if let Some(tls) = &self.tls {
                tls.validate()?;
                return redis::Client::build_with_tls(info, tls.certificates());
            }
        }
        redis::Client::open(info)
    }

    /// A client for the cluster whose nodes are `urls`, with these options.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster_client(
        &self,
        urls: Vec<String>,
    ) -> RedisResult<redis::cluster::ClusterClient> {
        for url in &urls {
            tls_available(url)?;
        }
        #[cfg(feature = "tls")]
        if urls.iter().any(|u| is_tls(u)) {
            super::tls::install_provider();
            if let Some(tls) = &self.tls {
                tls.validate()?;
                return redis::cluster::ClusterClientBuilder::new(urls)
                    .certs(tls.certificates())
                    .response_timeout(CLUSTER_NODE_REPLY)
                    .build();
            }
        }
        redis::cluster::ClusterClientBuilder::new(urls)
            .response_timeout(CLUSTER_NODE_REPLY)
            .build()
    }
}

/// How long the cluster client waits for any one node's reply, its own slot refreshes included.
/// Each call of a backend has its own, shorter deadline; this bounds what the client does on its
/// own: without it, a slot refresh that asks a master killed a moment before can wait for it
/// for good, and every call on the connection waits behind that refresh.
#[cfg(feature = "cluster")]
const CLUSTER_NODE_REPLY: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether `url` asks for TLS (`rediss://`, `valkeys://`).
pub(crate) fn is_tls(url: &str) -> bool {
    let scheme = url.trim_start().split("://").next().unwrap_or_default();
    scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
}

/// A `rediss://` URL in a build without the `tls` feature: an error that names the feature.
pub(crate) fn tls_available(url: &str) -> RedisResult<()> {
    tls_in(url, cfg!(feature = "tls"))
}

fn tls_in(url: &str, enabled: bool) -> RedisResult<()> {
    if is_tls(url) && !enabled {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "rediss:// needs redis-guard's `tls` feature",
            "enable it: redis-guard = { version = \"…\", features = [\"tls\"] }".to_owned(),
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::tls_in;

    #[test]
    fn a_tls_url_without_the_feature_names_the_feature() {
        let e = tls_in("rediss://:pw@redis.example:6380/", false).unwrap_err();
        assert_eq!(e.kind(), redis::ErrorKind::InvalidClientConfig);
        assert!(
            e.to_string()
                .contains("rediss:// needs redis-guard's `tls` feature"),
            "{e}"
        );
        assert!(!e.to_string().contains("pw"), "{e}");
        assert!(tls_in(" REDISS://h/", false).is_err());
        assert!(tls_in("rediss://h/", true).is_ok());
        assert!(tls_in("redis://h/", false).is_ok());
        assert!(tls_in("h:6379", false).is_ok());
    }
}
