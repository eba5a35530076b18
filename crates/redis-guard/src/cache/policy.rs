//! What is cached: which requests, which responses, for how long, under which key.

use std::time::{Duration, SystemTime};

use http::header::{
    AGE, AUTHORIZATION, CACHE_CONTROL, COOKIE, DATE, EXPIRES, HOST, IF_MODIFIED_SINCE,
    IF_NONE_MATCH, PROXY_AUTHORIZATION, SET_COOKIE, VARY,
};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, request, response};

use super::query::QueryKey;
use super::store::digest;
use super::validate::has_validator;

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
    #[cfg(test)]
    pub(crate) fn key(&self, req: &request::Parts) -> Option<String> {
        let carries = self.carries(&req.headers);
        self.cached(req, carries).then(|| self.variant_digest(req))
    }

    /// Whether the layer looks a request up: `GET` or `HEAD`, with no credentials that are not
    /// part of the key (as `carries`, the request's [`Carries`], says).
    pub(crate) fn cached(&self, req: &request::Parts, carries: Carries) -> bool {
        (req.method == Method::GET || req.method == Method::HEAD) && !carries.credential
    }

    /// What the names of `headers` (a request's) say: one pass over them, which costs less
    /// than a look-up of each header the layer reads, as a request has few.
    pub(crate) fn carries(&self, headers: &HeaderMap) -> Carries {
        let mut carries = Carries::default();
        for name in headers.keys() {
            carries.condition |= *name == IF_NONE_MATCH || *name == IF_MODIFIED_SINCE;
            carries.directives |= *name == CACHE_CONTROL;
            carries.credential |= self.credentials.contains(name)
                && !self.vary.contains(name)
                && !(self.ignore_cookies && *name == COOKIE);
        }
        carries
    }

    /// The variant digest of a request the layer looks up (see [`cached`](Self::cached)):
    /// the namespace, method, host, path, query and the `vary` headers' values.
    pub(crate) fn variant_digest(&self, req: &request::Parts) -> String {
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
        digest(parts)
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
pub(crate) fn host_of(req: &request::Parts) -> Option<String> {
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
pub(crate) fn original_path(req: &request::Parts) -> &str {
    #[cfg(feature = "axum")]
    if let Some(original) = req.extensions.get::<axum::extract::OriginalUri>() {
        return original.0.path();
    }
    req.uri.path()
}

/// The response-side settings of a layer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lifetimes {
    /// The heuristic freshness of a response without an explicit expiration time (RFC 9111
    /// §4.2.2); zero: such a response is not stored (the response cache's default). The value
    /// cache's default TTL.
    pub(crate) ttl: Duration,
    /// The most any entry stays fresh, and the most it is served stale after that.
    pub(crate) max_ttl: Duration,
    /// The stale window of a response without `stale-while-revalidate`.
    pub(crate) stale: Duration,
}

/// How long a response stays fresh, then stale, as stored. A response stale when received
/// (`fresh` zero) is stored only to be revalidated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Life {
    /// The freshness it has left when stored: its freshness lifetime less its age; zero for
    /// a response that was stale when received and has a validator (kept to be revalidated).
    pub(crate) fresh: Duration,
    /// How long it may be served stale while one request refreshes it.
    pub(crate) stale: Duration,
    /// How long past its freshness it may stand in for a failing handler.
    pub(crate) grace: Duration,
    /// Its age when stored (RFC 9111 §4.2.3, whole seconds): the `Age` it is stored with.
    pub(crate) age: u64,
}

impl Life {
    /// A response kept only to be revalidated: stale from the start, never served stale, its
    /// age on arrival `age`.
    fn revalidated_on_use(age: Duration) -> Self {
        Self {
            fresh: Duration::ZERO,
            stale: Duration::ZERO,
            grace: Duration::ZERO,
            age: age.as_secs(),
        }
    }
}

/// When a response arrived from the handler, and how long the handler took: what its age
/// is counted from (RFC 9111 §4.2.3's `response_time`, and `response_delay`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival {
    pub(crate) at: SystemTime,
    pub(crate) delay: Duration,
}

/// Statuses a response may be stored with when it states an explicit expiration (RFC 9111
/// §3): every final status but `206` (the layer does not combine partial content) and `304`
/// (an answer to a condition, not a representation).
fn storable_status(s: StatusCode) -> bool {
    s.as_u16() >= 200 && !matches!(s.as_u16(), 206 | 304)
}

/// Statuses stored under the heuristic `ttl` when the response states no expiration: the
/// heuristically cacheable ones (RFC 9110 §15.1) that are not errors (an error is kept only
/// for as long as the handler says: any path spelling is a 404 of its own).
fn heuristic_status(s: StatusCode) -> bool {
    matches!(s.as_u16(), 200 | 203 | 204 | 300 | 301 | 308)
}

/// Statuses whose meaning the layer knows (RFC 9110 §15): a response marked `must-understand`
/// with another is not stored (RFC 9111 §5.2.2.3).
fn understood_status(s: StatusCode) -> bool {
    matches!(
        s.as_u16(),
        200..=205 | 300..=305 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 500..=505
    )
}

/// How long `res`, which arrived as `arrival` says, may be cached, or why it is not.
/// `grace` is the layer's `stale_if_error`.
pub(crate) fn life(
    res: &response::Parts,
    keyed: &KeyPolicy,
    limits: Lifetimes,
    grace: Duration,
    arrival: Arrival,
) -> Result<Life, &'static str> {
    if !storable_status(res.status) {
        return Err("status");
    }
    if res.headers.contains_key(SET_COOKIE) {
        return Err("Set-Cookie");
    }
    vary_is_keyed(&res.headers, keyed)?;
    let cc = CacheControl::parse(&res.headers);
    if cc.must_understand && !understood_status(res.status) {
        return Err("must-understand with a status the cache does not know");
    }
    // `no-store` with `must-understand` is meant for the caches that do not know the status
    // (RFC 9111 §5.2.2.3): one that knows it ignores the `no-store`.
    if (cc.no_store && !cc.must_understand) || cc.unreadable || cc.private {
        return Err("Cache-Control");
    }
    let explicit = explicit_lifetime(&cc, &res.headers, arrival.at);
    if cc.no_cache {
        // RFC 9111 §5.2.2.4: never reused without the handler's `304`, whatever its lifetime
        // (it needs none); an error only when the handler says how long it lasts.
        if !has_validator(&res.headers) {
            return Err("no-cache without a validator");
        }
        if explicit.is_none() && !heuristic_status(res.status) {
            return Err("status not cached without an explicit expiration");
        }
        return Ok(Life::revalidated_on_use(received_age(
            &res.headers,
            arrival,
        )));
    }
    let lifetime = match explicit {
        Some(lifetime) => lifetime,
        None if !heuristic_status(res.status) => {
            return Err("status not cached without an explicit expiration");
        }
        None if limits.ttl.is_zero() => return Err("no explicit expiration, no heuristic"),
        None => limits.ttl,
    };
    let age = received_age(&res.headers, arrival);
    let fresh = lifetime.min(limits.max_ttl).saturating_sub(age);
    if fresh.is_zero() {
        // `max-age=0`, a past `Expires`, or older than its lifetime when it arrived: never
        // served without asking the handler. With a validator it is kept to be asked about
        // (RFC 9111 §4.3.1: a `304` then answers from it); without, there is nothing to keep.
        if !has_validator(&res.headers) {
            return Err("stale when received");
        }
        return Ok(Life::revalidated_on_use(age));
    }
    Ok(Life {
        fresh,
        stale: stale_window(&cc, limits),
        grace: grace_of(&cc, grace, limits.max_ttl),
        age: age.as_secs(),
    })
}

/// The freshness lifetime the response states (RFC 9111 §4.2.1): `s-maxage` (this is a
/// shared cache), else `max-age`, else `Expires` − `Date` (`Date` absent or invalid: the
/// arrival). An `Expires` that is not one valid HTTP-date (`0`, the classic) is in the past.
fn explicit_lifetime(cc: &CacheControl, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(lifetime) = cc.s_maxage.or(cc.max_age) {
        return Some(lifetime);
    }
    let expires = headers.get(EXPIRES)?;
    let Some(expires) = http_date(expires) else {
        return Some(Duration::ZERO);
    };
    let date = headers.get(DATE).and_then(http_date).unwrap_or(now);
    Some(expires.duration_since(date).unwrap_or_default())
}

/// The response's age when it arrived (RFC 9111 §4.2.3's `corrected_initial_age`): the
/// larger of the time since its `Date` and its `Age` plus the time the handler took (an `Age`
/// header was counted by a cache before the handler, which then spent that time relaying it).
fn received_age(headers: &HeaderMap, arrival: Arrival) -> Duration {
    let apparent = headers
        .get(DATE)
        .and_then(http_date)
        .and_then(|date| arrival.at.duration_since(date).ok())
        .unwrap_or_default();
    let corrected = age_value(headers).map_or(Duration::ZERO, |age| {
        Duration::from_secs(age).saturating_add(arrival.delay)
    });
    apparent.max(corrected)
}

/// The value of `Age` (RFC 9111 §5.1): the first, as delta-seconds, capped at 2^31 (§1.2.2);
/// `None` when absent or not a number (ignored).
pub(crate) fn age_value(headers: &HeaderMap) -> Option<u64> {
    let first = headers.get(AGE)?.as_bytes();
    let first = first.split(|&b| b == b',').next().unwrap_or_default();
    delta_seconds(std::str::from_utf8(first).ok()?.trim())
}

/// delta-seconds (RFC 9111 §1.2.2): digits only; a value too large for us is 2^31.
fn delta_seconds(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.parse::<u64>().map_or(MAX_DELTA, |n| n.min(MAX_DELTA)))
}

/// The cap on delta-seconds RFC 9111 §1.2.2 names: 2^31 seconds.
const MAX_DELTA: u64 = 1 << 31;

/// One HTTP-date, or `None` when the value is not one.
fn http_date(value: &HeaderValue) -> Option<SystemTime> {
    httpdate::parse_http_date(value.to_str().ok()?.trim()).ok()
}

/// The stale window: the response's `stale-while-revalidate` (RFC 5861 §3), else the
/// layer's; none when the response forbids serving it stale (`must-revalidate`,
/// `proxy-revalidate`), nor the layer's when it carries `s-maxage` (RFC 9111 §5.2.2.10: the
/// semantics of `proxy-revalidate` for a shared cache).
fn stale_window(cc: &CacheControl, limits: Lifetimes) -> Duration {
    let window = if cc.must_revalidate || cc.proxy_revalidate || cc.no_cache {
        Duration::ZERO
    } else if let Some(swr) = cc.swr {
        swr
    } else if cc.s_maxage.is_some() {
        Duration::ZERO
    } else {
        limits.stale
    };
    window.min(limits.max_ttl)
}

/// How long past its freshness a response may stand in for a failing handler: its
/// `stale-if-error` (RFC 5861 §4), else the layer's `stale_if_error` (`layer`); never one
/// marked `must-revalidate` or `proxy-revalidate` (RFC 9111 §5.2.2.2, §5.2.2.8), and the
/// layer's window never one carrying `s-maxage` (§5.2.2.10), and none a `no-cache` one
/// (§5.2.2.4: never reused without a successful revalidation). Read from the stored headers
/// too, so that it needs no field of its own.
fn grace_of(cc: &CacheControl, layer: Duration, max_ttl: Duration) -> Duration {
    if cc.must_revalidate || cc.proxy_revalidate || cc.no_cache {
        Duration::ZERO
    } else if let Some(sie) = cc.sie {
        sie.min(max_ttl.max(layer))
    } else if cc.s_maxage.is_some() {
        Duration::ZERO
    } else {
        layer
    }
}

/// How long past its freshness the stored response with these headers may stand in for a
/// failing handler, given the layer's `stale_if_error` (see [`life`]).
pub(crate) fn stored_grace(headers: &HeaderMap, layer: Duration, max_ttl: Duration) -> Duration {
    if !headers.contains_key(CACHE_CONTROL) {
        return layer;
    }
    grace_of(&CacheControl::parse(headers), layer, max_ttl)
}

/// Which of the headers the layer reads off a request it has (see [`KeyPolicy::carries`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Carries {
    /// A credential that is not part of the key: the request is not looked up.
    pub(crate) credential: bool,
    /// `If-None-Match` or `If-Modified-Since`: a condition the layer answers.
    pub(crate) condition: bool,
    /// `Cache-Control`: directives to the cache.
    pub(crate) directives: bool,
}

/// What a request's `Cache-Control` asks of the cache (RFC 9111 §5.2.1). Of the request
/// directives only these two are followed; see the module docs for the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Asked {
    /// `no-store`: the response to this request is not stored (§5.2.1.5).
    pub(crate) no_store: bool,
    /// `only-if-cached`: answer from the cache, else `504` (§5.2.1.7).
    pub(crate) only_if_cached: bool,
}

impl Asked {
    /// The request's directives; a value that is not text says nothing.
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let mut asked = Self::default();
        for value in headers.get_all(CACHE_CONTROL) {
            let Ok(value) = value.to_str() else {
                continue;
            };
            for (name, _) in directives(value) {
                if name.eq_ignore_ascii_case("no-store") {
                    asked.no_store = true;
                } else if name.eq_ignore_ascii_case("only-if-cached") {
                    asked.only_if_cached = true;
                }
            }
        }
        asked
    }
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

/// The directives of the response's `Cache-Control` the cache acts on. Of a directive given
/// twice the first counts (RFC 9111 §4.2.1).
#[derive(Debug, Default, PartialEq, Eq)]
struct CacheControl {
    no_store: bool,
    no_cache: bool,
    private: bool,
    /// A value that is not text: what it says is hidden, so the response is not stored.
    unreadable: bool,
    must_revalidate: bool,
    proxy_revalidate: bool,
    must_understand: bool,
    max_age: Option<Duration>,
    s_maxage: Option<Duration>,
    swr: Option<Duration>,
    sie: Option<Duration>,
}

impl CacheControl {
    fn parse(headers: &HeaderMap) -> Self {
        let mut cc = Self::default();
        for value in headers.get_all(CACHE_CONTROL) {
            // A value that is not text hides what it says: not cached.
            let Ok(value) = value.to_str() else {
                cc.unreadable = true;
                continue;
            };
            for (name, arg) in directives(value) {
                let secs = || arg.and_then(delta_seconds).map(Duration::from_secs);
                // A malformed age is a zero age (RFC 9111 §4.2.1: stale): not cached.
                let age = || Some(secs().unwrap_or_default());
                match name.to_ascii_lowercase().as_str() {
                    "no-store" => cc.no_store = true,
                    // `no-cache="Set-Cookie"` names headers that need a revalidation before
                    // reuse; it is taken as a plain `no-cache` (every reuse revalidated), as
                    // RFC 9111 §5.2.2.4 notes caches often do.
                    "no-cache" => cc.no_cache = true,
                    "private" => cc.private = true,
                    "must-revalidate" => cc.must_revalidate = true,
                    "proxy-revalidate" => cc.proxy_revalidate = true,
                    "must-understand" => cc.must_understand = true,
                    "max-age" => cc.max_age = cc.max_age.or_else(age),
                    "s-maxage" => cc.s_maxage = cc.s_maxage.or_else(age),
                    "stale-while-revalidate" => cc.swr = cc.swr.or_else(secs),
                    "stale-if-error" => cc.sie = cc.sie.or_else(secs),
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

    /// A fixed arrival: 2020-01-01T00:00:00Z, the handler took 2 s.
    fn arrival() -> Arrival {
        Arrival {
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_577_836_800),
            delay: Duration::from_secs(2),
        }
    }

    fn life_of(headers: &[(&str, &str)]) -> Result<Life, &'static str> {
        life(
            &res(headers),
            &varying(http::header::ACCEPT_ENCODING),
            LIMITS,
            Duration::from_secs(100),
            arrival(),
        )
    }

    fn fresh_of(headers: &[(&str, &str)]) -> Option<u64> {
        life_of(headers).ok().map(|l| l.fresh.as_secs())
    }

    /// RFC 9111 §4.2.1: `s-maxage`, then the first `max-age`, then `Expires` − `Date`; an
    /// invalid `Expires` is in the past; no heuristic with an explicit expiration.
    #[test]
    fn rfc9111_4_2_1_freshness_lifetime() {
        let date = "Wed, 01 Jan 2020 00:00:00 GMT";
        assert_eq!(
            fresh_of(&[("cache-control", "max-age=30, max-age=90")]),
            Some(30)
        );
        assert_eq!(
            fresh_of(&[
                ("cache-control", "max-age=30"),
                ("cache-control", "max-age=90")
            ]),
            Some(30)
        );
        assert_eq!(
            fresh_of(&[("cache-control", "s-maxage=90, max-age=30")]),
            Some(90)
        );
        assert_eq!(
            fresh_of(&[("date", date), ("expires", "Wed, 01 Jan 2020 00:05:00 GMT")]),
            Some(300)
        );
        // No Date: counted from the arrival.
        assert_eq!(
            fresh_of(&[("expires", "Wed, 01 Jan 2020 00:01:00 GMT")]),
            Some(60)
        );
        // max-age wins over Expires, either way.
        assert_eq!(
            fresh_of(&[
                ("expires", "Wed, 01 Jan 2020 00:05:00 GMT"),
                ("cache-control", "max-age=10")
            ]),
            Some(10)
        );
        for past in ["0", "-1", "yesterday", "Tue, 31 Dec 2019 23:59:59 GMT", ""] {
            assert_eq!(
                fresh_of(&[("date", date), ("expires", past)]),
                None,
                "{past:?}"
            );
        }
        // The heuristic (60 s here) only without an explicit expiration.
        assert_eq!(fresh_of(&[("date", date)]), Some(60));
        // Huge delta-seconds are capped, not refused.
        assert_eq!(
            fresh_of(&[("cache-control", "max-age=99999999999999999999999")]),
            Some(3600)
        );
        let off = Lifetimes {
            ttl: Duration::ZERO,
            ..LIMITS
        };
        let keyed = KeyPolicy::default();
        let none = life(&res(&[]), &keyed, off, Duration::ZERO, arrival());
        assert!(none.is_err(), "no heuristic by default");
    }

    /// RFC 9111 §4.2.3 and §5.1: the age when received counts against the lifetime.
    #[test]
    fn rfc9111_4_2_3_age_counts_against_freshness() {
        let cc = ("cache-control", "max-age=100");
        // Age plus the handler's 2 s.
        let l = life_of(&[cc, ("age", "30")]).unwrap();
        assert_eq!((l.fresh.as_secs(), l.age), (68, 32));
        // First value; invalid ignored; overflow capped (and so stale).
        assert_eq!(life_of(&[cc, ("age", "30, 50")]).unwrap().age, 32);
        assert_eq!(
            life_of(&[cc, ("age", "30"), ("age", "50")]).unwrap().age,
            32
        );
        for ignored in ["-5", "abc", "1.5", ""] {
            assert_eq!(
                life_of(&[cc, ("age", ignored)]).unwrap().age,
                0,
                "{ignored:?}"
            );
        }
        assert!(life_of(&[cc, ("age", "99999999999999999999")]).is_err());
        // Already older than its lifetime: not stored as fresh; with a validator, kept to be
        // revalidated, never served stale (RFC 9111 §4.3).
        assert!(life_of(&[cc, ("age", "100")]).is_err());
        let kept = life_of(&[cc, ("age", "100"), ("etag", "\"a\"")]).unwrap();
        assert_eq!(
            (kept.fresh, kept.stale, kept.grace, kept.age),
            (Duration::ZERO, Duration::ZERO, Duration::ZERO, 102)
        );
        // The apparent age from Date, when larger.
        let l = life_of(&[cc, ("date", "Tue, 31 Dec 2019 23:59:00 GMT"), ("age", "5")]).unwrap();
        assert_eq!((l.fresh.as_secs(), l.age), (40, 60));
    }

    /// RFC 9111 §5.2.2.2, §5.2.2.8, §5.2.2.10 and RFC 5861: when a stored response may be
    /// served stale.
    #[test]
    fn rfc9111_5_2_2_stale_serving_follows_the_response() {
        let grace = |cc: &str| life_of(&[("cache-control", cc)]).unwrap().grace.as_secs();
        let stale = |cc: &str| life_of(&[("cache-control", cc)]).unwrap().stale.as_secs();
        assert_eq!(grace("max-age=10"), 100);
        for forbidden in [
            "max-age=10, must-revalidate",
            "max-age=10, proxy-revalidate",
            "s-maxage=10",
            "max-age=10, must-revalidate, stale-if-error=50",
        ] {
            assert_eq!(grace(forbidden), 0, "{forbidden}");
        }
        assert_eq!(grace("max-age=10, stale-if-error=50"), 50);
        assert_eq!(grace("s-maxage=10, stale-if-error=50"), 50);
        assert_eq!(stale("max-age=10, stale-while-revalidate=5"), 5);
        assert_eq!(stale("s-maxage=10, stale-while-revalidate=5"), 5);
        assert_eq!(
            stale("max-age=10, must-revalidate, stale-while-revalidate=5"),
            0
        );
        let mut headers = HeaderMap::new();
        let (layer, max) = (Duration::from_secs(7), Duration::from_secs(3600));
        assert_eq!(stored_grace(&headers, layer, max), layer);
        headers.insert(
            CACHE_CONTROL,
            HeaderValue::from_static("max-age=1, must-revalidate"),
        );
        assert_eq!(stored_grace(&headers, layer, max), Duration::ZERO);
    }

    /// One pass over a request's header names finds what a look-up of each would: a
    /// credential outside the key (a keyed one, or a cookie the layer ignores, does not
    /// count), a condition, directives.
    #[test]
    fn a_request_carries_what_its_header_names_say() {
        let carries = |policy: &KeyPolicy, names: &[HeaderName]| {
            let mut h = HeaderMap::new();
            h.insert(HOST, HeaderValue::from_static("h"));
            for name in names {
                h.append(name.clone(), HeaderValue::from_static("v"));
            }
            let c = policy.carries(&h);
            (c.credential, c.condition, c.directives)
        };
        let default = KeyPolicy::default();
        assert_eq!(carries(&default, &[]), (false, false, false));
        assert_eq!(carries(&default, &[AUTHORIZATION]), (true, false, false));
        assert_eq!(
            carries(&default, &[PROXY_AUTHORIZATION]),
            (true, false, false)
        );
        assert_eq!(carries(&default, &[COOKIE, COOKIE]), (true, false, false));
        assert_eq!(carries(&default, &[IF_NONE_MATCH]), (false, true, false));
        assert_eq!(
            carries(&default, &[IF_MODIFIED_SINCE]),
            (false, true, false)
        );
        assert_eq!(carries(&default, &[CACHE_CONTROL]), (false, false, true));
        assert_eq!(
            carries(&default, &[CACHE_CONTROL, IF_NONE_MATCH, COOKIE]),
            (true, true, true)
        );
        assert_eq!(
            carries(&varying(AUTHORIZATION), &[AUTHORIZATION]),
            (false, false, false)
        );
        let ignoring = KeyPolicy {
            ignore_cookies: true,
            ..KeyPolicy::default()
        };
        assert_eq!(carries(&ignoring, &[COOKIE]), (false, false, false));
        assert_eq!(
            carries(&ignoring, &[COOKIE, AUTHORIZATION]),
            (true, false, false)
        );
    }

    #[test]
    fn request_directives_are_read() {
        let of = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(CACHE_CONTROL, HeaderValue::from_str(v).unwrap());
            Asked::of(&h)
        };
        assert!(of("No-Store").no_store);
        assert!(of("max-age=0, only-if-cached").only_if_cached);
        assert_eq!(of("no-cache, max-stale"), Asked::default());
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
                stale: secs(5),
                grace: secs(100),
                age: 0,
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
        // RFC 9111 §5.2.2.4: `no-cache` with a validator is kept to be revalidated on use.
        let etag = ("etag", "\"a\"");
        for no_cache in [
            "no-cache",
            "no-cache, max-age=60",
            "no-cache=\"x-a\", max-age=60",
        ] {
            let l = life_of(&[("cache-control", no_cache), etag]).unwrap();
            assert_eq!(
                (l.fresh, l.stale, l.grace),
                Default::default(),
                "{no_cache}"
            );
        }
        let error = |cc: &str| {
            let mut parts = res(&[("cache-control", cc), etag]);
            parts.status = StatusCode::NOT_FOUND;
            let keyed = KeyPolicy::default();
            life(&parts, &keyed, LIMITS, Duration::ZERO, arrival())
        };
        assert!(
            error("no-cache").is_err(),
            "an error needs an explicit expiration"
        );
        assert!(error("no-cache, max-age=60").is_ok());
        // RFC 9111 §5.2.2.3: `no-store` is for caches that do not know the status.
        let understood = life_of(&[("cache-control", "max-age=60, no-store, must-understand")]);
        assert_eq!(understood.unwrap().fresh, secs(60));
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
            let parts = b.body(()).unwrap().into_parts().0;
            life(&parts, &keyed, limits, Duration::ZERO, arrival())
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
