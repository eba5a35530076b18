//! Trusted-proxy networks: the CIDR list of [`ClientIp::trusted_proxies`](super::ClientIp::trusted_proxies).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a trusted-proxy list was rejected by [`ClientIp::trusted_proxies`](super::ClientIp::trusted_proxies). Each variant holds the
/// offending entry as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyConfigError {
    /// The entry is empty or only whitespace.
    #[error("invalid trusted proxy {0:?}: empty entry, expected an address or a CIDR")]
    Empty(String),
    /// The part before `/` (or the whole entry) is not an IPv4 or IPv6 address.
    #[error("invalid trusted proxy {0:?}: not an IP address or CIDR")]
    InvalidAddress(String),
    /// The part after `/` is not a number from 0 to 32 (IPv4) or 128 (IPv6).
    #[error("invalid trusted proxy {0:?}: the prefix length must be 0-32 for IPv4, 0-128 for IPv6")]
    InvalidPrefix(String),
    /// The forwarding header is neither `x-forwarded-for` nor `forwarded`.
    #[error("invalid forwarding header {0:?}: expected `x-forwarded-for` or `forwarded`")]
    UnknownHeader(String),
}

/// A network: the address with the bits below `prefix` cleared. IPv4-mapped IPv6 networks of at
/// least `/96` are stored as IPv4.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub(super) fn parse(input: &str) -> Result<Self, ProxyConfigError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(ProxyConfigError::Empty(input.to_owned()));
        }
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| ProxyConfigError::InvalidAddress(input.to_owned()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => {
                let digits = !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit());
                match p.parse::<u8>() {
                    Ok(n) if digits && n <= max => n,
                    _ => return Err(ProxyConfigError::InvalidPrefix(input.to_owned())),
                }
            }
        };
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) if prefix >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix - 96),
                None => (addr, prefix),
            },
            _ => (addr, prefix),
        };
        Ok(Self {
            net: masked(addr, prefix),
            prefix,
        })
    }

    /// Whether `ip` (already canonical) is in this network.
    pub(super) fn contains(self, ip: IpAddr) -> bool {
        match (self.net, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                masked(ip, self.prefix) == self.net
            }
            _ => false,
        }
    }
}

impl fmt::Debug for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

/// `ip` with the bits below `prefix` cleared.
fn masked(ip: IpAddr, prefix: u8) -> IpAddr {
    let prefix = u32::from(prefix);
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX
                .checked_shl(32_u32.saturating_sub(prefix))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX
                .checked_shl(128_u32.saturating_sub(prefix))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

/// Whether `ip` (canonical) is in any of `trusted`.
pub(super) fn is_trusted(trusted: &[Cidr], ip: IpAddr) -> bool {
    trusted.iter().any(|cidr| cidr.contains(ip))
}
