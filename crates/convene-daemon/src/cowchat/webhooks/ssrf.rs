//! The SSRF guard: webhook URLs, and which addresses a webhook may never reach.
//!
//! A target host is resolved once per attempt; if ANY resolved address is not public the
//! attempt is refused (a name that resolves to one public and one private address is a
//! rebinding trick), and the connection goes to the address that was checked, so a second
//! lookup cannot swap it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A parsed `http`/`https` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// True for https.
    pub tls: bool,
    /// Host as written (IPv6 literals without brackets).
    pub host: String,
    /// Port (default 80/443).
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
    /// The `Host` header value.
    pub host_header: String,
}

/// Why a URL or an address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not an absolute http(s) URL we can send to.
    #[error("webhook_url: {0}")]
    Url(&'static str),
    /// The host resolved to nothing.
    #[error("webhook_url host {0} does not resolve")]
    NoAddress(String),
    /// The name lookup did not answer in time.
    #[error("webhook_url host {0} did not resolve within {1:?}")]
    Slow(String, std::time::Duration),
    /// The host resolved to an address webhooks may not reach.
    #[error(
        "webhook_url host {host} resolves to {addr} ({why}); only public addresses are allowed"
    )]
    Forbidden {
        /// Host as written.
        host: String,
        /// The offending address.
        addr: IpAddr,
        /// The class it falls in.
        why: &'static str,
    },
}

/// Parses an absolute `http://` or `https://` URL (no userinfo; fragment dropped).
pub fn parse_url(url: &str) -> Result<Target, Refused> {
    if url.len() > 2048 {
        return Err(Refused::Url("longer than 2048 bytes"));
    }
    if url.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(Refused::Url("contains spaces or control characters"));
    }
    let (tls, rest) = match url.split_once("://") {
        Some((s, r)) if s.eq_ignore_ascii_case("http") => (false, r),
        Some((s, r)) if s.eq_ignore_ascii_case("https") => (true, r),
        _ => return Err(Refused::Url("must be an http:// or https:// URL")),
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let cut = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(cut);
    if authority.contains('@') {
        return Err(Refused::Url("credentials in the URL are not allowed"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or(Refused::Url("unclosed [ in host"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(Refused::Url("bad port"))?),
        };
        if h.parse::<Ipv6Addr>().is_err() {
            return Err(Refused::Url("bad IPv6 literal"));
        }
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    if host.is_empty() {
        return Err(Refused::Url("missing host"));
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
    {
        return Err(Refused::Url("host must be ASCII (use punycode)"));
    }
    let default = if tls { 443 } else { 80 };
    let port = match port {
        None => default,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or(Refused::Url("bad port"))?,
    };
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    let bracketed = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    let host_header = if port == default {
        bracketed
    } else {
        format!("{bracketed}:{port}")
    };
    Ok(Target {
        tls,
        host: host.to_ascii_lowercase(),
        port,
        path,
        host_header,
    })
}

/// Why `ip` is not a public unicast address, or None when webhooks may reach it.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    const TABLE: &[([u8; 4], u32, &str)] = &[
        ([0, 0, 0, 0], 8, "unspecified/this-network"),
        ([10, 0, 0, 0], 8, "private"),
        ([100, 64, 0, 0], 10, "carrier-grade NAT"),
        ([127, 0, 0, 0], 8, "loopback"),
        ([169, 254, 169, 254], 32, "cloud metadata"),
        ([169, 254, 0, 0], 16, "link-local"),
        ([172, 16, 0, 0], 12, "private"),
        ([192, 0, 0, 0], 24, "IETF protocol assignments"),
        ([192, 0, 2, 0], 24, "documentation"),
        ([192, 88, 99, 0], 24, "6to4 relay anycast"),
        ([192, 168, 0, 0], 16, "private"),
        ([198, 18, 0, 0], 15, "benchmarking"),
        ([198, 51, 100, 0], 24, "documentation"),
        ([203, 0, 113, 0], 24, "documentation"),
        ([224, 0, 0, 0], 4, "multicast"),
        ([255, 255, 255, 255], 32, "broadcast"),
        ([240, 0, 0, 0], 4, "reserved"),
    ];
    TABLE
        .iter()
        .find(|(net, bits, _)| in_v4(ip, *net, *bits))
        .map(|(_, _, why)| *why)
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u128::MAX << (128 - bits)
    };
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

fn embedded_v4(ip: Ipv6Addr) -> Ipv4Addr {
    let o = ip.octets();
    Ipv4Addr::new(o[12], o[13], o[14], o[15])
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let net = |s: &str| s.parse::<Ipv6Addr>().unwrap_or(Ipv6Addr::UNSPECIFIED);
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    // Forms that carry an IPv4 address: judge the IPv4 address.
    if in_v6(ip, net("::ffff:0:0"), 96) || in_v6(ip, net("64:ff9b::"), 96) {
        return forbidden_v4(embedded_v4(ip));
    }
    if in_v6(ip, net("::"), 96) {
        return Some("IPv4-compatible (deprecated)");
    }
    if in_v6(ip, net("2002::"), 16) {
        let o = ip.octets();
        let v4 = Ipv4Addr::new(o[2], o[3], o[4], o[5]);
        return forbidden_v4(v4).map(|_| "6to4 of a non-public IPv4");
    }
    const TABLE: &[(&str, u32, &str)] = &[
        ("fd00:ec2::254", 128, "cloud metadata"),
        ("fc00::", 7, "unique local (private)"),
        ("fe80::", 10, "link-local"),
        ("fec0::", 10, "site-local (deprecated)"),
        ("ff00::", 8, "multicast"),
        ("100::", 64, "discard-only"),
        ("64:ff9b:1::", 48, "local-use NAT64"),
        ("2001:db8::", 32, "documentation"),
        ("3fff::", 20, "documentation"),
        ("2001::", 23, "IETF protocol assignments"),
    ];
    if let Some((_, _, why)) = TABLE.iter().find(|(n, bits, _)| in_v6(ip, net(n), *bits)) {
        return Some(why);
    }
    // Only global unicast (2000::/3) is allocated for the public Internet.
    if !in_v6(ip, net("2000::"), 3) {
        return Some("reserved");
    }
    None
}

/// How long a name lookup may take before the delivery attempt (or the `subscribe`) fails:
/// the attempt holds a concurrency slot meanwhile.
pub const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Resolves `t` once and checks every address; the first one is returned to connect to.
/// With `allow_local` (test-only setting) nothing is refused.
pub async fn resolve(t: &Target, allow_local: bool) -> Result<SocketAddr, Refused> {
    resolve_with(t, allow_local, RESOLVE_TIMEOUT, |host, port| async move {
        tokio::net::lookup_host((host.as_str(), port))
            .await
            .map(Iterator::collect)
    })
    .await
}

/// [`resolve`] with the name lookup and its deadline given.
async fn resolve_with<F, Fut>(
    t: &Target,
    allow_local: bool,
    deadline: std::time::Duration,
    lookup: F,
) -> Result<SocketAddr, Refused>
where
    F: FnOnce(String, u16) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<Vec<SocketAddr>>>,
{
    let addrs: Vec<SocketAddr> = match t.host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, t.port)],
        Err(_) => tokio::time::timeout(deadline, lookup(t.host.clone(), t.port))
            .await
            .map_err(|_| Refused::Slow(t.host.clone(), deadline))?
            .map_err(|_| Refused::NoAddress(t.host.clone()))?,
    };
    if !allow_local {
        for a in &addrs {
            if let Some(why) = forbidden(a.ip()) {
                return Err(Refused::Forbidden {
                    host: t.host.clone(),
                    addr: a.ip(),
                    why,
                });
            }
        }
    }
    addrs
        .first()
        .copied()
        .ok_or_else(|| Refused::NoAddress(t.host.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifier_table() {
        let refused = [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "192.0.0.1",
            "192.0.2.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fd00:ec2::254",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::ffff:192.168.0.1",
            "64:ff9b::a00:1",
            "::127.0.0.1",
            "2002:7f00:1::",
            "2001:db8::1",
            "2001::1",
            "100::1",
            "3fff::1",
            "4000::1",
        ];
        for a in refused {
            let ip: IpAddr = a.parse().unwrap();
            assert!(forbidden(ip).is_some(), "{a} must be refused");
        }
        let allowed = [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.255.255",
            "192.169.0.1",
            "198.20.0.1",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ];
        for a in allowed {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(forbidden(ip), None, "{a} must be allowed");
        }
    }

    #[test]
    fn urls() {
        let t = parse_url("http://example.com/hook?x=1#frag").unwrap();
        assert_eq!(
            (
                t.tls,
                t.host.as_str(),
                t.port,
                t.path.as_str(),
                t.host_header.as_str()
            ),
            (false, "example.com", 80, "/hook?x=1", "example.com")
        );
        let t = parse_url("HTTPS://Example.com:8443").unwrap();
        assert_eq!((t.tls, t.port, t.path.as_str()), (true, 8443, "/"));
        assert_eq!(t.host_header, "Example.com:8443");
        let t = parse_url("http://[::1]:8080/x").unwrap();
        assert_eq!(
            (t.host.as_str(), t.host_header.as_str()),
            ("::1", "[::1]:8080")
        );
        let t = parse_url("http://h?q").unwrap();
        assert_eq!(t.path, "/?q");
        for bad in [
            "ftp://x/",
            "file:///etc/passwd",
            "http://",
            "http://user:pw@example.com/",
            "http://example.com:0/",
            "http://example.com:99999/",
            "http://[::1/",
            "http://exa mple.com/",
            "gopher://x",
            "//example.com",
        ] {
            assert!(parse_url(bad).is_err(), "{bad} must be refused");
        }
    }

    #[tokio::test]
    async fn resolve_refuses_local_unless_allowed() {
        let t = parse_url("http://127.0.0.1:9/").unwrap();
        assert!(matches!(
            resolve(&t, false).await,
            Err(Refused::Forbidden { .. })
        ));
        assert_eq!(
            resolve(&t, true).await.unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        // A name resolving to loopback is judged by its addresses, not its spelling.
        let t = parse_url("http://localhost:9/").unwrap();
        assert!(resolve(&t, false).await.is_err());
    }

    #[tokio::test]
    async fn a_name_lookup_that_does_not_answer_fails_at_the_deadline() {
        let t = parse_url("https://hooks.example.com/in").unwrap();
        let slow = |_: String, _: u16| async {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            Ok(vec![])
        };
        let started = std::time::Instant::now();
        let r = resolve_with(&t, false, std::time::Duration::from_millis(50), slow).await;
        assert!(
            matches!(r, Err(Refused::Slow(ref h, _)) if h == "hooks.example.com"),
            "{r:?}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        // A lookup that answers in time is checked as before.
        let fast =
            |_: String, p: u16| async move { Ok(vec![SocketAddr::from(([10, 0, 0, 1], p))]) };
        let r = resolve_with(&t, false, std::time::Duration::from_secs(5), fast).await;
        assert!(matches!(r, Err(Refused::Forbidden { .. })), "{r:?}");
    }
}
