//! What is cached: which requests, which responses, for how long, under which key.

use std::time::Duration;

use http::header::{
    AUTHORIZATION, CACHE_CONTROL, COOKIE, HOST, PROXY_AUTHORIZATION, SET_COOKIE, VARY,
};
use http::{HeaderMap, HeaderName, Method, StatusCode, request, response};

use super::query::QueryKey;
use super::store::digest;

/// The request-side settings of a layer.
#[derive(Clone, Debug)]
pub(crate) struct KeyPolicy {
    /// Request headers whose values enter the key, lower case, sorted, no duplicates.
    pub(crate) vary: Vec<HeaderName>,
    /// Request headers that carry credentials: a request with one of them passes uncached
    /// unless the header is in `vary`.
    pub(crate) credentials: Vec<HeaderName>,
    /// Requests that carry a `Cookie` are cached (cookies stay out of the key unless in `vary`).
    pub(crate) ignore_cookies: bool,
    /// The host (the URI's authority, else `Host`) is in the key.
    pub(crate) host: bool,
    pub(crate) query: QueryKey,
    /// The layer's own name, mixed into the namespace.
    pub(crate) name: String,
    /// The digest of the name and of the settings that say what a key holds (`vary`, `host`,
    /// `query`): layers that key differently, or are named differently, never share entries.
    pub(crate) namespace: String,
}

impl Default for KeyPolicy {
    fn default() -> Self {
        let mut policy = Self {
            vary: Vec::new(),
            credentials: vec![AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION],
            ignore_cookies: false,
            host: true,
            query: QueryKey::exact(),
            name: String::new(),
            namespace: String::new(),
        };
        policy.seal();
        policy
    }
}

impl KeyPolicy {
    /// Sorts the header lists and computes the namespace; after every change.
    pub(crate) fn seal(&mut self) {
        for list in [&mut self.vary, &mut self.credentials] {
            list.sort_by(|a, b| a.as_str().cmp(b.as_str()));
            list.dedup();
        }
        // What a key means: which request inputs it holds. Which requests are cached at all
        // (credentials, cookies) does not change that, so layers differing only there share.
        let flags = [u8::from(self.host)];
        let query = self.query.describe();
        let mut parts: Vec<&[u8]> = vec![
            b"rg-cache-2",
            self.name.as_bytes(),
            &flags,
            query.as_bytes(),
        ];
        parts.extend(self.vary.iter().map(|h| h.as_str().as_bytes()));
        self.namespace = digest(parts);
    }

    /// The variant digest of a request, or `None` when it is not cached (not `GET`/`HEAD`; it
    /// carries credentials that are not part of the key). Call it after
    /// [`normalize`](Self::normalize). A request that carried a session may be served an
    /// entry (entries are made only of pages that depend on no session) but never fills one.
    pub(crate) fn key(&self, req: &request::Parts) -> Option<String> {
        if req.method != Method::GET && req.method != Method::HEAD {
            return None;
        }
        let keyed = |h: &HeaderName| self.vary.contains(h);
        let unkeyed_credential = self.credentials.iter().any(|h| {
            req.headers.contains_key(h) && !keyed(h) && !(self.ignore_cookies && *h == COOKIE)
        });
        if unkeyed_credential {
            return None;
        }
        let host = self.host.then(|| host_of(req)).flatten();
        let mut parts: Vec<&[u8]> = vec![
            self.namespace.as_bytes(),
            req.method.as_str().as_bytes(),
            host.as_deref().map_or(&b"\0nohost"[..], str::as_bytes),
            original_path(req).as_bytes(),
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

    /// Rewrites the request's query as [`QueryKey`] says, so that the handler reads what the
    /// key holds. A URI that no longer parses (it cannot: only whole parameters are dropped)
    /// is left as it was.
    pub(crate) fn normalize(&self, req: &mut request::Parts) {
        if req.method != Method::GET && req.method != Method::HEAD {
            return;
        }
        let Some(query) = self.query.normalize(req.uri.query()) else {
            return;
        };
        let path_and_query = match query {
            Some(q) => format!("{}?{q}", req.uri.path()),
            None => req.uri.path().to_owned(),
        };
        let mut parts = req.uri.clone().into_parts();
        match path_and_query.parse() {
            Ok(pq) => parts.path_and_query = Some(pq),
            Err(_) => return,
        }
        if let Ok(uri) = http::Uri::from_parts(parts) {
            req.uri = uri;
        }
    }
}

/// The request's host, lower case: the URI's authority (HTTP/2, absolute form), else `Host`.
fn host_of(req: &request::Parts) -> Option<String> {
    if let Some(authority) = req.uri.authority() {
        return Some(authority.as_str().to_ascii_lowercase());
    }
    let mut values = req.headers.get_all(HOST).iter();
    let first = values.next()?;
    let mut host = String::from_utf8_lossy(first.as_bytes()).to_ascii_lowercase();
    // Two `Host` headers: both in the key, never mistaken for one.
    for more in values {
        host.push('\0');
        host.push_str(&String::from_utf8_lossy(more.as_bytes()).to_ascii_lowercase());
    }
    Some(host)
}

/// The path the client asked for: axum's `OriginalUri` when a `nest` stripped a prefix.
fn original_path(req: &request::Parts) -> &str {
    #[cfg(feature = "axum")]
    if let Some(original) = req.extensions.get::<axum::extract::OriginalUri>() {
        return original.0.path();
    }
    req.uri.path()
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
    let explicit = cc.s_maxage.or(cc.max_age);
    if res.status.is_client_error() || res.status.is_server_error() {
        // Any path spelling is a 404 of its own: an error is cached only when the handler
        // says for how long.
        if explicit.is_none() {
            return Err("error status without max-age");
        }
    }
    let fresh = explicit.unwrap_or(limits.ttl);
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

    /// The default policy, with `header` in the key.
    fn varying(header: HeaderName) -> KeyPolicy {
        let mut policy = KeyPolicy {
            vary: vec![header],
            ..KeyPolicy::default()
        };
        policy.seal();
        policy
    }

    const LIMITS: Lifetimes = Lifetimes {
        ttl: Duration::from_secs(60),
        max_ttl: Duration::from_secs(3600),
        stale: Duration::ZERO,
    };

    fn life_of(headers: &[(&str, &str)]) -> Result<Life, &'static str> {
        life(
            &res(headers),
            &varying(http::header::ACCEPT_ENCODING),
            LIMITS,
        )
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
        let policy = varying(http::header::ACCEPT_LANGUAGE);
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
        assert!(key(get().header("proxy-authorization", "Basic x")).is_none());
        // The host is in the key: from the authority, else the Host header, in any case.
        let host = |h: &str| key(get().header("host", h)).unwrap();
        assert_ne!(host("a.example"), host("b.example"));
        assert_ne!(host("a.example"), base);
        assert_eq!(host("A.Example"), host("a.example"));
        assert_eq!(
            key(http::Request::get("http://a.example/a?x=1")).unwrap(),
            host("a.example")
        );
        let mut hostless = policy.clone();
        hostless.host = false;
        hostless.seal();
        let key2 = |b: http::request::Builder| hostless.key(&b.body(()).unwrap().into_parts().0);
        assert_eq!(
            key2(get().header("host", "a.example")),
            key2(get().header("host", "b.example"))
        );
        // Another namespace, another key.
        assert_ne!(key2(get()).unwrap(), base);
        let mut named = policy.clone();
        named.name = "admin".to_owned();
        named.seal();
        assert_ne!(
            named.key(&get().body(()).unwrap().into_parts().0).unwrap(),
            base
        );
        // Other credential headers, when configured.
        let mut token = policy.clone();
        token
            .credentials
            .push(HeaderName::from_static("x-session-token"));
        token.seal();
        let parts = get()
            .header("x-session-token", "t")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        assert!(token.key(&parts).is_none());
        assert!(policy.key(&parts).is_some());
    }

    #[test]
    fn errors_are_cached_only_with_an_explicit_lifetime() {
        let keyed = KeyPolicy::default();
        let limits = Lifetimes {
            ttl: Duration::from_secs(60),
            max_ttl: Duration::from_secs(3600),
            stale: Duration::ZERO,
        };
        let of = |status: u16, cc: Option<&str>| {
            let mut b = http::Response::builder().status(status);
            if let Some(cc) = cc {
                b = b.header("cache-control", cc);
            }
            life(&b.body(()).unwrap().into_parts().0, &keyed, limits)
        };
        assert!(of(200, None).is_ok());
        for status in [404, 410, 501] {
            assert!(of(status, None).is_err(), "{status}");
            assert!(of(status, Some("public")).is_err(), "{status}");
            assert_eq!(
                of(status, Some("max-age=30")).map(|l| l.fresh),
                Ok(Duration::from_secs(30))
            );
        }
    }
}
