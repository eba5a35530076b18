//! Session reads without a script: a load whose idle refresh is not due is one `HGETALL`
//! (with `TIME` in the same round trip at most once a second, to learn Redis's clock),
//! validity taken from Redis's own key expiry; only a due load runs the load script, which
//! slides the TTL. Counted with `MONITOR` (on every node of
//! the cluster), through a real app over HTTP, on Redis, a `bb8` pool and the cluster.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, StatusCode};
use redis_guard::backend::RedisBackend;
use redis_guard::session::{RedisSessionStore, SessionId, SessionLayer, SessionStore};
use redis_guard_tests::session_routes::{error, route, session_and_path, text};
use redis_guard_tests::{Harness, Monitor, TEST_TIMEOUT, backend_suite, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::Layer;

const COOKIE: &str = "__Host-id";
const IDLE: Duration = Duration::from_secs(30 * 60);

/// An app on `store` over real HTTP: the shared session routes, 30 min idle, 24 h lifetime.
async fn app(store: Arc<dyn SessionStore>) -> SocketAddr {
    let layer = SessionLayer::builder(store)
        .idle_timeout(IDLE)
        .max_lifetime(Duration::from_secs(24 * 3600))
        .build()
        .expect("valid");
    serve(layer.layer(tower::service_fn(|req: Request<_>| async move {
        let (session, path) = session_and_path(&req);
        let parts: Vec<&str> = path.iter().map(String::as_str).collect();
        let res = match parts.as_slice() {
            ["noop"] => Ok(text(StatusCode::OK, "noop")),
            _ => route(&session, &parts)
                .await
                .unwrap_or_else(|| Ok(text(StatusCode::NOT_FOUND, "no route"))),
        };
        Ok::<_, Infallible>(res.unwrap_or_else(|e| error(&e)))
    })))
    .await
}

/// A store of the harness as production runs it: Redis `TIME` and Redis's own key expiry, no
/// test clock.
async fn production_store(h: &Harness) -> Arc<dyn SessionStore> {
    let backend = RedisBackend::new(h.connection().await)
        .prefix(h.prefix().to_owned())
        .timeout(TEST_TIMEOUT);
    Arc::new(RedisSessionStore::new(backend))
}

/// `method path` with the session cookie `id`: the status and the id the response sets.
async fn send(addr: SocketAddr, method: &str, path: &str, id: Option<&str>) -> (u16, String) {
    let text = exchange(addr, method, path, id).await;
    let set = text
        .lines()
        .find_map(|l| {
            let value = l.strip_prefix("set-cookie: ")?.strip_prefix(COOKIE)?;
            Some(value.strip_prefix('=')?.split(';').next()?.to_owned())
        })
        .unwrap_or_default();
    (status(&text), set)
}

/// `GET path` with the session cookie `id`: the status and the body.
async fn get(addr: SocketAddr, path: &str, id: &str) -> (u16, String) {
    let text = exchange(addr, "GET", path, Some(id)).await;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status(&text), body.to_owned())
}

/// The status of the response `text`.
fn status(text: &str) -> u16 {
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line")
}

/// `method path` with the session cookie `id` over a connection of its own: the whole
/// response.
async fn exchange(addr: SocketAddr, method: &str, path: &str, id: Option<&str>) -> String {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n");
    if let Some(id) = id {
        head.push_str(&format!("cookie: {COOKIE}={id}\r\n"));
    }
    head.push_str("content-length: 0\r\n\r\n");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(head.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.expect("read");
    String::from_utf8_lossy(&raw).into_owned()
}

fn session_key(h: &Harness, id: &str) -> String {
    let storage = SessionId::parse(id).expect("well-formed").storage_key();
    format!("{}s:{{{storage}}}", h.prefix())
}

/// Whether `round_trip` is a plain read: `HGETALL`, alone or with `TIME`.
fn is_read(round_trip: &str) -> bool {
    round_trip.starts_with("\"HGETALL\"") && !round_trip.contains("| \"HGETALL\"")
}

fn is_script(command: &str) -> bool {
    command.to_ascii_lowercase().starts_with("\"eval")
}

/// Loads without a due refresh (reads, and an untouched session's refresh after the response)
/// send no script and write nothing; a due load runs the load script, which marks the use and
/// slides the TTL back to the idle timeout.
async fn loads_without_a_due_refresh_send_no_script(h: Harness) {
    let addr = app(production_store(&h).await).await;
    let (status, id) = send(addr, "POST", "/set/name/alice", None).await;
    assert_eq!(status, 200);
    assert!(!id.is_empty(), "a new session sets its cookie");
    let key = session_key(&h, &id);
    let mut monitor = Monitor::start(&h).await;
    monitor.commands(&h).await;
    let requests = ["/get/name", "/noop", "/get/name", "/whoami", "/get/other"];
    for path in requests {
        let (status, _) = send(addr, "GET", path, Some(&id)).await;
        assert!(
            status == 200 || status == 404 || status == 401,
            "{path}: {status}"
        );
    }
    let (sent, inside) = monitor.split(&h).await;
    assert!(!sent.iter().any(|c| is_script(c)), "no script: {sent:?}");
    let reads: Vec<&String> = sent.iter().filter(|c| is_read(c)).collect();
    assert_eq!(reads.len(), requests.len(), "one plain read each: {sent:?}");
    assert!(reads.iter().all(|c| c.contains(&key)), "{reads:?}");
    assert!(inside.is_empty(), "nothing ran inside Redis: {inside:?}");

    // A minute later (past 1 % of the idle timeout) the refresh is due. The TTL, cut short
    // here, shows the slide.
    let seam = app(h.session_store().await).await;
    let mut conn = h.inspect().await;
    let () = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(5000)
        .query_async(&mut conn)
        .await
        .expect("PEXPIRE");
    h.wait(Duration::from_secs(60)).await;
    monitor.commands(&h).await;
    assert_eq!(send(seam, "GET", "/get/name", Some(&id)).await.0, 200);
    let (sent, inside) = monitor.split(&h).await;
    // (An `EVAL` follows when this Redis has not run the load script yet: `NOSCRIPT`.)
    let scripts = sent.iter().filter(|c| c.starts_with("\"EVALSHA\"")).count();
    assert_eq!(scripts, 1, "the due load runs the load script: {sent:?}");
    assert!(
        inside
            .iter()
            .any(|c| c.starts_with("\"HSET\"") && c.contains("\"$m\"")),
        "{inside:?}"
    );
    let pttl = h.pttl(&key).await;
    assert!(pttl > 29 * 60 * 1000, "the TTL slid back up: {pttl}");
    // Just refreshed: the next load is a plain read again, on either store.
    monitor.commands(&h).await;
    assert_eq!(send(seam, "GET", "/get/name", Some(&id)).await.0, 200);
    assert_eq!(send(addr, "GET", "/get/name", Some(&id)).await.0, 200);
    let sent = monitor.commands(&h).await;
    assert!(!sent.iter().any(|c| is_script(c)), "{sent:?}");
}

/// A read sends `HGETALL` alone: Redis's clock is learnt from a `TIME` sent in the same round
/// trip at most once a second, not on every read.
async fn reads_ask_redis_time_at_most_once_a_second(h: Harness) {
    const READS: u64 = 12;
    let addr = app(production_store(&h).await).await;
    let (_, id) = send(addr, "POST", "/set/name/alice", None).await;
    let mut monitor = Monitor::start(&h).await;
    monitor.commands(&h).await;
    let started = std::time::Instant::now();
    for _ in 0..READS {
        assert_eq!(send(addr, "GET", "/get/name", Some(&id)).await.0, 200);
    }
    let took = started.elapsed().as_secs();
    let mut sent = monitor.commands(&h).await;
    // A pool checks each connection it hands out.
    sent.retain(|c| c != "\"PING\"");
    assert!(!sent.iter().any(|c| is_script(c)), "no script: {sent:?}");
    assert_eq!(
        sent.len(),
        usize::try_from(READS).expect("small"),
        "{sent:?}"
    );
    assert!(sent.iter().all(|c| is_read(c)), "{sent:?}");
    assert!(!sent.iter().any(|c| c.contains("\"PTTL\"")), "{sent:?}");
    let with_time = sent.iter().filter(|c| c.contains("| \"TIME\"")).count();
    let with_time = u64::try_from(with_time).expect("small");
    assert!(
        with_time >= 1 && with_time <= 1 + took,
        "{with_time} reads with TIME in {took} s: {sent:?}"
    );
}

/// A session whose key Redis expired is never served, though its hash said it was live: no
/// value, no user, and the id is not adopted.
async fn a_session_expired_by_its_ttl_is_never_served(h: Harness) {
    let addr = app(production_store(&h).await).await;
    let (_, id) = send(addr, "POST", "/set/name/alice", None).await;
    let key = session_key(&h, &id);
    let mut conn = h.inspect().await;
    let (s, us): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .expect("TIME");
    let at = s * 1000 + us / 1000 + 3;
    let () = redis::cmd("PEXPIREAT")
        .arg(&key)
        .arg(at)
        .query_async(&mut conn)
        .await
        .expect("PEXPIREAT");
    // Until Redis's own clock has passed the expiry (Redis time, not ours: no sleep).
    loop {
        let (s, us): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .expect("TIME");
        if s * 1000 + us / 1000 > at {
            break;
        }
        tokio::task::yield_now().await;
    }
    let (status, set) = send(addr, "GET", "/get/name", Some(&id)).await;
    assert_eq!((status, set.as_str()), (404, ""), "no session, no cookie");
    let (status, set) = send(addr, "POST", "/set/x/1", Some(&id)).await;
    assert_eq!(status, 200);
    assert!(
        !set.is_empty() && set != id,
        "a fresh id, never the expired one"
    );
}

/// The names of the commands a script ran, lowercase, in order.
fn names(inside: &[String]) -> Vec<String> {
    inside
        .iter()
        .map(|c| {
            c.split(' ')
                .next()
                .unwrap_or_default()
                .trim_matches('"')
                .to_ascii_lowercase()
        })
        .collect()
}

/// A write within the last-seen interval of the session's last use recorded writes its fields
/// alone, as a read in that interval writes nothing: no new last-seen time, no `PEXPIRE`. A
/// write once the interval has passed (here: while the handler ran) records the use with its
/// fields and slides the TTL.
async fn a_write_records_the_use_only_when_its_refresh_is_due(h: Harness) {
    let clock = h.clock();
    let layer = SessionLayer::builder(h.session_store().await)
        .idle_timeout(IDLE)
        .max_lifetime(Duration::from_secs(24 * 3600))
        .build()
        .expect("valid");
    let addr = serve(layer.layer(tower::service_fn(move |req: Request<_>| {
        let clock = clock.clone();
        async move {
            let (session, path) = session_and_path(&req);
            let parts: Vec<&str> = path.iter().map(String::as_str).collect();
            let res = match parts.as_slice() {
                // Loaded, then a minute passes (past 1 % of the idle timeout) before the write.
                ["slow", key, value] => {
                    async {
                        session.get::<String>("name").await?;
                        clock.advance(Duration::from_secs(60));
                        session.insert(key, value).await?;
                        Ok(text(StatusCode::OK, "slow"))
                    }
                    .await
                }
                _ => route(&session, &parts)
                    .await
                    .unwrap_or_else(|| Ok(text(StatusCode::NOT_FOUND, "no route"))),
            };
            Ok::<_, Infallible>(res.unwrap_or_else(|e| error(&e)))
        }
    })))
    .await;
    let (status, id) = send(addr, "POST", "/set/name/alice", None).await;
    assert_eq!(status, 200);
    let key = session_key(&h, &id);
    let mut conn = h.inspect().await;
    let created = field(&mut conn, &key, "$m").await;
    // Warm up: the save script loaded.
    assert_eq!(send(addr, "POST", "/set/x/0", Some(&id)).await.0, 200);
    let mut monitor = Monitor::start(&h).await;
    monitor.commands(&h).await;
    assert_eq!(send(addr, "POST", "/set/x/1", Some(&id)).await.0, 200);
    let (_, inside) = monitor.split(&h).await;
    assert_eq!(names(&inside), ["time", "hmget", "hset"], "{inside:?}");
    assert!(
        !inside
            .iter()
            .any(|c| c.starts_with("\"HSET\"") && c.contains("\"$m\"")),
        "{inside:?}"
    );
    assert_eq!(
        field(&mut conn, &key, "$m").await,
        created,
        "the last use recorded stands"
    );
    assert_eq!(field(&mut conn, &key, "x").await, "\"1\"");

    monitor.commands(&h).await;
    assert_eq!(send(addr, "POST", "/slow/y/2", Some(&id)).await.0, 200);
    let (_, inside) = monitor.split(&h).await;
    assert!(names(&inside).contains(&"pexpire".to_owned()), "{inside:?}");
    assert!(
        inside
            .iter()
            .any(|c| c.starts_with("\"HSET\"") && c.contains("\"$m\"") && c.contains("\"y\"")),
        "the use recorded with the field, in one HSET: {inside:?}"
    );
    let seen = |m: &str| m.split(':').nth(2).and_then(|s| s.parse::<u64>().ok());
    let (before, after) = (seen(&created), seen(&field(&mut conn, &key, "$m").await));
    assert!(
        after >= before.map(|us| us + 60_000_000),
        "a new last use, a minute later: {before:?} then {after:?}"
    );
    let pttl = h.pttl(&key).await;
    assert!(pttl > 29 * 60 * 1000, "the TTL slid: {pttl}");
    assert_eq!(field(&mut conn, &key, "y").await, "\"2\"");
    assert_eq!(field(&mut conn, &key, "x").await, "\"1\"");
}

/// Reads that arrive while two are out wait for room, then go to Redis together: 72 reads of
/// 9 sessions sent while Redis answers no client leave at most two reads per queue (per hash
/// slot, on a cluster) out at Redis; the others are sent only after a reply has come back, so
/// after a command another client sent during the pause. Each read still gets its own
/// session, and one whose key holds another type fails alone.
async fn reads_that_queue_share_a_round_trip(h: Harness) {
    const SESSIONS: usize = 8;
    const EACH: usize = 8;
    let writer = app(production_store(&h).await).await;
    let mut ids = Vec::new();
    for i in 0..=SESSIONS {
        let (status, id) = send(writer, "POST", &format!("/set/name/n{i}"), None).await;
        assert_eq!(status, 200);
        ids.push(id);
    }
    // The last session's key holds a string: its reads fail, and only they.
    let poisoned = session_key(&h, &ids[SESSIONS]);
    let mut conn = h.inspect().await;
    let () = redis::cmd("SET")
        .arg(&poisoned)
        .arg("not a session")
        .query_async(&mut conn)
        .await
        .expect("SET");
    // A fresh store learns Redis's clock on its first read: the reads of the next second are
    // each one `HGETALL`, which the reads' coalescer carries.
    let addr = app(production_store(&h).await).await;
    assert_eq!(
        get(addr, "/get/name", &ids[0]).await,
        (200, "n0".to_owned())
    );
    let cluster = h.kind() == redis_guard_tests::Kind::Cluster;
    // Long enough for the reads to arrive on a loaded machine, and shorter than the backend's
    // timeout (and, on a cluster, than a node's reply timeout).
    let (pause, settle) = if cluster {
        ("600", Duration::from_millis(300))
    } else {
        ("3000", Duration::from_secs(1))
    };
    let mut monitor = Monitor::start(&h).await;
    monitor.commands(&h).await;
    h.admin(&["CLIENT", "PAUSE", pause, "ALL"]).await;
    let reads: Vec<_> = (0..(SESSIONS + 1) * EACH)
        .map(|i| {
            let id = ids[i % (SESSIONS + 1)].clone();
            tokio::spawn(async move { get(addr, "/get/name", &id).await })
        })
        .collect();
    // While Redis still pauses, once the reads have had time to go out: a command of another
    // client, which Redis runs as the pause ends, after what it holds, before anything sent
    // in answer to a reply.
    tokio::time::sleep(settle).await;
    let marks: Vec<_> = monitor
        .ports()
        .into_iter()
        .map(|port| tokio::spawn(mark(port)))
        .collect();
    for (i, read) in reads.into_iter().enumerate() {
        let (status, body) = read.await.expect("task");
        let session = i % (SESSIONS + 1);
        if session == SESSIONS {
            assert_eq!(status, 503, "a key of another type: {body}");
        } else {
            assert_eq!(
                (status, body.as_str()),
                (200, format!("n{session}").as_str())
            );
        }
    }
    for mark in marks {
        mark.await.expect("task");
    }
    let (mut before, mut after) = (0, 0);
    for (sent, _) in monitor.by_node(&h).await {
        let at = sent
            .iter()
            .position(|c| c.contains(MARK))
            .unwrap_or_else(|| panic!("no mark: {sent:?}"));
        let alone = |c: &&String| c.starts_with("\"HGETALL\"") && !c.contains('|');
        before += sent[..at].iter().filter(alone).count();
        after += sent[at..].iter().filter(alone).count();
    }
    // At most two reads out per queue: one queue on one server, one per session's slot on a
    // cluster. (Through a pool every read reaches Redis after the mark, coalesced or not: what
    // the pool does with a connection before it hands it out waits out the pause too.)
    let queues = if cluster { SESSIONS + 1 } else { 1 };
    assert!(
        before <= 2 * queues && after >= 1,
        "{before} reads sent while Redis paused, {after} after"
    );
}

/// What [`mark`] sends.
const MARK: &str = "reads-sent-before-this";

/// Sends `ECHO` [`MARK`] to the server at `port` over a connection with no handshake (Redis
/// accepts it while it pauses clients), and returns once it has answered.
async fn mark(port: u16) {
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    tcp.write_all(format!("ECHO {MARK}\r\n").as_bytes())
        .await
        .expect("ECHO");
    let mut reply = [0; 64];
    let n = tcp.read(&mut reply).await.expect("reply");
    assert!(n > 0, "the server answered the mark");
}

/// The stored text of `field` of the hash `key` (empty when absent).
async fn field(conn: &mut impl redis::aio::ConnectionLike, key: &str, field: &str) -> String {
    let value: Option<String> = redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(conn)
        .await
        .expect("HGET");
    value.unwrap_or_default()
}

backend_suite!(
    redis_only: loads_without_a_due_refresh_send_no_script,
    reads_ask_redis_time_at_most_once_a_second,
    a_session_expired_by_its_ttl_is_never_served,
    a_write_records_the_use_only_when_its_refresh_is_due,
    reads_that_queue_share_a_round_trip,
);
