//! End to end, the connection caps of the `axum-app` binary over real sockets:
//! `MAX_CONNECTIONS_PER_IP` (one address cannot take every connection) and `MAX_CONNECTIONS`
//! (idle connections are closed to make room; a newcomer waits only while every connection
//! is serving a request).
//!
//! The tests need two client addresses: some connections are made from `127.0.0.2` (Linux
//! routes all of `127.0.0.0/8` to the loopback interface), the others from `127.0.0.1`.

use std::time::Duration;

use redis_guard_testkit::app::{RunningApp, spawn};
use redis_guard_testkit::http::request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

/// How long an answer that must not wait may take: far more than loopback needs.
const PROMPTLY: Duration = Duration::from_secs(1);

async fn start(env: &[(&str, &str)]) -> RunningApp {
    let mut env = env.to_vec();
    // Nothing closes an idle connection while a test holds it.
    env.push(("HEADER_READ_TIMEOUT", "60s"));
    env.push(("BODY_READ_TIMEOUT", "60s"));
    spawn(env!("CARGO_BIN_EXE_axum-app"), &env).await
}

/// A connection to the app made from `local`, a loopback address such as `127.0.0.2`.
async fn connect_from(app: &RunningApp, local: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    let local = format!("{local}:0").parse().expect("address");
    socket.bind(local).expect("bind");
    socket.connect(app.addr).await.expect("connect")
}

/// Reads from `stream` until `done` says what arrived is complete, for at most `PROMPTLY`.
async fn read_until(stream: &mut TcpStream, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut received = Vec::new();
    let read = timeout(PROMPTLY, async {
        let mut buf = [0; 1024];
        while !done(&received) {
            let n = stream.read(&mut buf).await.expect("read");
            assert!(
                n > 0,
                "closed after {:?}",
                String::from_utf8_lossy(&received)
            );
            received.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "no complete answer in {PROMPTLY:?}: {:?}",
        String::from_utf8_lossy(&received)
    );
    received
}

/// A keep-alive `GET /healthz` on `stream`, answered: afterwards the connection is idle.
async fn health_check(stream: &mut TcpStream) {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: app\r\n\r\n")
        .await
        .expect("write");
    let answer = read_until(stream, |r| r.ends_with(b"\r\n\r\nok")).await;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
}

/// Whether the server closes `stream` within `within`, having sent nothing.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0; 256];
    match timeout(within, stream.read(&mut buf)).await {
        Ok(Ok(0) | Err(_)) => true,
        Ok(Ok(n)) => panic!(
            "unexpected answer: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(_) => false,
    }
}

/// `GET /healthz` from `127.0.0.1`, on a connection of its own.
async fn health_from_another_address(app: &RunningApp) -> u16 {
    let answered = timeout(PROMPTLY, request(app.addr, "GET", "/healthz", &[], b"")).await;
    answered
        .unwrap_or_else(|_| panic!("/healthz waited more than {PROMPTLY:?}"))
        .expect("response")
        .status
}

#[tokio::test]
async fn one_address_holds_at_most_max_connections_per_ip() {
    let app = start(&[("MAX_CONNECTIONS", "8"), ("MAX_CONNECTIONS_PER_IP", "2")]).await;
    let mut first = connect_from(&app, "127.0.0.2").await;
    health_check(&mut first).await;
    // Opened and silent, as a client holding connections does.
    let mut second = connect_from(&app, "127.0.0.2").await;
    let mut third = connect_from(&app, "127.0.0.2").await;
    assert!(
        closed_within(&mut third, PROMPTLY).await,
        "a third connection from one address stayed open"
    );
    assert_eq!(health_from_another_address(&app).await, 200);
    // The address keeps the two it had.
    health_check(&mut second).await;
    health_check(&mut first).await;
}

#[tokio::test]
async fn idle_connections_are_closed_to_make_room_for_another_client() {
    // One address may take them all here: the total, not the share, is under test.
    let app = start(&[("MAX_CONNECTIONS", "4"), ("MAX_CONNECTIONS_PER_IP", "4")]).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut conn = connect_from(&app, "127.0.0.2").await;
        // Keep-alive connections that served a request and now idle; the first idles longest.
        health_check(&mut conn).await;
        held.push(conn);
    }
    assert_eq!(health_from_another_address(&app).await, 200);
    assert!(
        closed_within(&mut held[0], PROMPTLY).await,
        "the connection idle the longest was not the one closed"
    );
    // The others are still served.
    for conn in &mut held[1..] {
        health_check(conn).await;
    }
}

/// `POST /calls` on `stream` with `Expect: 100-continue` and no body yet: once the
/// `100 Continue` arrives, the app is serving the request, waiting for its body.
async fn start_a_call(stream: &mut TcpStream, body: &str) {
    let head = format!(
        "POST /calls HTTP/1.1\r\nHost: app\r\nContent-Type: application/json\r\n\
         Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let answer = read_until(stream, |r| r.ends_with(b"\r\n\r\n")).await;
    assert!(answer.starts_with(b"HTTP/1.1 100"), "{answer:?}");
}

#[tokio::test]
async fn a_new_connection_waits_only_while_every_connection_is_busy() {
    let app = start(&[("MAX_CONNECTIONS", "2"), ("MAX_CONNECTIONS_PER_IP", "2")]).await;
    let body = r#"{"from": "+15550100000", "to": "+15550109999"}"#;
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut conn = connect_from(&app, "127.0.0.2").await;
        start_a_call(&mut conn, body).await;
        busy.push(conn);
    }
    let addr = app.addr;
    let mut waiting = tokio::spawn(async move { request(addr, "GET", "/healthz", &[], b"").await });
    let early = timeout(Duration::from_millis(1500), &mut waiting).await;
    assert!(
        early.is_err(),
        "answered while every connection was busy: {early:?}"
    );
    // The first call ends; its connection, idle again, makes room.
    busy[0].write_all(body.as_bytes()).await.expect("write");
    let answer = read_until(&mut busy[0], |r| r.ends_with(b"}")).await;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    let answered = timeout(Duration::from_secs(5), waiting).await;
    let r = answered
        .expect("the waiting request was not served")
        .expect("task")
        .expect("response");
    assert_eq!(r.status, 200);
    // The second call was not cut off to make room.
    busy[1].write_all(body.as_bytes()).await.expect("write");
    let answer = read_until(&mut busy[1], |r| r.ends_with(b"}")).await;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
}
