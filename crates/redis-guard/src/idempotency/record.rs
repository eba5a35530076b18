//! What the store holds under a record's name: a line the store writes, then the layer's part.
//!
//! ```text
//! RGI1 F <until µs> <token>\n<fingerprint>\n
//! RGI1 D <until µs> <token>\n<fingerprint>\n<status>\n<name>: <value>\n…\n\n<body>
//! ```
//!
//! `F`: a request in flight, its lease over at `until`. `D`: a completed request and its
//! response, kept until `until`. Times are on the store's clock. Header values never hold a
//! line break (`http` refuses them), so the headers are plain lines, and the body is the rest
//! as it is. Anything else under the name is not a record: [`Record::decode`] answers `None`.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

/// A live record, as the layer reads it.
#[derive(Debug)]
pub(crate) enum Record {
    /// The request is running (on this replica or another).
    InFlight { fingerprint: String },
    /// The request completed; its response.
    Done {
        fingerprint: String,
        response: StoredResponse,
    },
}

/// A completed request's response.
#[derive(Debug)]
pub(crate) struct StoredResponse {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// The line in front of every record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Head<'a> {
    pub(crate) done: bool,
    pub(crate) until: u64,
    pub(crate) token: &'a str,
}

/// The line the store writes in front of the layer's part.
pub(crate) fn head_line(done: bool, until: u64, token: &str) -> String {
    format!("RGI1 {} {until} {token}\n", if done { 'D' } else { 'F' })
}

/// The head of `value` and what follows it, or `None` when it is not a record.
pub(crate) fn split(value: &[u8]) -> Option<(Head<'_>, &[u8])> {
    let end = value.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&value[..end]).ok()?;
    let mut words = line.split(' ');
    let (Some("RGI1"), Some(kind), Some(until), Some(token), None) = (
        words.next(),
        words.next(),
        words.next(),
        words.next(),
        words.next(),
    ) else {
        return None;
    };
    let done = match kind {
        "F" => false,
        "D" => true,
        _ => return None,
    };
    let until = until.parse().ok()?;
    (!token.is_empty()).then_some(())?;
    Some((Head { done, until, token }, &value[end + 1..]))
}

/// The layer's part of an in-flight record.
pub(crate) fn in_flight(fingerprint: &str) -> Vec<u8> {
    format!("{fingerprint}\n").into_bytes()
}

/// The layer's part of a completed record: the fingerprint, then the response.
pub(crate) fn done(
    fingerprint: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> Vec<u8> {
    let mut out = format!("{fingerprint}\n{}\n", status.as_u16()).into_bytes();
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

impl Record {
    /// The record in `value` (head included), or `None` when `value` is not one of ours.
    pub(crate) fn decode(value: &[u8]) -> Option<Self> {
        let (head, rest) = split(value)?;
        let (fingerprint, rest) = line(rest)?;
        let fingerprint = std::str::from_utf8(fingerprint).ok()?.to_owned();
        if !head.done {
            return rest.is_empty().then_some(Self::InFlight { fingerprint });
        }
        let (status, mut rest) = line(rest)?;
        let status = StatusCode::from_bytes(status).ok()?;
        let mut headers = HeaderMap::new();
        loop {
            let (field, after) = line(rest)?;
            rest = after;
            if field.is_empty() {
                break;
            }
            let colon = field.iter().position(|&b| b == b':')?;
            let name = HeaderName::from_bytes(&field[..colon]).ok()?;
            let value = field[colon + 1..].strip_prefix(b" ")?;
            headers.append(name, HeaderValue::from_bytes(value).ok()?);
        }
        Some(Self::Done {
            fingerprint,
            response: StoredResponse {
                status,
                headers,
                body: Bytes::copy_from_slice(rest),
            },
        })
    }

    pub(crate) fn fingerprint(&self) -> &str {
        match self {
            Self::InFlight { fingerprint } | Self::Done { fingerprint, .. } => fingerprint,
        }
    }
}

/// The bytes up to the next line break, and what follows it.
fn line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = bytes.iter().position(|&b| b == b'\n')?;
    Some((&bytes[..end], &bytes[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_survives_the_round_trip_and_anything_else_is_not_a_record() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.append("x-two", HeaderValue::from_static("a"));
        headers.append("x-two", HeaderValue::from_static(""));
        headers.insert("x-bytes", HeaderValue::from_bytes(b"\xff:\t b").unwrap());
        let body = b"{\"id\":1}\n\nRGI1 F 1 t\n";
        let mut value = head_line(true, 99, "tok").into_bytes();
        value.extend(done("fp", StatusCode::CREATED, &headers, body));
        let Some(Record::Done {
            fingerprint,
            response,
        }) = Record::decode(&value)
        else {
            panic!("not decoded");
        };
        assert_eq!(fingerprint, "fp");
        assert_eq!(response.status, StatusCode::CREATED);
        assert_eq!(response.headers, headers);
        assert_eq!(&response.body[..], body);
        let mut claim = head_line(false, 5, "tok").into_bytes();
        claim.extend(in_flight("fp"));
        assert_eq!(
            split(&claim).map(|(h, _)| h),
            Some(Head {
                done: false,
                until: 5,
                token: "tok"
            })
        );
        assert!(matches!(
            Record::decode(&claim),
            Some(Record::InFlight { .. })
        ));
        for foreign in [
            &b""[..],
            b"hello",
            b"RGI1 X 1 t\nfp\n",
            b"RGI1 F x t\nfp\n",
            b"RGI1 F 1\nfp\n",
            b"RGI1 F 1 t\nfp",
            b"RGI1 F 1 t\nfp\nmore",
            b"RGI1 D 1 t\nfp\n20x\n\n",
            b"RGI1 D 1 t\nfp\n200\nno colon\n\n",
            b"RGI1 D 1 t\nfp\n200\nx: a",
        ] {
            assert!(Record::decode(foreign).is_none(), "{foreign:?}");
        }
    }
}
