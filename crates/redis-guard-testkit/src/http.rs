//! A tiny HTTP/1.1 client over a raw socket, for end-to-end tests.
//!
//! It sends exactly the bytes it is given, so tests can send what real clients refuse to
//! (non-UTF-8 header values, 100 KB headers), and reads the response until the server closes.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A parsed response.
#[derive(Clone, Debug)]
pub struct RawResponse {
    /// The status code.
    pub status: u16,
    /// Header names (lower-cased) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked when the server chunked it.
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The first value of header `name` (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.values(name).next()
    }

    /// All values of header `name`.
    #[must_use]
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.values(name).collect()
    }

    fn values(&self, name: &str) -> impl Iterator<Item = &str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as UTF-8 (lossy).
    #[must_use]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `request` (a complete HTTP/1.1 request; it should say `Connection: close`) and reads the
/// whole response.
///
/// # Errors
///
/// Connection or parse failures, or no answer within 10 seconds.
pub async fn send(addr: SocketAddr, request: &[u8]) -> std::io::Result<RawResponse> {
    let fut = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request).await?;
        let mut buf = Vec::new();
        // A server may answer and close before reading a huge request: keep what it sent.
        match stream.read_to_end(&mut buf).await {
            Ok(_) => {}
            Err(e) if !buf.is_empty() => drop(e),
            Err(e) => return Err(e),
        }
        parse(&buf)
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no response in 10 s"))?
}

/// Builds and sends a request with `Connection: close` and, when there is a body, its length.
///
/// # Errors
///
/// As [`send`].
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
) -> std::io::Result<RawResponse> {
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n").into_bytes();
    for (name, value) in headers {
        req.extend_from_slice(name.as_bytes());
        req.extend_from_slice(b": ");
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() || method == "POST" {
        req.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    req.extend_from_slice(b"\r\n");
    req.extend_from_slice(body);
    send(addr, &req).await
}

fn invalid(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.to_owned())
}

fn parse(buf: &[u8]) -> std::io::Result<RawResponse> {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| invalid("no end of headers"))?;
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or_else(|| invalid("empty response"))?;
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let raw = &buf[end + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked { dechunk(raw)? } else { raw.to_vec() };
    Ok(RawResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| invalid("bad chunk"))?;
        let size_str = String::from_utf8_lossy(&raw[..line_end]);
        let size = usize::from_str_radix(size_str.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| invalid("bad chunk size"))?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if raw.len() < size + 2 {
            return Err(invalid("truncated chunk"));
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}
