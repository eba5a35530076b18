//! Trusted-proxy networks: the CIDR list of [`ClientIp::trusted_proxies`](super::ClientIp::trusted_proxies).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{ConfigError, ConfigErrorKind};

/// Why `input`, an entry of a trusted-proxy list, was rejected: the message holds the entry as
/// given, and so does the error's [`value`](ConfigError::value).
fn invalid(input: &str, why: &str) -> ConfigError {
    ConfigError::new(
        ConfigErrorKind::TrustedProxy,
        format!("invalid trusted proxy {input:?}: {why}"),
    )
    .with_setting("ClientIp::trusted_proxies")
    .with_value(input)
}

/// A network: the address with the bits below `prefix` cleared. IPv4-mapped IPv6 networks of at
/// least `/96` are stored as IPv4.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub(super) fn parse(input: &str) -> Result<Self, ConfigError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(invalid(input, "empty entry, expected an address or a CIDR"));
        }
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| invalid(input, "not an IP address or CIDR"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => {
                let digits = !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit());
                match p.parse::<u8>() {
                    Ok(n) if digits && n <= max => n,
                    _ => {
                        return Err(invalid(
                            input,
                            "the prefix length must be 0-32 for IPv4, 0-128 for IPv6",
                        ));
                    }
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_parsing() {
        let ok = |s: &str| format!("{:?}", Cidr::parse(s).unwrap());
        assert_eq!(ok("10.0.0.0/8"), "10.0.0.0/8");
        assert_eq!(ok(" 10.1.2.3/8 "), "10.0.0.0/8");
        assert_eq!(ok("192.168.1.1"), "192.168.1.1/32");
        assert_eq!(ok("::1"), "::1/128");
        assert_eq!(ok("::1/128"), "::1/128");
        assert_eq!(ok("fd00::/8"), "fd00::/8");
        assert_eq!(ok("0.0.0.0/0"), "0.0.0.0/0");
        assert_eq!(ok("::ffff:10.0.0.0/104"), "10.0.0.0/8");
        assert_eq!(ok("::ffff:1.2.3.4"), "1.2.3.4/32");

        // What each kind of bad entry is told.
        let (empty, address, prefix) = ("empty entry", "not an IP address", "prefix length");
        let cases: [(&str, &str); 14] = [
            ("", empty),
            ("  ", empty),
            ("banana", address),
            ("10.0.0/8", address),
            ("[::1]/128", address),
            ("/8", address),
            ("10.0.0.0/33", prefix),
            ("::1/129", prefix),
            ("10.0.0.0/8/1", prefix),
            ("10.0.0.0/", prefix),
            ("10.0.0.0/+8", prefix),
            ("10.0.0.0/-1", prefix),
            ("10.0.0.0/0008", prefix),
            ("10.0.0.0/ 8", prefix),
        ];
        for (input, why) in cases {
            let err = Cidr::parse(input).unwrap_err();
            assert_eq!(err.kind(), ConfigErrorKind::TrustedProxy, "{input:?}");
            assert_eq!(err.value(), Some(input), "{input:?}");
            assert!(err.to_string().contains(why), "{input:?}: {err}");
            assert!(err.to_string().contains(&format!("{input:?}")), "{err}");
        }
    }

    #[test]
    fn cidr_matching() {
        let net = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(net.contains(ip("10.255.255.255")));
        assert!(!net.contains(ip("11.0.0.0")));
        assert!(!net.contains(ip("::a00:1")));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains(ip("fdff::1")));
        assert!(!v6.contains(ip("fe00::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        let all = Cidr::parse("::/0").unwrap();
        assert!(all.contains(ip("2001:db8::1")));
        assert!(!all.contains(ip("1.2.3.4")));
        let host = Cidr::parse("192.168.1.1").unwrap();
        assert!(host.contains(ip("192.168.1.1")));
        assert!(!host.contains(ip("192.168.1.2")));
    }

    /// Any address; IPv4-mapped IPv6 is one case in three.
    fn address() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<[u8; 4]>().prop_map(IpAddr::from),
            any::<[u8; 16]>().prop_map(IpAddr::from),
            any::<[u8; 4]>().prop_map(|o| IpAddr::V6(Ipv4Addr::from(o).to_ipv6_mapped())),
        ]
    }

    fn width(ip: IpAddr) -> usize {
        if ip.is_ipv4() { 32 } else { 128 }
    }

    /// The bits of `ip`, most significant first.
    fn bits(ip: IpAddr) -> Vec<bool> {
        let octets = match ip {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        octets
            .iter()
            .flat_map(|o| (0..8).rev().map(move |i| o >> i & 1 == 1))
            .collect()
    }

    /// `ip` with bit `i` (counted from the most significant) inverted.
    fn flipped(ip: IpAddr, i: usize) -> IpAddr {
        match ip {
            IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) ^ (1 << (31 - i)))),
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) ^ (1 << (127 - i)))),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// What a network prints parses back to the same network, which prints the same.
        #[test]
        fn parse_display_parse_round_trips(addr in address(), prefix in 0..=128_usize) {
            let prefix = prefix % (width(addr) + 1);
            let cidr = Cidr::parse(&format!("{addr}/{prefix}")).unwrap();
            let shown = format!("{cidr:?}");
            let again = Cidr::parse(&shown).unwrap();
            prop_assert_eq!(again, cidr);
            prop_assert_eq!(format!("{again:?}"), shown);
        }
    }

    proptest! {
        // Each case checks every prefix length of its address.
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// For every prefix length, `contains` agrees with comparing the first `prefix` bits one
        /// by one: for the address with one bit inverted on either side of the prefix boundary
        /// or anywhere, and for random addresses of either family.
        #[test]
        fn contains_agrees_with_a_bitwise_reference(
            addr in address(),
            anywhere in 0..128_usize,
            other in any::<[u8; 16]>(),
        ) {
            let [a, b, c, d, ..] = other;
            let random = [IpAddr::from([a, b, c, d]), IpAddr::from(other)];
            for prefix in 0..=width(addr) {
                let cidr = Cidr::parse(&format!("{addr}/{prefix}")).unwrap();
                // Mapped networks of at least /96 are IPv4 networks.
                let (net, prefix) = match addr {
                    IpAddr::V6(v6) if prefix >= 96 && v6.to_ipv4_mapped().is_some() => {
                        (IpAddr::V4(v6.to_ipv4_mapped().unwrap()), prefix - 96)
                    }
                    _ => (addr, prefix),
                };
                let net_bits = bits(net);
                let flips = [prefix.wrapping_sub(1), prefix, anywhere % width(net)];
                let candidates = flips
                    .into_iter()
                    .filter(|&i| i < width(net))
                    .map(|i| flipped(net, i))
                    .chain([net])
                    .chain(random)
                    .map(|ip| ip.to_canonical());
                for candidate in candidates {
                    let expected = net.is_ipv4() == candidate.is_ipv4()
                        && net_bits[..prefix] == bits(candidate)[..prefix];
                    prop_assert_eq!(cidr.contains(candidate), expected, "{:?} ∋ {}", cidr, candidate);
                }
            }
        }
    }
}
