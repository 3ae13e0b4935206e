//! Which webhook URLs and addresses the server may call (protocol §12.8):
//! the decision alone, no resolution. A URL is checked when a subscription
//! is declared (a literal address, `localhost`, a scheme); every address a
//! name resolves to is checked again when a delivery connects
//! (`crate::subscriptions::guard`), so a name that later resolves to a
//! private address (DNS rebinding) reaches nothing.
//!
//! Refused: every address that is not globally routable unicast — loopback,
//! RFC 1918 and CGNAT, link-local (cloud metadata at 169.254.169.254
//! among them), unique-local, unspecified, multicast, broadcast,
//! documentation and benchmarking ranges, reserved ranges, and IPv6 forms
//! that carry an IPv4 address (mapped, compatible, NAT64, 6to4), judged by
//! the address they carry. A development allowlist of CIDR blocks
//! (`--webhook-allow`) lets tests reach a receiver on loopback.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address block, `10.0.0.0/8` or `::1/128` (a bare address: /32, /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (addr, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an address block"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => b
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("{s:?}: the prefix length is 0 to {max}"))?,
        };
        Ok(Cidr { addr, bits })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix_eq(
                u128::from(u32::from(net)) << 96,
                u128::from(u32::from(ip)) << 96,
                self.bits,
            ),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(u128::from(net), u128::from(ip), self.bits)
            }
            _ => false,
        }
    }
}

fn prefix_eq(a: u128, b: u128, bits: u8) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(bits))
    };
    a & mask == b & mask
}

fn v4_public(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 192 && b == 88 && c == 99)
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224)
}

fn v6_public(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    // Forms that carry an IPv4 address are judged by it.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_public(v4);
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if s[..6] == [0; 6] {
        // Unspecified, loopback and the deprecated IPv4-compatible form.
        return ip != Ipv6Addr::UNSPECIFIED
            && ip != Ipv6Addr::LOCALHOST
            && v4_public(embedded(s[6], s[7]));
    }
    if s[0] == 0x64 && s[1] == 0xff9b {
        // NAT64 (64:ff9b::/96 and the local-use 64:ff9b:1::/48).
        return s[2] == 0 && v4_public(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        // 6to4 carries its relay's IPv4 address.
        return v4_public(embedded(s[1], s[2]));
    }
    !((s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (s[0] & 0xff00) == 0xff00 // multicast
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x2001 && s[1] < 0x0200) // IETF protocol assignments, Teredo
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard
        || s[0] == 0x3fff) // documentation (RFC 9637)
}

/// Whether an address is globally routable unicast.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_public(v4),
        IpAddr::V6(v6) => v6_public(v6),
    }
}

/// What webhook URLs may be.
#[derive(Clone, Debug, Default)]
pub struct UrlPolicy {
    /// `http://` too (development only); else `https://` alone.
    pub allow_http: bool,
    /// Blocks allowed though not public (development only).
    pub allow: Vec<Cidr>,
}

/// A URL that passed: its host, and the address when the host is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Callable {
    pub host: String,
    pub literal: Option<IpAddr>,
}

impl UrlPolicy {
    /// Whether a delivery may connect to `ip`.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        is_public(ip) || self.allow.iter().any(|c| c.contains(ip))
    }

    /// Checks a webhook URL as declared: the reason is the 400's message.
    pub fn check(&self, raw: &str) -> Result<Callable, String> {
        let url = url::Url::parse(raw).map_err(|e| format!("not a URL: {e}"))?;
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => return Err("webhook URLs use https".into()),
            other => return Err(format!("webhook URLs use https, not {other}")),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("a webhook URL carries no credentials".into());
        }
        let literal = match url.host() {
            None => return Err("a webhook URL names a host".into()),
            Some(url::Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(url::Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
            Some(url::Host::Domain(d)) => {
                let d = d.trim_end_matches('.').to_ascii_lowercase();
                // Names every resolver answers with loopback, and names no
                // public resolver answers.
                if d == "localhost"
                    || d.ends_with(".localhost")
                    || d.ends_with(".local")
                    || d.ends_with(".internal")
                    || !d.contains('.')
                {
                    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
                    if !(d == "localhost" && self.permits(loopback)) {
                        return Err(format!("{d} is not a public host name"));
                    }
                }
                None
            }
        };
        if let Some(ip) = literal {
            if !self.permits(ip) {
                return Err(format!("{ip} is not a public address"));
            }
        }
        Ok(Callable {
            host: url.host_str().unwrap_or_default().to_owned(),
            literal,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_refused_class() {
        for a in [
            "0.0.0.0",
            "10.0.0.1",
            "100.64.0.1",
            "127.0.0.1",
            "127.9.9.9",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "198.51.100.1",
            "203.0.113.9",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
            "100::1",
            "3fff::1",
        ] {
            assert!(!is_public(ip(a)), "{a}");
        }
        for a in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(is_public(ip(a)), "{a}");
        }
    }

    #[test]
    fn urls() {
        let strict = UrlPolicy::default();
        assert!(strict.check("https://hooks.example.com/x").is_ok());
        for u in [
            "http://hooks.example.com/x",
            "https://10.0.0.1/hook",
            "https://[::1]/x",
            "https://localhost/x",
            "https://a.localhost/x",
            "https://metadata/x",
            "https://u:p@hooks.example.com/",
            "ftp://hooks.example.com/",
            "https://169.254.169.254/latest",
            "https://0x7f000001/",
            "https://2130706433/",
            "not a url",
        ] {
            assert!(strict.check(u).is_err(), "{u}");
        }
        let dev = UrlPolicy {
            allow_http: true,
            allow: vec![Cidr::parse("127.0.0.0/8").unwrap()],
        };
        assert!(dev.check("http://127.0.0.1:8080/webhook").is_ok());
        assert!(dev.check("http://localhost:8080/webhook").is_ok());
        assert!(dev.check("http://10.0.0.1/hook").is_err());
        assert!(dev.permits(ip("::ffff:127.0.0.1")));
        assert!(!dev.permits(ip("::1")));
    }

    #[test]
    fn blocks() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains(ip("10.1.2.3")));
        assert!(!c.contains(ip("10.2.0.0")));
        assert!(Cidr::parse("::/0").unwrap().contains(ip("::1")));
        assert!(Cidr::parse("1.2.3.4/33").is_err());
        assert!(Cidr::parse("x").is_err());
    }
}
