//! Property test of the demo apps over real HTTP:
//! generated requests on every route (paths, path numbers, queries, bodies and headers) must
//! each get a complete response that is not a 5xx — a handler that panics drops the connection,
//! which reads here as no response.

use std::net::SocketAddr;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// The `ADMIN_TOKEN` the apps under test run with: sent on some requests, so that the admin
/// handlers see generated input too.
pub const ADMIN_TOKEN: &str = "route-fuzz-admin-token-0123456789abcdef";

/// A route as the generator sees it: a method and a path whose `{}` are filled with generated
/// segments.
pub type Route = (&'static str, &'static str);

/// Up to `max` arbitrary bytes, each percent-escaped (`%00`…`%FF`): what decodes to anything.
fn percent_escaped(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<u8>(), 0..max)
        .prop_map(|bytes| bytes.iter().map(|b| format!("%{b:02X}")).collect())
}

/// A path segment: numbers at and past every integer width, text, and percent-escapes.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        prop::sample::select(vec![
            "0",
            "1",
            "-1",
            "4294967295",
            "4294967296",
            "18446744073709551615",
            "18446744073709551616",
            "340282366920938463463374607431768211456",
            "1e99",
            "NaN",
            "%00",
            "%ff%fe",
            "..",
            "user:alice",
            "127.0.0.1",
            "::1",
            "+15550100000",
        ])
        .prop_map(str::to_owned),
        "[A-Za-z0-9._~:+-]{0,40}",
        percent_escaped(12),
    ]
}

/// A query string (without the `?`), often empty.
fn query() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z]{1,8}=[A-Za-z0-9%]{0,16}(&[a-z]{1,8}=[A-Za-z0-9%]{0,16}){0,3}",
        percent_escaped(16),
    ]
}

/// A body: nothing, JSON of the shapes the routes read (with odd values), or bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let value = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        "\"[^\"\\\\]{0,70}\"",
        Just("null".to_owned()),
        Just("1e999".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
    ];
    let field = prop::sample::select(vec![
        "username", "password", "remember", "from", "to", "seconds", "name", "quota", "amount", "x",
    ]);
    prop_oneof![
        Just(Vec::new()),
        prop::collection::vec((field, value), 0..4).prop_map(|fields| {
            let inner: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("\"{k}\": {v}"))
                .collect();
            format!("{{{}}}", inner.join(", ")).into_bytes()
        }),
        "name=[A-Za-z0-9%+]{0,20}&csrf_token=[A-Za-z0-9]{0,20}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..64),
    ]
}

/// A header value of visible ASCII (what a server must accept at all), sometimes long.
fn header_value() -> impl Strategy<Value = String> {
    prop_oneof!["[ -~]{0,40}", "[ -~]{200,300}"]
}

/// Extra headers: content types, cookies, tokens, forwarding headers, origins.
fn headers() -> impl Strategy<Value = Vec<(&'static str, String)>> {
    let name = prop::sample::select(vec![
        "content-type",
        "cookie",
        "authorization",
        "x-forwarded-for",
        "forwarded",
        "origin",
        "sec-fetch-site",
        "if-none-match",
        "cache-control",
        "idempotency-key",
        "accept",
        "user-agent",
        "x-plan",
    ]);
    let value = prop_oneof![
        Just("application/json".to_owned()),
        Just("application/x-www-form-urlencoded".to_owned()),
        Just("id=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".to_owned()),
        Just("Bearer ".to_owned()),
        Just(format!("Bearer {ADMIN_TOKEN}")),
        Just("same-origin".to_owned()),
        header_value(),
    ];
    prop::collection::vec((name, value), 0..5)
}

/// One generated request, as raw bytes, and a description for the failure message.
fn request(routes: &'static [Route]) -> impl Strategy<Value = (String, Vec<u8>)> {
    (
        prop::sample::select(routes),
        prop::collection::vec(segment(), 3),
        query(),
        body(),
        headers(),
    )
        .prop_map(|((method, template), segments, query, body, headers)| {
            let mut path = String::new();
            let mut parts = template.split("{}");
            path.push_str(parts.next().unwrap_or_default());
            for (part, segment) in parts.zip(segments.iter().cycle()) {
                path.push_str(segment);
                path.push_str(part);
            }
            if !query.is_empty() {
                path.push('?');
                path.push_str(&query);
            }
            let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: app\r\nConnection: close\r\n")
                .into_bytes();
            for (name, value) in &headers {
                raw.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
            }
            raw.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
            raw.extend_from_slice(&body);
            let shown = format!(
                "{method} {path} headers {headers:?} body {:?}",
                String::from_utf8_lossy(&body)
            );
            (shown, raw)
        })
}

/// Sends `cases` generated requests over `routes` to the app at `addr`, one connection each.
/// Fails on the first request that gets no complete response or a 5xx.
pub fn no_route_reaches_a_panic(addr: SocketAddr, routes: &'static [Route], cases: u32) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut runner = TestRunner::new(Config {
        cases,
        // Each shrink step is a real request: a few are enough to show a small input.
        max_shrink_iters: 64,
        ..Config::default()
    });
    let outcome = runner.run(&request(routes), |(shown, raw)| {
        let res = rt.block_on(redis_guard_testkit::http::send(addr, &raw));
        match res {
            Err(e) => Err(TestCaseError::fail(format!("{shown}: no response ({e})"))),
            Ok(r) if r.status >= 500 => Err(TestCaseError::fail(format!(
                "{shown}: {} {}",
                r.status,
                r.text()
            ))),
            Ok(_) => Ok(()),
        }
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
