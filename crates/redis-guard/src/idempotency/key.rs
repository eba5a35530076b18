//! The `Idempotency-Key` header, the client it is scoped to, and the digests that name a record
//! and fingerprint a request.

use std::fmt::Write as _;
use std::sync::Arc;

use http::request::Parts;
use http::{HeaderMap, HeaderName};
use sha2::{Digest, Sha256};

/// The request header (draft-ietf-httpapi-idempotency-key-header).
pub(crate) const HEADER: HeaderName = HeaderName::from_static("idempotency-key");

/// The longest key accepted, in bytes (after unquoting).
pub(crate) const MAX_KEY_LEN: usize = 255;

/// The key a request carries: `Ok(None)` without the header, `Err` (what is wrong) when it
/// cannot be used.
///
/// Accepted: the draft's Structured Field String (`"abc"`, with `\"` and `\\` escapes) and a
/// bare key (`abc`: visible ASCII without `"`, `\`, `,` or `;`), the same key either way. One
/// header line; 1 to [`MAX_KEY_LEN`] bytes; no parameters after the string.
pub(crate) fn parse(headers: &HeaderMap) -> Result<Option<Vec<u8>>, &'static str> {
    let mut values = headers.get_all(&HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("the request carries more than one Idempotency-Key header");
    }
    let raw = value.as_bytes().trim_ascii();
    let key = match raw.strip_prefix(b"\"") {
        Some(quoted) => unquote(quoted)?,
        None if raw.iter().all(|&b| bare(b)) => raw.to_vec(),
        None => return Err("the Idempotency-Key is neither a quoted string nor a bare token"),
    };
    if key.is_empty() {
        return Err("the Idempotency-Key is empty");
    }
    if key.len() > MAX_KEY_LEN {
        return Err("the Idempotency-Key is longer than 255 bytes");
    }
    Ok(Some(key))
}

/// A byte of a bare key.
fn bare(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && !matches!(b, b'"' | b'\\' | b',' | b';')
}

/// The content of an sf-string whose opening quote is gone.
fn unquote(quoted: &[u8]) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::with_capacity(quoted.len());
    let mut bytes = quoted.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'"' if bytes.as_slice().is_empty() => return Ok(out),
            b'"' => return Err("the quoted Idempotency-Key is followed by more text"),
            b'\\' => match bytes.next() {
                Some(&c @ (b'"' | b'\\')) => out.push(c),
                _ => {
                    return Err("the quoted Idempotency-Key has an escape other than \\\" or \\\\");
                }
            },
            0x20..=0x7e => out.push(b),
            _ => return Err("the quoted Idempotency-Key holds a byte outside visible ASCII"),
        }
    }
    Err("the quoted Idempotency-Key has no closing quote")
}

/// A closure that names the client of a request.
pub(crate) type ScopeFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// Who a key belongs to: keys of two clients never meet.
#[derive(Clone)]
pub(crate) enum Scope {
    /// The session's user, from the session layer outside (feature `session`): a session
    /// without a user is the anonymous scope; a request with no session at all is refused.
    SessionUser,
    /// One scope for every request: the key alone tells clients apart.
    Shared,
    /// The value of a request header (an API key).
    Header(HeaderName),
    /// What the closure says.
    Custom(ScopeFn),
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SessionUser => f.write_str("SessionUser"),
            Self::Shared => f.write_str("Shared"),
            Self::Header(name) => f.debug_tuple("Header").field(name).finish(),
            Self::Custom(_) => f.write_str("Custom"),
        }
    }
}

/// Why the scope of a request is not known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unscoped {
    /// The session could not be loaded (its store failed).
    #[cfg_attr(not(feature = "session"), allow(dead_code))]
    SessionFailed,
    /// The scope is the session's user and the request went through no session layer.
    NoSession,
}

impl Scope {
    /// The client `parts` comes from, `Ok(None)` when it names none (the anonymous scope).
    pub(crate) async fn of(&self, parts: &Parts) -> Result<Option<Vec<u8>>, Unscoped> {
        match self {
            Self::SessionUser => session_user(parts).await,
            Self::Shared => Ok(None),
            Self::Header(name) => Ok(parts.headers.get(name).map(|v| v.as_bytes().to_vec())),
            Self::Custom(scope) => Ok(scope(parts).map(String::into_bytes)),
        }
    }
}

/// The user of the session a session layer outside put in the request: `Ok(None)` for a
/// session without a user (an anonymous visitor).
#[cfg(feature = "session")]
async fn session_user(parts: &Parts) -> Result<Option<Vec<u8>>, Unscoped> {
    use crate::session::{Session, SessionUser};
    if let Some(SessionUser(user)) = parts.extensions.get::<SessionUser>() {
        return Ok(Some(user.clone().into_bytes()));
    }
    let Some(session) = parts.extensions.get::<Session>() else {
        return Err(Unscoped::NoSession);
    };
    match session.user().await {
        Ok(user) => Ok(user.map(String::into_bytes)),
        Err(e) => {
            tracing::warn!(error = %e, "idempotency: the session could not be loaded to scope the key");
            Err(Unscoped::SessionFailed)
        }
    }
}

// Never reached: without `session` the layer does not build with this scope.
#[cfg(not(feature = "session"))]
#[allow(clippy::unused_async)]
async fn session_user(_: &Parts) -> Result<Option<Vec<u8>>, Unscoped> {
    Err(Unscoped::NoSession)
}

/// The name of the record of `key` in `scope`: a digest, so no key or user id shows in Redis.
pub(crate) fn record_name(scope: Option<&[u8]>, key: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b"idempotency-key/1");
    match scope {
        Some(scope) => {
            h.update([1]);
            h.update((scope.len() as u64).to_be_bytes());
            h.update(scope);
        }
        None => h.update([0]),
    }
    h.update(key);
    hex(&h.finalize())
}

/// What makes two requests the same request: the method, the path and query the client asked
/// for, and the body.
pub(crate) fn fingerprint(parts: &Parts, body: &[u8]) -> String {
    let target = original_target(parts);
    let mut h = Sha256::new();
    h.update((parts.method.as_str().len() as u64).to_be_bytes());
    h.update(parts.method.as_str());
    h.update((target.len() as u64).to_be_bytes());
    h.update(target);
    h.update(Sha256::digest(body));
    hex(&h.finalize())
}

/// The path and query the client asked for: axum's `OriginalUri` when a `nest` stripped a
/// prefix (two nested routes never share a fingerprint).
fn original_target(parts: &Parts) -> &str {
    #[cfg(feature = "axum")]
    if let Some(original) = parts.extensions.get::<axum::extract::OriginalUri>() {
        return original.0.path_and_query().map_or("/", |p| p.as_str());
    }
    parts.uri.path_and_query().map_or("/", |p| p.as_str())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(64), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(values: &[&[u8]]) -> Result<Option<Vec<u8>>, &'static str> {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(&HEADER, http::HeaderValue::from_bytes(v).unwrap());
        }
        parse(&headers)
    }

    #[test]
    fn quoted_and_bare_keys_are_one_key_and_the_rest_is_refused() {
        let abc = Ok(Some(b"abc".to_vec()));
        assert_eq!(key(&[]), Ok(None));
        assert_eq!(key(&[b"\"abc\""]), abc);
        assert_eq!(key(&[b"abc"]), abc);
        assert_eq!(key(&[b" \"abc\" "]), abc);
        assert_eq!(
            key(&[b"8e03978e-40d5-43e8-bc93-6894a57f9324"]),
            Ok(Some(b"8e03978e-40d5-43e8-bc93-6894a57f9324".to_vec()))
        );
        assert_eq!(
            key(&[br#""a \"b\" \\c""#]),
            Ok(Some(br#"a "b" \c"#.to_vec()))
        );
        let long = vec![b'k'; MAX_KEY_LEN];
        assert_eq!(key(&[&long]), Ok(Some(long.clone())));
        let too_long = vec![b'k'; MAX_KEY_LEN + 1];
        for bad in [
            &b""[..],
            b"\"\"",
            b"\"abc",
            b"\"abc\";p=1",
            b"\"a\\nb\"",
            b"\"a\tb\"",
            b"a b",
            b"a,b",
            b"a;b",
            b"\xffab",
            &too_long,
        ] {
            assert!(key(&[bad]).is_err(), "{bad:?}");
        }
        assert!(key(&[b"abc", b"abc"]).is_err());
    }

    #[test]
    fn scopes_keys_and_requests_are_told_apart() {
        let k = b"k";
        let names = [
            record_name(None, k),
            record_name(Some(b""), k),
            record_name(Some(b"alice"), k),
            record_name(Some(b"bob"), k),
            record_name(Some(b"alice"), b"k2"),
        ];
        for (i, a) in names.iter().enumerate() {
            assert_eq!(a.len(), 64);
            assert!(names[i + 1..].iter().all(|b| a != b));
        }
        let parts = crate::test_helpers::request_head::<&str>;
        let post = parts("POST", "/pay?x=1");
        let prints = [
            fingerprint(&post, b"{}"),
            fingerprint(&post, b"{ }"),
            fingerprint(&parts("PATCH", "/pay?x=1"), b"{}"),
            fingerprint(&parts("POST", "/pay?x=2"), b"{}"),
            fingerprint(&parts("POST", "/pay"), b"{}"),
        ];
        for (i, a) in prints.iter().enumerate() {
            assert!(prints[i + 1..].iter().all(|b| a != b));
        }
        assert_eq!(fingerprint(&post, b"{}"), prints[0]);
    }
}
