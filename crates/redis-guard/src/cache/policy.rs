//! What is cached: which requests, which responses, for how long, under which key.

use std::time::Duration;

use http::header::{AUTHORIZATION, CACHE_CONTROL, COOKIE, SET_COOKIE, VARY};
use http::{HeaderMap, HeaderName, Method, StatusCode, request, response};

use super::store::digest;

/// The request-side settings of a layer.
#[derive(Clone, Debug)]
pub(crate) struct KeyPolicy {
    /// Request headers whose values enter the key, lower case, sorted, no duplicates.
    pub(crate) vary: Vec<HeaderName>,
    /// Requests that carry a `Cookie` are cached (cookies stay out of the key unless in `vary`).
    pub(crate) ignore_cookies: bool,
    /// The digest of the settings above: layers that key differently never share entries.
    pub(crate) namespace: String,
}

impl KeyPolicy {
    pub(crate) fn new(mut vary: Vec<HeaderName>, ignore_cookies: bool) -> Self {
        vary.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        vary.dedup();
        let namespace = digest(
            std::iter::once(&b"rg-cache-1"[..]).chain(vary.iter().map(|h| h.as_str().as_bytes())),
        );
        Self {
            vary,
            ignore_cookies,
            namespace,
        }
    }

    /// The variant digest of a request, or `None` when it is not cached (not `GET`/`HEAD`; it
    /// carries credentials that are not part of the key).
    pub(crate) fn key(&self, req: &request::Parts) -> Option<String> {
        if req.method != Method::GET && req.method != Method::HEAD {
            return None;
        }
        let keyed = |h: &HeaderName| self.vary.contains(h);
        if req.headers.contains_key(AUTHORIZATION) && !keyed(&AUTHORIZATION) {
            return None;
        }
        if req.headers.contains_key(COOKIE) && !keyed(&COOKIE) && !self.ignore_cookies {
            return None;
        }
        let mut parts: Vec<&[u8]> = vec![
            self.namespace.as_bytes(),
            req.method.as_str().as_bytes(),
            req.uri.path().as_bytes(),
            req.uri.query().map_or(&b"\0none"[..], str::as_bytes),
        ];
        let mut counts = Vec::with_capacity(self.vary.len());
        for name in &self.vary {
            counts.push(req.headers.get_all(name).iter().count().to_string());
        }
        for (name, count) in self.vary.iter().zip(&counts) {
            parts.push(name.as_str().as_bytes());
            parts.push(count.as_bytes());
            parts.extend(
                req.headers
                    .get_all(name)
                    .iter()
                    .map(http::HeaderValue::as_bytes),
            );
        }
        Some(digest(parts))
    }
}

/// The response-side settings of a layer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lifetimes {
    /// For a response without `max-age` / `s-maxage`.
    pub(crate) ttl: Duration,
    /// The most any entry stays fresh, and the most it is served stale after that.
    pub(crate) max_ttl: Duration,
    /// The stale window of a response without `stale-while-revalidate`.
    pub(crate) stale: Duration,
}

/// How long a response stays fresh, then stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Life {
    pub(crate) fresh: Duration,
    pub(crate) stale: Duration,
}

/// Statuses cached (RFC 9111's heuristically cacheable ones that a handler means to repeat).
fn cacheable_status(s: StatusCode) -> bool {
    matches!(
        s.as_u16(),
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// How long `res` may be cached, or why it is not.
pub(crate) fn life(
    res: &response::Parts,
    keyed: &KeyPolicy,
    limits: Lifetimes,
) -> Result<Life, &'static str> {
    if !cacheable_status(res.status) {
        return Err("status");
    }
    if res.headers.contains_key(SET_COOKIE) {
        return Err("Set-Cookie");
    }
    vary_is_keyed(&res.headers, keyed)?;
    let cc = CacheControl::parse(&res.headers);
    if cc.no_store || cc.private || cc.no_cache {
        return Err("Cache-Control");
    }
    let fresh = cc.s_maxage.or(cc.max_age).unwrap_or(limits.ttl);
    if fresh.is_zero() {
        return Err("max-age=0");
    }
    let stale = cc.swr.unwrap_or(limits.stale);
    Ok(Life {
        fresh: fresh.min(limits.max_ttl),
        stale: stale.min(limits.max_ttl),
    })
}

/// Every header the response varies on is in the key; `Vary: *` never is.
fn vary_is_keyed(headers: &HeaderMap, keyed: &KeyPolicy) -> Result<(), &'static str> {
    for value in headers.get_all(VARY) {
        let Ok(value) = value.to_str() else {
            return Err("Vary");
        };
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let known =
                HeaderName::from_bytes(name.as_bytes()).is_ok_and(|n| keyed.vary.contains(&n));
            if !known {
                return Err("Vary");
            }
        }
    }
    Ok(())
}

/// The directives of the response's `Cache-Control` the cache acts on.
#[derive(Debug, Default, PartialEq, Eq)]
struct CacheControl {
    no_store: bool,
    no_cache: bool,
    private: bool,
    max_age: Option<Duration>,
    s_maxage: Option<Duration>,
    swr: Option<Duration>,
}

impl CacheControl {
    fn parse(headers: &HeaderMap) -> Self {
        let mut cc = Self::default();
        for value in headers.get_all(CACHE_CONTROL) {
            // A value that is not text hides what it says: not cached.
            let Ok(value) = value.to_str() else {
                cc.no_store = true;
                continue;
            };
            for (name, arg) in directives(value) {
                let secs = || {
                    arg.and_then(|a| a.parse::<u64>().ok())
                        .map(Duration::from_secs)
                };
                match name.to_ascii_lowercase().as_str() {
                    "no-store" => cc.no_store = true,
                    // `no-cache="Set-Cookie"` names headers to drop on reuse; we store none of
                    // those (a Set-Cookie is never cached), but be strict: not cached.
                    "no-cache" => cc.no_cache = true,
                    "private" => cc.private = true,
                    // A malformed age is a zero age (RFC 9111 §4.2.1): not cached.
                    "max-age" => cc.max_age = Some(secs().unwrap_or_default()),
                    "s-maxage" => cc.s_maxage = Some(secs().unwrap_or_default()),
                    "stale-while-revalidate" => cc.swr = secs(),
                    _ => {}
                }
            }
        }
        cc
    }
}

/// `(name, argument)` of each directive; quoted arguments keep their commas.
fn directives(value: &str) -> impl Iterator<Item = (&str, Option<&str>)> {
    let mut rest = value;
    std::iter::from_fn(move || {
        loop {
            rest = rest.trim_start_matches([' ', '\t', ',']);
            if rest.is_empty() {
                return None;
            }
            let mut quoted = false;
            let end = rest
                .char_indices()
                .find(|&(_, c)| {
                    if c == '"' {
                        quoted = !quoted;
                    }
                    c == ',' && !quoted
                })
                .map_or(rest.len(), |(i, _)| i);
            let (item, tail) = rest.split_at(end);
            rest = tail;
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            return Some(match item.split_once('=') {
                Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
                None => (item, None),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(headers: &[(&str, &str)]) -> response::Parts {
        let mut b = http::Response::builder();
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    const LIMITS: Lifetimes = Lifetimes {
        ttl: Duration::from_secs(60),
        max_ttl: Duration::from_secs(3600),
        stale: Duration::ZERO,
    };

    fn life_of(headers: &[(&str, &str)]) -> Result<Life, &'static str> {
        let keyed = KeyPolicy::new(vec![http::header::ACCEPT_ENCODING], false);
        life(&res(headers), &keyed, LIMITS)
    }

    #[test]
    fn cache_control_sets_the_lifetime_or_forbids_caching() {
        let secs = Duration::from_secs;
        assert_eq!(life_of(&[]).unwrap().fresh, secs(60));
        let l = life_of(&[(
            "cache-control",
            "public, max-age=30, stale-while-revalidate=5",
        )]);
        assert_eq!(
            l.unwrap(),
            Life {
                fresh: secs(30),
                stale: secs(5)
            }
        );
        let l = life_of(&[
            ("cache-control", "max-age=30"),
            ("cache-control", "s-maxage=90"),
        ]);
        assert_eq!(l.unwrap().fresh, secs(90));
        assert_eq!(
            life_of(&[("cache-control", "max-age=999999")])
                .unwrap()
                .fresh,
            secs(3600)
        );
        for refused in [
            "no-store",
            "private",
            "No-Cache",
            "max-age=0",
            "max-age=soon",
            "private=\"x, y\", max-age=60",
        ] {
            assert!(life_of(&[("cache-control", refused)]).is_err(), "{refused}");
        }
        assert!(life_of(&[("set-cookie", "a=b")]).is_err());
        assert!(life_of(&[("vary", "*")]).is_err());
        assert!(life_of(&[("vary", "accept-language")]).is_err());
        assert!(life_of(&[("vary", "Accept-Encoding")]).is_ok());
    }

    #[test]
    fn keys_separate_variants_and_skip_credentials() {
        let policy = KeyPolicy::new(vec![http::header::ACCEPT_LANGUAGE], false);
        let key = |b: http::request::Builder| policy.key(&b.body(()).unwrap().into_parts().0);
        let get = || http::Request::get("/a?x=1");
        let base = key(get()).unwrap();
        assert_eq!(key(get()).unwrap(), base);
        assert_ne!(key(get().header("accept-language", "fr")).unwrap(), base);
        assert_ne!(key(http::Request::head("/a?x=1")).unwrap(), base);
        assert_ne!(key(http::Request::get("/a?x=2")).unwrap(), base);
        assert_ne!(key(http::Request::get("/a")).unwrap(), base);
        assert_eq!(key(get().header("x-other", "1")).unwrap(), base);
        assert!(key(http::Request::post("/a")).is_none());
        assert!(key(get().header("cookie", "id=1")).is_none());
        assert!(key(get().header("authorization", "Bearer x")).is_none());
    }
}
