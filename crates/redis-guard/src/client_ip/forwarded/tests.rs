//! The forwarding-header grammar and walk: examples, then properties over arbitrary headers.

use std::net::{IpAddr, Ipv4Addr};

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;

use super::ForwardedHeader::{Forwarded, XForwardedFor};
use super::*;

/// The trusted peer every request here comes from.
const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

/// The trusted proxies: `10.0.0.0/8` and `fd00::/8`.
fn trusted() -> [Cidr; 2] {
    ["10.0.0.0/8", "fd00::/8"].map(|c| Cidr::parse(c).unwrap())
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The client found in the header `lines` of a request from [`PEER`], by proxies that write
/// `header`.
fn resolve(header: ForwardedHeader, lines: &[(&str, &[u8])]) -> IpAddr {
    let mut headers = HeaderMap::new();
    for (name, value) in lines {
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
        headers.append(name, HeaderValue::from_bytes(value).unwrap());
    }
    resolve_chain(&trusted(), header, &headers, PEER)
}

fn xff(value: impl AsRef<[u8]>) -> IpAddr {
    resolve(XForwardedFor, &[("x-forwarded-for", value.as_ref())])
}

fn fwd(value: impl AsRef<[u8]>) -> IpAddr {
    resolve(Forwarded, &[("forwarded", value.as_ref())])
}

#[test]
fn forwarded_header_names_parse() {
    for (s, h) in [
        ("x-forwarded-for", XForwardedFor),
        ("X-Forwarded-For", XForwardedFor),
        (" forwarded ", Forwarded),
    ] {
        assert_eq!(s.parse::<ForwardedHeader>(), Ok(h));
    }
    let err = "x-real-ip".parse::<ForwardedHeader>().unwrap_err();
    assert_eq!(err.kind(), ConfigErrorKind::ForwardedHeader);
    assert_eq!(err.value(), Some("x-real-ip"));
    assert!(err.to_string().contains("x-real-ip"));
    assert_eq!(ForwardedHeader::default().to_string(), "x-forwarded-for");
}

#[test]
fn only_the_configured_header_is_read() {
    // Proxies that append to X-Forwarded-For pass a client's own Forwarded through untouched.
    for spoof in ["for=1.1.1.1", "for=6.6.6.6", "for=10.0.0.5", "for=unknown"] {
        let lines = [
            ("forwarded", spoof.as_bytes()),
            ("x-forwarded-for", b"203.0.113.7"),
        ];
        assert_eq!(resolve(XForwardedFor, &lines), ip("203.0.113.7"), "{spoof}");
    }
    // Forwarded alone is not read either: the peer is the nearest verified hop.
    assert_eq!(
        resolve(XForwardedFor, &[("forwarded", b"for=1.1.1.1")]),
        PEER
    );
    // With `Forwarded` configured, X-Forwarded-For is the one ignored, even when Forwarded
    // gives no usable address: the headers are never mixed.
    let both =
        |forwarded: &'static [u8]| [("forwarded", forwarded), ("x-forwarded-for", b"6.6.6.6")];
    assert_eq!(
        resolve(Forwarded, &both(b"for=203.0.113.7")),
        ip("203.0.113.7")
    );
    assert_eq!(resolve(Forwarded, &both(b"proto=https")), PEER);
    assert_eq!(resolve(Forwarded, &[("x-forwarded-for", b"6.6.6.6")]), PEER);
}

#[test]
fn right_most_untrusted_entry_is_the_client() {
    assert_eq!(xff("6.6.6.6, 1.2.3.4, 10.0.0.2"), ip("1.2.3.4"));
    // Whatever the client puts on the left does not change its key.
    for spoof in [
        "7.7.7.7",
        "10.0.0.9",
        "unknown",
        "",
        "7.7.7.7, 8.8.8.8, ::1",
    ] {
        let value = format!("{spoof}, 1.2.3.4, 10.0.0.2");
        assert_eq!(xff(value), ip("1.2.3.4"), "{spoof}");
    }
}

#[test]
fn trusted_peer_without_headers_is_the_client() {
    assert_eq!(resolve(XForwardedFor, &[]), PEER);
    assert_eq!(resolve(Forwarded, &[]), PEER);
}

#[test]
fn all_entries_trusted_gives_the_left_most() {
    assert_eq!(xff("10.1.1.1, 10.0.0.3, 10.0.0.2"), ip("10.1.1.1"));
}

#[test]
fn mapped_ipv4_entries_are_ipv4() {
    assert_eq!(xff("1.2.3.4, ::ffff:10.0.0.2"), ip("1.2.3.4"));
    assert_eq!(xff("::ffff:1.2.3.4"), ip("1.2.3.4"));
    assert_eq!(xff("[::ffff:1.2.3.4]:99"), ip("1.2.3.4"));
}

#[test]
fn forwarded_header() {
    assert_eq!(
        fwd(r#"for="[2001:db8::1]:443";proto=https"#),
        ip("2001:db8::1")
    );
    assert_eq!(fwd(r#"for="1.2.3.4""#), ip("1.2.3.4"));
    assert_eq!(fwd(r#"for="1.2.3.4:_p1""#), ip("1.2.3.4"));
    let spaced = "proto=http ; For = 1.2.3.4 ;by=10.0.0.1;host=example.com";
    assert_eq!(fwd(spaced), ip("1.2.3.4"));
    assert_eq!(fwd("FOR=1.2.3.4:80"), ip("1.2.3.4"));
    let chain = r#"for=6.6.6.6, for="1.2.3.4", for=10.0.0.2;by=10.0.0.1"#;
    assert_eq!(fwd(chain), ip("1.2.3.4"));
    // Empty pairs are allowed.
    assert_eq!(fwd(";for=1.2.3.4;;"), ip("1.2.3.4"));
}

#[test]
fn multiple_header_lines_are_one_chain() {
    let lines = [
        ("x-forwarded-for", b"6.6.6.6, 1.2.3.4".as_slice()),
        ("x-forwarded-for", b"10.0.0.3"),
    ];
    assert_eq!(resolve(XForwardedFor, &lines), ip("1.2.3.4"));
    let lines = [
        ("x-forwarded-for", b"6.6.6.6".as_slice()),
        ("x-forwarded-for", b"10.0.0.4, 10.0.0.3"),
    ];
    assert_eq!(resolve(XForwardedFor, &lines), ip("6.6.6.6"));
    let lines = [
        ("forwarded", b"for=6.6.6.6, for=1.2.3.4".as_slice()),
        ("forwarded", b"for=10.0.0.3;proto=https"),
    ];
    assert_eq!(resolve(Forwarded, &lines), ip("1.2.3.4"));
}

#[test]
fn garbage_stops_the_walk_at_the_nearest_verified_hop() {
    for garbage in [
        "unknown",
        "_abc",
        "999.1.1.1",
        "",
        " ",
        "::::",
        "1.2.3",
        "01.2.3.4",
        "1.2.3.4:",
        "1.2.3.4:99999",
        "1.2.3.4:80:80",
        "[1.2.3.4]",
        "[::1",
        "[::1]x",
        "[::1]:",
        "fe80::1%",
        "fe80::1% eth0",
        "1.2.3.4%eth0",
        "\"1.2.3.4\"",
    ] {
        assert_eq!(parse_node(garbage.as_bytes()), None, "{garbage:?}");
        // Garbage right next to the peer: the peer is the nearest verified hop.
        assert_eq!(xff(format!("1.2.3.4, {garbage}")), PEER, "{garbage:?}");
        // Garbage behind a trusted entry: that entry.
        let behind = format!("1.2.3.4, {garbage}, 10.0.0.2");
        assert_eq!(xff(behind), ip("10.0.0.2"), "{garbage:?}");
        // Garbage to the left of the client does not matter.
        let left = format!("{garbage}, 1.2.3.4, 10.0.0.2");
        assert_eq!(xff(left), ip("1.2.3.4"), "{garbage:?}");
    }
    for element in [
        "for=unknown",
        "for=_hidden",
        "for=\"_hidden\"",
        "for=",
        "for=\"",
        "for=\"1.2.3.4",
        "proto=https",
        "for=1.2.3.4;for=5.6.7.8",
        "for=1.2.3.4;garbage",
        "by=10.0.0.1",
        "for=\"[::1\\]\"",
    ] {
        assert_eq!(forwarded_for(element.as_bytes()), None, "{element:?}");
        assert_eq!(fwd(format!("for=1.2.3.4, {element}")), PEER, "{element:?}");
    }
    // Non-UTF-8 bytes.
    assert_eq!(xff(b"1.2.3.4, \xff\xfe, 10.0.0.2"), ip("10.0.0.2"));
    assert_eq!(xff(b"\xff\xfe, 1.2.3.4"), ip("1.2.3.4"));
    assert_eq!(fwd(b"for=1.2.3.4, for=\xc3\x28"), PEER);
    // Non-UTF-8 bytes in another parameter: the element is still garbage-free.
    assert_eq!(fwd(b"for=1.2.3.4;host=\xff"), ip("1.2.3.4"));
}

#[test]
fn zone_ids_are_stripped() {
    assert_eq!(xff("fe80::1%eth0"), ip("fe80::1"));
    assert_eq!(xff("[fe80::1%25eth0]:80"), ip("fe80::1"));
    assert_eq!(fwd(r#"for="[fe80::1%eth0]""#), ip("fe80::1"));
}

#[test]
fn long_chains_are_capped() {
    // 1,000 trusted entries: the walk stops after MAX_HOPS, at the last one examined.
    let entries: Vec<String> = (0..1000_u32)
        .map(|i| format!("10.0.{}.{}", i / 256, i % 256))
        .collect();
    let expected = ip(&entries[1000 - MAX_HOPS]);
    assert_eq!(xff(entries.join(", ")), expected);
    // An untrusted entry within the cap is found.
    let mut entries: Vec<String> = (0..1000_u32)
        .map(|i| format!("1.1.{}.{}", i / 256, i % 256))
        .collect();
    entries.push("10.0.0.2".into());
    assert_eq!(xff(entries.join(",")), ip("1.1.3.231"));
    // One beyond the cap is not.
    let mut entries = vec!["1.2.3.4".to_owned()];
    entries.extend((0..MAX_HOPS).map(|i| format!("10.0.1.{i}")));
    assert_eq!(xff(entries.join(",")), ip("10.0.1.0"));
    // Split over 1,000 header lines.
    let lines = [("x-forwarded-for", b"10.0.0.7".as_slice()); 1000];
    assert_eq!(resolve(XForwardedFor, &lines), ip("10.0.0.7"));
    // The same for Forwarded.
    let elements: Vec<String> = (0..1000_u32)
        .map(|i| format!("for=10.0.{}.{};proto=https", i / 256, i % 256))
        .collect();
    assert_eq!(fwd(elements.join(", ")), expected);
}

#[test]
fn huge_values_are_garbage() {
    let big = "1".repeat(100_000);
    assert_eq!(xff(&big), PEER);
    assert_eq!(xff(format!("1.2.3.4, {big}, 10.0.0.2")), ip("10.0.0.2"));
    assert_eq!(xff(",".repeat(100_000)), PEER);
    let many = "1.2.3.4,".repeat(12_500);
    assert_eq!(xff(&many), PEER);
    assert_eq!(xff(format!("{many}5.6.7.8")), ip("5.6.7.8"));
    assert_eq!(fwd(format!("for=1.2.3.4{}", ";".repeat(100_000))), PEER);
    // Whitespace is trimmed (in linear time) before the length check.
    assert_eq!(
        xff(format!("{}1.2.3.4", " ".repeat(100_000))),
        ip("1.2.3.4")
    );
}

/// Bytes forwarding headers are made of, and now and then any other byte a header may hold.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    const ALPHABET: &[u8] = b"0123456789abcdefABCDEF.:[]%,;=\"_ \tforFORunknwn/-";
    let other = any::<u8>().prop_filter("not a header byte", |&b| b >= 0x20 && b != 0x7f);
    let byte = prop_oneof![6 => prop::sample::select(ALPHABET), 1 => other];
    prop::collection::vec(byte, 0..80)
}

/// Any address, with extra weight on the trusted networks and on IPv4-mapped IPv6.
fn addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
        any::<[u8; 4]>().prop_map(|o| IpAddr::V6(Ipv4Addr::from(o).to_ipv6_mapped())),
        trusted_addr(),
    ]
}

/// An address in [`trusted`], possibly IPv4-mapped.
fn trusted_addr() -> impl Strategy<Value = IpAddr> {
    (any::<[u8; 16]>(), 0..3_u8).prop_map(|(mut o, kind)| match kind {
        0 => IpAddr::from([10, o[1], o[2], o[3]]),
        1 => IpAddr::V6(Ipv4Addr::from([10, o[1], o[2], o[3]]).to_ipv6_mapped()),
        _ => {
            o[0] = 0xfd;
            IpAddr::from(o)
        }
    })
}

/// `ip` as a proxy may write it into `header`: bare, with a port, in brackets, quoted.
fn written(ip: IpAddr, header: ForwardedHeader, style: u8) -> String {
    let node = match (ip, style % 3) {
        (IpAddr::V4(v4), 0) => v4.to_string(),
        (IpAddr::V4(v4), _) => format!("{v4}:{style}"),
        (IpAddr::V6(v6), 0) => v6.to_string(),
        (IpAddr::V6(v6), 1) => format!("[{v6}]"),
        (IpAddr::V6(v6), _) => format!("[{v6}]:443"),
    };
    match header {
        XForwardedFor => node,
        Forwarded => format!("for=\"{node}\";proto=https"),
    }
}

/// A header line: random bytes, or a chain of well-formed entries of either header.
fn line() -> impl Strategy<Value = Vec<u8>> {
    let entry = (addr(), any::<bool>(), any::<u8>()).prop_map(|(ip, rfc, style)| {
        written(ip, if rfc { Forwarded } else { XForwardedFor }, style)
    });
    prop_oneof![
        header_bytes(),
        prop::collection::vec(entry, 0..6).prop_map(|e| e.join(", ").into_bytes()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever a header holds, the walk never panics, and the client is the peer or an address
    /// written in the header with only well-formed trusted entries to its right, fewer than
    /// `MAX_HOPS` of them: never anything else.
    #[test]
    fn any_header_yields_the_peer_or_a_verified_address_from_it(
        lines in prop::collection::vec(line(), 0..3),
        trust_all in any::<bool>(),
        rfc in any::<bool>(),
    ) {
        let trusted = if trust_all {
            ["0.0.0.0/0", "::/0"].map(|c| Cidr::parse(c).unwrap())
        } else {
            trusted()
        };
        type Parse = fn(&[u8]) -> Option<IpAddr>;
        let (header, parse): (_, Parse) =
            if rfc { (Forwarded, forwarded_for) } else { (XForwardedFor, parse_node) };
        let mut headers = HeaderMap::new();
        for line in &lines {
            headers.append(header.as_str(), HeaderValue::from_bytes(line).unwrap());
        }
        let client = resolve_chain(&trusted, header, &headers, PEER);
        let chain: Vec<Option<IpAddr>> = lines
            .iter()
            .flat_map(|line| line.split(|&b| b == b','))
            .map(|entry| parse(entry).map(|ip| ip.to_canonical()))
            .collect();
        let verified = |i: usize| {
            chain.len() - i <= MAX_HOPS
                && chain[i + 1..]
                    .iter()
                    .all(|e| e.is_some_and(|ip| is_trusted(&trusted, ip)))
        };
        let found = (0..chain.len()).any(|i| chain[i] == Some(client) && verified(i));
        prop_assert!(client == PEER || found, "{client} from {lines:?}");
    }

    /// Trusted proxies append the client's address and their own: whatever the client sent
    /// before that, in the same line or its own, the client is the address the first proxy wrote.
    #[test]
    fn what_a_client_prepends_never_changes_the_result(
        client in addr().prop_filter("trusted", |ip| !is_trusted(&trusted(), ip.to_canonical())),
        proxies in prop::collection::vec(trusted_addr(), 0..MAX_HOPS),
        style in any::<u8>(),
        prefix in line(),
        rfc in any::<bool>(),
        own_line in any::<bool>(),
    ) {
        let header = if rfc { Forwarded } else { XForwardedFor };
        let appended: Vec<String> = std::iter::once(client)
            .chain(proxies)
            .map(|ip| written(ip, header, style))
            .collect();
        let appended = appended.join(", ").into_bytes();
        let mut headers = HeaderMap::new();
        if own_line {
            headers.append(header.as_str(), HeaderValue::from_bytes(&prefix).unwrap());
            headers.append(header.as_str(), HeaderValue::from_bytes(&appended).unwrap());
        } else {
            let line = [prefix.as_slice(), b", ", &appended].concat();
            headers.append(header.as_str(), HeaderValue::from_bytes(&line).unwrap());
        }
        let found = resolve_chain(&trusted(), header, &headers, PEER);
        prop_assert_eq!(found, client.to_canonical());
    }
}
