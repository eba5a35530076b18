//! A slow-loris client for both example apps' end-to-end tests (included with `#[path]`).

/// Sends a request head one byte every 250 ms and never finishes it; returns how long the
/// server let the connection live, or `None` when it was still open after 10 s.
async fn trickle_until_closed(addr: std::net::SocketAddr) -> Option<std::time::Duration> {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let started = Instant::now();
    let head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let bytes = head.iter().copied().chain(std::iter::repeat(b'a'));
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
pub(crate) async fn assert_closed_by_a_1s_header_timeout(addr: std::net::SocketAddr) {
    let lived = trickle_until_closed(addr).await;
    assert!(
        lived.is_some_and(|d| d < std::time::Duration::from_secs(5)),
        "still open after {lived:?} (None: 10 s)"
    );
}
