//! [`Shared`]: the settings every request of one layer reads, and what the layer records of
//! each request's client.

use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderValue;
use http::Request;

use super::cookie::CookieConfig;
use super::store::{Lifetimes, SessionStore};
use super::token::Wire;
use super::{FailurePolicy, Rejection};
use crate::problem::Respond;

/// Settings shared by every request of a layer.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) life: Lifetimes,
    pub(crate) cookie: CookieConfig,
    /// How the session id travels: the cookie, or a token header.
    pub(crate) transport: Wire,
    pub(crate) failure: FailurePolicy,
    pub(crate) expose_user: bool,
    pub(crate) metadata: Metadata,
    /// The hook that writes the layer's own answers
    /// ([`SessionLayerBuilder::response`](super::SessionLayerBuilder::response)).
    pub(crate) response: Option<Respond<Rejection>>,
}

/// Which client details the layer keeps with each session.
#[derive(Clone, Debug)]
pub(crate) struct Metadata {
    /// How the client's address is read; `None`: no address is kept.
    pub(crate) ip: Option<crate::client_ip::ClientIp>,
    /// Whether the user agent is kept.
    pub(crate) user_agent: bool,
}

impl Default for Metadata {
    fn default() -> Self {
        Self {
            ip: Some(crate::client_ip::ClientIp::peer()),
            user_agent: true,
        }
    }
}

/// The longest user agent kept, in bytes; longer ones are cut at a character boundary.
pub(crate) const MAX_USER_AGENT_LEN: usize = 256;

/// What one request tells about its client, as far as the layer records it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Visit {
    pub(crate) ip: Option<IpAddr>,
    pub(crate) user_agent: Option<HeaderValue>,
}

impl Visit {
    /// The client details of the request with head `parts`, as `metadata` asks. Without a peer
    /// address in the extensions (axum's `ConnectInfo` or [`PeerAddr`](crate::client_ip::PeerAddr))
    /// no address is recorded, and nothing is logged: sessions work without one.
    pub(crate) fn of<B>(req: &Request<B>, metadata: &Metadata) -> Self {
        let ip = metadata
            .ip
            .as_ref()
            .and_then(|client| client.address(req.headers(), req.extensions()));
        let user_agent = metadata
            .user_agent
            .then(|| req.headers().get(http::header::USER_AGENT).cloned())
            .flatten();
        Self { ip, user_agent }
    }

    /// The user agent as kept: visible ASCII and spaces (other bytes, tabs included, become `?`), at most
    /// [`MAX_USER_AGENT_LEN`] bytes; `None` when absent or empty.
    pub(crate) fn user_agent(&self) -> Option<String> {
        let kept = self.kept_user_agent();
        (!kept.is_empty()).then(|| kept.iter().map(|&b| char::from(keep_byte(b))).collect())
    }

    /// Whether this request carries a user agent (as kept) other than `stored`.
    pub(crate) fn user_agent_differs(&self, stored: &str) -> bool {
        let kept = self.kept_user_agent();
        !kept.is_empty()
            && (kept.len() != stored.len()
                || kept
                    .iter()
                    .zip(stored.bytes())
                    .any(|(&b, s)| keep_byte(b) != s))
    }

    /// The raw bytes of the user agent that are kept: the first [`MAX_USER_AGENT_LEN`], without
    /// the spaces at either end.
    fn kept_user_agent(&self) -> &[u8] {
        let Some(raw) = self.user_agent.as_ref() else {
            return &[];
        };
        let raw = raw.as_bytes();
        let raw = &raw[..raw.len().min(MAX_USER_AGENT_LEN)];
        // Only spaces: any other byte is kept (as `?` when not visible ASCII).
        let start = raw.iter().position(|&b| b != b' ').unwrap_or(raw.len());
        let end = raw
            .iter()
            .rposition(|&b| b != b' ')
            .map_or(start, |i| i + 1);
        &raw[start..end]
    }
}

/// A user agent's byte as kept: visible ASCII and spaces as they are, anything else `?`.
fn keep_byte(b: u8) -> u8 {
    if b == b' ' || b.is_ascii_graphic() {
        b
    } else {
        b'?'
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ua(raw: &[u8]) -> Option<String> {
        Visit {
            ip: None,
            user_agent: Some(HeaderValue::from_bytes(raw).expect("a header value")),
        }
        .user_agent()
    }

    #[test]
    fn user_agents_are_cut_and_cleaned() {
        assert_eq!(
            ua(b"Mozilla/5.0 (X11)").as_deref(),
            Some("Mozilla/5.0 (X11)")
        );
        assert_eq!(
            ua(&[b'a'; 10_000]).map(|s| s.len()),
            Some(MAX_USER_AGENT_LEN)
        );
        assert_eq!(ua(b"caf\xc3\xa9\tx").as_deref(), Some("caf???x"));
        assert_eq!(ua(b"   "), None);
        assert_eq!(ua(b"  \tx y \t ").as_deref(), Some("?x y ?"));
    }

    #[test]
    fn a_user_agent_differs_from_what_is_stored_as_kept() {
        let visit = |raw: &[u8]| Visit {
            ip: None,
            user_agent: Some(HeaderValue::from_bytes(raw).expect("a header value")),
        };
        for raw in [
            &b"Mozilla/5.0 (X11)"[..],
            b"  caf\xc3\xa9\tx ",
            b" \tx",
            &[b'a'; 1000],
        ] {
            let v = visit(raw);
            let kept = v.user_agent().expect("kept");
            assert!(!v.user_agent_differs(&kept), "{kept:?}");
            assert!(v.user_agent_differs(&kept[1..]), "{kept:?}");
            assert!(v.user_agent_differs(&format!("{kept}x")), "{kept:?}");
            assert!(v.user_agent_differs(""), "{kept:?}");
        }
        // None, or nothing kept: nothing to record, so nothing differs.
        assert!(!visit(b"   ").user_agent_differs("old"));
        assert!(!Visit::default().user_agent_differs("old"));
    }

    /// Sessions read the client's address with the limiter's `ClientIp`
    /// (`redis_guard::client_ip`), with or without the `rate-limit` feature: the peer by
    /// default, the trusted proxies' forwarding header when given, nothing without a peer.
    #[test]
    fn visits_record_the_client_address_as_the_limiter_reads_it() {
        use crate::client_ip::{ClientIp, PeerAddr};

        let request = |peer: Option<&str>| {
            let mut req = http::Request::get("/")
                .header("x-forwarded-for", "6.6.6.6, 203.0.113.7")
                .body(())
                .expect("a request");
            if let Some(peer) = peer {
                let addr = peer.parse().expect("an address");
                req.extensions_mut().insert(PeerAddr(addr));
            }
            req
        };
        let ip = |s: &str| Some(s.parse::<IpAddr>().expect("an address"));
        let peer_only = Metadata::default();
        let proxied = Metadata {
            ip: Some(ClientIp::trusted_proxies(["10.0.0.0/8"]).expect("CIDRs")),
            user_agent: false,
        };
        let from_proxy = request(Some("10.0.0.1:4000"));
        assert_eq!(Visit::of(&from_proxy, &peer_only).ip, ip("10.0.0.1"));
        assert_eq!(Visit::of(&from_proxy, &proxied).ip, ip("203.0.113.7"));
        let direct = request(Some("[::ffff:198.51.100.2]:1"));
        assert_eq!(Visit::of(&direct, &proxied).ip, ip("198.51.100.2"));
        assert_eq!(Visit::of(&request(None), &proxied).ip, None);
        let none = Metadata {
            ip: None,
            user_agent: true,
        };
        assert_eq!(Visit::of(&from_proxy, &none).ip, None);
    }
}
