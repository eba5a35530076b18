//! Slow clients for the demo apps' end-to-end tests: one that
//! trickles its request head (slow loris), one that trickles its body.

/// Sends a request head one byte every 250 ms and never finishes it; returns how long the
/// server let the connection live, or `None` when it was still open after 10 s.
async fn trickle_until_closed(addr: std::net::SocketAddr) -> Option<std::time::Duration> {
    trickle(addr, b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").await
}

/// Sends `prefix` at once, then `trickled` and `a`s one byte every 250 ms; returns how long the
/// server let the connection live, or `None` when it was still open after 10 s.
async fn trickle(
    addr: std::net::SocketAddr,
    prefix: &[u8],
    trickled: &[u8],
) -> Option<std::time::Duration> {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let started = Instant::now();
    stream.write_all(prefix).await.expect("write");
    let bytes = trickled.iter().copied().chain(std::iter::repeat(b'a'));
    // Bounded: 40 bytes, 10 s at most.
    for byte in bytes.take(40) {
        if stream.write_all(&[byte]).await.is_err() {
            return Some(started.elapsed());
        }
        let mut buf = [0u8; 512];
        // Any answer (EOF, a reset, or an error response) means the server gave up on us.
        if let Ok(read) =
            tokio::time::timeout(Duration::from_millis(250), stream.read(&mut buf)).await
        {
            if let Ok(n) = read {
                let head = String::from_utf8_lossy(&buf[..n]);
                assert!(
                    !head.starts_with("HTTP/1.1 2"),
                    "answered a trickled request: {head}"
                );
            }
            return Some(started.elapsed());
        }
    }
    None
}

/// Asserts that an app started with `HEADER_READ_TIMEOUT=1s` closes a trickling connection:
/// within 5 s, room for a loaded machine and half of what the trickle lasts.
pub async fn assert_closed_by_a_1s_header_timeout(addr: std::net::SocketAddr) {
    let lived = trickle_until_closed(addr).await;
    assert!(
        lived.is_some_and(|d| d < std::time::Duration::from_secs(5)),
        "still open after {lived:?} (None: 10 s)"
    );
}

/// Asserts that an app started with `BODY_READ_TIMEOUT=1s` and a `BODY_MIN_RATE` far above
/// 4 bytes a second closes a connection whose `POST path` body trickles in: within 5 s.
pub async fn assert_a_trickled_body_is_cut_off_after_1s(addr: std::net::SocketAddr, path: &str) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: 1000\r\n\r\n"
    );
    let lived = trickle(addr, head.as_bytes(), br#"{"username": ""#).await;
    assert!(
        lived.is_some_and(|d| d < std::time::Duration::from_secs(5)),
        "still open after {lived:?} (None: 10 s)"
    );
}
