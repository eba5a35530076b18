//! The atomic session helpers (`take`, `ensure`, `compare_and_set`) and the CSRF helper, over
//! real HTTP (an axum app on a local port), on the memory store, Redis (`ConnectionManager` and
//! `bb8`) and a 3-master Redis Cluster. Racing requests meet at a barrier after their session is
//! loaded, so they truly overlap.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Extension, Router};
use redis_guard::session::{
    CsrfConfig, CsrfForm, CsrfHeader, Session, SessionError, SessionId, SessionLayer, SessionStore,
};
use redis_guard_tests::{Harness, Monitor, Stored, backend_suite, stored};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Barrier;

/// The session cookie's name (the default).
const COOKIE: &str = "__Host-id";

/// What the racing routes share: the barrier they meet at, and a counter that makes every
/// `ensure` candidate distinct.
struct Race {
    barrier: Barrier,
    made: AtomicUsize,
    /// The app's store, for routes that end a session behind the handler's back.
    store: Arc<dyn SessionStore>,
}

type Shared = State<Arc<Race>>;

/// Loads the session, then waits for the other racers.
async fn meet(session: &Session, race: &Race) -> Result<(), SessionError> {
    let _: Option<String> = session.get("loaded").await?;
    tokio::time::timeout(Duration::from_secs(10), race.barrier.wait())
        .await
        .expect("the other racers never came");
    Ok(())
}

async fn set(
    session: Session,
    Path((key, value)): Path<(String, String)>,
) -> Result<(), SessionError> {
    session.insert(&key, &value).await
}

async fn take_racing(
    session: Session,
    State(race): Shared,
    Path(key): Path<String>,
) -> Result<String, SessionError> {
    meet(&session, &race).await?;
    Ok(session.take::<String>(&key).await?.unwrap_or_default())
}

async fn ensure_racing(
    session: Session,
    State(race): Shared,
    Path(key): Path<String>,
) -> Result<String, SessionError> {
    meet(&session, &race).await?;
    let mine = format!("candidate-{}", race.made.fetch_add(1, Ordering::SeqCst));
    session.ensure(&key, || mine).await
}

async fn csrf_racing(session: Session, State(race): Shared) -> Result<String, SessionError> {
    meet(&session, &race).await?;
    session.csrf_token().await
}

async fn cas_racing(
    session: Session,
    State(race): Shared,
    Path((key, expected, new)): Path<(String, String, String)>,
) -> Result<&'static str, SessionError> {
    meet(&session, &race).await?;
    let won = session.compare_and_set(&key, Some(&expected), &new).await?;
    Ok(if won { "won" } else { "lost" })
}

async fn csrf(session: Session) -> Result<String, SessionError> {
    session.csrf_token().await
}

/// Logs in (`cycle_id`, then `set_user`) and hands out the CSRF token for the next page.
async fn login(session: Session, Path(user): Path<String>) -> Result<String, SessionError> {
    session.cycle_id().await?;
    session.set_user(&user).await?;
    session.csrf_token().await
}

/// A privilege change without a new id.
async fn promote(session: Session, Path(user): Path<String>) -> Result<&'static str, SessionError> {
    session.set_user(&user).await?;
    Ok("promoted")
}

/// A new id alone.
async fn cycle(session: Session) -> Result<&'static str, SessionError> {
    session.cycle_id().await?;
    Ok("cycled")
}

/// A state-changing route behind the header check: it writes when it runs.
async fn guarded(_: CsrfHeader, session: Session) -> Result<&'static str, SessionError> {
    session.insert("done", &true).await?;
    Ok("done")
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Note {
    text: String,
}

async fn form(session: Session, CsrfForm(note): CsrfForm<Note>) -> Result<String, SessionError> {
    session.insert("note", &note.text).await?;
    Ok(note.text)
}

/// `take`, `ensure` and `compare_and_set` within one request: pending changes resolve locally,
/// a stored session's results show in later reads of the same request.
async fn local(session: Session) -> Result<String, SessionError> {
    session.insert("pending", &"p").await?;
    let taken: Option<String> = session.take("pending").await?;
    let again: Option<String> = session.take("pending").await?;
    let stored: Option<String> = session.take("stored").await?;
    let stored_after: Option<String> = session.get("stored").await?;
    let ensured = session.ensure("fresh", || "e".to_owned()).await?;
    let kept = session.ensure("fresh", || "other".to_owned()).await?;
    let cas_absent = session.compare_and_set("cas", None, &1).await?;
    let cas_again = session.compare_and_set("cas", None, &2).await?;
    let cas_next = session.compare_and_set("cas", Some(&1), &3).await?;
    let cas_now: Option<i32> = session.get("cas").await?;
    Ok(format!(
        "{taken:?} {again:?} {stored:?} {stored_after:?} {ensured} {kept} {cas_absent} {cas_again} {cas_next} {cas_now:?}"
    ))
}

/// Loads the session, deletes it in the store (the storage key comes in `x-storage-key`), then
/// runs one helper: it finds the session gone and carries on as for a new session.
async fn gone(
    session: Session,
    State(race): Shared,
    Path(op): Path<String>,
    headers: http::HeaderMap,
) -> Result<String, SessionError> {
    let _: Option<String> = session.get("loaded").await?;
    let key = headers["x-storage-key"].to_str().expect("ascii").to_owned();
    race.store.delete_stored(&key).await?;
    Ok(match op.as_str() {
        "take" => format!("{:?}", session.take::<String>("seed").await?),
        "ensure" => session.ensure("k", || "new".to_owned()).await?,
        "cas" => {
            let set = session
                .compare_and_set("seed", None, &"new".to_owned())
                .await?;
            set.to_string()
        }
        _ => session.csrf_token().await.map(|t| t.len().to_string())?,
    })
}

/// Each helper after `destroy`: the writing ones are refused.
async fn destroyed(session: Session) -> Result<String, SessionError> {
    session.destroy().await?;
    let refused = |r: Result<(), SessionError>| matches!(r, Err(SessionError::Destroyed));
    Ok(format!(
        "{} {} {} {}",
        refused(session.take::<String>("seed").await.map(drop)),
        refused(session.ensure("k", || 1).await.map(drop)),
        refused(session.compare_and_set("k", None, &1).await.map(drop)),
        refused(session.csrf_token().await.map(drop)),
    ))
}

/// Each helper on a reserved key: all refused.
async fn reserved(session: Session) -> String {
    let take = session.take::<String>("$csrf").await;
    let ensure = session.ensure("$csrf", || "forged".to_owned()).await;
    let cas = session
        .compare_and_set("$csrf", None, &"forged".to_owned())
        .await;
    let refused = |r: Result<(), SessionError>| matches!(r, Err(SessionError::ReservedKey(_)));
    format!(
        "{} {} {}",
        refused(take.map(drop)),
        refused(ensure.map(drop)),
        refused(cas.map(drop))
    )
}

/// The app: the routes above under a session layer on `store`; the racing routes meet `racers`
/// at a time.
fn app(store: Arc<dyn SessionStore>, racers: usize, config: Option<CsrfConfig>) -> Router {
    let race = Arc::new(Race {
        barrier: Barrier::new(racers),
        made: AtomicUsize::new(0),
        store: Arc::clone(&store),
    });
    let layer = SessionLayer::builder(store)
        .idle_timeout(Duration::from_secs(30 * 60))
        .max_lifetime(Duration::from_secs(24 * 3600))
        .build()
        .expect("valid");
    let router = Router::new()
        .route("/set/{key}/{value}", post(set))
        .route("/race/take/{key}", get(take_racing))
        .route("/race/ensure/{key}", get(ensure_racing))
        .route("/race/csrf", get(csrf_racing))
        .route("/race/cas/{key}/{expected}/{new}", post(cas_racing))
        .route("/csrf", get(csrf))
        .route("/login/{user}", post(login))
        .route("/promote/{user}", post(promote))
        .route("/cycle", post(cycle))
        .route(
            "/guarded",
            get(guarded)
                .post(guarded)
                .put(guarded)
                .patch(guarded)
                .delete(guarded)
                .options(guarded)
                .trace(guarded),
        )
        .route("/form", get(form).post(form).options(form))
        .route("/local", post(local))
        .route("/reserved", post(reserved))
        .route("/gone/{op}", post(gone))
        .route("/destroyed", post(destroyed))
        .with_state(race);
    let router = match config {
        Some(config) => router.layer(Extension(config)),
        None => router,
    };
    router.layer(layer)
}

/// Serves the app on a fresh local port.
async fn serve(h: &Harness, racers: usize) -> SocketAddr {
    serve_app(app(h.session_store().await, racers, None)).await
}

async fn serve_app(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A response as it came over the wire.
#[derive(Debug)]
struct Reply {
    status: u16,
    head: String,
    body: String,
}

impl Reply {
    /// The session id the response sets, if any.
    fn set_id(&self) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            if !name.eq_ignore_ascii_case("set-cookie") {
                return None;
            }
            let value = value.trim().strip_prefix(COOKIE)?.strip_prefix('=')?;
            let id = value.split(';').next()?;
            (!id.is_empty()).then(|| id.to_owned())
        })
    }
}

/// One request on its own connection (`Connection: close`), read to the end.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    if let Some(id) = cookie {
        head.push_str(&format!("cookie: {COOKIE}={id}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(head.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {head:?}"));
    Reply {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// `POST /guarded` with `token` in header `name`.
async fn post_guarded(addr: SocketAddr, cookie: Option<&str>, name: &str, token: &str) -> Reply {
    send(addr, "POST", "/guarded", cookie, &[(name, token)], "").await
}

/// The CSRF token of session `id`.
async fn csrf_of(addr: SocketAddr, id: &str) -> String {
    send(addr, "GET", "/csrf", Some(id), &[], "").await.body
}

/// A new stored session (holding `seed` = "x"); its cookie value.
async fn new_session(addr: SocketAddr) -> String {
    let r = send(addr, "POST", "/set/seed/x", None, &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");
    r.set_id().expect("a new session sets its cookie")
}

/// What the store holds for the session `id`.
async fn record(store: &Arc<dyn SessionStore>, id: &str) -> Stored {
    let key = SessionId::parse(id).expect("well-formed").storage_key();
    stored(&**store, &key)
        .await
        .expect("load")
        .expect("a live session")
}

/// The JSON text of a string value, as the session stores it.
fn json(s: &str) -> String {
    serde_json::to_string(s).expect("json")
}

async fn take_under_two_concurrent_requests_returns_the_value_once(h: Harness) {
    let addr = serve(&h, 2).await;
    let store = h.session_store().await;
    for round in 0..20 {
        let id = new_session(addr).await;
        let flash = format!("hello-{round}");
        let r = send(
            addr,
            "POST",
            &format!("/set/flash/{flash}"),
            Some(&id),
            &[],
            "",
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
        let (a, b) = tokio::join!(
            send(addr, "GET", "/race/take/flash", Some(&id), &[], ""),
            send(addr, "GET", "/race/take/flash", Some(&id), &[], "")
        );
        assert_eq!((a.status, b.status), (200, 200), "{a:?} {b:?}");
        let mut bodies = [a.body, b.body];
        bodies.sort();
        assert_eq!(bodies, [String::new(), flash], "round {round}");
        assert_eq!(record(&store, &id).await.get("flash"), None);
    }
}

async fn ensure_under_20_concurrent_requests_stores_one_value(h: Harness) {
    let addr = serve(&h, 20).await;
    let store = h.session_store().await;
    let id = new_session(addr).await;
    for (path, field) in [("/race/ensure/pick", "pick"), ("/race/csrf", "$csrf")] {
        let replies = futures_util::future::join_all(
            (0..20).map(|_| send(addr, "GET", path, Some(&id), &[], "")),
        )
        .await;
        assert!(replies.iter().all(|r| r.status == 200), "{replies:?}");
        let first = &replies[0].body;
        assert!(
            replies.iter().all(|r| &r.body == first),
            "{path}: {:?}",
            replies.iter().map(|r| &r.body).collect::<Vec<_>>()
        );
        let stored = record(&store, &id).await;
        let expected = if field == "pick" {
            json(first)
        } else {
            first.clone()
        };
        assert_eq!(stored.get(field), Some(expected.as_str()), "{path}");
        // None of the 20 set a cookie: the session existed.
        assert!(replies.iter().all(|r| r.set_id().is_none()));
    }
}

async fn of_concurrent_compare_and_sets_exactly_one_wins(h: Harness) {
    const RACERS: usize = 8;
    let addr = serve(&h, RACERS).await;
    let store = h.session_store().await;
    for round in 0..5 {
        let id = new_session(addr).await;
        let r = send(addr, "POST", "/set/step/cart", Some(&id), &[], "").await;
        assert_eq!(r.status, 200);
        let replies = futures_util::future::join_all((0..RACERS).map(|i| {
            let path = format!("/race/cas/step/cart/paid-{i}");
            let id = &id;
            async move { (i, send(addr, "POST", &path, Some(id), &[], "").await) }
        }))
        .await;
        let winners: Vec<usize> = replies
            .iter()
            .filter(|(_, r)| r.body == "won")
            .map(|(i, _)| *i)
            .collect();
        assert!(replies.iter().all(|(_, r)| r.status == 200), "{replies:?}");
        assert_eq!(winners.len(), 1, "round {round}: {replies:?}");
        let stored = record(&store, &id).await;
        assert_eq!(
            stored.get("step"),
            Some(json(&format!("paid-{}", winners[0])).as_str())
        );
    }
}

async fn csrf_refusals_are_403_and_write_nothing(h: Harness) {
    let addr = serve(&h, 1).await;
    let store = h.session_store().await;
    let (a, b) = (new_session(addr).await, new_session(addr).await);
    let token_a = csrf_of(addr, &a).await;
    let token_b = csrf_of(addr, &b).await;
    assert_eq!(token_a.len(), 43, "{token_a:?}");
    assert_ne!(token_a, token_b);
    // A token is stable for the session.
    assert_eq!(csrf_of(addr, &a).await, token_a);
    let before = record(&store, &a).await;
    let form = "application/x-www-form-urlencoded";
    let forged = "A".repeat(43);
    let wrong_length = "x".repeat(10_000);
    let header = |value: &str| vec![("x-csrf-token".to_owned(), value.to_owned())];
    let form_with = |body: String| (vec![("content-type".to_owned(), form.to_owned())], body);
    let refusals = [
        ("/guarded", Some(&a), (vec![], String::new()), "missing"),
        ("/guarded", Some(&a), (header(""), String::new()), "missing"),
        (
            "/guarded",
            Some(&a),
            (header(&forged), String::new()),
            "mismatch",
        ),
        (
            "/guarded",
            Some(&a),
            (header(&wrong_length), String::new()),
            "mismatch",
        ),
        (
            "/guarded",
            Some(&a),
            (header(&token_b), String::new()),
            "mismatch",
        ),
        // The right token, with no session or with someone else's.
        (
            "/guarded",
            None,
            (header(&token_a), String::new()),
            "mismatch",
        ),
        (
            "/guarded",
            Some(&b),
            (header(&token_a), String::new()),
            "mismatch",
        ),
        // The token in the wrong place.
        ("/form", Some(&a), form_with("text=hi".into()), "missing"),
        (
            "/form",
            Some(&a),
            form_with(format!("text=hi&csrf_token={token_b}")),
            "mismatch",
        ),
        (
            "/form",
            Some(&a),
            form_with(format!("text=hi&csrf_token=&csrf_token={token_a}")),
            "missing",
        ),
    ];
    for (path, cookie, (headers, body), why) in &refusals {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let methods: &[&str] = if *path == "/guarded" {
            &["POST", "PUT", "PATCH", "DELETE"]
        } else {
            &["POST"]
        };
        for method in methods {
            let r = send(
                addr,
                method,
                path,
                cookie.map(String::as_str),
                &headers,
                body,
            )
            .await;
            assert_eq!(r.status, 403, "{method} {path} {headers:?} {body}: {r:?}");
            assert!(r.body.contains(why), "{r:?}");
            assert_eq!(r.set_id(), None, "a refusal sets no cookie");
        }
    }
    // Bad forms are 4xx, never 5xx, and write nothing either.
    for (headers, body, status) in [
        (
            vec![("content-type", "application/json")],
            format!("{{\"csrf_token\":\"{token_a}\"}}"),
            415,
        ),
        (
            vec![("content-type", form)],
            format!("csrf_token={token_a}&text=hi&extra=1"),
            422,
        ),
        (
            vec![("content-type", form)],
            format!("csrf_token={token_a}"),
            422,
        ),
    ] {
        let r = send(addr, "POST", "/form", Some(&a), &headers, &body).await;
        assert_eq!(r.status, status, "{body}: {r:?}");
    }
    assert_eq!(
        record(&store, &a).await,
        before,
        "a refused request wrote to the session"
    );

    // The right token passes, in the header or the form.
    let ok = post_guarded(addr, Some(&a), "x-csrf-token", &token_a).await;
    assert_eq!((ok.status, ok.body.as_str()), (200, "done"), "{ok:?}");
    let body = format!("text=hello+world&csrf_token={token_a}");
    let ok = send(
        addr,
        "POST",
        "/form",
        Some(&a),
        &[("content-type", form)],
        &body,
    )
    .await;
    assert_eq!(
        (ok.status, ok.body.as_str()),
        (200, "hello world"),
        "{ok:?}"
    );
    let after = record(&store, &a).await;
    assert_eq!(after.get("done"), Some("true"));
    assert_eq!(after.get("note"), Some(json("hello world").as_str()));
}

/// A CSRF extractor on a safe method is a refusal, never a pass (even with the
/// right token), and `CsrfForm` reads the body only, never the query string.
async fn csrf_extractors_refuse_safe_methods_and_never_read_the_query(h: Harness) {
    let addr = serve(&h, 1).await;
    let store = h.session_store().await;
    let id = new_session(addr).await;
    let token = csrf_of(addr, &id).await;
    let before = record(&store, &id).await;
    let form = "application/x-www-form-urlencoded";
    let query = format!("/form?text=hi&csrf_token={token}");
    let with_token = [("x-csrf-token", token.as_str())];
    for method in ["GET", "HEAD", "OPTIONS", "TRACE"] {
        let r = send(addr, method, "/guarded", Some(&id), &with_token, "").await;
        assert_eq!(r.status, 403, "{method} /guarded: {r:?}");
        if method != "HEAD" {
            assert!(r.body.contains("safe method"), "{method}: {r:?}");
        }
    }
    for method in ["GET", "HEAD", "OPTIONS"] {
        let r = send(addr, method, &query, Some(&id), &with_token, "").await;
        assert_eq!(r.status, 403, "{method} {query}: {r:?}");
    }
    // On POST the query is not the form: a token there only is missing, and the fields come
    // from the body.
    let r = send(
        addr,
        "POST",
        &query,
        Some(&id),
        &[("content-type", form)],
        "text=body",
    )
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body.contains("missing"), "{r:?}");
    let body = format!("csrf_token={token}");
    let r = send(
        addr,
        "POST",
        "/form?text=query",
        Some(&id),
        &[("content-type", form)],
        &body,
    )
    .await;
    assert_eq!(r.status, 422, "the query fills no field: {r:?}");
    assert_eq!(
        record(&store, &id).await,
        before,
        "a refusal wrote to the session"
    );
    let body = format!("text=body&csrf_token={token}");
    let r = send(
        addr,
        "POST",
        "/form?text=query",
        Some(&id),
        &[("content-type", form)],
        &body,
    )
    .await;
    assert_eq!((r.status, r.body.as_str()), (200, "body"), "{r:?}");
}

/// A privilege change (`cycle_id`, `set_user`) draws a new CSRF token; the
/// one handed out before is refused after it.
async fn a_privilege_change_draws_a_new_csrf_token(h: Harness) {
    let addr = serve(&h, 1).await;
    let refused = |r: &Reply| r.status == 403 && r.body.contains("mismatch");
    // Login (new id and user), the new token handed out by the login response itself.
    let id = new_session(addr).await;
    let before = csrf_of(addr, &id).await;
    let r = send(addr, "POST", "/login/alice", Some(&id), &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");
    let id = r.set_id().expect("the login rotates the id");
    let handed = r.body;
    assert_eq!(handed.len(), 43, "{handed:?}");
    assert_ne!(handed, before, "the token survived the login");
    assert_eq!(
        csrf_of(addr, &id).await,
        handed,
        "the login's token is the stored one"
    );
    assert!(refused(
        &post_guarded(addr, Some(&id), "x-csrf-token", &before).await
    ));
    // `set_user` alone (same id).
    let r = send(addr, "POST", "/promote/admin", Some(&id), &[], "").await;
    assert_eq!((r.status, r.set_id()), (200, None), "{r:?}");
    let promoted = csrf_of(addr, &id).await;
    assert_ne!(promoted, handed, "the token survived set_user");
    assert!(refused(
        &post_guarded(addr, Some(&id), "x-csrf-token", &handed).await
    ));
    // `cycle_id` alone.
    let r = send(addr, "POST", "/cycle", Some(&id), &[], "").await;
    let id = r.set_id().expect("a new id");
    let cycled = csrf_of(addr, &id).await;
    assert_eq!(cycled.len(), 43, "{cycled:?}");
    assert_ne!(cycled, promoted, "the token survived cycle_id");
    assert!(refused(
        &post_guarded(addr, Some(&id), "x-csrf-token", &promoted).await
    ));
    let ok = post_guarded(addr, Some(&id), "x-csrf-token", &cycled).await;
    assert_eq!((ok.status, ok.body.as_str()), (200, "done"), "{ok:?}");
}

async fn a_token_handed_to_a_new_session_is_stored_with_it(h: Harness) {
    let addr = serve(&h, 1).await;
    let first = send(addr, "GET", "/csrf", None, &[], "").await;
    assert_eq!(first.status, 200);
    let id = first.set_id().expect("the token's session is created");
    let ok = post_guarded(addr, Some(&id), "x-csrf-token", &first.body).await;
    assert_eq!(ok.status, 200, "{ok:?}");
}

async fn a_configured_header_and_field_are_read(h: Harness) {
    let config = CsrfConfig::new()
        .header(http::HeaderName::from_static("x-xsrf-token"))
        .field("_csrf");
    let addr = serve_app(app(h.session_store().await, 1, Some(config))).await;
    let id = new_session(addr).await;
    let token = csrf_of(addr, &id).await;
    let default = post_guarded(addr, Some(&id), "x-csrf-token", &token).await;
    assert_eq!(default.status, 403);
    let ok = post_guarded(addr, Some(&id), "x-xsrf-token", &token).await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let form = [("content-type", "application/x-www-form-urlencoded")];
    let body = format!("_csrf={token}&text=hi");
    let ok = send(addr, "POST", "/form", Some(&id), &form, &body).await;
    assert_eq!((ok.status, ok.body.as_str()), (200, "hi"), "{ok:?}");
}

async fn helpers_resolve_pending_changes_in_the_request(h: Harness) {
    let addr = serve(&h, 1).await;
    let store = h.session_store().await;
    // On a new session (no cookie): everything is pending, then stored together.
    let r = send(addr, "POST", "/local", None, &[], "").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.body,
        "Some(\"p\") None None None e e true false true Some(3)"
    );
    let id = r.set_id().expect("created");
    let stored = record(&store, &id).await;
    assert_eq!(stored.get("pending"), None);
    assert_eq!(stored.get("fresh"), Some("\"e\""));
    assert_eq!(stored.get("cas"), Some("3"));
    // On a stored session: the store's answers show in the request's later reads.
    let id = new_session(addr).await;
    send(addr, "POST", "/set/stored/s", Some(&id), &[], "").await;
    let r = send(addr, "POST", "/local", Some(&id), &[], "").await;
    assert_eq!(
        r.body,
        "Some(\"p\") None Some(\"s\") None e e true false true Some(3)"
    );
    let stored = record(&store, &id).await;
    assert_eq!(stored.get("stored"), None);
    assert_eq!(stored.get("fresh"), Some("\"e\""));
    assert_eq!(stored.get("cas"), Some("3"));
}

async fn reserved_keys_are_refused(h: Harness) {
    let addr = serve(&h, 1).await;
    let store = h.session_store().await;
    let id = new_session(addr).await;
    let token = csrf_of(addr, &id).await;
    let before = record(&store, &id).await;
    let r = send(addr, "POST", "/reserved", Some(&id), &[], "").await;
    assert_eq!((r.status, r.body.as_str()), (200, "true true true"));
    assert_eq!(record(&store, &id).await, before);
    assert_eq!(before.get("$csrf"), Some(token.as_str()));
}

async fn a_session_gone_meanwhile_is_a_new_one_and_destroyed_refuses(h: Harness) {
    let addr = serve(&h, 1).await;
    let store = h.session_store().await;
    for (op, body, creates) in [
        ("take", "None", false),
        ("ensure", "new", true),
        ("cas", "true", true),
        ("csrf", "43", true),
    ] {
        let id = new_session(addr).await;
        let key = SessionId::parse(&id).expect("id").storage_key();
        let headers = [("x-storage-key", key.as_str())];
        let r = send(
            addr,
            "POST",
            &format!("/gone/{op}"),
            Some(&id),
            &headers,
            "",
        )
        .await;
        assert_eq!((r.status, r.body.as_str()), (200, body), "{op}: {r:?}");
        // Never resurrected under the old id; a new session only when something was stored.
        assert!(stored(&*store, &key).await.expect("load").is_none());
        let new = r.set_id();
        assert_eq!(new.is_some(), creates, "{op}: {r:?}");
        if let Some(new) = new {
            assert_ne!(new, id);
            record(&store, &new).await;
        }
    }
    let id = new_session(addr).await;
    let r = send(addr, "POST", "/destroyed", Some(&id), &[], "").await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "true true true true"),
        "{r:?}"
    );
}

/// A refused request costs at most the session's load: no write goes to Redis.
async fn a_refusal_sends_only_the_load(h: Harness) {
    let addr = serve(&h, 1).await;
    let id = new_session(addr).await;
    let token = csrf_of(addr, &id).await;
    let mut monitor = Monitor::start(&h).await;
    monitor.commands(&h).await;
    // No token: refused before the session is even loaded. A wrong one: the load only.
    for (header, round_trips) in [(vec![], 0), (vec![("x-csrf-token", "forged")], 1)] {
        let r = send(addr, "POST", "/guarded", Some(&id), &header, "").await;
        assert_eq!(r.status, 403);
        let sent = monitor.commands(&h).await;
        assert_eq!(sent.len(), round_trips, "{sent:?}");
    }
    let r = post_guarded(addr, Some(&id), "x-csrf-token", &token).await;
    assert_eq!(r.status, 200);
    assert_eq!(monitor.commands(&h).await.len(), 2, "load and save");
}

backend_suite!(
    take_under_two_concurrent_requests_returns_the_value_once,
    ensure_under_20_concurrent_requests_stores_one_value,
    of_concurrent_compare_and_sets_exactly_one_wins,
    csrf_refusals_are_403_and_write_nothing,
    csrf_extractors_refuse_safe_methods_and_never_read_the_query,
    a_privilege_change_draws_a_new_csrf_token,
    a_token_handed_to_a_new_session_is_stored_with_it,
    a_configured_header_and_field_are_read,
    helpers_resolve_pending_changes_in_the_request,
    reserved_keys_are_refused,
    a_session_gone_meanwhile_is_a_new_one_and_destroyed_refuses,
);
// Counts commands with MONITOR on one server.
backend_suite!(standalone_only: a_refusal_sends_only_the_load);
