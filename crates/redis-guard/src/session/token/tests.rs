//! The transports' checks, and how a checked one reads and writes tokens.

use http::header::{CACHE_CONTROL, SET_COOKIE};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::Transport;
use super::transport::DEFAULT_TOKEN_HEADER;
use super::wire::{TokenHeader, VIA_COOKIE, VIA_FIELD, Wire};
use crate::session::cookie_header::ReadCookie;
use crate::session::id::SessionId;
use crate::session::state::CookieAction;
use crate::session::store::{Changes, Record};

fn wire(t: &Transport) -> TokenHeader {
    match t.resolve() {
        Ok(Wire::Header(h)) => h,
        other => panic!("{other:?}"),
    }
}

fn read(t: &Transport, name: &str, values: &[&[u8]]) -> Option<SessionId> {
    let mut h = HeaderMap::new();
    for v in values {
        h.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(v).unwrap(),
        );
    }
    match wire(t).read(&h) {
        ReadCookie::Ids(ids) => {
            assert_eq!(ids.len(), 1);
            ids.first().cloned()
        }
        ReadCookie::Absent | ReadCookie::Malformed => None,
    }
}

/// A well-formed bearer token is read; everything else is no token.
#[test]
fn bearer_tokens_are_read_strictly() {
    let id = SessionId::generate().unwrap();
    let token = id.encode();
    let bearer = Transport::bearer();
    for good in [
        format!("Bearer {token}"),
        format!("bearer  {token}"),
        format!("BEARER {token} "),
    ] {
        assert_eq!(
            read(&bearer, "authorization", &[good.as_bytes()]),
            Some(id.clone()),
            "{good}"
        );
    }
    let other = SessionId::generate().unwrap().encode();
    for bad in [
        token.clone(),
        "Bearer".to_owned(),
        "Bearer ".to_owned(),
        format!("Bearer{token}"),
        format!("Basic {token}"),
        format!("Bearer {}", &token[..42]),
        format!("Bearer {token}A"),
        format!("Bearer {}+", &token[..42]),
        format!("Bearer {token}="),
        format!("Bearer {token} {other}"),
        format!("Bearer \"{token}\""),
    ] {
        assert_eq!(
            read(&bearer, "authorization", &[bad.as_bytes()]),
            None,
            "{bad}"
        );
    }
    let non_utf8 = [b"Bearer ".as_slice(), &[0xff; 43]].concat();
    assert_eq!(read(&bearer, "authorization", &[&non_utf8]), None);
    let twice = format!("Bearer {token}");
    assert_eq!(
        read(
            &bearer,
            "authorization",
            &[twice.as_bytes(), twice.as_bytes()]
        ),
        None
    );
    assert_eq!(read(&bearer, "x-other", &[twice.as_bytes()]), None);
}

#[test]
fn named_headers_carry_the_bare_token() {
    let id = SessionId::generate().unwrap();
    let t = Transport::header("X-Session-Token");
    let token = id.encode();
    assert_eq!(read(&t, "x-session-token", &[token.as_bytes()]), Some(id));
    let bearer = format!("Bearer {token}");
    assert_eq!(read(&t, "x-session-token", &[bearer.as_bytes()]), None);
    assert_eq!(read(&t, "authorization", &[bearer.as_bytes()]), None);
}

#[test]
fn names_are_checked_when_built() {
    assert!(matches!(Transport::cookie().resolve(), Ok(Wire::Cookie)));
    for (bad, says) in [
        (Transport::header("bad name"), "bad name"),
        (Transport::header("Cookie"), "cookie"),
        (
            Transport::bearer().response_header("set-cookie"),
            "set-cookie",
        ),
        (Transport::bearer().response_header(""), "\"\""),
        (Transport::cookie().response_header("x-token"), "x-token"),
        (Transport::bearer().secure(false), "cookie attributes"),
        (
            Transport::header("x-token").with_cookie_name("sid"),
            "x-token",
        ),
    ] {
        let err = bad.resolve().unwrap_err();
        assert_eq!(err.kind(), crate::ConfigErrorKind::Transport);
        assert!(err.to_string().contains(says), "{err}");
    }
    let h = wire(&Transport::header("x-token").response_header("X-New-Token"));
    let (response, bearer) = h.response_and_bearer();
    assert_eq!(response, "x-new-token");
    assert!(!bearer);
}

#[test]
fn sessions_remember_their_transport() {
    let cookie = Transport::cookie().resolve().unwrap();
    let header = Transport::bearer().resolve().unwrap();
    let created = |w: &Wire| Record {
        fields: w.stamp(Changes::default()).set.into_iter().collect(),
        ..Record::default()
    };
    let (by_cookie, by_header) = (created(&cookie), created(&header));
    assert_eq!(
        by_cookie,
        Record::default(),
        "cookie sessions are unchanged"
    );
    assert!(cookie.accepts(&by_cookie) && !cookie.accepts(&by_header));
    assert!(header.accepts(&by_header) && !header.accepts(&by_cookie));
    let explicit = Record {
        fields: [(VIA_FIELD.to_owned(), VIA_COOKIE.to_owned())]
            .into_iter()
            .collect(),
        ..Record::default()
    };
    assert!(cookie.accepts(&explicit) && !header.accepts(&explicit));
}

#[test]
fn a_new_token_is_never_cached() {
    let h = wire(&Transport::bearer());
    let id = SessionId::generate().unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(
        CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=60"),
    );
    h.respond(&mut headers, &CookieAction::Keep);
    h.respond(&mut headers, &CookieAction::Remove);
    assert_eq!(headers.len(), 1);
    h.respond(&mut headers, &CookieAction::Set(id.clone()));
    assert_eq!(headers[DEFAULT_TOKEN_HEADER], id.encode().as_str());
    assert_eq!(headers[CACHE_CONTROL], "no-store");
    assert!(!headers.contains_key(SET_COOKIE));
}
