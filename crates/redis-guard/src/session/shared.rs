//! [`Shared`]: the settings every request of one layer reads, and what the layer records of
//! each request's client.

use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderValue;
use http::request::Parts;

use super::FailurePolicy;
use super::cookie::CookieConfig;
use super::store::{Lifetimes, SessionStore};
use super::token::Wire;

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
}

/// Which client details the layer keeps with each session.
#[derive(Clone, Debug)]
pub(crate) struct Metadata {
    /// How the client's address is read; `None`: no address is kept.
    #[cfg(feature = "rate-limit")]
    pub(crate) ip: Option<crate::rate_limit::ClientIp>,
    /// Whether the user agent is kept.
    pub(crate) user_agent: bool,
}

impl Default for Metadata {
    fn default() -> Self {
        Self {
            #[cfg(feature = "rate-limit")]
            ip: Some(crate::rate_limit::ClientIp::peer()),
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
    /// address in the extensions (axum's `ConnectInfo` or [`PeerAddr`](crate::rate_limit::PeerAddr))
    /// no address is recorded, and nothing is logged: sessions work without one.
    pub(crate) fn of(parts: &Parts, metadata: &Metadata) -> Self {
        #[cfg(feature = "rate-limit")]
        let ip = metadata
            .ip
            .as_ref()
            .filter(|_| crate::rate_limit::has_peer(parts))
            .and_then(|client| client.client_ip(parts).ok());
        #[cfg(not(feature = "rate-limit"))]
        let ip = None;
        let user_agent = metadata
            .user_agent
            .then(|| parts.headers.get(http::header::USER_AGENT).cloned())
            .flatten();
        Self { ip, user_agent }
    }

    /// The user agent as kept: visible ASCII and spaces (other bytes, tabs included, become `?`), at most
    /// [`MAX_USER_AGENT_LEN`] bytes; `None` when absent or empty.
    pub(crate) fn user_agent(&self) -> Option<String> {
        let raw = self.user_agent.as_ref()?.as_bytes();
        let kept: String = raw
            .iter()
            .take(MAX_USER_AGENT_LEN)
            .map(|&b| {
                if b == b' ' || b.is_ascii_graphic() {
                    char::from(b)
                } else {
                    '?'
                }
            })
            .collect();
        let kept = kept.trim().to_owned();
        (!kept.is_empty()).then_some(kept)
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
    }
}
