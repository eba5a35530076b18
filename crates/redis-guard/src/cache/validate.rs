//! Conditional requests answered from a stored entry (RFC 9110 §13): `If-None-Match` against
//! the entry's `ETag`, else `If-Modified-Since` against its `Last-Modified`; the strong
//! `ETag` computed for an entry whose handler sent none; and the layer's own conditional
//! request that revalidates a stale entry with the handler (RFC 9111 §4.3), with the `304`
//! that freshens it.

use std::time::SystemTime;

use base64::Engine as _;
use http::header::Entry;
use http::header::{
    AGE, CACHE_CONTROL, CONNECTION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_LOCATION,
    CONTENT_RANGE, DATE, ETAG, EXPIRES, HeaderName, IF_MODIFIED_SINCE, IF_NONE_MATCH,
    LAST_MODIFIED, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING,
    UPGRADE, VARY,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use sha2::{Digest, Sha256};

/// What a request asks to be answered `304 Not Modified` on.
#[derive(Debug)]
pub(crate) enum Condition {
    /// Nothing (or only headers that are ignored: malformed, or on another method).
    Unconditional,
    /// `If-None-Match`, every field line of it.
    NoneMatch(Vec<HeaderValue>),
    /// `If-Modified-Since`, parsed.
    Since(SystemTime),
}

impl Condition {
    /// The request's condition, its headers removed: the cache answers them, and the handler
    /// computes an entry for every client (given a client's validators it could answer `304`,
    /// which is no entry, and a refresh would leave a hit-for-pass marker in place of the
    /// entry). `If-Modified-Since` counts only without `If-None-Match`, on `GET` and `HEAD`,
    /// and when it is one valid HTTP-date (RFC 9110 §13.1.3).
    pub(crate) fn take(method: &Method, headers: &mut HeaderMap) -> Self {
        // Each header found and removed in one look-up (a request usually has neither).
        let since = match headers.entry(IF_MODIFIED_SINCE) {
            Entry::Occupied(e) => {
                let mut all = e.remove_entry_mult().1;
                match (all.next(), all.next()) {
                    (Some(v), None) => v
                        .to_str()
                        .ok()
                        .and_then(|v| httpdate::parse_http_date(v).ok()),
                    _ => None,
                }
            }
            Entry::Vacant(_) => None,
        };
        let tags: Vec<HeaderValue> = match headers.entry(IF_NONE_MATCH) {
            Entry::Occupied(e) => e.remove_entry_mult().1.collect(),
            Entry::Vacant(_) => Vec::new(),
        };
        if !tags.is_empty() {
            return Self::NoneMatch(tags);
        }
        match since {
            Some(since) if method == Method::GET || method == Method::HEAD => Self::Since(since),
            _ => Self::Unconditional,
        }
    }

    /// Whether the stored response (`status`, `headers`) answers this request with a `304`.
    pub(crate) fn unchanged(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        // RFC 9110 §13.2.1: preconditions apply only to what would be a 2xx.
        if !status.is_success() {
            return false;
        }
        match self {
            Self::Unconditional => false,
            Self::NoneMatch(values) => {
                let stored = one_etag(headers).and_then(|t| opaque(t.as_bytes()));
                values.iter().any(|v| listed(v.as_bytes(), stored))
            }
            // RFC 9111 §4.3.2: without a `Last-Modified`, the stored response's `Date`.
            Self::Since(since) => one_date(headers, &LAST_MODIFIED)
                .or_else(|| one_date(headers, &DATE))
                .is_some_and(|modified| modified <= *since),
        }
    }
}

/// The stored response's one well-formed `ETag`, if it has one.
fn one_etag(headers: &HeaderMap) -> Option<&HeaderValue> {
    let mut etags = headers.get_all(ETAG).iter();
    match (etags.next(), etags.next()) {
        (Some(one), None) if opaque(one.as_bytes()).is_some() => Some(one),
        _ => None,
    }
}

/// Whether a stored response carries a validator the handler can be asked about: one
/// well-formed `ETag`, or one valid `Last-Modified`.
pub(crate) fn has_validator(headers: &HeaderMap) -> bool {
    one_etag(headers).is_some() || one_date(headers, &LAST_MODIFIED).is_some()
}

/// Makes `request` ask the handler whether the stored response (its `stored` headers) is
/// still current (RFC 9111 §4.3.1): `If-None-Match` with its `ETag`, else
/// `If-Modified-Since` with its `Last-Modified`. Whether it asked (`false`: no validator).
/// The client's own conditional headers were taken before ([`Condition::take`]).
pub(crate) fn ask(stored: &HeaderMap, request: &mut HeaderMap) -> bool {
    if let Some(etag) = one_etag(stored) {
        request.insert(IF_NONE_MATCH, etag.clone());
        return true;
    }
    if one_date(stored, &LAST_MODIFIED).is_some()
        && let Some(modified) = stored.get(LAST_MODIFIED)
    {
        request.insert(IF_MODIFIED_SINCE, modified.clone());
        return true;
    }
    false
}

/// Fields a `304` does not update in the stored response (RFC 9111 §3.2): those that describe
/// the stored body or belong to one connection.
static NOT_UPDATED: [HeaderName; 11] = [
    CONTENT_LENGTH,
    CONTENT_ENCODING,
    CONTENT_RANGE,
    TRANSFER_ENCODING,
    CONNECTION,
    TE,
    TRAILER,
    UPGRADE,
    PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION,
    HeaderName::from_static("keep-alive"),
];

/// Freshens the `stored` headers with those of a `304` (`fresh`) that answered the layer's
/// conditional request (RFC 9111 §4.3.4): each field the `304` carries replaces the stored
/// one, but for those of [`NOT_UPDATED`]. The response's age and date are the `304`'s (the
/// stored ones are dropped when it has none: it was current when it arrived). `false`, and
/// nothing changed, when the `304` names another representation: an `ETag` that is not the
/// stored one (then it must not update it).
pub(crate) fn freshen(stored: &mut HeaderMap, fresh: &HeaderMap) -> bool {
    if fresh.contains_key(ETAG) {
        let theirs = one_etag(fresh).and_then(|t| opaque(t.as_bytes()));
        let ours = one_etag(stored).and_then(|t| opaque(t.as_bytes()));
        if theirs.is_none() || theirs != ours {
            return false;
        }
    }
    stored.remove(AGE);
    stored.remove(DATE);
    for name in fresh.keys() {
        if NOT_UPDATED.contains(name) {
            continue;
        }
        stored.remove(name);
        for value in fresh.get_all(name) {
            stored.append(name.clone(), value.clone());
        }
    }
    true
}

/// The one value of `name`, as an HTTP-date; `None` when absent, repeated or malformed.
fn one_date(headers: &HeaderMap, name: &HeaderName) -> Option<SystemTime> {
    let mut all = headers.get_all(name).iter();
    match (all.next(), all.next()) {
        (Some(v), None) => httpdate::parse_http_date(v.to_str().ok()?).ok(),
        _ => None,
    }
}

/// The opaque tag of an entity-tag (`"x"` or `W/"x"`), quotes included; `None` if malformed.
fn opaque(tag: &[u8]) -> Option<&[u8]> {
    let tag = tag.strip_prefix(b"W/").unwrap_or(tag);
    let inner = tag.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    (!inner.contains(&b'"')).then_some(tag)
}

/// Whether the `If-None-Match` line `list` (`*` or entity-tags, comma-separated) names the
/// stored opaque tag, by weak comparison (RFC 9110 §8.8.3.2). A malformed line matches
/// nothing: the request gets the whole response. One pass over the bytes, whatever the length.
fn listed(list: &[u8], stored: Option<&[u8]>) -> bool {
    let mut rest = list;
    let mut found = false;
    loop {
        rest = rest.trim_ascii_start();
        while let Some(more) = rest.strip_prefix(b",") {
            rest = more.trim_ascii_start();
        }
        if rest.is_empty() {
            return found;
        }
        if let Some(more) = rest.strip_prefix(b"*") {
            found = true;
            rest = more;
        } else {
            let tag = rest.strip_prefix(b"W/").unwrap_or(rest);
            let Some(inner) = tag.strip_prefix(b"\"") else {
                return false;
            };
            let Some(end) = inner.iter().position(|&b| b == b'"') else {
                return false;
            };
            let (this, more) = tag.split_at(end + 2);
            found |= stored == Some(this);
            rest = more;
        }
        // Each element ends at a comma or at the end of the line.
        let after = rest.trim_ascii_start();
        if !(after.is_empty() || after.starts_with(b",")) {
            return false;
        }
        rest = after;
    }
}

/// The headers a `304` keeps from the stored response (RFC 9110 §15.4.5), `Last-Modified` and
/// an inner cache's `Cache-Status` included.
pub(crate) fn not_modified(headers: &mut HeaderMap) {
    let keep = [
        CACHE_CONTROL,
        CONTENT_LOCATION,
        DATE,
        ETAG,
        EXPIRES,
        LAST_MODIFIED,
        VARY,
        HeaderName::from_static("cache-status"),
    ];
    let kept = std::mem::take(headers);
    let mut name = None;
    for (n, value) in kept {
        if n.is_some() {
            name = n;
        }
        if let Some(n) = name.as_ref().filter(|n| keep.contains(n)) {
            headers.append(n.clone(), value);
        }
    }
}

/// A strong `ETag` for `body`: `"` + base64url of the first 16 bytes of its SHA-256 + `"`.
pub(crate) fn etag_of(body: &[u8]) -> Option<HeaderValue> {
    let digest = Sha256::digest(body);
    let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..16]);
    HeaderValue::from_str(&format!("\"{text}\"")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> Condition {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let c = Condition::take(&Method::GET, &mut map);
        assert!(map.is_empty(), "the condition's headers are taken");
        c
    }

    fn stored(headers: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn if_none_match_compares_weakly_and_ignores_malformed_lists() {
        let entry = stored(&[("etag", "W/\"v1\"")]);
        let ok = StatusCode::OK;
        for (header, unchanged) in [
            ("\"v1\"", true),
            ("W/\"v1\"", true),
            ("\"v0\", W/\"v1\"", true),
            (" , \"v0\" ,,\"v1\" ", true),
            ("*", true),
            ("\"a,b\", \"v1\"", true),
            ("\"v2\"", false),
            ("\"v1", false),
            ("v1", false),
            ("\"v1\"x", false),
            ("\"v1\" \"v1\"", false),
            ("", false),
        ] {
            let c = request(&[("if-none-match", header)]);
            assert_eq!(c.unchanged(ok, &entry), unchanged, "{header:?}");
        }
        let c = request(&[("if-none-match", "\"v0\""), ("if-none-match", "\"v1\"")]);
        assert!(c.unchanged(ok, &entry), "every field line counts");
        // `*` matches any stored response, with or without an ETag; no 304 but for a 2xx.
        let c = request(&[("if-none-match", "*")]);
        assert!(c.unchanged(ok, &HeaderMap::new()));
        assert!(!c.unchanged(StatusCode::NOT_FOUND, &entry));
        // A malformed stored tag matches no listed tag.
        let c = request(&[("if-none-match", "\"v1\"")]);
        assert!(!c.unchanged(ok, &stored(&[("etag", "v1")])));
        // A huge list is one pass, and never a panic.
        let huge = "\"x\", ".repeat(20_000) + "\"v1\"";
        assert!(request(&[("if-none-match", &huge)]).unchanged(ok, &entry));
    }

    #[test]
    fn if_modified_since_needs_a_date_and_no_if_none_match() {
        let entry = stored(&[("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT")]);
        let ok = StatusCode::OK;
        for (since, unchanged) in [
            ("Sun, 06 Nov 1994 08:49:37 GMT", true),
            ("Sunday, 06-Nov-94 08:49:37 GMT", true),
            ("Sun Nov  6 08:49:37 1994", true),
            ("Mon, 07 Nov 1994 08:49:37 GMT", true),
            ("Sun, 06 Nov 1994 08:49:36 GMT", false),
            ("yesterday", false),
            ("Sun, 99 Nov 1994 08:49:37 GMT", false),
        ] {
            let c = request(&[("if-modified-since", since)]);
            assert_eq!(c.unchanged(ok, &entry), unchanged, "{since:?}");
        }
        let late = "Mon, 07 Nov 1994 08:49:37 GMT";
        let c = request(&[("if-none-match", "\"other\""), ("if-modified-since", late)]);
        assert!(!c.unchanged(ok, &entry), "If-None-Match wins");
        assert!(!request(&[("if-modified-since", late)]).unchanged(ok, &HeaderMap::new()));
        // RFC 9111 §4.3.2: no Last-Modified, the stored Date.
        let dated = stored(&[("date", "Sun, 06 Nov 1994 08:49:37 GMT")]);
        assert!(request(&[("if-modified-since", late)]).unchanged(ok, &dated));
        let early = "Sat, 05 Nov 1994 08:49:37 GMT";
        assert!(!request(&[("if-modified-since", early)]).unchanged(ok, &dated));
        let mut map = HeaderMap::new();
        map.insert(IF_MODIFIED_SINCE, HeaderValue::from_static(late));
        let post = Condition::take(&Method::POST, &mut map);
        assert!(!post.unchanged(ok, &entry), "GET and HEAD only");
    }

    #[test]
    fn a_304_keeps_the_validators_and_caching_headers_only() {
        let mut headers = stored(&[
            ("etag", "\"t\""),
            ("content-type", "text/plain"),
            ("content-length", "5"),
            ("vary", "accept"),
            ("vary", "accept-language"),
            ("cache-control", "max-age=5"),
            ("x-other", "1"),
        ]);
        not_modified(&mut headers);
        assert_eq!(
            headers,
            stored(&[
                ("etag", "\"t\""),
                ("vary", "accept"),
                ("vary", "accept-language"),
                ("cache-control", "max-age=5"),
            ])
        );
    }

    /// RFC 9111 §4.3.1: the layer's condition is the stored `ETag`, else its `Last-Modified`.
    #[test]
    fn rfc9111_4_3_1_the_condition_comes_from_the_stored_validators() {
        let date = "Sun, 06 Nov 1994 08:49:37 GMT";
        let asked = |headers: &[(&str, &str)]| {
            let mut req = HeaderMap::new();
            let asked = ask(&stored(headers), &mut req);
            assert_eq!(asked, has_validator(&stored(headers)), "{headers:?}");
            req
        };
        let req = asked(&[("etag", "W/\"a\""), ("last-modified", date)]);
        assert_eq!(req, stored(&[("if-none-match", "W/\"a\"")]));
        let req = asked(&[("last-modified", date)]);
        assert_eq!(req, stored(&[("if-modified-since", date)]));
        for none in [
            &[][..],
            &[("etag", "a")],
            &[("etag", "\"a\""), ("etag", "\"b\"")],
            &[("last-modified", "yesterday")],
        ] {
            assert!(asked(none).is_empty(), "{none:?}");
        }
    }

    /// RFC 9111 §4.3.4 and §3.2: a `304` replaces the stored fields it carries, but for
    /// those that describe the stored body; one that names another `ETag` changes nothing.
    #[test]
    fn rfc9111_4_3_4_a_304_freshens_the_stored_headers() {
        let mut headers = stored(&[
            ("etag", "\"a\""),
            ("cache-control", "max-age=1"),
            ("content-length", "5"),
            ("age", "30"),
            ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("x-kept", "1"),
        ]);
        let fresh = stored(&[
            ("etag", "W/\"a\""),
            ("cache-control", "max-age=60"),
            ("content-length", "0"),
            ("x-new", "2"),
        ]);
        assert!(freshen(&mut headers, &fresh));
        assert_eq!(
            headers,
            stored(&[
                ("etag", "W/\"a\""),
                ("cache-control", "max-age=60"),
                ("content-length", "5"),
                ("x-kept", "1"),
                ("x-new", "2"),
            ])
        );
        let before = headers.clone();
        for other in [("etag", "\"b\""), ("etag", "b")] {
            assert!(!freshen(&mut headers, &stored(&[other])), "{other:?}");
            assert_eq!(headers, before);
        }
    }

    #[test]
    fn computed_etags_are_strong_and_follow_the_body() {
        let a = etag_of(b"body").unwrap();
        assert_eq!(a.len(), 24, "{a:?}");
        assert!(a.as_bytes().starts_with(b"\"") && opaque(a.as_bytes()).is_some());
        assert_eq!(etag_of(b"body"), Some(a.clone()));
        assert_ne!(etag_of(b"body2"), Some(a));
    }
}
