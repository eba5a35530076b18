//! A Redis Cluster connection that is made again when it stops answering.
//!
//! redis-rs' cluster client can stop answering for good after a node dies: its slot refresh
//! waits for a lock that requests it has queued hold, and it polls those requests only once the
//! refresh is done. Every call on the connection then times out, the calls to the surviving
//! masters included, while a new connection to the same cluster works at once. So when no call
//! has had a reply for [`STALL`], the next call starts a new connection in the background and,
//! once it is made, calls go to it. The old one closes when its last call ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{RedisError, RedisResult};

use super::slot::Masters;

/// How long every call may fail before the connection is made again.
const STALL: Duration = Duration::from_secs(1);

/// The longest a new connection may take to be made: its nodes' connection and response
/// timeouts bound it already; this bounds what is left.
const REMAKE_LIMIT: Duration = Duration::from_secs(5);

/// A cluster connection, the client that made it (to make another) and the map of its masters.
pub(super) struct Cluster {
    conn: RwLock<ClusterConnection>,
    /// `None` for a connection the application made: it cannot be made again.
    client: Option<ClusterClient>,
    pub(super) masters: Masters,
    /// When calls started failing without a reply since: milliseconds after `epoch`, plus one
    /// (0 while the last call had a reply).
    failing_since: AtomicU64,
    epoch: Instant,
    /// Whether a new connection is being made.
    remaking: AtomicBool,
    /// How many times the connection was made again.
    remade: AtomicU64,
}

impl Cluster {
    pub(super) fn new(
        conn: ClusterConnection,
        client: Option<ClusterClient>,
        masters: Masters,
    ) -> Arc<Self> {
        Arc::new(Self {
            conn: RwLock::new(conn),
            client,
            masters,
            failing_since: AtomicU64::new(0),
            epoch: Instant::now(),
            remaking: AtomicBool::new(false),
            remade: AtomicU64::new(0),
        })
    }

    /// The connection a call goes to, and the watch that reports the call's outcome. When calls
    /// have failed for [`STALL`], a new connection is started first.
    pub(super) fn checkout(self: &Arc<Self>) -> (ClusterConnection, Watch<'_>) {
        let since = self.failing_since.load(Ordering::Relaxed);
        if since != 0 && self.millis() >= since + duration_millis(STALL) {
            self.remake();
        }
        let conn = self.conn.read().unwrap_or_else(PoisonError::into_inner).clone();
        (
            conn,
            Watch {
                cluster: self,
                replied: false,
            },
        )
    }

    /// How many times the connection was made again.
    #[cfg(test)]
    pub(super) fn remade(&self) -> u64 {
        self.remade.load(Ordering::Relaxed)
    }

    /// Milliseconds since `epoch`, plus one (never 0).
    fn millis(&self) -> u64 {
        duration_millis(self.epoch.elapsed()) + 1
    }

    fn replied(&self) {
        if self.failing_since.load(Ordering::Relaxed) != 0 {
            self.failing_since.store(0, Ordering::Relaxed);
        }
    }

    fn failed(&self) {
        if self.failing_since.load(Ordering::Relaxed) == 0 {
            let now = self.millis();
            let _ =
                self.failing_since
                    .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Starts making a new connection, unless one is being made or there is no client.
    fn remake(self: &Arc<Self>) {
        let Some(client) = self.client.clone() else {
            return;
        };
        // Outside a Tokio runtime no task can be started (and redis-rs' calls fail anyway).
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.remaking.swap(true, Ordering::Acquire) {
            return;
        }
        // The next attempt, if this one fails, waits for another STALL of failures.
        self.failing_since.store(self.millis(), Ordering::Relaxed);
        let cluster = Arc::downgrade(self);
        runtime.spawn(async move {
            let made = tokio::time::timeout(REMAKE_LIMIT, client.get_async_connection()).await;
            let Some(cluster) = cluster.upgrade() else {
                return;
            };
            if let Ok(Ok(conn)) = made {
                *cluster.conn.write().unwrap_or_else(PoisonError::into_inner) = conn;
                cluster.remade.fetch_add(1, Ordering::Relaxed);
                cluster.failing_since.store(0, Ordering::Relaxed);
            }
            cluster.remaking.store(false, Ordering::Release);
        });
    }
}

/// Reports whether a call had a reply (an error reply from a node counts: the connection
/// works). A call dropped before its outcome (its deadline passed) counts as a failure.
pub(super) struct Watch<'a> {
    cluster: &'a Cluster,
    replied: bool,
}

impl Watch<'_> {
    /// Notes `outcome`, and gives it back.
    pub(super) fn outcome<T>(mut self, outcome: RedisResult<T>) -> RedisResult<T> {
        self.replied = match &outcome {
            Ok(_) => true,
            Err(e) => is_reply(e),
        };
        outcome
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if self.replied {
            self.cluster.replied();
        } else {
            self.cluster.failed();
        }
    }
}

/// Whether `e` is a node's error reply, not a failure to get one.
fn is_reply(e: &RedisError) -> bool {
    matches!(e.kind(), redis::ErrorKind::Server(_))
}

fn duration_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis_guard_testkit::RedisCluster;

    async fn start() -> RedisCluster {
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .expect("task")
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A connection to a cluster whose nodes have all been killed since.
    async fn gone() -> (RedisCluster, ClusterConnection) {
        let mut cluster = start().await;
        let conn = ClusterClient::new(cluster.urls())
            .expect("client")
            .get_async_connection()
            .await
            .expect("connect");
        tokio::task::block_in_place(|| {
            for i in 0..cluster.nodes().len() {
                cluster.kill_node(i);
            }
        });
        (cluster, conn)
    }

    /// A `PING` with a backend's deadline: whether it had a reply.
    async fn ping(cluster: &Arc<Cluster>) -> bool {
        let (mut conn, watch) = cluster.checkout();
        let ping = redis::cmd("PING");
        let call = ping.query_async::<String>(&mut conn);
        match tokio::time::timeout(Duration::from_millis(250), call).await {
            Ok(outcome) => watch.outcome(outcome).is_ok(),
            Err(_) => false,
        }
    }

    /// A connection whose every call fails while its client's cluster works (the connection of
    /// a cluster that is gone stands in for one that stopped answering): calls fail for
    /// `STALL`, then a new connection is made and they have replies again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_without_replies_is_made_again() {
        let working = start().await;
        let (_gone, stale) = gone().await;
        let client = ClusterClient::builder(working.urls())
            .response_timeout(Duration::from_secs(1))
            .build()
            .expect("client");
        let cluster = Cluster::new(stale, Some(client), Masters::default());
        let started = Instant::now();
        let mut failures = 0;
        while !ping(&cluster).await {
            failures += 1;
            assert!(started.elapsed() < Duration::from_secs(10), "never made again");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = started.elapsed();
        assert!(failures > 0, "the stale connection failed first");
        assert!(took >= STALL, "made again only after {STALL:?} of failures: {took:?}");
        assert_eq!(cluster.remade(), 1);
        for _ in 0..20 {
            assert!(ping(&cluster).await, "the new connection answers");
        }
        assert_eq!(cluster.remade(), 1, "made once");
    }

    /// A connection the application made (no client) is kept, whatever its calls do.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_without_a_client_is_kept() {
        let (_gone, stale) = gone().await;
        let cluster = Cluster::new(stale, None, Masters::default());
        assert!(!ping(&cluster).await);
        // Past STALL (measured from the first failure): a client would have been asked now.
        tokio::time::sleep(STALL + Duration::from_millis(100)).await;
        assert!(!ping(&cluster).await);
        assert!(!ping(&cluster).await);
        assert_eq!(cluster.remade(), 0);
        assert!(!cluster.remaking.load(Ordering::Relaxed));
    }
}
