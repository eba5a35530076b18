//! `RedisCluster` starts a real, healthy 3-master Redis Cluster and cleans up after itself.

use redis_guard_testkit::RedisCluster;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const SLOTS: i64 = 16384;

fn start() -> RedisCluster {
    let started = Instant::now();
    let cluster = RedisCluster::start().unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "cluster {:?} started in {:?}",
        cluster.nodes(),
        started.elapsed()
    );
    cluster
}

fn conn(cluster: &RedisCluster, i: usize) -> redis::Connection {
    cluster
        .client_for(i)
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("node {i}: {e}"))
}

fn accepts(port: u32) -> bool {
    let Ok(port) = u16::try_from(port) else {
        return false;
    };
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .is_ok()
}

/// `CLUSTER SLOTS` as `(first, last, "host:port" of the master)`, sorted.
fn cluster_slots(conn: &mut redis::Connection) -> Vec<(i64, i64, String)> {
    let entries: Vec<(i64, i64, Vec<redis::Value>)> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(conn)
        .unwrap_or_else(|e| panic!("CLUSTER SLOTS: {e}"));
    let mut slots: Vec<_> = entries
        .into_iter()
        .map(|(first, last, master)| {
            let host: String = redis::from_redis_value_ref(&master[0]).unwrap_or_default();
            let port: i64 = redis::from_redis_value_ref(&master[1]).unwrap_or_default();
            (first, last, format!("{host}:{port}"))
        })
        .collect();
    slots.sort();
    slots
}

/// Node `i` owns the `i`-th third of the slots.
fn expected_owner(slot: i64) -> usize {
    (0..3_usize)
        .find(|&i| {
            let i = i64::try_from(i).unwrap_or_default();
            i * SLOTS / 3 <= slot && slot < (i + 1) * SLOTS / 3
        })
        .unwrap_or_else(|| panic!("slot {slot} out of range"))
}

/// Sends `cmd` to node 0 and follows one `MOVED`, as a cluster client would; returns the
/// address that executed it and the reply.
fn route(cluster: &RedisCluster, cmd: &redis::Cmd, slot: i64) -> (String, redis::Value) {
    let nodes = cluster.nodes();
    match cmd.query::<redis::Value>(&mut conn(cluster, 0)) {
        Ok(reply) => (nodes[0].clone(), reply),
        Err(e) => {
            let (addr, moved_slot) = e
                .redirect_node()
                .unwrap_or_else(|| panic!("expected a reply or MOVED, got {e}"));
            assert_eq!(i64::from(moved_slot), slot, "{e}");
            let i = nodes
                .iter()
                .position(|n| n == addr)
                .unwrap_or_else(|| panic!("MOVED to {addr}, not one of {nodes:?}"));
            assert_ne!(i, 0, "node 0 redirected to itself: {e}");
            let reply = cmd
                .query(&mut conn(cluster, i))
                .unwrap_or_else(|e| panic!("{addr} after MOVED: {e}"));
            (addr.to_owned(), reply)
        }
    }
}

#[test]
fn every_node_sees_a_healthy_cluster_and_moved_routing_works() {
    let cluster = start();
    let nodes = cluster.nodes();
    assert_eq!(nodes.len(), 3);
    assert_eq!(cluster.ports().len(), 3);
    for (i, (node, url)) in nodes.iter().zip(cluster.urls()).enumerate() {
        assert_eq!(url, format!("redis://{node}/"));
        let mut c = conn(&cluster, i);
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut c)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(info.contains("cluster_state:ok"), "{node}: {info}");
        assert!(info.contains("cluster_known_nodes:3"), "{node}: {info}");
        assert!(
            info.contains("cluster_slots_assigned:16384"),
            "{node}: {info}"
        );
        assert!(info.contains("cluster_size:3"), "{node}: {info}");

        // Slots 0..=16383, each exactly once, split in thirds in node order.
        let slots = cluster_slots(&mut c);
        let mut next = 0;
        for (first, last, owner) in &slots {
            assert_eq!(*first, next, "{node}: {slots:?}");
            assert_eq!(*owner, nodes[expected_owner(*first)], "{node}: {slots:?}");
            assert_eq!(
                expected_owner(*first),
                expected_owner(*last),
                "{node}: {slots:?}"
            );
            next = last + 1;
        }
        assert_eq!(next, SLOTS, "{node}: {slots:?}");
    }

    // 100 keys in 100 distinct slots.
    let mut c0 = conn(&cluster, 0);
    let mut keys = BTreeMap::new();
    for n in 0.. {
        if keys.len() == 100 {
            break;
        }
        let key = format!("key:{n}");
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query(&mut c0)
            .unwrap_or_else(|e| panic!("{e}"));
        if !keys.values().any(|&s| s == slot) {
            keys.insert(key, slot);
        }
    }

    let mut owners = BTreeSet::new();
    for (n, (key, &slot)) in keys.iter().enumerate() {
        let mut set = redis::cmd("SET");
        set.arg(key).arg(n);
        if n % 2 == 0 {
            set.arg("PX").arg(60_000);
        }
        let (owner, reply) = route(&cluster, &set, slot);
        assert_eq!(reply, redis::Value::Okay, "SET {key}");
        assert_eq!(owner, nodes[expected_owner(slot)], "{key} in slot {slot}");
        owners.insert(owner.clone());

        let (get_owner, value) = route(&cluster, redis::cmd("GET").arg(key), slot);
        assert_eq!(get_owner, owner);
        assert_eq!(
            redis::from_redis_value::<usize>(value).unwrap_or(usize::MAX),
            n
        );

        let pttl = cluster.pttl(key);
        if n % 2 == 0 {
            assert!(0 < pttl && pttl <= 60_000, "PTTL {key} = {pttl}");
        } else {
            assert_eq!(pttl, -1, "PTTL {key}");
        }
    }
    assert_eq!(owners.len(), 3, "every master got keys: {owners:?}");
    assert_eq!(cluster.pttl("no-such-key"), -2);
    assert_eq!(cluster.keys(), keys.keys().cloned().collect::<Vec<_>>());

    // `for_each_node` reaches every master.
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query(&mut c0)
        .unwrap_or_else(|e| panic!("{e}"));
    cluster
        .for_each_node(redis::cmd("SCRIPT").arg("LOAD").arg("return 1"))
        .unwrap_or_else(|e| panic!("{e}"));
    let loaded_everywhere = |expected: bool| {
        for i in 0..3 {
            let exists: Vec<bool> = redis::cmd("SCRIPT")
                .arg("EXISTS")
                .arg(&sha)
                .query(&mut conn(&cluster, i))
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(exists, [expected], "node {i}");
        }
    };
    loaded_everywhere(true);
    cluster
        .for_each_node(redis::cmd("SCRIPT").arg("FLUSH"))
        .unwrap_or_else(|e| panic!("{e}"));
    loaded_everywhere(false);

    let log = cluster.log();
    for node in &nodes {
        assert!(log.contains(&format!("===== {node} ")), "{log}");
    }
    assert!(log.contains("Cluster state changed: ok"), "{log}");
}

#[test]
fn drop_kills_every_node_and_removes_its_files() {
    let cluster = start();
    let ports = cluster.ports();
    for &port in &ports {
        assert!(accepts(u32::from(port)), "port {port}");
        assert!(accepts(u32::from(port) + 10_000), "bus port of {port}");
    }
    drop(cluster);
    for &port in &ports {
        assert!(!accepts(u32::from(port)), "port {port} still open");
        assert!(
            !accepts(u32::from(port) + 10_000),
            "bus port of {port} still open"
        );
    }
    // The nodes' directories are `redis-guard-testkit-cluster-<pid>-<n>-<port>`.
    let prefix = format!("redis-guard-testkit-cluster-{}-", std::process::id());
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| {
            name.starts_with(&prefix) && ports.iter().any(|p| name.ends_with(&format!("-{p}")))
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn two_clusters_run_side_by_side() {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(start);
        let b = s.spawn(start);
        (
            a.join().unwrap_or_else(|_| panic!("cluster a")),
            b.join().unwrap_or_else(|_| panic!("cluster b")),
        )
    });
    let ports_a: BTreeSet<u16> = a.ports().into_iter().collect();
    let ports_b: BTreeSet<u16> = b.ports().into_iter().collect();
    assert_eq!(ports_a.len(), 3);
    assert_eq!(ports_b.len(), 3);
    assert!(ports_a.is_disjoint(&ports_b), "{ports_a:?} {ports_b:?}");

    // Each node knows exactly its own cluster's nodes.
    for cluster in [&a, &b] {
        let mut own = cluster.nodes();
        own.sort();
        for i in 0..3 {
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query(&mut conn(cluster, i))
                .unwrap_or_else(|e| panic!("{e}"));
            let mut known: Vec<String> = nodes
                .lines()
                .filter_map(|line| line.split(' ').nth(1))
                .map(|addr| addr.split('@').next().unwrap_or(addr).to_owned())
                .collect();
            known.sort();
            assert_eq!(known, own, "{nodes}");
        }
    }

    let mut key_slot = conn(&a, 0);
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("only-in-a")
        .query(&mut key_slot)
        .unwrap_or_else(|e| panic!("{e}"));
    let (_, reply) = route(&a, redis::cmd("SET").arg("only-in-a").arg(1), slot);
    assert_eq!(reply, redis::Value::Okay);
    assert_eq!(a.keys(), ["only-in-a"]);
    assert_eq!(a.pttl("only-in-a"), -1);
    assert!(b.keys().is_empty(), "{:?}", b.keys());
    assert_eq!(b.pttl("only-in-a"), -2);
}
