//! The fixed window without Lua: on Redis >= 7 and Redis' own clock, a request
//! of one fixed-window rule is one `MULTI` of `INCRBY`, `PEXPIRE … NX` and `PTTL`, on a plain
//! counter (`fwc` keys). It decides as the script (`fw` keys) does, except that a denial counts
//! its units (as `INCR` + `EXPIRE` does); requests that need a script run one on the same counter.
//! Redis only: the memory backend has no such path. Every limiter here reads Redis `TIME` as it
//! is (no time shift: the harness's shifted limiters keep the scripts), so windows last an hour
//! and a window closes by deleting its key, never by waiting.

use std::time::{Duration, Instant};

use redis_guard::rate_limit::{
    Algorithm, Check, Decision, Key, Quota, RateLimitLayer, RedisLimiter, Rule,
};
use redis_guard_testkit::http as raw;
use redis_guard_tests::{Harness, Inspect, Kind, backend_suite, by_client, serve};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tower::Layer;

const PERIOD: Duration = Duration::from_secs(3600);
/// Slack for Redis' whole milliseconds (the script rounds up, `PTTL` down).
const MS: Duration = Duration::from_millis(2);

fn rule(name: &str, limit: u32) -> Rule {
    Rule::new(name, Quota::per_hour(limit)).with_algorithm(Algorithm::FixedWindow)
}

/// The Lua-free limiter: Redis `TIME` as it is, no deny cache (every answer is Redis').
async fn plain(h: &Harness) -> RedisLimiter {
    RedisLimiter::new(h.redis_time_backend().await).deny_cache(0)
}

/// The script limiter on the same Redis: the harness's backend carries a time shift (left at 0,
/// so its scripts read the same `TIME`), which keeps fixed windows on the scripts.
async fn scripted(h: &Harness) -> RedisLimiter {
    RedisLimiter::new(h.backend().await).deny_cache(0)
}

async fn decide(l: &RedisLimiter, rule: &Rule, cost: u32) -> Decision {
    let check = Check::new(rule.clone(), Key::from("k")).with_cost(cost);
    l.check_all(vec![check]).await.expect("decision")
}

async fn del(h: &Harness, key: &str) {
    let mut conn: Inspect = h.inspect().await;
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("DEL");
}

async fn get(h: &Harness, key: &str) -> Option<String> {
    let mut conn = h.inspect().await;
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("GET")
}

/// One path through the table: its limiter, its state key, and when its window opened (the
/// instants around the call that opened it).
struct Path {
    limiter: RedisLimiter,
    key: String,
    opened: Option<(Instant, Instant)>,
}

impl Path {
    async fn new(limiter: RedisLimiter, rule: &Rule) -> Self {
        // The first call tells the limiter the server's version, and with it the key's shape.
        let probe = Check::new(rule.clone(), Key::from("k")).with_cost(0);
        limiter.check_all(vec![probe]).await.expect("probe");
        let key = limiter.key_name(&Check::new(rule.clone(), Key::from("k")));
        Self {
            limiter,
            key,
            opened: None,
        }
    }

    /// Decides `cost` and checks the reset against the window's own age: exact up to Redis'
    /// millisecond rounding, with the instants bounding when Redis ran each call.
    async fn step(&mut self, rule: &Rule, cost: u32) -> Decision {
        let start = Instant::now();
        let d = decide(&self.limiter, rule, cost).await;
        let end = Instant::now();
        let (opened_start, opened_end) = *self.opened.get_or_insert((start, end));
        let most = PERIOD - start.saturating_duration_since(opened_end) + MS;
        let least = PERIOD - (end - opened_start) - MS;
        assert!(
            least <= d.reset_after && d.reset_after <= most,
            "{}: reset {:?} not in [{least:?}, {most:?}]",
            self.key,
            d.reset_after
        );
        let retry = if d.allowed {
            Duration::ZERO
        } else {
            d.reset_after
        };
        assert_eq!(d.retry_after, retry, "{}", self.key);
        d
    }
}

enum Step {
    /// A request of this cost.
    Cost(u32),
    /// The window closes (its key is deleted).
    Close,
}

/// The table test: the same steps through the script (`fw`) and the plain path (`fwc`) give the
/// same decisions and remaining quota, and resets within Redis' millisecond. The denials in it
/// come once the window is full, where counting them changes nothing.
async fn the_plain_path_decides_as_the_script_does(h: Harness) {
    use Step::{Close, Cost};
    let rule = rule("table", 5);
    let mut lua = Path::new(scripted(&h).await, &rule).await;
    let mut plain = Path::new(plain(&h).await, &rule).await;
    assert!(lua.key.contains(":fw:{"), "{}", lua.key);
    assert!(plain.key.contains(":fwc:{"), "{}", plain.key);
    #[rustfmt::skip]
    let table = [
        (Cost(1), true, 4), (Cost(1), true, 3), (Cost(3), true, 0), (Cost(1), false, 0),
        (Cost(5), false, 0), (Cost(1), false, 0),
        (Close, true, 0),
        (Cost(5), true, 0), (Cost(1), false, 0),
        (Close, true, 0),
        (Cost(2), true, 3), (Cost(2), true, 1), (Cost(1), true, 0), (Cost(1), false, 0),
        (Cost(2), false, 0),
    ];
    for (i, (step, allowed, remaining)) in table.into_iter().enumerate() {
        let cost = match step {
            Close => {
                for path in [&mut lua, &mut plain] {
                    del(&h, &path.key).await;
                    path.opened = None;
                }
                continue;
            }
            Cost(cost) => cost,
        };
        let a = lua.step(&rule, cost).await;
        let b = plain.step(&rule, cost).await;
        let got = |d: &Decision| (d.allowed, d.remaining);
        assert_eq!(got(&a), (allowed, remaining), "step {i}: script");
        assert_eq!(got(&b), got(&a), "step {i}: plain differs from the script");
    }
    assert!(h.pttl(&plain.key).await > 0, "the counter expires");
}

/// What the plain path's denial consumes: its units, until the window closes (as
/// `INCR` + `EXPIRE` does). The script path's denial consumes nothing; they part where a denied request was
/// bigger than what was left.
async fn a_denial_on_the_plain_path_counts_its_units(h: Harness) {
    let rule = rule("denials", 10);
    let (lua, plain) = (scripted(&h).await, plain(&h).await);
    for l in [&lua, &plain] {
        assert_eq!(decide(l, &rule, 8).await.remaining, 2);
    }
    let (a, b) = (decide(&lua, &rule, 5).await, decide(&plain, &rule, 5).await);
    assert!(!a.allowed && !b.allowed);
    assert_eq!(
        (a.remaining, b.remaining),
        (2, 0),
        "the plain denial took 5"
    );
    assert!(decide(&lua, &rule, 1).await.allowed);
    let d = decide(&plain, &rule, 1).await;
    assert!(
        !d.allowed,
        "13 of 10 counted: denied until the window closes"
    );
    let key = plain.key_name(&Check::new(rule.clone(), Key::from("k")));
    assert_eq!(get(&h, &key).await.as_deref(), Some("14"));
    // The window's end never moves: the denials did not push it.
    let ttl = Duration::from_millis(u64::try_from(h.pttl(&key).await).expect("a TTL"));
    assert!(
        ttl <= d.reset_after + MS && d.reset_after <= PERIOD,
        "{ttl:?} {d:?}"
    );
}

/// Two fixed-window rules in one request stay all or nothing on the plain counters: the
/// request goes to the script, whose denial counts nothing in the other rule.
async fn several_rules_on_plain_counters_stay_all_or_nothing(h: Harness) {
    let (tight, loose) = (rule("tight", 2), rule("loose", 5));
    let l = plain(&h).await;
    let both = || {
        [&tight, &loose]
            .map(|r| Check::new(r.clone(), Key::from("k")))
            .to_vec()
    };
    for allowed in [true, true, false, false] {
        assert_eq!(
            l.check_all(both()).await.expect("decision").allowed,
            allowed
        );
    }
    let key = l.key_name(&Check::new(loose.clone(), Key::from("k")));
    assert!(key.contains(":fwc:{"), "{key}");
    assert_eq!(
        get(&h, &key).await.as_deref(),
        Some("2"),
        "denials uncounted"
    );
    // The single-rule path reads the same counter.
    let d = decide(&l, &loose, 1).await;
    assert_eq!((d.allowed, d.remaining), (true, 2));
}

/// Inspect, reset and a charge after the response work on the plain counter.
async fn operations_work_on_the_plain_counter(h: Harness) {
    let rule = rule("ops", 10);
    let l = plain(&h).await;
    assert_eq!(decide(&l, &rule, 3).await.remaining, 7);
    let seen = l.inspect(&rule, Key::from("k")).await.expect("inspect");
    assert_eq!((seen.state.allowed, seen.state.remaining), (true, 7));
    l.charge(&rule, Key::from("k"), 4).await.expect("charge");
    assert_eq!(decide(&l, &rule, 1).await.remaining, 2);
    l.reset(&rule, Key::from("k")).await.expect("reset");
    let key = l.key_name(&Check::new(rule.clone(), Key::from("k")));
    assert_eq!(get(&h, &key).await, None, "reset deletes the counter");
    assert_eq!(decide(&l, &rule, 1).await.remaining, 9);
    let seen = l.inspect(&rule, Key::from("k")).await.expect("inspect");
    assert_eq!(seen.state.remaining, 9, "inspect records nothing");
}

/// Reads every Redis server's `MONITOR` up to a marker sent to that server.
struct Monitors(Vec<(String, BufReader<tokio::net::TcpStream>)>);

impl Monitors {
    async fn start(h: &Harness) -> Self {
        let mut monitors = Vec::new();
        for url in h.server_urls() {
            let addr = url.trim_start_matches("redis://").trim_end_matches('/');
            let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            stream.write_all(b"MONITOR\r\n").await.expect("MONITOR");
            let mut reader = BufReader::new(stream);
            let mut ok = String::new();
            reader.read_line(&mut ok).await.expect("+OK");
            assert_eq!(ok.trim(), "+OK");
            monitors.push((url, reader));
        }
        Self(monitors)
    }

    /// The commands every server ran since the start, lower-cased.
    async fn commands(&mut self) -> String {
        let mut seen = String::new();
        for (url, reader) in &mut self.0 {
            let marker = "fixed-window-census-marker";
            let client = redis::Client::open(url.as_str()).expect("url");
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .expect("connect");
            let _: String = redis::cmd("ECHO")
                .arg(marker)
                .query_async(&mut conn)
                .await
                .expect("ECHO");
            let read = async {
                loop {
                    let mut line = String::new();
                    let n = reader.read_line(&mut line).await.expect("monitor line");
                    assert!(n > 0, "MONITOR closed");
                    if line.contains(marker) {
                        return;
                    }
                    seen.push_str(&line.to_ascii_lowercase());
                }
            };
            tokio::time::timeout(Duration::from_secs(10), read)
                .await
                .expect("the marker");
        }
        seen
    }
}

/// The `MONITOR` census: requests through a real HTTP app send no script, only the
/// transaction (on every node of a cluster, each watched).
async fn the_plain_path_sends_no_script(h: Harness) {
    let mut monitors = Monitors::start(&h).await;
    let layer = RateLimitLayer::builder(plain(&h).await)
        .rule_with(rule("census", 2), by_client())
        .build()
        .expect("valid");
    let ok = tower::service_fn(|_: http::Request<hyper::body::Incoming>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(
            http_body_util::Empty::<bytes::Bytes>::new(),
        ))
    });
    let app = serve(layer.layer(ok)).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let request = b"GET / HTTP/1.1\r\nhost: test\r\nx-client: c\r\nconnection: close\r\n\r\n";
        statuses.push(raw::send(app, request).await.expect("response").status);
    }
    assert_eq!(statuses, [200, 200, 429]);
    let seen = monitors.commands().await;
    for script in ["\"eval", "\"fcall", "\"script"] {
        assert!(!seen.contains(script), "{script} in:\n{seen}");
    }
    assert_eq!(seen.matches("\"multi\"").count(), 3, "{seen}");
    assert_eq!(seen.matches("\"incrby\"").count(), 3, "{seen}");
    assert_eq!(seen.matches("\"pexpire\"").count(), 3, "{seen}");
    assert!(seen.contains(":fwc:{") && seen.contains("\"nx\""), "{seen}");
}

/// The transactions of concurrent requests go to Redis together, as the
/// scripts' calls do. 200 requests on one hot key queued behind a paused Redis take a handful of
/// `EXEC`s (the two let out at once, then batches of at most 64), not 200, and each is decided
/// exactly as alone: one `INCRBY` of the key per transaction, yet a limit of 50 admits 50,
/// whose `remaining` count down from 49 to 0 once each, every denial is counted (the counter reads 200) and every reset lies in the window.
/// Many clients' keys go together too (on a Cluster, those of one hash slot): 100 clients with
/// a limit of 1, three requests each, get one admission each, and a client whose key Redis
/// cannot count fails alone, not the requests it went with.
async fn concurrent_requests_share_one_exec(h: Harness) {
    let backend = h
        .redis_time_backend()
        .await
        .timeout(Duration::from_secs(10));
    let l = RedisLimiter::new(backend).deny_cache(0);
    let (hot, each) = (rule("hot", 50), rule("each", 1));
    // The first call learns the server's version.
    decide(&l, &each, 0).await;
    let spawn = |rule: &Rule, key: String| {
        let (l, check) = (l.clone(), Check::new(rule.clone(), Key::from(key)));
        tokio::spawn(async move { l.check_all(vec![check]).await })
    };
    h.admin(&["CONFIG", "RESETSTAT"]).await;
    h.admin(&["CLIENT", "PAUSE", "200", "ALL"]).await;
    let start = Instant::now();
    let tasks: Vec<_> = (0..200).map(|_| spawn(&hot, "hot".into())).collect();
    let mut remaining = Vec::new();
    for task in tasks {
        let d = task.await.expect("task").expect("decision");
        assert!(d.reset_after <= PERIOD && d.reset_after + start.elapsed() + MS >= PERIOD);
        assert_eq!(d.retry_after.is_zero(), d.allowed, "{d:?}");
        if d.allowed {
            remaining.push(d.remaining);
        } else {
            assert_eq!(d.remaining, 0);
        }
    }
    remaining.sort_unstable();
    assert_eq!(
        remaining,
        (0..50).collect::<Vec<u32>>(),
        "50 admitted, each its own count"
    );
    let execs = h.calls("exec").await;
    let bound = 2 + 198_u64.div_ceil(64);
    assert!(
        (1..=bound).contains(&execs),
        "{execs} EXECs for 200 requests on one key"
    );
    let incrs = h.calls("incrby").await;
    assert_eq!(incrs, execs, "one INCRBY of the key per transaction");
    let key = l.key_name(&Check::new(hot.clone(), Key::from("hot")));
    assert_eq!(
        get(&h, &key).await.as_deref(),
        Some("200"),
        "every denial counted"
    );

    let poisoned = l.key_name(&Check::new(each.clone(), Key::from("poisoned")));
    let mut conn = h.inspect().await;
    let () = redis::AsyncCommands::hset(&mut conn, &poisoned, "f", "v")
        .await
        .expect("HSET");
    h.admin(&["CONFIG", "RESETSTAT"]).await;
    h.admin(&["CLIENT", "PAUSE", "200", "ALL"]).await;
    let mut tasks: Vec<_> = (0..300)
        .map(|i| spawn(&each, format!("client-{}", i % 100)))
        .collect();
    tasks.push(spawn(&each, "poisoned".into()));
    let mut admitted = [0_u32; 100];
    for (i, task) in tasks.into_iter().enumerate() {
        let decision = task.await.expect("task");
        match admitted.get_mut(i % 100) {
            Some(n) if i < 300 => *n += u32::from(decision.expect("decision").allowed),
            _ => assert!(
                decision.is_err(),
                "a key of the wrong type got {decision:?}"
            ),
        }
    }
    assert_eq!(admitted, [1; 100], "one admitted per client");
    if h.kind() != Kind::Cluster {
        let execs = h.calls("exec").await;
        let bound = 2 + 299_u64.div_ceil(64);
        assert!(
            (1..=bound).contains(&execs),
            "{execs} EXECs for 301 requests of 101 clients"
        );
    }
}

backend_suite!(
    redis_only: the_plain_path_decides_as_the_script_does,
    a_denial_on_the_plain_path_counts_its_units,
    several_rules_on_plain_counters_stay_all_or_nothing,
    operations_work_on_the_plain_counter,
    the_plain_path_sends_no_script,
    concurrent_requests_share_one_exec,
);
