//! Sessions stored in Redis in an earlier layout are still served, and are rewritten in the
//! current one (the creation time, absolute expiry and last use packed into `$m`, the device in
//! `$dev`) by their next write, their next use recorded or their next rotation. Two earlier
//! layouts are read: the three times in fields of their own (`$created`, `$exp`, `$seen`,
//! beside `$dev`), and the device packed into `$m` after the times (no `$dev`). A session
//! without a user records no device any more; one stored with a device while it had none (the
//! earlier releases recorded it for every session) is read and written as it is, and keeps its
//! device and handle when it gets a user. Each test writes the earlier layouts with raw
//! commands into a real Redis, then goes through a real app over HTTP, on Redis, a `bb8` pool,
//! the cluster and Sentinel.
//!
//! The current layout keeps a small session within Redis' listpack limits (no value longer than
//! `hash-max-listpack-value`, 64 bytes), so Redis stores it as a compact listpack, not a
//! hashtable.

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
/// The time fields of the earliest layout, which `$m` replaces.
const OLD_FIELDS: [&str; 3] = ["$created", "$exp", "$seen"];
/// The device the earlier layouts recorded: handle, address, user agent.
const DEVICE: &str = "AAAAAAAAAAAAAAAAAAAAAA\t2001:db8::7\tan old browser";
/// A user agent that makes the device this app records exactly 64 bytes (a 22-byte handle, two
/// tabs, no address: the app has no peer address to give, and this user agent): the longest
/// value a listpack holds. A `$m` holding it with the three times would not fit.
const AGENT_64: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:12.0)";

/// How an earlier release stored a session's metadata.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// `$created`, `$exp`, `$seen` and `$dev`, each a field of its own.
    Fields,
    /// `$m` = `created:exp:seen:dev`: the device packed after the times, no `$dev`.
    DeviceInM,
    /// `$m` = `created:exp:seen` and `$dev`: the current layout, with the device a session
    /// without a user no longer records.
    DeviceAlways,
}

const LAYOUTS: [Layout; 3] = [Layout::Fields, Layout::DeviceInM, Layout::DeviceAlways];

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
    send_as(addr, method, path, id, "").await
}

/// [`send`] with a `User-Agent` header (none when `agent` is empty).
async fn send_as(
    addr: SocketAddr,
    method: &str,
    path: &str,
    id: &str,
    agent: &str,
) -> (u16, String, String) {
    let agent = if agent.is_empty() {
        String::new()
    } else {
        format!("user-agent: {agent}\r\n")
    };
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\
         cookie: {COOKIE}={id}\r\n{agent}content-length: 0\r\n\r\n"
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

/// Writes a session of user `user` (if any) holding `name = "alice"` in the earlier `layout`,
/// as a touch left it a second ago (the last use, and the TTL of the idle timeout), with raw
/// commands; returns its cookie id and its creation time.
async fn store_old_layout(h: &Harness, layout: Layout, user: Option<&str>) -> (String, String) {
    let id = SessionId::generate().expect("random").encode();
    let key = session_key(h, &id).await;
    let now = store_now(h).await;
    let created = now - 1_000_000;
    let exp = created + u64::try_from(MAX.as_micros()).expect("fits");
    let mut conn = h.inspect().await;
    let mut hset = redis::cmd("HSET");
    hset.arg(&key);
    match layout {
        Layout::Fields => hset
            .arg("$created")
            .arg(created)
            .arg("$exp")
            .arg(exp)
            .arg("$seen")
            .arg(created)
            .arg("$dev")
            .arg(DEVICE),
        Layout::DeviceInM => hset
            .arg("$m")
            .arg(format!("{created}:{exp}:{created}:{DEVICE}")),
        Layout::DeviceAlways => hset
            .arg("$m")
            .arg(format!("{created}:{exp}:{created}"))
            .arg("$dev")
            .arg(DEVICE),
    };
    hset.arg("name").arg("\"alice\"");
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
    (id, created.to_string())
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

/// The hash is in the current layout: the three times in `$m` (and none of the earliest
/// layout's fields), the device in `$dev`; `$m` keeps the creation time, `$dev` the device's
/// handle the earlier layout recorded (a write records the client's own address and user
/// agent).
fn assert_current(fields: &HashMap<String, String>, created: &str) {
    for old in OLD_FIELDS {
        assert!(!fields.contains_key(old), "{old} left: {fields:?}");
    }
    let packed = fields.get("$m").expect("$m written");
    let parts: Vec<&str> = packed.split(':').collect();
    assert_eq!(parts.len(), 3, "the three times only: {packed:?}");
    assert_eq!(parts[0], created, "{packed:?}");
    assert!(parts[1].parse::<u64>().is_ok(), "{packed:?}");
    assert!(parts[2].parse::<u64>().is_ok(), "{packed:?}");
    let handle = DEVICE.split('\t').next().expect("handle");
    let device = fields.get("$dev").expect("$dev written");
    assert_eq!(device.split('\t').next(), Some(handle), "{device:?}");
    assert_eq!(fields.get("name").map(String::as_str), Some("\"alice\""));
}

/// The absolute expiry and last use a hash in `layout` holds.
fn times(fields: &HashMap<String, String>, layout: Layout) -> (String, String) {
    match layout {
        Layout::Fields => (fields["$exp"].clone(), fields["$seen"].clone()),
        Layout::DeviceInM | Layout::DeviceAlways => {
            let parts: Vec<&str> = fields["$m"].splitn(4, ':').collect();
            (parts[1].to_owned(), parts[2].to_owned())
        }
    }
}

/// A session in either earlier layout is read as it is (a read within the last-seen interval
/// writes nothing), and its next write stores it in the current layout, keeping its data,
/// creation time, absolute expiry and device (its handle and address; the write records the
/// client's new user agent when the session has a user, and leaves the device as it was
/// otherwise).
async fn an_old_session_is_read_and_rewritten_by_its_next_write(h: Harness) {
    let addr = app(&h).await;
    let cases = LAYOUTS
        .into_iter()
        .flat_map(|l| [(l, None), (l, Some("dave"))]);
    for (layout, user) in cases {
        let (id, created) = store_old_layout(&h, layout, user).await;
        let layout = (layout, user);
        let key = session_key(&h, &id).await;
        let before = hash(&h, &key).await;
        let (status, body, set) = send(addr, "GET", "/get/name", &id).await;
        assert_eq!(
            (status, body.as_str(), set.as_str()),
            (200, "alice", ""),
            "{layout:?}"
        );
        assert_eq!(
            hash(&h, &key).await,
            before,
            "{layout:?}: a read writes nothing"
        );

        // From another browser: the write records it beside the stored handle and address.
        let (status, _, _) = send_as(addr, "POST", "/set/city/paris", &id, "a new browser").await;
        assert_eq!(status, 200, "{layout:?}");
        let after = hash(&h, &key).await;
        assert_current(&after, &created);
        let device = match user {
            Some(_) => DEVICE.replace("an old browser", "a new browser"),
            None => DEVICE.to_owned(),
        };
        assert_eq!(after["$dev"], device, "{layout:?}");
        let exp = after["$m"].split(':').nth(1).expect("exp");
        assert_eq!(
            exp,
            times(&before, layout.0).0,
            "{layout:?}: the expiry is kept"
        );
        for (path, value) in [("/get/name", "alice"), ("/get/city", "paris")] {
            let (status, body, _) = send(addr, "GET", path, &id).await;
            assert_eq!((status, body.as_str()), (200, value), "{layout:?} {path}");
        }
    }
}

/// A session in either earlier layout whose last use is due to be recorded is marked used by
/// the load script, which rewrites it in the current layout (the device kept) and slides its
/// idle timeout.
async fn an_old_session_is_rewritten_when_its_use_is_recorded(h: Harness) {
    let addr = app(&h).await;
    let sessions = [
        store_old_layout(&h, Layout::Fields, None).await,
        store_old_layout(&h, Layout::DeviceInM, None).await,
        store_old_layout(&h, Layout::DeviceAlways, None).await,
    ];
    // Past the last-seen interval (1 % of the idle timeout): the load records the use.
    h.wait(Duration::from_secs(60)).await;
    for (layout, (id, created)) in LAYOUTS.into_iter().zip(sessions) {
        let key = session_key(&h, &id).await;
        let (status, body, _) = send(addr, "GET", "/get/name", &id).await;
        assert_eq!((status, body.as_str()), (200, "alice"), "{layout:?}");
        let after = hash(&h, &key).await;
        assert_current(&after, &created);
        assert_eq!(after["$dev"], DEVICE, "{layout:?}: a load keeps the device");
        let seen: u64 = after["$m"]
            .split(':')
            .nth(2)
            .and_then(|s| s.parse().ok())
            .expect("seen");
        assert!(
            seen > created.parse::<u64>().expect("created") + 59_000_000,
            "{layout:?}: the use is recorded: {after:?}"
        );
    }
}

/// A logged-in session in either earlier layout is listed with its device, rotated (its data
/// and device move to the new id, in the current layout), and revoked with its user.
async fn an_old_session_is_listed_rotated_and_revoked(h: Harness) {
    let addr = app(&h).await;
    for (layout, user) in LAYOUTS.into_iter().zip(["bob", "carol", "erin"]) {
        let (id, created) = store_old_layout(&h, layout, Some(user)).await;
        let old_key = session_key(&h, &id).await;
        let (status, body, _) = send(addr, "GET", "/devices", &id).await;
        assert_eq!(
            (status, body.as_str()),
            (200, "2001:db8::7 an old browser"),
            "{layout:?}"
        );
        let (status, body, _) = send(addr, "GET", "/whoami", &id).await;
        assert_eq!((status, body.as_str()), (200, user), "{layout:?}");

        let (status, body, new_id) = send(addr, "POST", "/cycle", &id).await;
        assert_eq!(status, 200, "{layout:?}: {body}");
        assert!(!new_id.is_empty() && new_id != id, "{layout:?}: a new id");
        assert!(
            hash(&h, &old_key).await.is_empty(),
            "{layout:?}: old id gone"
        );
        let new_key = session_key(&h, &new_id).await;
        assert_current(&hash(&h, &new_key).await, &created);
        let (status, body, _) = send(addr, "GET", "/get/name", &new_id).await;
        assert_eq!((status, body.as_str()), (200, "alice"), "{layout:?}");
        let (status, body, _) = send(addr, "GET", "/devices", &new_id).await;
        assert_eq!(
            (status, body.as_str()),
            (200, "2001:db8::7 an old browser"),
            "{layout:?}"
        );

        let (status, body, _) = send(addr, "POST", &format!("/revoke/{user}"), &new_id).await;
        assert_eq!((status, body.as_str()), (200, "1"), "{layout:?}");
        assert!(hash(&h, &new_key).await.is_empty(), "{layout:?}: revoked");
        let (status, _, _) = send(addr, "GET", "/get/name", &new_id).await;
        assert_eq!(status, 404, "{layout:?}");
    }
}

/// How Redis stores the value under `key` (`OBJECT ENCODING`), and its `MEMORY USAGE` in bytes.
async fn encoding(h: &Harness, key: &str) -> (String, u64) {
    let mut conn = h.inspect().await;
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("OBJECT ENCODING");
    let bytes: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("MEMORY USAGE");
    (encoding, bytes)
}

/// A session with a device recorded (a 64-byte one, the longest a listpack value holds) stays a
/// listpack in Redis through its creation, a write that changes the device and a recorded use:
/// the metadata value (`$m`, the three times) stays within 64 bytes, the device in its own field.
async fn a_session_with_its_device_stays_a_listpack(h: Harness) {
    let addr = app(&h).await;
    let (status, _, id) = send_as(addr, "POST", "/login/alice", "", AGENT_64).await;
    assert_eq!(status, 200);
    let (status, _, _) = send_as(addr, "POST", "/set/name/alice", &id, AGENT_64).await;
    assert_eq!(status, 200);
    let key = session_key(&h, &id).await;
    let fields = hash(&h, &key).await;
    let (kind, bytes) = encoding(&h, &key).await;
    assert_eq!(kind, "listpack", "created: {bytes} B, {fields:?}");
    let device = &fields["$dev"];
    assert_eq!(device.len(), 64, "{device:?}");
    assert!(device.ends_with(AGENT_64), "{device:?}");

    // Another user agent: the write records the new device.
    let agent = AGENT_64.replace("X11", "x11");
    let (status, _, _) = send_as(addr, "POST", "/set/city/paris", &id, &agent).await;
    assert_eq!(status, 200);
    let fields = hash(&h, &key).await;
    assert!(fields["$dev"].ends_with(&agent), "{fields:?}");
    assert_eq!(encoding(&h, &key).await.0, "listpack", "{fields:?}");

    // Past the last-seen interval: the load marks the use.
    h.wait(Duration::from_secs(60)).await;
    let (status, body, _) = send_as(addr, "GET", "/get/name", &id, &agent).await;
    assert_eq!((status, body.as_str()), (200, "alice"));
    let (kind, bytes) = encoding(&h, &key).await;
    assert_eq!(kind, "listpack", "after a recorded use: {bytes} B");
}

/// A session without a user stores its keys and its times (`$m`) alone, through its creation,
/// writes from another browser and a recorded use: no device, no handle. The login that gives
/// it a user records the device of the login's client, under a new handle, which the
/// rotations after it keep.
async fn a_session_gets_its_device_with_its_user(h: Harness) {
    let addr = app(&h).await;
    let (status, _, id) = send_as(addr, "POST", "/set/name/alice", "", "browser/1").await;
    assert_eq!(status, 200);
    let key = session_key(&h, &id).await;
    let names = |fields: &HashMap<String, String>| {
        let mut names: Vec<String> = fields.keys().cloned().collect();
        names.sort();
        names
    };
    assert_eq!(names(&hash(&h, &key).await), ["$m", "name"]);
    let (status, _, _) = send_as(addr, "POST", "/set/city/paris", &id, "browser/2").await;
    assert_eq!(status, 200);
    h.wait(Duration::from_secs(60)).await;
    let (status, body, _) = send_as(addr, "GET", "/get/name", &id, "browser/3").await;
    assert_eq!((status, body.as_str()), (200, "alice"));
    assert_eq!(names(&hash(&h, &key).await), ["$m", "city", "name"]);
    assert_eq!(encoding(&h, &key).await.0, "listpack");

    let (status, _, id) = send_as(addr, "POST", "/login/alice", &id, "browser/4").await;
    assert_eq!(status, 200);
    let fields = hash(&h, &session_key(&h, &id).await).await;
    let device: Vec<&str> = fields["$dev"].split('\t').collect();
    assert_eq!(device.len(), 3, "{device:?}");
    assert_eq!(
        (device[0].len(), device[1], device[2]),
        (22, "", "browser/4")
    );
    let handle = device[0].to_owned();
    let (status, _, id) = send_as(addr, "POST", "/cycle", &id, "browser/4").await;
    assert_eq!(status, 200);
    let fields = hash(&h, &session_key(&h, &id).await).await;
    assert_eq!(fields["$dev"].split('\t').next(), Some(handle.as_str()));
    let (status, body, _) = send(addr, "GET", "/devices", &id).await;
    assert_eq!((status, body.as_str()), (200, " browser/4"));
}

/// A session stored with a device while it had no user (as earlier releases stored every
/// session) is read and written as it is, its device left alone, and keeps that device's
/// handle and address when it gets a user (the login records its client's user agent).
async fn a_session_stored_with_a_device_keeps_it_when_it_gets_a_user(h: Harness) {
    let addr = app(&h).await;
    let (id, _) = store_old_layout(&h, Layout::DeviceAlways, None).await;
    let key = session_key(&h, &id).await;
    let (status, body, _) = send(addr, "GET", "/get/name", &id).await;
    assert_eq!((status, body.as_str()), (200, "alice"));
    let (status, _, _) = send_as(addr, "POST", "/set/city/paris", &id, "a new browser").await;
    assert_eq!(status, 200);
    assert_eq!(
        hash(&h, &key).await["$dev"],
        DEVICE,
        "a write without a user"
    );
    let (status, _, id) = send_as(addr, "POST", "/login/frank", &id, "a new browser").await;
    assert_eq!(status, 200);
    let fields = hash(&h, &session_key(&h, &id).await).await;
    assert_eq!(
        fields["$dev"],
        DEVICE.replace("an old browser", "a new browser")
    );
    let (status, body, _) = send(addr, "GET", "/devices", &id).await;
    assert_eq!((status, body.as_str()), (200, "2001:db8::7 a new browser"));
}

/// A stored session whose times are not numbers (`$m` malformed) is no session: a read and a
/// write through it find none (the write starts a new session, under a new id), and the
/// malformed hash is deleted, whatever its TTL says.
async fn a_session_with_malformed_times_is_gone_and_deleted(h: Harness) {
    let addr = app(&h).await;
    for (n, packed) in ["soon:later:now", "1:2", "", "::"].into_iter().enumerate() {
        let id = SessionId::generate().expect("random").encode();
        let key = session_key(&h, &id).await;
        let mut conn = h.inspect().await;
        let _: i64 = redis::cmd("HSET")
            .arg(&key)
            .arg("$m")
            .arg(packed)
            .arg("$dev")
            .arg(DEVICE)
            .arg("name")
            .arg("\"alice\"")
            .query_async(&mut conn)
            .await
            .expect("HSET");
        let _: i64 = redis::cmd("PEXPIRE")
            .arg(&key)
            .arg(u64::try_from(IDLE.as_millis()).expect("fits"))
            .query_async(&mut conn)
            .await
            .expect("PEXPIRE");
        let (status, body, set) = send(addr, "GET", "/get/name", &id).await;
        assert_eq!((status, set.as_str()), (404, ""), "{packed:?}: {body}");
        assert!(hash(&h, &key).await.is_empty(), "{packed:?}: deleted");
        if n == 0 {
            let (status, _, set) = send(addr, "POST", "/set/x/1", &id).await;
            assert_eq!(status, 200);
            assert!(
                !set.is_empty() && set != id,
                "a new id, never the malformed one"
            );
        }
    }
}

backend_suite!(
    redis_only: an_old_session_is_read_and_rewritten_by_its_next_write,
    an_old_session_is_rewritten_when_its_use_is_recorded,
    an_old_session_is_listed_rotated_and_revoked,
    a_session_with_its_device_stays_a_listpack,
    a_session_gets_its_device_with_its_user,
    a_session_stored_with_a_device_keeps_it_when_it_gets_a_user,
    a_session_with_malformed_times_is_gone_and_deleted,
);
