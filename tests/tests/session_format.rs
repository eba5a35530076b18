//! Sessions stored in Redis before their metadata was packed into one `$m` field (creation time,
//! absolute expiry, last use and device in four fields of their own: `$created`, `$exp`,
//! `$seen`, `$dev`) are still served, and are rewritten in the packed layout by their next
//! write, their next use recorded or their next rotation. Each test writes the earlier layout
//! with raw commands into a real Redis, then goes through a real app over HTTP, on Redis, a
//! `bb8` pool, the cluster and Sentinel.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, StatusCode};
use redis_guard::backend::Clock as _;
use redis_guard::session::{RedisSessionStore, SessionId, SessionLayer};
use redis_guard_tests::session_routes::{error, route, session_and_path, text};
use redis_guard_tests::{Harness, backend_suite, serve};
use tower::Layer;

const COOKIE: &str = "__Host-id";
const IDLE: Duration = Duration::from_secs(30 * 60);
const MAX: Duration = Duration::from_secs(24 * 3600);
/// The fields of the earlier layout that `$m` replaces.
const OLD_FIELDS: [&str; 4] = ["$created", "$exp", "$seen", "$dev"];
/// The device the earlier layout recorded: handle, address, user agent.
const DEVICE: &str = "AAAAAAAAAAAAAAAAAAAAAA\t2001:db8::7\tan old browser";

/// An app on the harness' session store over real HTTP: the shared session routes, plus
/// `GET /devices` (the user's sessions: address and user agent, one line each).
async fn app(h: &Harness) -> SocketAddr {
    let layer = SessionLayer::builder(h.session_store().await)
        .idle_timeout(IDLE)
        .max_lifetime(MAX)
        .build()
        .expect("valid");
    serve(layer.layer(tower::service_fn(|req: Request<_>| async move {
        let (session, path) = session_and_path(&req);
        let parts: Vec<&str> = path.iter().map(String::as_str).collect();
        let res = match parts.as_slice() {
            ["devices"] => session.sessions().await.map(|list| {
                let lines: Vec<String> = list
                    .iter()
                    .map(|s| {
                        let ip = s.ip.map(|ip| ip.to_string()).unwrap_or_default();
                        format!("{ip} {}", s.user_agent.clone().unwrap_or_default())
                    })
                    .collect();
                text(StatusCode::OK, lines.join("\n"))
            }),
            _ => route(&session, &parts)
                .await
                .unwrap_or_else(|| Ok(text(StatusCode::NOT_FOUND, "no route"))),
        };
        Ok::<_, Infallible>(res.unwrap_or_else(|e| error(&e)))
    })))
    .await
}

/// `method path` with the session cookie `id`: the status, the body and the id the response
/// sets (empty when none).
async fn send(addr: SocketAddr, method: &str, path: &str, id: &str) -> (u16, String, String) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\
         cookie: {COOKIE}={id}\r\ncontent-length: 0\r\n\r\n"
    );
    let res = redis_guard_testkit::http::send(addr, head.as_bytes())
        .await
        .expect("a response");
    let set = res
        .headers_named("set-cookie")
        .into_iter()
        .find_map(|value| {
            let value = value.strip_prefix(COOKIE)?;
            Some(value.strip_prefix('=')?.split(';').next()?.to_owned())
        })
        .unwrap_or_default();
    (res.status, res.text(), set)
}

/// The store's names for the harness' keys.
async fn names(h: &Harness) -> RedisSessionStore {
    RedisSessionStore::new(h.backend().await)
}

async fn session_key(h: &Harness, id: &str) -> String {
    let storage = SessionId::parse(id).expect("well-formed").storage_key();
    names(h).await.session_key(&storage)
}

/// The store's time (µs): Redis `TIME` plus the harness' shift, as the scripts read it.
async fn store_now(h: &Harness) -> u64 {
    let mut conn = h.inspect().await;
    let (s, us): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .expect("TIME");
    let shift = u64::try_from(h.clock().now().as_micros()).expect("fits");
    s * 1_000_000 + us + shift
}

/// Writes a session of user `user` (if any) holding `name = "alice"` in the earlier layout, as
/// a touch left it a second ago (`$seen`, and the TTL of the idle timeout), with raw
/// commands; returns its cookie id.
async fn store_old_layout(h: &Harness, user: Option<&str>) -> String {
    let id = SessionId::generate().expect("random").encode();
    let key = session_key(h, &id).await;
    let now = store_now(h).await;
    let created = now - 1_000_000;
    let exp = created + u64::try_from(MAX.as_micros()).expect("fits");
    let mut conn = h.inspect().await;
    let mut hset = redis::cmd("HSET");
    hset.arg(&key)
        .arg("$created")
        .arg(created)
        .arg("$exp")
        .arg(exp)
        .arg("$seen")
        .arg(created)
        .arg("$dev")
        .arg(DEVICE)
        .arg("name")
        .arg("\"alice\"");
    if let Some(user) = user {
        hset.arg("$user").arg(user);
    }
    let _: i64 = hset.query_async(&mut conn).await.expect("HSET");
    let ttl = u64::try_from(IDLE.as_millis()).expect("fits");
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(ttl)
        .query_async(&mut conn)
        .await
        .expect("PEXPIRE");
    if let Some(user) = user {
        // The user's index, as `set_user` leaves it: the storage key scored by its expiry.
        let storage = SessionId::parse(&id).expect("well-formed").storage_key();
        let index = names(h).await.user_key(user);
        let _: i64 = redis::cmd("ZADD")
            .arg(&index)
            .arg(exp)
            .arg(&storage)
            .query_async(&mut conn)
            .await
            .expect("ZADD");
    }
    id
}

/// Every field of the hash under `key`.
async fn hash(h: &Harness, key: &str) -> HashMap<String, String> {
    let mut conn = h.inspect().await;
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("HGETALL")
}

/// The hash holds the packed metadata and none of the earlier layout's fields; `$m` keeps the
/// creation time and the device's handle the earlier layout recorded (a write records the
/// client's own address and user agent).
fn assert_packed(fields: &HashMap<String, String>, created: &str) {
    for old in OLD_FIELDS {
        assert!(!fields.contains_key(old), "{old} left: {fields:?}");
    }
    let packed = fields.get("$m").expect("$m written");
    let parts: Vec<&str> = packed.splitn(4, ':').collect();
    assert_eq!(parts.len(), 4, "{packed:?}");
    assert_eq!(parts[0], created, "{packed:?}");
    assert!(parts[1].parse::<u64>().is_ok(), "{packed:?}");
    assert!(parts[2].parse::<u64>().is_ok(), "{packed:?}");
    let handle = DEVICE.split('\t').next().expect("handle");
    assert_eq!(parts[3].split('\t').next(), Some(handle), "{packed:?}");
    assert_eq!(fields.get("name").map(String::as_str), Some("\"alice\""));
}

/// A session in the earlier layout is read as it is (a read within the last-seen interval
/// writes nothing), and its next write stores it in the packed layout, keeping its data,
/// creation time, absolute expiry and device.
async fn an_old_session_is_read_and_repacked_by_its_next_write(h: Harness) {
    let addr = app(&h).await;
    let id = store_old_layout(&h, None).await;
    let key = session_key(&h, &id).await;
    let before = hash(&h, &key).await;
    let (status, body, set) = send(addr, "GET", "/get/name", &id).await;
    assert_eq!((status, body.as_str(), set.as_str()), (200, "alice", ""));
    assert_eq!(hash(&h, &key).await, before, "a plain read writes nothing");

    let (status, _, _) = send(addr, "POST", "/set/city/paris", &id).await;
    assert_eq!(status, 200);
    let after = hash(&h, &key).await;
    assert_packed(&after, &before["$created"]);
    let packed = &after["$m"];
    let exp = packed.split(':').nth(1).expect("exp");
    assert_eq!(exp, before["$exp"], "the absolute expiry is kept");
    for (path, value) in [("/get/name", "alice"), ("/get/city", "paris")] {
        let (status, body, _) = send(addr, "GET", path, &id).await;
        assert_eq!((status, body.as_str()), (200, value), "{path}");
    }
}

/// A session in the earlier layout whose last use is due to be recorded is marked used by the
/// load script, which rewrites it in the packed layout and slides its idle timeout.
async fn an_old_session_is_repacked_when_its_use_is_recorded(h: Harness) {
    let addr = app(&h).await;
    let id = store_old_layout(&h, None).await;
    let key = session_key(&h, &id).await;
    let created = hash(&h, &key).await["$created"].clone();
    // Past the last-seen interval (1 % of the idle timeout): the load records the use.
    h.wait(Duration::from_secs(60)).await;
    let (status, body, _) = send(addr, "GET", "/get/name", &id).await;
    assert_eq!((status, body.as_str()), (200, "alice"));
    let after = hash(&h, &key).await;
    assert_packed(&after, &created);
    let seen: u64 = after["$m"]
        .split(':')
        .nth(2)
        .and_then(|s| s.parse().ok())
        .expect("seen");
    assert!(
        seen > created.parse::<u64>().expect("created") + 59_000_000,
        "the use is recorded: {after:?}"
    );
}

/// A logged-in session in the earlier layout is listed with its device, rotated (its data and
/// device move to the new id, packed), and revoked with its user.
async fn an_old_session_is_listed_rotated_and_revoked(h: Harness) {
    let addr = app(&h).await;
    let id = store_old_layout(&h, Some("bob")).await;
    let old_key = session_key(&h, &id).await;
    let created = hash(&h, &old_key).await["$created"].clone();
    let (status, body, _) = send(addr, "GET", "/devices", &id).await;
    assert_eq!((status, body.as_str()), (200, "2001:db8::7 an old browser"));
    let (status, body, _) = send(addr, "GET", "/whoami", &id).await;
    assert_eq!((status, body.as_str()), (200, "bob"));

    let (status, _, new_id) = send(addr, "POST", "/cycle", &id).await;
    assert_eq!(status, 200);
    assert!(!new_id.is_empty() && new_id != id, "a new id");
    assert!(hash(&h, &old_key).await.is_empty(), "the old id is gone");
    let new_key = session_key(&h, &new_id).await;
    assert_packed(&hash(&h, &new_key).await, &created);
    let (status, body, _) = send(addr, "GET", "/get/name", &new_id).await;
    assert_eq!((status, body.as_str()), (200, "alice"));
    let (status, body, _) = send(addr, "GET", "/devices", &new_id).await;
    assert_eq!((status, body.as_str()), (200, "2001:db8::7 an old browser"));

    let (status, body, _) = send(addr, "POST", "/revoke/bob", &new_id).await;
    assert_eq!((status, body.as_str()), (200, "1"));
    assert!(hash(&h, &new_key).await.is_empty(), "revoked");
    let (status, _, _) = send(addr, "GET", "/get/name", &new_id).await;
    assert_eq!(status, 404);
}

backend_suite!(
    redis_only: an_old_session_is_read_and_repacked_by_its_next_write,
    an_old_session_is_repacked_when_its_use_is_recorded,
    an_old_session_is_listed_rotated_and_revoked,
);
