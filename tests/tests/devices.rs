//! Sessions users manage: the metadata each session keeps (handle, client address,
//! user agent, created and last seen), listing a user's sessions, revoking one of them or all
//! but the current one, and a session's own lifetimes ("remember me"). Every scenario runs on
//! the memory store, on Redis through a `ConnectionManager` and a `bb8` pool, and on a 3-master
//! Redis Cluster.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use redis_guard::rate_limit::PeerAddr;
use redis_guard::session::{
    SessionError, SessionId, SessionLayer, SessionLayerBuilder, SessionStore,
};
use redis_guard_tests::session_routes::{error, route, session_and_path, text};
use redis_guard_tests::{Harness, Monitor, Reply, backend_suite, call};
use tower::{Layer, Service};

type Body = Full<Bytes>;

const COOKIE: &str = "__Host-id";
const DAY: Duration = Duration::from_secs(86_400);

/// The app: login (optionally remembered), whoami, the device list and the revocations.
fn app() -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |req: Request<Body>| async move {
        let (session, path) = session_and_path(&req);
        let parts: Vec<&str> = path.iter().map(String::as_str).collect();
        let res: Result<Response<Body>, SessionError> = match parts.as_slice() {
            ["remember", user, days] => {
                async {
                    session.cycle_id().await?;
                    session.set_user(user).await?;
                    let days: u64 = days.parse().expect("days");
                    session.set_idle_timeout(7 * DAY).await?;
                    session
                        .set_max_lifetime(DAY * u32::try_from(days).expect("days"))
                        .await?;
                    Ok(text(StatusCode::OK, "remembered"))
                }
                .await
            }
            ["flush", note] => {
                async {
                    session.flush().await?;
                    if *note != "-" {
                        session.insert("k", &(*note).to_owned()).await?;
                    }
                    Ok(text(StatusCode::OK, "flushed"))
                }
                .await
            }
            ["get"] => session
                .get::<String>("k")
                .await
                .map(|v| text(StatusCode::OK, format!("{v:?}"))),
            // One line per session: handle, ip, user agent, current, age, idle, expires (s).
            ["sessions"] => session.sessions().await.map(|list| {
                let lines: Vec<String> = list
                    .iter()
                    .map(|s| {
                        format!(
                            "{}|{}|{}|{}|{}|{}|{}",
                            s.handle,
                            s.ip.map(|ip| ip.to_string()).unwrap_or_default(),
                            s.user_agent.clone().unwrap_or_default(),
                            s.current,
                            s.age.as_secs(),
                            s.idle_for.as_secs(),
                            s.expires_in.as_secs(),
                        )
                    })
                    .collect();
                text(StatusCode::OK, lines.join("\n"))
            }),
            ["revoke", handle] => session.revoke_session(handle).await.map(|ended| {
                if ended {
                    text(StatusCode::OK, "revoked")
                } else {
                    text(StatusCode::NOT_FOUND, "no such session")
                }
            }),
            // The atomic helpers, each one store step that writes.
            ["take", key] => session
                .take::<String>(key)
                .await
                .map(|v| text(StatusCode::OK, format!("{v:?}"))),
            ["ensure", key] => session
                .ensure(key, || "e".to_owned())
                .await
                .map(|v| text(StatusCode::OK, v)),
            ["cas", key] => session
                .compare_and_set(key, None, &1)
                .await
                .map(|set| text(StatusCode::OK, set.to_string())),
            ["others"] => session
                .revoke_other_sessions()
                .await
                .map(|n| text(StatusCode::OK, n.to_string())),
            // login/{user}, whoami, cycle: the suites' shared routes.
            shared => route(&session, shared)
                .await
                .unwrap_or_else(|| Ok(text(StatusCode::NOT_FOUND, "no route"))),
        };
        Ok::<_, Infallible>(res.unwrap_or_else(|e| error(&e)))
    })
}

/// One browser: its address, its user agent and its cookie.
#[derive(Clone)]
struct Device {
    peer: SocketAddr,
    agent: Vec<u8>,
    id: Option<String>,
}

impl Device {
    fn new(ip: &str, agent: &str) -> Self {
        Self {
            peer: SocketAddr::new(ip.parse().expect("ip"), 40_000),
            agent: agent.as_bytes().to_vec(),
            id: None,
        }
    }
}

struct Client {
    layer: SessionLayer,
}

impl Client {
    async fn new(h: &Harness) -> Self {
        Self::with(h.session_store().await, |b| b)
    }

    fn with(
        store: Arc<dyn SessionStore>,
        configure: impl FnOnce(SessionLayerBuilder) -> SessionLayerBuilder,
    ) -> Self {
        let builder = SessionLayer::builder(store)
            .idle_timeout(Duration::from_secs(30 * 60))
            .max_lifetime(DAY);
        Self {
            layer: configure(builder).build().expect("valid"),
        }
    }

    /// Sends a request from `device`, keeping the cookie it gets (or losing the one removed).
    async fn send(&self, device: &mut Device, method: &str, path: &str) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::USER_AGENT, device.agent.as_slice());
        if let Some(id) = &device.id {
            req = req.header("cookie", format!("{COOKIE}={id}"));
        }
        let mut req = req.body(Body::default()).expect("request");
        req.extensions_mut().insert(PeerAddr(device.peer));
        let r = call(self.layer.layer(app()), req).await;
        if let Some(set) = r.headers.get("set-cookie") {
            let set = set.to_str().expect("ascii");
            let value = set
                .strip_prefix(&format!("{COOKIE}="))
                .and_then(|v| v.split(';').next())
                .expect("our cookie");
            device.id = (!value.is_empty()).then(|| value.to_owned());
        }
        r
    }

    async fn login(&self, device: &mut Device, user: &str) {
        let r = self.send(device, "POST", &format!("/login/{user}")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(device.id.is_some(), "logged in with a cookie");
    }
}

/// A listed session, as the app prints it.
#[derive(Debug)]
struct Listed {
    handle: String,
    ip: String,
    agent: String,
    current: bool,
    age: u64,
    idle: u64,
    expires: u64,
}

async fn list(c: &Client, device: &mut Device) -> Vec<Listed> {
    let r = c.send(device, "GET", "/sessions").await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            assert_eq!(f.len(), 7, "{l}");
            Listed {
                handle: f[0].to_owned(),
                ip: f[1].to_owned(),
                agent: f[2].to_owned(),
                current: f[3] == "true",
                age: f[4].parse().expect("age"),
                idle: f[5].parse().expect("idle"),
                expires: f[6].parse().expect("expires"),
            }
        })
        .collect()
}

fn storage_key(id: &str) -> String {
    SessionId::parse(id).expect("well-formed").storage_key()
}

async fn devices_are_listed_with_their_metadata(h: Harness) {
    let c = Client::new(&h).await;
    let mut laptop = Device::new("203.0.113.7", "Mozilla/5.0 (X11; Linux) Firefox/140.0");
    let mut phone = Device::new("2001:db8::42", "Mozilla/5.0 (iPhone) Safari/604.1");
    c.login(&mut laptop, "alice").await;
    h.wait(Duration::from_secs(120)).await;
    c.login(&mut phone, "alice").await;
    let listed = list(&c, &mut laptop).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    let mine: Vec<&Listed> = listed.iter().filter(|l| l.current).collect();
    assert_eq!(mine.len(), 1, "exactly one current: {listed:?}");
    assert_eq!(mine[0].ip, "203.0.113.7");
    assert_eq!(mine[0].agent, "Mozilla/5.0 (X11; Linux) Firefox/140.0");
    let other = listed.iter().find(|l| !l.current).expect("the phone");
    assert_eq!(other.ip, "2001:db8::42");
    assert_eq!(other.agent, "Mozilla/5.0 (iPhone) Safari/604.1");
    // The laptop logged in two minutes before the phone.
    assert!((120..=122).contains(&mine[0].age), "{listed:?}");
    assert!(other.age <= 2, "{listed:?}");
    assert!(
        other.expires > 23 * 3600 && other.expires <= 24 * 3600,
        "{listed:?}"
    );
    // Handles: 22 characters of base64url, distinct, never the id nor its storage key.
    for l in &listed {
        assert_eq!(l.handle.len(), 22, "{l:?}");
        assert!(
            l.handle
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        for id in [laptop.id.as_deref(), phone.id.as_deref()]
            .into_iter()
            .flatten()
        {
            assert!(!id.contains(&l.handle) && !storage_key(id).contains(&l.handle));
        }
    }
    assert_ne!(listed[0].handle, listed[1].handle);
    // The phone sees the same two, itself current.
    let seen = list(&c, &mut phone).await;
    assert_eq!(seen.iter().filter(|l| l.current).count(), 1);
    assert_eq!(
        seen.iter().find(|l| l.current).expect("current").handle,
        other.handle
    );
    // Logged out: no sessions to list.
    let mut stranger = Device::new("198.51.100.1", "curl/8");
    assert_eq!(c.send(&mut stranger, "GET", "/sessions").await.body, "");
}

/// `n` devices logged in as alice (`device {i}` from 192.0.2.{i}), and one as bob.
async fn alice_and_bob(c: &Client, n: u8) -> (Vec<Device>, Device) {
    let mut devices: Vec<Device> = (0..n)
        .map(|i| Device::new(&format!("192.0.2.{i}"), &format!("device {i}")))
        .collect();
    for d in &mut devices {
        c.login(d, "alice").await;
    }
    let mut bob = Device::new("192.0.2.99", "bob's");
    c.login(&mut bob, "bob").await;
    (devices, bob)
}

async fn revoking_one_handle_ends_exactly_that_session(h: Harness) {
    let c = Client::new(&h).await;
    let (mut devices, mut bob) = alice_and_bob(&c, 3).await;
    let bobs = list(&c, &mut bob).await;
    let listed = list(&c, &mut devices[0]).await;
    let target = listed
        .iter()
        .find(|l| l.agent == "device 1")
        .expect("listed")
        .handle
        .clone();

    // Forged, oversize and foreign handles: nothing happens, nothing is written.
    let before = if h.is_redis() {
        h.keys().await
    } else {
        Vec::new()
    };
    for forged in [
        "AAAAAAAAAAAAAAAAAAAAAA".to_owned(),
        "x".repeat(5000),
        "%00".to_owned(),
        bobs[0].handle.clone(),
    ] {
        let r = c
            .send(&mut devices[0], "POST", &format!("/revoke/{forged}"))
            .await;
        assert_eq!(r.status, 404, "{forged:.40}: {}", r.body);
    }
    if h.is_redis() {
        assert_eq!(h.keys().await, before, "no write for a forged handle");
    }
    assert_eq!(
        c.send(&mut bob, "GET", "/whoami").await.body,
        "bob",
        "bob untouched"
    );

    let r = c
        .send(&mut devices[0], "POST", &format!("/revoke/{target}"))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        c.send(&mut devices[1], "GET", "/whoami").await.status,
        401,
        "revoked"
    );
    for i in [0, 2] {
        assert_eq!(
            c.send(&mut devices[i], "GET", "/whoami").await.body,
            "alice",
            "device {i}"
        );
    }
    assert_eq!(c.send(&mut bob, "GET", "/whoami").await.body, "bob");
    let left: Vec<String> = list(&c, &mut devices[0])
        .await
        .into_iter()
        .map(|l| l.agent)
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(!left.contains(&"device 1".to_owned()));
    // Again: already gone.
    let r = c
        .send(&mut devices[0], "POST", &format!("/revoke/{target}"))
        .await;
    assert_eq!(r.status, 404);

    // Revoking the current session logs this device out, cookie and all.
    let own = list(&c, &mut devices[2])
        .await
        .into_iter()
        .find(|l| l.current)
        .expect("own");
    let r = c
        .send(&mut devices[2], "POST", &format!("/revoke/{}", own.handle))
        .await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers["set-cookie"]
            .to_str()
            .expect("ascii")
            .contains("Max-Age=0")
    );
    assert_eq!(devices[2].id, None);
    assert_eq!(
        c.send(&mut devices[0], "GET", "/whoami").await.body,
        "alice"
    );
}

async fn log_out_everywhere_else_keeps_the_current_one(h: Harness) {
    let c = Client::new(&h).await;
    let (mut devices, mut bob) = alice_and_bob(&c, 4).await;
    let r = c.send(&mut devices[2], "POST", "/others").await;
    assert_eq!((r.status, r.body.as_str()), (200, "3"));
    for (i, d) in devices.iter_mut().enumerate() {
        let expected = if i == 2 { 200 } else { 401 };
        assert_eq!(
            c.send(d, "GET", "/whoami").await.status,
            expected,
            "device {i}"
        );
    }
    let left = list(&c, &mut devices[2]).await;
    assert_eq!(left.len(), 1);
    assert!(left[0].current);
    assert_eq!(c.send(&mut bob, "GET", "/whoami").await.body, "bob");
    // Logged out, it ends nothing.
    let mut stranger = Device::new("198.51.100.1", "curl/8");
    assert_eq!(c.send(&mut stranger, "POST", "/others").await.body, "0");
}

async fn the_handle_survives_id_rotation(h: Harness) {
    let c = Client::new(&h).await;
    let mut d = Device::new("192.0.2.1", "browser");
    c.login(&mut d, "alice").await;
    let before = list(&c, &mut d).await;
    let old_id = d.id.clone();
    assert_eq!(c.send(&mut d, "POST", "/cycle").await.status, 200);
    assert_ne!(d.id, old_id, "rotated");
    let after = list(&c, &mut d).await;
    assert_eq!(before.len(), 1);
    assert_eq!(after.len(), 1);
    assert_eq!(before[0].handle, after[0].handle);
    assert!(after[0].current);
}

/// The cookie's `Max-Age`, if any.
fn max_age(r: &Reply) -> Option<u64> {
    let set = r.headers.get("set-cookie")?.to_str().ok()?;
    set.split("; ")
        .find_map(|a| a.strip_prefix("Max-Age="))
        .map(|v| v.parse().expect("seconds"))
}

async fn remember_me_outlives_the_layer_lifetimes(h: Harness) {
    let c = Client::new(&h).await;
    let mut plain = Device::new("192.0.2.1", "plain");
    c.login(&mut plain, "alice").await;
    let mut kept = Device::new("192.0.2.2", "remembered");
    let r = c.send(&mut kept, "POST", "/remember/alice/30").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        max_age(&r),
        Some(30 * 86_400),
        "a persistent cookie for 30 days"
    );
    let listed = list(&c, &mut kept).await;
    let own = listed.iter().find(|l| l.current).expect("own");
    assert!(
        own.expires > 29 * 86_400 && own.expires <= 30 * 86_400,
        "{own:?}"
    );

    if h.is_redis() {
        // The key's TTL follows the session's own idle timeout, not the layer's 30 minutes.
        let key = format!(
            "{}s:{{{}}}",
            h.prefix(),
            storage_key(kept.id.as_deref().expect("id"))
        );
        let pttl = h.pttl(&key).await;
        assert!(pttl > 6 * 86_400_000 && pttl <= 7 * 86_400_000, "{pttl}");
    }
    // Two hours unused: past the layer's 30-minute idle timeout, within the session's week.
    h.wait(Duration::from_secs(2 * 3600)).await;
    assert_eq!(
        c.send(&mut plain, "GET", "/whoami").await.status,
        401,
        "plain idled out"
    );
    assert_eq!(c.send(&mut kept, "GET", "/whoami").await.body, "alice");
    // Past the layer's 24-hour lifetime, used every few days.
    for _ in 0..9 {
        h.wait(3 * DAY).await;
        assert_eq!(c.send(&mut kept, "GET", "/whoami").await.body, "alice");
    }
    // A rotation keeps the cookie persistent, for the time left (30 days - 27 days 2 hours).
    let r = c.send(&mut kept, "POST", "/cycle").await;
    let left = max_age(&r).expect("a persistent cookie after rotation");
    let expected = 30 * 86_400 - (27 * 86_400 + 2 * 3600);
    assert!(
        left <= expected && left + 30 >= expected,
        "{left} vs {expected}"
    );
    // Eight idle days: past its own idle timeout.
    h.wait(8 * DAY).await;
    assert_eq!(c.send(&mut kept, "GET", "/whoami").await.status, 401);

    // Its absolute lifetime holds however it is used; beyond the ceiling (30 days) it is cut.
    let mut long = Device::new("192.0.2.3", "long");
    let r = c.send(&mut long, "POST", "/remember/alice/365").await;
    assert_eq!(max_age(&r), Some(30 * 86_400), "cut to the ceiling");
    for step in 1..10 {
        h.wait(3 * DAY).await;
        let r = c.send(&mut long, "GET", "/whoami").await;
        assert_eq!(r.status, 200, "day {}", step * 3);
    }
    h.wait(3 * DAY).await;
    assert_eq!(
        c.send(&mut long, "GET", "/whoami").await.status,
        401,
        "30 days are up"
    );
}

async fn a_session_without_its_own_lifetime_keeps_a_browser_session_cookie(h: Harness) {
    let c = Client::new(&h).await;
    let mut d = Device::new("192.0.2.1", "plain");
    let r = c.send(&mut d, "POST", "/login/alice").await;
    assert_eq!(max_age(&r), None);
    let r = c.send(&mut d, "POST", "/cycle").await;
    assert!(r.headers.contains_key("set-cookie"));
    assert_eq!(max_age(&r), None);
    // A zero lifetime is refused (the rest of that login stands).
    let r = c.send(&mut d, "POST", "/remember/alice/0").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(max_age(&r), None);
    assert_eq!(c.send(&mut d, "GET", "/whoami").await.body, "alice");
}

async fn metadata_can_be_turned_off_and_is_bounded(h: Harness) {
    let c = Client::with(h.session_store().await, |b| {
        b.client_ip(None).record_user_agent(false)
    });
    let mut d = Device::new("192.0.2.1", "a browser");
    c.login(&mut d, "alice").await;
    let listed = list(&c, &mut d).await;
    assert_eq!((listed[0].ip.as_str(), listed[0].agent.as_str()), ("", ""));
    if h.is_redis() {
        let key = h
            .keys()
            .await
            .into_iter()
            .find(|k| k.contains("s:{"))
            .expect("session");
        let mut conn = h.inspect().await;
        let device: String = redis::cmd("HGET")
            .arg(&key)
            .arg("$dev")
            .query_async(&mut conn)
            .await
            .expect("HGET");
        // The device is the handle only: no address, no user agent.
        let parts: Vec<&str> = device.split('\t').collect();
        assert_eq!(parts.len(), 3, "{device:?}");
        assert_eq!(
            (parts[0].len(), parts[1], parts[2]),
            (22, "", ""),
            "{device:?}"
        );
    }

    // Oversize and binary user agents are cut and cleaned, never refused.
    let c = Client::new(&h).await;
    let mut huge = Device::new("192.0.2.2", "");
    huge.agent = [b"Mozilla/5.0 \xff\xfe".as_slice(), &[b'A'; 10_000]].concat();
    c.login(&mut huge, "bob").await;
    let listed = list(&c, &mut huge).await;
    // User agents are kept up to 256 bytes (the crate's MAX_USER_AGENT_LEN).
    assert_eq!(listed[0].agent.len(), 256);
    assert!(
        listed[0].agent.starts_with("Mozilla/5.0 ??AAA"),
        "{}",
        listed[0].agent
    );
}

async fn flush_logs_out_and_carries_on_anonymously(h: Harness) {
    let c = Client::new(&h).await;
    let mut d = Device::new("192.0.2.1", "browser");
    c.login(&mut d, "alice").await;
    let old = d.id.clone().expect("id");
    let r = c.send(&mut d, "POST", "/flush/bye").await;
    assert_eq!(r.status, 200);
    let new = d.id.clone().expect("a new session for the message");
    assert_ne!(new, old);
    assert_eq!(
        c.send(&mut d, "GET", "/whoami").await.status,
        401,
        "anonymous"
    );
    assert_eq!(c.send(&mut d, "GET", "/get").await.body, "Some(\"bye\")");
    let mut stale = Device {
        id: Some(old),
        ..d.clone()
    };
    assert_eq!(
        c.send(&mut stale, "GET", "/get").await.body,
        "None",
        "the old id is dead"
    );
    // Nothing written after the flush: the cookie goes, no session is left behind.
    c.login(&mut d, "alice").await;
    let r = c.send(&mut d, "POST", "/flush/-").await;
    assert!(
        r.headers["set-cookie"]
            .to_str()
            .expect("ascii")
            .contains("Max-Age=0")
    );
    assert_eq!(d.id, None);
    if h.is_redis() {
        let sessions = h
            .keys()
            .await
            .into_iter()
            .filter(|k| k.contains("s:{"))
            .count();
        // The login took over the anonymous session (rotated), and the flush ended it.
        assert_eq!(sessions, 0, "no session left behind");
    }
}

backend_suite!(
    flush_logs_out_and_carries_on_anonymously,
    devices_are_listed_with_their_metadata,
    revoking_one_handle_ends_exactly_that_session,
    log_out_everywhere_else_keeps_the_current_one,
    the_handle_survives_id_rotation,
    remember_me_outlives_the_layer_lifetimes,
    a_session_without_its_own_lifetime_keeps_a_browser_session_cookie,
    metadata_can_be_turned_off_and_is_bounded,
    last_seen_is_recorded_once_per_interval,
    the_device_follows_the_client_on_loads_and_atomic_helpers,
    a_session_is_listed_with_the_device_of_its_login,
);
backend_suite!(
    standalone_only: requests_within_the_interval_write_nothing,
    a_session_without_a_user_writes_no_device,
);

/// A session without a user records no device (no listing shows one): a session started
/// anonymously from one address and used from others is listed, once its user logs in from a
/// third, with that one only, under a handle of its own that later writes keep.
async fn a_session_is_listed_with_the_device_of_its_login(h: Harness) {
    let c = Client::with(h.session_store().await, |b| {
        b.last_seen_interval(Duration::from_secs(60))
    });
    let mut d = Device::new("192.0.2.1", "browser/1");
    assert_eq!(c.send(&mut d, "POST", "/set/k/v").await.status, 200);
    // Used from elsewhere past the interval (the load records the use), and written to.
    d.peer = "192.0.2.2:1".parse().expect("addr");
    d.agent = b"browser/2".to_vec();
    h.wait(Duration::from_secs(61)).await;
    assert_eq!(c.send(&mut d, "GET", "/get").await.status, 200);
    assert_eq!(c.send(&mut d, "POST", "/ensure/e").await.status, 200);
    d.peer = "192.0.2.3:1".parse().expect("addr");
    d.agent = b"browser/3".to_vec();
    c.login(&mut d, "alice").await;
    let listed = list(&c, &mut d).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let shown = (listed[0].ip.as_str(), listed[0].agent.as_str());
    assert_eq!(shown, ("192.0.2.3", "browser/3"), "{listed:?}");
    assert_eq!(listed[0].handle.len(), 22, "{listed:?}");
    // Later writes from elsewhere keep the handle and record the client.
    d.peer = "192.0.2.4:1".parse().expect("addr");
    assert_eq!(c.send(&mut d, "POST", "/set/k/w").await.status, 200);
    let again = list(&c, &mut d).await;
    assert_eq!(
        (again[0].handle.as_str(), again[0].ip.as_str()),
        (listed[0].handle.as_str(), "192.0.2.4"),
        "{again:?}"
    );
}

/// A session without a user, counted with MONITOR: past the last-seen interval, a read from a
/// new address is the plain read and the load script, with no save of a device after them, and
/// nothing it sends or runs names one; the login that gives it a user writes its device.
async fn a_session_without_a_user_writes_no_device(h: Harness) {
    let c = Client::with(h.session_store().await, |b| {
        b.last_seen_interval(Duration::from_secs(60))
    });
    let mut d = Device::new("192.0.2.1", "browser/1");
    let mut monitor = Monitor::start(&h).await;
    assert_eq!(c.send(&mut d, "POST", "/set/k/v").await.status, 200);
    // A script call carrying the device field, or a write of it by a script (the scripts read
    // it, for sessions that have one).
    let named = |lines: &[String]| {
        lines.iter().any(|l| {
            let l = l.to_ascii_lowercase();
            (l.starts_with("\"evalsha\"") || l.starts_with("\"hset\"")) && l.contains("$dev")
        })
    };
    let (sent, inside) = monitor.split(&h).await;
    assert!(!named(&sent) && !named(&inside), "{sent:?} {inside:?}");
    // Warm up: a load past the interval loads the load script (no `NOSCRIPT` below).
    h.wait(Duration::from_secs(61)).await;
    assert_eq!(c.send(&mut d, "GET", "/get").await.status, 200);
    d.peer = "192.0.2.2:1".parse().expect("addr");
    d.agent = b"browser/2".to_vec();
    h.wait(Duration::from_secs(61)).await;
    monitor.commands(&h).await;
    assert_eq!(c.send(&mut d, "GET", "/get").await.status, 200);
    let (sent, inside) = monitor.split(&h).await;
    assert_eq!(sent.len(), 2, "the read and the load script: {sent:?}");
    assert!(!named(&sent) && !named(&inside), "{sent:?} {inside:?}");
    c.login(&mut d, "alice").await;
    let (sent, _) = monitor.split(&h).await;
    assert!(
        sent.iter()
            .any(|l| l.contains("$dev") && l.contains("192.0.2.2")),
        "{sent:?}"
    );
}

/// Within the last-seen interval a request is one read: no write of the last-seen time or
/// anything else, counted with MONITOR (script commands included), even from a new address;
/// past it, the load script writes it (after the plain read that found the refresh due), plus
/// one save when the client's address changed.
async fn requests_within_the_interval_write_nothing(h: Harness) {
    let c = Client::with(h.session_store().await, |b| {
        b.last_seen_interval(Duration::from_secs(60))
    });
    let mut d = Device::new("192.0.2.1", "browser");
    c.login(&mut d, "alice").await;
    // Warm up: a load past the interval loads the load script (no `NOSCRIPT` below).
    h.wait(Duration::from_secs(61)).await;
    c.send(&mut d, "GET", "/get").await;
    let mut monitor = Monitor::start(&h).await;
    monitor.commands(&h).await;
    for step in 0..5 {
        h.wait(Duration::from_secs(10)).await;
        assert_eq!(c.send(&mut d, "GET", "/get").await.status, 200);
        let (sent, inside) = monitor.split(&h).await;
        assert_eq!(sent.len(), 1, "step {step}: one round trip: {sent:?}");
        assert!(
            inside
                .iter()
                .all(|l| !l.to_ascii_lowercase().starts_with("\"hset\"")
                    && !l.to_ascii_lowercase().starts_with("\"pexpire\"")),
            "step {step}: {inside:?}"
        );
    }
    // 70 s after the last use recorded: this request records it, its plain read followed by
    // the load script.
    h.wait(Duration::from_secs(20)).await;
    monitor.commands(&h).await;
    assert_eq!(c.send(&mut d, "GET", "/get").await.status, 200);
    let (sent, inside) = monitor.split(&h).await;
    assert_eq!(sent.len(), 2, "the read and the load script: {sent:?}");
    assert!(
        sent[1].to_ascii_lowercase().starts_with("\"evalsha\""),
        "{sent:?}"
    );
    let writes: Vec<&String> = inside
        .iter()
        .filter(|l| l.to_ascii_lowercase().starts_with("\"hset\""))
        .collect();
    assert_eq!(writes.len(), 1, "{inside:?}");
    assert!(writes[0].contains("\"$m\""), "{writes:?}");
    // A read from a new address within the interval is still one read and records nothing.
    d.peer = "192.0.2.77:1".parse().expect("addr");
    h.wait(Duration::from_secs(10)).await;
    monitor.commands(&h).await;
    assert_eq!(c.send(&mut d, "GET", "/get").await.status, 200);
    let (sent, inside) = monitor.split(&h).await;
    assert_eq!(sent.len(), 1, "one round trip: {sent:?}");
    assert!(
        inside
            .iter()
            .all(|l| !l.to_ascii_lowercase().starts_with("\"hset\"")),
        "{inside:?}"
    );
    assert_eq!(list(&c, &mut d).await[0].ip, "192.0.2.1");
    // Past the interval, the load that records the use is followed by one save of the device:
    // the address the client reads from now.
    h.wait(Duration::from_secs(60)).await;
    monitor.commands(&h).await;
    assert_eq!(c.send(&mut d, "GET", "/get").await.status, 200);
    let (sent, _) = monitor.split(&h).await;
    assert_eq!(
        sent.len(),
        3,
        "read, load script and the device's save: {sent:?}"
    );
    assert!(
        sent[2].contains("\"$dev\"") && sent[2].contains("192.0.2.77"),
        "{sent:?}"
    );
    assert_eq!(list(&c, &mut d).await[0].ip, "192.0.2.77");
    // A write records a new address in the write's own round trip.
    d.peer = "192.0.2.78:1".parse().expect("addr");
    monitor.commands(&h).await;
    assert_eq!(c.send(&mut d, "POST", "/set/x/1").await.status, 200);
    let (sent, _) = monitor.split(&h).await;
    assert_eq!(sent.len(), 2, "load and save: {sent:?}");
    assert_eq!(list(&c, &mut d).await[0].ip, "192.0.2.78");
}

/// A client whose address and user agent change while it only reads shows
/// them once the last-seen interval has passed (not within it); the atomic helpers record them
/// as every write does.
async fn the_device_follows_the_client_on_loads_and_atomic_helpers(h: Harness) {
    let c = Client::with(h.session_store().await, |b| {
        b.last_seen_interval(Duration::from_secs(60))
    });
    let mut d = Device::new("192.0.2.1", "browser/1");
    c.login(&mut d, "alice").await;
    let shown = |l: &[Listed]| (l[0].ip.clone(), l[0].agent.clone());
    let was = ("192.0.2.1".to_owned(), "browser/1".to_owned());
    // Within the interval a read from elsewhere records nothing.
    h.wait(Duration::from_secs(10)).await;
    d.peer = "192.0.2.2:1".parse().expect("addr");
    d.agent = b"browser/2".to_vec();
    assert_eq!(c.send(&mut d, "GET", "/get").await.status, 200);
    assert_eq!(shown(&list(&c, &mut d).await), was);
    // Past it, a read (no field written) records where the client is now.
    h.wait(Duration::from_secs(70)).await;
    assert_eq!(c.send(&mut d, "GET", "/get").await.status, 200);
    let now = ("192.0.2.2".to_owned(), "browser/2".to_owned());
    assert_eq!(shown(&list(&c, &mut d).await), now);
    // Each atomic helper that writes records it, within the interval.
    assert_eq!(c.send(&mut d, "POST", "/set/k/v").await.status, 200);
    for (i, path) in ["/take/k", "/ensure/e", "/cas/n"].into_iter().enumerate() {
        let ip = format!("198.51.100.{i}");
        d.peer = SocketAddr::new(ip.parse().expect("ip"), 1);
        let r = c.send(&mut d, "POST", path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert_eq!(list(&c, &mut d).await[0].ip, ip, "{path}");
    }
}

/// What listings show as last seen moves only once per interval, on every backend.
async fn last_seen_is_recorded_once_per_interval(h: Harness) {
    let c = Client::with(h.session_store().await, |b| {
        b.last_seen_interval(Duration::from_secs(60))
    });
    let mut d = Device::new("192.0.2.1", "browser");
    c.login(&mut d, "alice").await;
    h.wait(Duration::from_secs(40)).await;
    let first = list(&c, &mut d).await;
    assert!((40..=42).contains(&first[0].idle), "{first:?}");
    h.wait(Duration::from_secs(30)).await;
    // 70 s: this request's load records the use.
    let now = list(&c, &mut d).await;
    assert!(now[0].idle <= 1, "{now:?}");
    assert!((70..=72).contains(&now[0].age), "{now:?}");
}
