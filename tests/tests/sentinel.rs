//! Redis Sentinel: a primary, a replica and three sentinels on loopback; the primary killed
//! under load. The suites run on a sentinel-found server as `sentinel::…`
//! through `backend_suite!`; this binary covers what only a failover shows, and the errors of
//! a topology that cannot be used.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use redis_guard::backend::{Breaker, RedisBackend, RedisConnection};
use redis_guard::rate_limit::{Key, Quota, RedisLimiter, Rule};
use redis_guard::session::{RedisSessionStore, SessionLayer};
use redis_guard_testkit::{RedisSentinels, RedisServer, inspect, unique_prefix};
use redis_guard_tests::session_routes::{error, route, session_and_path, text};
use redis_guard_tests::{Reply, call};
use tower::Layer;

/// The backend's timeout: every call returns within it (plus scheduling noise).
const TIMEOUT: Duration = Duration::from_millis(500);
/// What a task's round (a decision, then a session request: at most three calls, each within
/// the timeout) may take on a loaded 2-core machine running debug builds.
const BOUND: Duration = Duration::from_millis(2500);
/// Tasks deciding at once.
const TASKS: usize = 4;

/// Counts `redis_guard_breaker_opened_total` per `prefix` label: the outages the breaker saw.
#[derive(Default)]
struct Opened(std::sync::Mutex<std::collections::HashMap<String, Arc<AtomicU64>>>);

struct Count(Arc<AtomicU64>);

impl metrics::CounterFn for Count {
    fn increment(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    fn absolute(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }
}

impl metrics::Recorder for &'static Opened {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        if key.name() != "redis_guard_breaker_opened_total" {
            return metrics::Counter::noop();
        }
        let prefix = key
            .labels()
            .find(|l| l.key() == "prefix")
            .map(|l| l.value().to_owned());
        let mut map = self.0.lock().expect("counters");
        let n = map.entry(prefix.unwrap_or_default()).or_default();
        metrics::Counter::from_arc(Arc::new(Count(Arc::clone(n))))
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// How often the breaker of the backends with `prefix` opened.
fn opened(prefix: &str) -> u64 {
    static OPENED: OnceLock<&'static Opened> = OnceLock::new();
    let recorder = *OPENED.get_or_init(|| {
        let r: &'static Opened = Box::leak(Box::default());
        metrics::set_global_recorder(r).expect("the one recorder of this binary");
        r
    });
    let map = recorder.0.lock().expect("counters");
    map.get(prefix).map_or(0, |n| n.load(Ordering::Relaxed))
}

/// A primary, its replica and `count` sentinels with `down_after`.
fn servers(count: usize, down_after: Duration) -> (RedisServer, RedisServer, RedisSentinels) {
    // Redis waits 5 s by default before a diskless sync, for more replicas to join.
    let primary = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"])
        .unwrap_or_else(|e| panic!("{e}"));
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port])
        .unwrap_or_else(|e| panic!("{e}"));
    // In sync before the sentinels start: the primary's first INFO to them lists the replica,
    // instead of the next one, ten seconds later.
    let mut conn = replica.client().get_connection().expect("connect");
    let started = Instant::now();
    while !redis::cmd("INFO")
        .arg("replication")
        .query::<String>(&mut conn)
        .expect("INFO")
        .contains("master_link_status:up")
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the replica never synced"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let sentinels =
        RedisSentinels::start(primary.port(), count, down_after).unwrap_or_else(|e| panic!("{e}"));
    (primary, replica, sentinels)
}

/// A primary, its replica and three sentinels that know both and each other.
fn topology() -> (RedisServer, RedisServer, RedisSentinels) {
    // Long enough that a primary stalled by a loaded machine is not failed over before the kill.
    let (primary, replica, sentinels) = servers(3, Duration::from_millis(1000));
    sentinels
        .wait_watching(1, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    (primary, replica, sentinels)
}

/// `INFO <section>` of the server on `port`.
async fn info(port: u16, section: &str) -> String {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await
        .expect("INFO")
}

/// Whether `limiter` admits a request of `key` under `rule` (it must decide).
async fn admits(limiter: &RedisLimiter, rule: &Rule, key: &str) -> bool {
    limiter
        .check(rule, Key::from(key))
        .await
        .expect("decided")
        .allowed
}

/// A request to the session app, with the session's cookie.
fn session_request(path: &str, id: Option<&str>) -> Request<Full<Bytes>> {
    let mut req = Request::builder().method("POST").uri(path);
    if let Some(id) = id {
        req = req.header("cookie", format!("__Host-id={id}"));
    }
    req.body(Full::default()).expect("request")
}

fn session_id(r: &Reply) -> String {
    let cookie = r.header("set-cookie");
    let value = cookie
        .split(';')
        .next()
        .and_then(|c| c.split_once('='))
        .map(|(_, v)| v);
    value.expect("a new session sets its cookie").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_under_load_loses_no_decision_and_the_limit_holds_on_the_new_primary() {
    let (mut primary, _replica, sentinels) =
        tokio::task::spawn_blocking(topology).await.expect("start");
    let prefix = unique_prefix("failover");
    // Installs the recorder before the breaker counts anything.
    assert_eq!(opened(&prefix), 0);
    let conn = RedisConnection::sentinel(&sentinels.addrs(), RedisSentinels::MASTER)
        .await
        .expect("the sentinels name the primary");
    let backend = RedisBackend::new(conn)
        .prefix(prefix.clone())
        .timeout(TIMEOUT)
        .breaker(Breaker::new());
    let limiter = RedisLimiter::new(backend.clone());
    let sessions = SessionLayer::builder(Arc::new(RedisSessionStore::new(backend.clone())))
        .build()
        .expect("valid");
    let app = move |sessions: &SessionLayer| {
        sessions.layer(tower::service_fn(|req: Request<Full<Bytes>>| async move {
            let (session, path) = session_and_path(&req);
            let parts: Vec<&str> = path.iter().map(String::as_str).collect();
            let res = match route(&session, &parts).await {
                Some(Ok(res)) => res,
                Some(Err(e)) => error(&e),
                None => text(StatusCode::NOT_FOUND, ""),
            };
            Ok::<_, std::convert::Infallible>(res)
        }))
    };
    // A session the replica holds before the primary goes.
    let r = call(app(&sessions), session_request("/set/name/alice", None)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = session_id(&r);
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut direct = primary
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connect");
    let replicated: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(&mut direct)
        .await
        .expect("WAIT");
    assert_eq!(replicated, 1);

    let rule = Rule::new("failover", Quota::per_minute(1_000_000));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (limiter, rule, stop, sessions, id) = (
            limiter.clone(),
            rule.clone(),
            Arc::clone(&stop),
            sessions.clone(),
            id.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let (mut decided, mut failed, mut slowest) = (0_u32, 0_u32, Duration::ZERO);
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                match limiter.check(&rule, Key::from(format!("task-{t}"))).await {
                    Ok(d) => decided += u32::from(d.allowed),
                    Err(_) => failed += 1,
                }
                let r = call(app(&sessions), session_request("/incr/n", Some(&id))).await;
                assert!(matches!(r.status, 200 | 503), "{} {}", r.status, r.body);
                slowest = slowest.max(started.elapsed());
                // Pacing, so that four tasks failing fast do not spin a core.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (decided, failed, slowest)
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let old = primary.port();
    primary.stop();
    let killed = Instant::now();
    let new = tokio::task::spawn_blocking(move || {
        sentinels
            .wait_failover(old, Duration::from_secs(30))
            .map(|p| (p, sentinels))
    })
    .await
    .expect("wait")
    .unwrap_or_else(|e| panic!("{e}"));
    let (new, _sentinels) = new;
    // Bounded: the connection finds the new primary, and the breaker closes, on their own.
    let fresh = Rule::new("fresh", Quota::per_hour(5));
    let found = loop {
        if limiter.check(&rule, Key::from("probe")).await.is_ok() {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "no decision 30 s after the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failed = 0;
    for task in tasks {
        let (decided, f, slowest) = task.await.expect("no task panicked");
        assert!(decided > 0, "a task decided nothing");
        assert!(slowest < BOUND, "a call took {slowest:?}");
        failed += f;
    }
    println!(
        "failover to :{new}: decided again {found:?} after the kill; {failed} calls failed meanwhile"
    );
    assert_eq!(
        opened(&prefix),
        1,
        "the switch is one outage for the breaker"
    );

    // The limit holds exactly on the new primary, from concurrent calls.
    let checks = (0..8).map(|_| {
        let (limiter, fresh) = (limiter.clone(), fresh.clone());
        tokio::spawn(async move { limiter.check(&fresh, Key::from("fresh")).await })
    });
    let mut admitted = 0;
    for check in checks {
        admitted += u32::from(check.await.expect("task").expect("decided").allowed);
    }
    assert_eq!(admitted, 5);
    // The session written before the kill is there, and keeps working.
    let r = call(app(&sessions), session_request("/get/name", Some(&id))).await;
    assert_eq!((r.status, r.body.as_str()), (200, "alice"));
    // No request paid NOSCRIPT on the new primary: the scripts were loaded before it took calls.
    let stats = info(new, "commandstats").await;
    assert!(inspect::command_calls(&stats, "evalsha") > 0, "{stats}");
    assert_eq!(inspect::command_calls(&stats, "eval"), 0, "{stats}");
    assert!(inspect::command_calls(&stats, "script|load") > 0, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_that_are_down_or_lie_are_skipped_and_none_is_a_clear_error() {
    let (primary, replica, mut sentinels) =
        tokio::task::spawn_blocking(|| servers(2, Duration::from_secs(60)))
            .await
            .expect("start");
    // A "sentinel" that names the replica: a plain server that answers SENTINEL with the
    // replica's address is hard to fake, so a real sentinel watching the replica stands in.
    let liar = tokio::task::spawn_blocking({
        let port = replica.port();
        move || {
            RedisSentinels::start(port, 1, Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("{e}"))
        }
    })
    .await
    .expect("start");
    sentinels.stop(0);
    let mut addrs = vec!["127.0.0.1:1".to_owned()];
    addrs.extend(liar.addrs());
    addrs.extend(sentinels.addrs());
    let conn = RedisConnection::sentinel(&addrs, RedisSentinels::MASTER)
        .await
        .expect("the last sentinel names the primary");
    let limiter = RedisLimiter::new(RedisBackend::new(conn).prefix(unique_prefix("skip")));
    let decision = limiter
        .check(&Rule::new("s", Quota::per_hour(1)), Key::from("k"))
        .await;
    assert!(decision.expect("decided on the primary").allowed);
    assert!(
        info(primary.port(), "commandstats")
            .await
            .contains("cmdstat_evalsha")
    );

    // None that names a primary: an error that says why for each, quickly.
    let started = Instant::now();
    let e = RedisConnection::sentinel(&addrs[..3], RedisSentinels::MASTER)
        .await
        .expect_err("no primary");
    let text = e.to_string();
    assert!(
        text.contains("127.0.0.1:1") && text.contains("replica"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let e = RedisConnection::sentinel(&sentinels.addrs(), "othermaster")
        .await
        .expect_err("unknown name");
    assert!(e.to_string().contains("does not monitor"), "{e}");
    for (sentinels, master) in [
        (vec![], "m"),
        (vec!["nowhere".to_owned()], "m"),
        (sentinels.addrs(), ""),
    ] {
        let e = RedisConnection::sentinel(&sentinels, master)
            .await
            .expect_err("bad config");
        assert_eq!(e.kind(), redis::ErrorKind::InvalidClientConfig, "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_is_left_for_the_new_one_without_noscript() {
    forced_failover(false).await;
}

/// The primary frozen (`SIGSTOP`: calls time out, nothing breaks the connection) and replaced:
/// only the once-a-second check finds the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_primary_the_sentinels_replaced_is_left_within_a_check() {
    forced_failover(true).await;
}

/// A failover the one sentinel is told to make (`SENTINEL FAILOVER`), of a primary that stays up
/// and is demoted, or that is `frozen`: the connection moves to the new primary, every call
/// within the bound, the limit exact there and no `NOSCRIPT`.
async fn forced_failover(frozen: bool) {
    let (old, _replica, sentinels) = tokio::task::spawn_blocking(|| {
        let (primary, replica, sentinels) = servers(1, Duration::from_secs(60));
        sentinels
            .wait_watching(1, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{e}"));
        (primary, replica, sentinels)
    })
    .await
    .expect("start");
    let conn = RedisConnection::sentinel(&sentinels.addrs(), RedisSentinels::MASTER)
        .await
        .expect("the sentinel names the primary");
    let limiter = RedisLimiter::new(
        RedisBackend::new(conn)
            .prefix(unique_prefix("demoted"))
            .timeout(TIMEOUT),
    );
    let rule = Rule::new("demoted", Quota::per_hour(1_000_000));
    assert!(admits(&limiter, &rule, "k").await);
    if frozen {
        old.freeze().expect("SIGSTOP");
    }
    let sentinel = sentinels.ports()[0];
    let client = redis::Client::open(format!("redis://127.0.0.1:{sentinel}/")).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    // Until the sentinel has the replica's own INFO it finds no replica good enough: bounded.
    let asked = Instant::now();
    while let Err(e) = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(RedisSentinels::MASTER)
        .query_async::<()>(&mut conn)
        .await
    {
        assert!(
            asked.elapsed() < Duration::from_secs(30),
            "SENTINEL FAILOVER: {e}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let old_port = old.port();
    let (new, sentinels) = tokio::task::spawn_blocking(move || {
        let new = sentinels.wait_failover(old_port, Duration::from_secs(30));
        (new.unwrap_or_else(|e| panic!("{e}")), sentinels)
    })
    .await
    .expect("wait");
    if !frozen {
        // Demoted as the sentinel would (it does so only at its next look at the old primary,
        // up to 10 s later): writes there now answer READONLY.
        let mut demote = old.connect().await;
        let () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(new)
            .query_async(&mut demote)
            .await
            .expect("REPLICAOF");
    }
    let started = Instant::now();
    loop {
        let call = Instant::now();
        let outcome = limiter.check(&rule, Key::from("k")).await;
        assert!(call.elapsed() < BOUND, "a call took {:?}", call.elapsed());
        if outcome.is_ok() && info(new, "commandstats").await.contains("cmdstat_evalsha") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still not on the new primary"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fresh = Rule::new("fresh", Quota::per_hour(3));
    let mut admitted = 0;
    for _ in 0..5 {
        admitted += u32::from(admits(&limiter, &fresh, "f").await);
    }
    assert_eq!(admitted, 3);
    let stats = info(new, "commandstats").await;
    assert_eq!(inspect::command_calls(&stats, "eval"), 0, "{stats}");
    if frozen {
        old.thaw().expect("SIGCONT");
    } else {
        assert!(info(old_port, "replication").await.contains("role:slave"));
    }
    drop(sentinels);
}
