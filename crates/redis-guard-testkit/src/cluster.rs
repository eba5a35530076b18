use crate::process::{Node, connect_sync, fresh_dir, node_client, on_node};
use crate::server::{LOG_FILE, OUTPUT_FILE, TestkitError, spawn_redis_watched};
use crate::tls::TestTls;
use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Masters in the cluster (no replicas).
const MASTERS: usize = 3;
/// Hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;
/// Redis puts a node's cluster bus on `port + 10000`.
const BUS_OFFSET: u16 = 10000;
/// Client ports are drawn from `PORT_LO..PORT_HI`, so that they and their bus ports
/// (`PORT_LO + 10000..PORT_HI + 10000`) stay below Linux's ephemeral range (32768 and up),
/// where the kernel picks ports for outgoing connections and for `RedisServer`s.
const PORT_LO: u16 = 12000;
const PORT_HI: u16 = 22000;
/// Whole-cluster start attempts (a port found free can be taken before redis binds it).
const ATTEMPTS: usize = 4;
/// How long every node gets to answer `PING`.
const UP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the cluster gets to agree on its state once the nodes have met.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the state is polled.
const POLL: Duration = Duration::from_millis(25);
/// `ADDSLOTS` batch size when `ADDSLOTSRANGE` (Redis 7.0+) is not available.
const ADDSLOTS_BATCH: usize = 1024;

mod spares;

/// A Redis Cluster of three masters (no replicas), each a private `redis-server` on a free
/// `127.0.0.1` port with no persistence, all killed when dropped.
///
/// The 16384 hash slots are split evenly and in order: node 0 owns the lowest third, node 2
/// the highest. [`start`](Self::start) returns only once every node reports
/// `cluster_state:ok`, knows the three nodes, and maps every slot to one of them, so a cluster
/// client can be pointed at [`urls`](Self::urls) right away.
///
/// [`start_tls`](Self::start_tls) starts one that speaks only TLS, to its clients and between
/// its nodes.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
    /// The certificates of a TLS cluster ([`start_tls`](Self::start_tls)).
    tls: Option<TestTls>,
}

impl RedisCluster {
    /// Starts three cluster-enabled nodes, assigns them the hash slots, joins them with
    /// `CLUSTER MEET` and waits until all of them agree the cluster is healthy.
    ///
    /// A cluster takes about two seconds to start, whatever the machine does: Redis keeps a
    /// fresh master's cluster state at `fail` for its first two seconds. So that a test binary
    /// with many cluster tests waits for that once rather than once per test, clusters are
    /// started ahead, in the background, a few at a time, and this hands out one of them (a
    /// cluster nobody used: no keys, no scripts). Their nodes are killed when this process
    /// exits, also those of clusters nobody took.
    ///
    /// # Errors
    ///
    /// `redis-server` is missing, or the cluster did not come up in a few attempts (the error
    /// carries what was missing and every node's log). Nothing is left running on failure.
    pub fn start() -> Result<Self, TestkitError> {
        spares::take()
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments for every node (e.g.
    /// `["--cluster-require-full-coverage", "no"]`, so the surviving masters keep serving
    /// their slots once a [killed](Self::kill_node) master is marked failed).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_with(extra: &[&str]) -> Result<Self, TestkitError> {
        if extra.is_empty() {
            return spares::take();
        }
        Self::start_now(extra, None)
    }

    /// Starts a cluster that speaks only TLS, with the certificates of `tls`: every node has a
    /// TLS port and no plain one, verifies its clients (a client certificate of the same
    /// authority is required), and talks TLS on the cluster bus (`tls-cluster yes`) and for
    /// replication (`tls-replication yes`), so that `CLUSTER SLOTS` and `CLUSTER NODES` name
    /// the TLS ports. [`urls`](Self::urls) are `rediss://127.0.0.1:<port>/`, and
    /// [`client_for`](Self::client_for) and this type's own calls to the nodes
    /// ([`keys`](Self::keys), [`pttl`](Self::pttl), [`for_each_node`](Self::for_each_node))
    /// trust the authority and present its client certificate.
    ///
    /// Unlike [`start`](Self::start), this starts the cluster now, in this thread (about two
    /// seconds): TLS clusters are not started ahead.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_tls(tls: &TestTls) -> Result<Self, TestkitError> {
        Self::start_now(&[], Some(tls))
    }

    /// Starts a cluster in this thread (what [`start_with`](Self::start_with) does for extra
    /// arguments, [`start_tls`](Self::start_tls) for TLS, and the spares' thread for neither).
    fn start_now(extra: &[&str], tls: Option<&TestTls>) -> Result<Self, TestkitError> {
        let mut last = None;
        for attempt in 1..=ATTEMPTS {
            match Self::try_start(extra, tls) {
                Ok(cluster) => return Ok(cluster),
                Err(TestkitError::NotInstalled(bin)) => {
                    return Err(TestkitError::NotInstalled(bin));
                }
                Err(TestkitError::NotReady(why)) => {
                    last = Some(TestkitError::NotReady(format!(
                        "Redis Cluster did not come up (attempt {attempt} of {ATTEMPTS}): {why}"
                    )));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| TestkitError::NotReady("no attempt made".into())))
    }

    fn try_start(extra: &[&str], tls: Option<&TestTls>) -> Result<Self, TestkitError> {
        let ports = pick_ports()?;
        let mut cluster = Self {
            nodes: Vec::with_capacity(MASTERS),
            tls: tls.cloned(),
        };
        // From here on an early return drops `cluster`, which kills the nodes started so far.
        for port in ports {
            cluster.nodes.push(Node::spawn(port, extra, tls)?);
        }
        cluster.wait_up()?;
        cluster.assign_slots()?;
        cluster.meet()?;
        cluster.wait_converged()?;
        Ok(cluster)
    }

    /// Waits until every node answers `PING` and is our process (not someone else's server
    /// that owned the port when ours failed to bind it).
    fn wait_up(&mut self) -> Result<(), TestkitError> {
        let deadline = Instant::now() + UP_TIMEOUT;
        for i in 0..self.nodes.len() {
            loop {
                self.check_alive()?;
                let node = &self.nodes[i];
                if let Ok(mut conn) = connect_sync(node.port, self.tls.as_ref())
                    && redis::cmd("PING").query::<String>(&mut conn).is_ok()
                {
                    // Our node was started with a logfile in its own directory: a server
                    // reporting another one is someone else's, which got the port first.
                    // (The pid would not do: REDIS_SERVER_BIN may be a wrapper script.)
                    let ours = node.log_path().to_string_lossy().into_owned();
                    let logfile: Vec<String> = redis::cmd("CONFIG")
                        .arg("GET")
                        .arg("logfile")
                        .query(&mut conn)
                        .unwrap_or_default();
                    if logfile.get(1) == Some(&ours) {
                        break;
                    }
                    return Err(self.fail(format_args!(
                        "{} is answered by another Redis (its logfile is {:?}, ours is {ours:?}): \
                         the port was taken before our node could bind it",
                        node.addr(),
                        logfile.get(1).map_or("unknown", String::as_str),
                    )));
                }
                if Instant::now() > deadline {
                    return Err(self.fail(format_args!(
                        "{} did not answer PING within {} s",
                        node.addr(),
                        UP_TIMEOUT.as_secs()
                    )));
                }
                std::thread::sleep(POLL);
            }
        }
        Ok(())
    }

    /// Fails, with the logs, if any node has exited.
    fn check_alive(&mut self) -> Result<(), TestkitError> {
        for i in 0..self.nodes.len() {
            if let Ok(Some(status)) = self.nodes[i].process.child.try_wait() {
                let port = self.nodes[i].port;
                return Err(self.fail(format_args!(
                    "node 127.0.0.1:{port} exited with {status} (a taken port {port} or cluster \
                     bus port {} is the usual cause; see its log below)",
                    u32::from(port) + u32::from(BUS_OFFSET)
                )));
            }
        }
        Ok(())
    }

    /// Gives node `i` the `i`-th third of the slots, and a distinct config epoch.
    fn assign_slots(&self) -> Result<(), TestkitError> {
        for (i, node) in self.nodes.iter().enumerate() {
            let (first, last) = slot_range(i, self.nodes.len());
            let mut conn = connect_sync(node.port, self.tls.as_ref())
                .map_err(|e| self.fail(format_args!("cannot connect to {}: {e}", node.addr())))?;
            let range = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .exec(&mut conn);
            if let Err(range_err) = range {
                // Redis < 7.0 has no ADDSLOTSRANGE: list the slots instead.
                let slots: Vec<u16> = (first..=last).collect();
                for batch in slots.chunks(ADDSLOTS_BATCH) {
                    redis::cmd("CLUSTER")
                        .arg("ADDSLOTS")
                        .arg(batch)
                        .exec(&mut conn)
                        .map_err(|e| {
                            self.fail(format_args!(
                                "cannot assign slots {first}..={last} to {}: \
                                 CLUSTER ADDSLOTSRANGE failed ({range_err}), then \
                                 CLUSTER ADDSLOTS failed ({e})",
                                node.addr()
                            ))
                        })?;
                }
            }
            // Distinct epochs spare the nodes resolving an epoch collision after they meet (as
            // `redis-cli --cluster create` does). Only an optimisation: gossip sorts it out anyway.
            let _ = redis::cmd("CLUSTER")
                .arg("SET-CONFIG-EPOCH")
                .arg(i + 1)
                .exec(&mut conn);
        }
        Ok(())
    }

    /// Every node meets every later node (one direction suffices per pair).
    fn meet(&self) -> Result<(), TestkitError> {
        for (i, node) in self.nodes.iter().enumerate() {
            let mut conn = connect_sync(node.port, self.tls.as_ref())
                .map_err(|e| self.fail(format_args!("cannot connect to {}: {e}", node.addr())))?;
            for other in &self.nodes[i + 1..] {
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(other.port)
                    .exec(&mut conn)
                    .map_err(|e| {
                        self.fail(format_args!(
                            "CLUSTER MEET {} on {} failed: {e}",
                            other.addr(),
                            node.addr()
                        ))
                    })?;
            }
        }
        Ok(())
    }

    /// Waits until every node reports `cluster_state:ok` and 3 known nodes, and its
    /// `CLUSTER SLOTS` maps all 16384 slots to the masters they were assigned to.
    fn wait_converged(&mut self) -> Result<(), TestkitError> {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        let ports = self.ports();
        let tls = self.tls.clone();
        let mut conns: Vec<Option<redis::Connection>> = self.nodes.iter().map(|_| None).collect();
        loop {
            self.check_alive()?;
            let mut pending = Vec::new();
            for (node, conn) in self.nodes.iter().zip(&mut conns) {
                if conn.is_none() {
                    *conn = connect_sync(node.port, tls.as_ref()).ok();
                }
                let Some(c) = conn.as_mut() else {
                    pending.push(format!("{}: cannot connect", node.addr()));
                    continue;
                };
                if let Err(why) = node_converged(c, &ports) {
                    pending.push(format!("{}: {why}", node.addr()));
                    if why.starts_with("error") {
                        *conn = None;
                    }
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.fail(format_args!(
                    "the cluster did not converge within {} s; still waiting for:\n  {}",
                    CONVERGE_TIMEOUT.as_secs(),
                    pending.join("\n  ")
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    fn fail(&self, why: std::fmt::Arguments<'_>) -> TestkitError {
        TestkitError::NotReady(format!("{why}\nnode logs:\n{}", self.log()))
    }

    /// The nodes' addresses, `127.0.0.1:<port>`, in slot order.
    #[must_use]
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.iter().map(Node::addr).collect()
    }

    /// The nodes' URLs, `redis://127.0.0.1:<port>/` (`rediss://…` for a
    /// [TLS cluster](Self::start_tls)), in slot order: what a cluster client is built from.
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

    /// The certificates of a cluster started with [`start_tls`](Self::start_tls): what a client
    /// needs to trust its nodes and be let in.
    #[must_use]
    pub fn tls(&self) -> Option<&TestTls> {
        self.tls.as_ref()
    }

    /// The ports the nodes listen on (on 127.0.0.1), in slot order. Each node's cluster bus
    /// is on its port + 10000.
    #[must_use]
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// A plain (non-cluster) client for node `i` (with the cluster's certificates on a
    /// [TLS cluster](Self::start_tls)): commands on keys it does not own get `MOVED` errors.
    ///
    /// # Panics
    ///
    /// If `i` is not below 3.
    #[must_use]
    pub fn client_for(&self, i: usize) -> redis::Client {
        let Some(node) = self.nodes.get(i) else {
            panic!(
                "RedisCluster::client_for({i}): the cluster has {} nodes",
                self.nodes.len()
            );
        };
        #[allow(clippy::expect_used)]
        node_client(node.port, self.tls.as_ref())
            .expect("a loopback URL and test certificates are valid")
    }

    /// Kills master `i` (`SIGKILL`, as a crash would) and waits for it to exit: its slots are
    /// served by nobody until the end of the test (there are no replicas to promote). Killing a
    /// killed node does nothing.
    ///
    /// # Panics
    ///
    /// If `i` is not below 3.
    pub fn kill_node(&mut self, i: usize) {
        let n = self.nodes.len();
        let Some(node) = self.nodes.get_mut(i) else {
            panic!("RedisCluster::kill_node({i}): the cluster has {n} nodes");
        };
        node.process.stop();
    }

    /// Every node's log so far, each under a header naming the node.
    #[must_use]
    pub fn log(&self) -> String {
        let mut all = String::new();
        for node in &self.nodes {
            let log = node.log_path();
            let _ = writeln!(all, "===== {} ({}) =====", node.addr(), log.display());
            all.push_str(&std::fs::read_to_string(&log).unwrap_or_default());
            if !all.ends_with('\n') {
                all.push('\n');
            }
            let output = std::fs::read_to_string(node.dir.join(OUTPUT_FILE)).unwrap_or_default();
            if !output.trim().is_empty() {
                let _ = writeln!(all, "----- {} stdout/stderr -----", node.addr());
                all.push_str(&output);
                if !all.ends_with('\n') {
                    all.push('\n');
                }
            }
        }
        all
    }

    /// Runs `cmd` on every master, e.g. `redis::cmd("SCRIPT").arg("FLUSH")`; its replies are
    /// ignored.
    ///
    /// # Errors
    ///
    /// The first node that could not be reached or answered an error.
    pub fn for_each_node(&self, cmd: &redis::Cmd) -> Result<(), redis::RedisError> {
        for node in &self.nodes {
            on_node(node.port, self.tls.as_ref(), |conn| cmd.exec(conn))?;
        }
        Ok(())
    }

    /// All keys of the cluster (a `SCAN` of every node), sorted. Non-UTF-8 bytes are replaced
    /// with U+FFFD.
    ///
    /// # Panics
    ///
    /// If a node cannot be reached or the scan fails.
    #[must_use]
    pub fn keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        for node in &self.nodes {
            // A whole scan of the node, from the start again if a call failed.
            let scanned = on_node(node.port, self.tls.as_ref(), |conn| {
                let mut found = Vec::new();
                let mut cursor = "0".to_owned();
                loop {
                    let (next, batch): (String, Vec<Vec<u8>>) = redis::cmd("SCAN")
                        .arg(&cursor)
                        .arg("COUNT")
                        .arg(1000)
                        .query(conn)?;
                    found.extend(
                        batch
                            .iter()
                            .map(|k| String::from_utf8_lossy(k).into_owned()),
                    );
                    if next == "0" {
                        return Ok(found);
                    }
                    cursor = next;
                }
            });
            keys.extend(scanned.unwrap_or_else(|e| {
                panic!("RedisCluster::keys: SCAN on {} failed: {e}", node.addr())
            }));
        }
        keys.sort();
        keys
    }

    /// `PTTL key` on the node that owns `key`: milliseconds left, -1 if the key has no expiry,
    /// -2 if it does not exist.
    ///
    /// Every node is asked; the others answer `MOVED` (or -2), as a key lives only on the
    /// master owning its slot.
    ///
    /// # Panics
    ///
    /// If a node cannot be reached or answers an error other than a redirection.
    #[must_use]
    pub fn pttl(&self, key: &str) -> i64 {
        for node in &self.nodes {
            match on_node(node.port, self.tls.as_ref(), |conn| {
                redis::cmd("PTTL").arg(key).query::<i64>(conn)
            }) {
                Ok(-2) => {}
                Ok(ms) => return ms,
                Err(e) if e.redirect_node().is_some() => {}
                Err(e) => panic!(
                    "RedisCluster::pttl: PTTL {key:?} on {} failed: {e}",
                    node.addr()
                ),
            }
        }
        -2
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // Kill them all first so they go down together; each `Node`'s drop then reaps its
        // process and removes its directory.
        for node in &mut self.nodes {
            node.process.signal_stop();
        }
    }
}

impl Node {
    fn spawn(port: u16, extra: &[&str], tls: Option<&TestTls>) -> Result<Self, TestkitError> {
        let dir = fresh_dir("testkit-cluster", port)?;
        let conf = dir.join("nodes.conf").to_string_lossy().into_owned();
        let mut args: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &conf,
            "--cluster-node-timeout",
            "5000",
        ]
        .map(str::to_owned)
        .into();
        if let Some(tls) = tls {
            // The TLS port replaces the plain one; the cluster bus stays on port + 10000.
            args.extend(tls.server_args(&dir, port, "yes")?);
            args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(str::to_owned));
        }
        args.extend(extra.iter().map(|&a| a.to_owned()));
        let process = spawn_redis_watched(port, &dir, &args)?;
        Ok(Self { process, port, dir })
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// Slots `first..=last` of node `i` out of `n`.
fn slot_range(i: usize, n: usize) -> (u16, u16) {
    let slots = usize::from(SLOTS);
    let first = i * slots / n;
    let last = (i + 1) * slots / n - 1;
    (
        u16::try_from(first).unwrap_or(u16::MAX),
        u16::try_from(last).unwrap_or(u16::MAX),
    )
}

/// `MASTERS` ports whose cluster bus ports are free too. Each port and bus port is held open
/// until all are chosen, so they are distinct.
fn pick_ports() -> Result<Vec<u16>, TestkitError> {
    let mut held = Vec::with_capacity(2 * MASTERS);
    let mut ports = Vec::with_capacity(MASTERS);
    for _ in 0..1000 {
        if ports.len() == MASTERS {
            return Ok(ports);
        }
        let port = random_port();
        if let Ok(a) = TcpListener::bind(("127.0.0.1", port))
            && let Ok(b) = TcpListener::bind(("127.0.0.1", port + BUS_OFFSET))
        {
            held.extend([a, b]);
            ports.push(port);
        }
    }
    if ports.len() == MASTERS {
        return Ok(ports);
    }
    Err(TestkitError::NotReady(format!(
        "found only {} of {MASTERS} free port pairs (p and p+{BUS_OFFSET}, p in \
         {PORT_LO}..{PORT_HI}) on 127.0.0.1",
        ports.len()
    )))
}

fn random_port() -> u16 {
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let offset = h.finish() % u64::from(PORT_HI - PORT_LO);
    PORT_LO + u16::try_from(offset).unwrap_or(0)
}

/// `field:value` from an `INFO`-style reply.
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k == field).then(|| v.trim())
    })
}

/// `Ok` once this node sees a healthy 3-master cluster made of `ports`, where the `i`-th
/// third of the slots is served by `ports[i]`; else what is missing (starting with "error"
/// if the connection failed).
fn node_converged(conn: &mut redis::Connection, ports: &[u16]) -> Result<(), String> {
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(conn)
        .map_err(|e| format!("error on CLUSTER INFO: {e}"))?;
    let state = info_field(&info, "cluster_state").unwrap_or("?");
    let known = info_field(&info, "cluster_known_nodes").unwrap_or("?");
    if state != "ok" || known != ports.len().to_string() {
        return Err(format!("cluster_state:{state} cluster_known_nodes:{known}"));
    }
    let slots: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(conn)
        .map_err(|e| format!("error on CLUSTER SLOTS: {e}"))?;
    let mut ranges = parse_cluster_slots(&slots)?;
    ranges.sort_unstable();
    let mut next = 0;
    for &(first, last, ref host, port) in &ranges {
        if first != next {
            return Err(format!(
                "CLUSTER SLOTS does not cover slots {next}..{first} exactly: {ranges:?}"
            ));
        }
        let owner = ports
            .iter()
            .position(|&p| i64::from(p) == port)
            .filter(|_| host == "127.0.0.1");
        let expected = (0..ports.len())
            .find(|&i| {
                let (f, l) = slot_range(i, ports.len());
                i64::from(f) <= first && last <= i64::from(l)
            })
            .map(|i| ports[i]);
        if owner.map(|i| ports[i]) != expected {
            return Err(format!(
                "CLUSTER SLOTS maps {first}..={last} to {host}:{port}, expected 127.0.0.1:{}",
                expected.map_or_else(|| "?".to_owned(), |p| p.to_string())
            ));
        }
        next = last + 1;
    }
    if next != i64::from(SLOTS) {
        return Err(format!(
            "CLUSTER SLOTS covers only slots 0..{next} of {SLOTS}: {ranges:?}"
        ));
    }
    Ok(())
}

/// `CLUSTER SLOTS` as `(first, last, master host, master port)`.
fn parse_cluster_slots(v: &redis::Value) -> Result<Vec<(i64, i64, String, i64)>, String> {
    use redis::Value;
    let bad = || format!("unexpected CLUSTER SLOTS reply: {v:?}");
    let Value::Array(entries) = v else {
        return Err(bad());
    };
    entries
        .iter()
        .map(|entry| {
            let Value::Array(fields) = entry else {
                return Err(bad());
            };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return Err(bad());
            };
            let host = match master.first() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(Value::SimpleString(s)) => s.clone(),
                _ => return Err(bad()),
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return Err(bad());
            };
            Ok((*first, *last, host, *port))
        })
        .collect()
}
