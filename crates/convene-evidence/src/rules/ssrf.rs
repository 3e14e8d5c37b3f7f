//! `ssrf_protection`: URLs and hosts that reach internal addresses.

use super::{strings, Rule, RuleContext, RuleOutcome};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Blocks URLs that reach loopback, private, link-local or metadata endpoints.
pub struct SsrfProtection;

/// Schemes whose URLs reach a host this rule checks (WHATWG "special" schemes but `file`).
const HOST_SCHEMES: [&str; 5] = ["http", "https", "ws", "wss", "ftp"];
/// Schemes refused outright, with the text that must follow the scheme name.
const FORBIDDEN_SCHEMES: [&str; 7] = [
    "file://",
    "gopher://",
    "dict://",
    "ldap://",
    "tftp://",
    "jar:",
    "netdoc://",
];

impl SsrfProtection {
    fn host_is_internal(host: &str) -> bool {
        let h = normalize_host(host);
        let h = h.as_str();
        if h == "localhost"
            || h.ends_with(".localhost")
            || h.ends_with(".internal")
            || h.ends_with(".local")
            || h == "metadata"
            || h == "metadata.google.internal"
            || resolves_to_loopback(h)
        {
            return true;
        }
        if let Some(ip) = embedded_address(h) {
            return ip_internal(ip);
        }
        if let Ok(ip) = h.parse::<IpAddr>() {
            return ip_internal(ip);
        }
        // inet_aton forms that HTTP clients still accept: 2130706433, 0x7f000001,
        // 0177.0.0.1, 127.1, 10.0.1 ...
        if let Some(n) = inet_aton(h) {
            return ip_internal(IpAddr::V4(Ipv4Addr::from(n)));
        }
        false
    }

    /// The URL whose (lower-cased) scheme starts at `u[start..]`; `None` when it is not one we
    /// check.
    fn check_url(u: &str, start: usize, memo: &mut AuthorityMemo) -> Option<String> {
        let url = &u[start..];
        for scheme in FORBIDDEN_SCHEMES {
            if url.starts_with(scheme) {
                return Some(format!("SSRF: forbidden URL scheme {scheme}"));
            }
        }
        let (scheme, rest) = url.split_once(':')?;
        if !HOST_SCHEMES.contains(&scheme) {
            return None;
        }
        // WHATWG parsers take any run of slashes and backslashes (or none: "http:10.0.0.1")
        // before the host of a special scheme.
        let host_at = u.len() - rest.trim_start_matches(['/', '\\']).len();
        Self::check_authority_in(u, host_at, memo)
    }

    /// The host of `authority[/path...]`, read as WHATWG does (a backslash ends it) and as
    /// parsers that keep backslashes in the authority do (Python's urlsplit): either internal
    /// host denies.
    fn check_authority(rest: &str) -> Option<String> {
        Self::check_authority_in(rest, 0, &mut AuthorityMemo::default())
    }

    /// [`Self::check_authority`] of `s[pos..]`, with the authority's end and last '@' taken
    /// from `memo` when an earlier URL of the same token shares them.
    fn check_authority_in(s: &str, pos: usize, memo: &mut AuthorityMemo) -> Option<String> {
        let whatwg = memo.whatwg.locate(s, pos, &['/', '?', '#', '\\']);
        let python = memo.python.locate(s, pos, &['/', '?', '#']);
        // Without a backslash in the authority both readings are the same: one pass.
        let readings: &[(usize, Option<usize>)] = if whatwg.0 == python.0 {
            &[whatwg][..]
        } else {
            &[whatwg, python][..]
        };
        for &(end, at) in readings {
            let hostport = &s[at.map_or(pos, |a| a + 1)..end];
            let host = if hostport.starts_with('[') {
                // An IPv6 literal (zone id included) is short: a ']' further on closes no
                // host, so the search stops there (unclosed, it is read as if closed).
                let mut n = hostport.len().min(256);
                while !hostport.is_char_boundary(n) {
                    n -= 1;
                }
                let inner = hostport[..n].split(']').next().unwrap_or("");
                format!("{inner}]")
            } else {
                let h = hostport.split(':').next().unwrap_or("");
                // Punctuation around a URL in prose: "(http://10.0.0.1)", "<...>".
                h.trim_end_matches([')', ']', '}', '>', '"', '\'', ',', ';', '!'])
                    .to_string()
            };
            if Self::host_is_internal(&host) {
                return Some(format!("SSRF: internal address {host}"));
            }
        }
        None
    }

    /// Every URL in one token: at each scheme (found by its ':'), and a leading
    /// scheme-relative "//host" (or with two backslashes, a UNC path).
    fn check_token(tok: &str) -> Option<String> {
        let lower = tok.to_ascii_lowercase();
        let t = lower.trim_start_matches(['"', '\'', '<', '(', '[', '`']);
        if let Some(rest) = t.strip_prefix("//").or_else(|| t.strip_prefix("\\\\")) {
            if let Some(r) = Self::check_authority(rest) {
                return Some(r);
            }
        }
        // No scheme: "169.254.169.254/latest", "localhost:6379", "[::1]:8080" (curl and
        // most clients assume http://).
        let bare = lower.trim_start_matches(['"', '\'', '<', '(', '`']);
        if Self::is_bare_authority(bare) {
            if let Some(r) = Self::check_authority(bare) {
                return Some(r);
            }
        }
        let b = lower.as_bytes();
        let mut memo = AuthorityMemo::default();
        for (colon, _) in lower.match_indices(':') {
            // The scheme is the run of scheme characters before the ':'.
            let start = b[..colon]
                .iter()
                .rposition(|c| !(c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.')))
                .map_or(0, |p| p + 1);
            if start < colon {
                if let Some(r) = Self::check_url(&lower, start, &mut memo) {
                    return Some(r);
                }
            }
        }
        None
    }
}

impl SsrfProtection {
    /// `host:port...` or `host/path...` where host is a dotted-quad IPv4, a bracketed IPv6
    /// or `localhost`: an address without a scheme. Bare names ("notes/todo.md",
    /// "example.com:443") are left alone: without a scheme only numeric hosts and
    /// localhost are unambiguous.
    fn is_bare_authority(t: &str) -> bool {
        if t.starts_with('[') {
            return t.contains(']');
        }
        let Some(end) = t.find([':', '/']) else {
            return false;
        };
        let host = &t[..end];
        let after = &t[end..];
        // "10.0.0.0/8" is a CIDR prefix in network configuration, not a path.
        let cidr = after.len() <= 4 && after[1..].bytes().all(|b| b.is_ascii_digit());
        let port_or_path = (after.starts_with('/') && !cidr)
            || (after.starts_with(':')
                && after[1..]
                    .bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_digit()));
        let numeric = |n: usize| {
            host.split('.').count() == n
                && host
                    .split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        };
        // A port of two to five digits ("10.5:1" is a ratio, not 10.0.0.5 port 1).
        let with_port = after.starts_with(':') && {
            let digits = after[1..].bytes().take_while(u8::is_ascii_digit).count();
            (2..=5).contains(&digits)
        };
        port_or_path
            && (host == "localhost"
                || numeric(4)
                // Short inet_aton forms ("127.1:8080", "10.0.1:22") only with a port: with a
                // path they read like ratios and versions ("0.5/1").
                || (with_port && (numeric(2) || numeric(3)))
                // Reserved internal names ("metadata.google.internal/computeMetadata/v1/").
                || host.ends_with(".internal"))
    }

    /// A parameter whose name says it holds a host or URL (`host`, `target_url`,
    /// `endpoint`, `proxy`...): its value is read as `host[:port][/path]` even without a
    /// scheme ("169.254.169.254", "metadata.google.internal", "10.0.0.5:5432").
    fn check_host_field(key: &str, value: &str) -> Option<String> {
        // Plurals name lists of the same ("hosts", "targetUrls").
        let named = |n: &str| {
            let singular = n.strip_suffix(['s', 'S']).unwrap_or(n);
            HOST_KEYS
                .iter()
                .any(|h| h.eq_ignore_ascii_case(n) || h.eq_ignore_ascii_case(singular))
        };
        if !named(last_word(key)) && !named(key) {
            return None;
        }
        let v = value.trim();
        if v.contains(char::is_whitespace) || v.contains("://") {
            // Free text or a URL with a scheme: the token scan sees those.
            return None;
        }
        Self::check_authority(v.to_ascii_lowercase().trim_start_matches(['/', '\\']))
    }
}

/// The last word of a parameter name: after the last `_`, `-` or `.`, then the last camelCase
/// hump ("target_url" -> "url", "webhookUrl" -> "Url", "proxyHost" -> "Host", "targetURL" -> "URL").
fn last_word(key: &str) -> &str {
    let tail = key.rsplit(['_', '-', '.']).next().unwrap_or("");
    let b = tail.as_bytes();
    // A hump starts at an upper-case letter after a lower-case one (both ASCII, so the
    // index is a char boundary).
    let start = (1..b.len())
        .rev()
        .find(|&i| b[i].is_ascii_uppercase() && b[i - 1].is_ascii_lowercase())
        .unwrap_or(0);
    &tail[start..]
}

/// Where the authorities of a token's URLs end, remembered between URLs: every URL whose host
/// starts before a found end shares that end (no delimiter lies between), and its last '@'
/// is the shared one if that lies after the host's start. So a token with many URLs
/// ("http:http:http:...") is searched once, not once per URL (seconds for 64 KB).
#[derive(Default)]
struct AuthorityMemo {
    whatwg: Reach,
    python: Reach,
}

/// One reading's last search: from `from`, the authority ends at `end`, with its last '@'.
#[derive(Default)]
struct Reach {
    found: Option<(usize, usize, Option<usize>)>,
}

impl Reach {
    /// The end of the authority starting at `s[pos..]` (first of `delims`, or the end of
    /// `s`) and the last '@' before it at or after `pos`.
    fn locate(&mut self, s: &str, pos: usize, delims: &[char]) -> (usize, Option<usize>) {
        if let Some((from, end, at)) = self.found {
            if from <= pos && pos <= end {
                return (end, at.filter(|&a| a >= pos));
            }
        }
        let end = s[pos..].find(delims).map_or(s.len(), |i| pos + i);
        let at = s[pos..end].rfind('@').map(|i| pos + i);
        self.found = Some((pos, end, at));
        (end, at)
    }
}

/// Parameter names (or their last word, see [`last_word`]) that hold a host, address or URL.
/// Names that may hold plain data about a host ("client_ip", "address") are not here.
const HOST_KEYS: [&str; 13] = [
    "host", "hostname", "server", "endpoint", "target", "url", "uri", "domain", "proxy",
    "upstream", "callback", "webhook", "baseurl",
];

/// Public names that resolve to 127.0.0.1 by design (local development services), with
/// every subdomain.
const LOOPBACK_NAMES: [&str; 4] = ["localtest.me", "lvh.me", "vcap.me", "lacolhost.com"];

/// Wildcard DNS services that answer with the address written in the name:
/// `10.0.0.1.nip.io`, `app.10-0-0-1.sslip.io`, `7f000001.nip.io`, `--1.sslip.io` (::1).
const EMBEDDING_SUFFIXES: [&str; 5] = [
    ".nip.io",
    ".sslip.io",
    ".xip.io",
    ".traefik.me",
    ".nip.direct",
];

/// Whether `h` (normalized) is one of [`LOOPBACK_NAMES`] or under one.
fn resolves_to_loopback(h: &str) -> bool {
    LOOPBACK_NAMES.iter().any(|n| {
        h.strip_suffix(n)
            .is_some_and(|p| p.is_empty() || p.ends_with('.'))
    })
}

/// The address a wildcard DNS service of [`EMBEDDING_SUFFIXES`] answers for `h`.
fn embedded_address(h: &str) -> Option<IpAddr> {
    let pre = EMBEDDING_SUFFIXES.iter().find_map(|s| h.strip_suffix(s))?;
    let labels: Vec<&str> = pre.split('.').collect();
    // Dotted: the last four labels ("app.10.0.0.1").
    if labels.len() >= 4 {
        let quad = labels[labels.len() - 4..].join(".");
        if let Ok(ip) = quad.parse::<Ipv4Addr>() {
            return Some(IpAddr::V4(ip));
        }
    }
    let last = labels.last()?;
    // Dashed IPv4: the last four '-' parts ("app-10-0-0-1").
    let parts: Vec<&str> = last.split('-').collect();
    if parts.len() >= 4 {
        if let Ok(ip) = parts[parts.len() - 4..].join(".").parse::<Ipv4Addr>() {
            return Some(IpAddr::V4(ip));
        }
    }
    // Hex IPv4 ("7f000001"), alone or after a '-'.
    let tail = parts.last().copied().unwrap_or("");
    if tail.len() == 8 {
        if let Ok(n) = u32::from_str_radix(tail, 16) {
            return Some(IpAddr::V4(Ipv4Addr::from(n)));
        }
    }
    // Dashed IPv6 (sslip.io): '-' for ':' ("--1", "fe80--1").
    last.replace('-', ":")
        .parse::<Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}

/// A host as URL parsers see it: percent-decoded, IDNA-style width and dot folding
/// ("１２７。０。０。１" is 127.0.0.1), lower case, brackets, IPv6 zone and trailing dot removed.
fn normalize_host(host: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    let decoded = if host.contains('%') {
        percent_decode(host)
    } else {
        host.to_string()
    };
    let mut h: String = if decoded.is_ascii() {
        decoded.to_ascii_lowercase()
    } else {
        decoded
            .nfkc()
            .map(|c| {
                if matches!(c, '\u{3002}' | '\u{ff0e}' | '\u{ff61}') {
                    '.'
                } else {
                    c
                }
            })
            .flat_map(char::to_lowercase)
            .collect()
    };
    if let Some(inner) = h.strip_prefix('[') {
        let inner = inner.trim_end_matches(']');
        // "fe80::1%eth0": the zone names an interface, the address is what matters.
        h = inner.split('%').next().unwrap_or("").to_string();
    }
    h.trim_end_matches('.').to_string()
}

/// %XX escapes decoded (invalid escapes kept as they are).
fn percent_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(hi), Some(lo)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse a numeric IPv4 host the way `inet_aton` does (1-4 parts, decimal/0x hex/0 octal).
fn inet_aton(h: &str) -> Option<u32> {
    // Every form starts with a digit ("0x..." included); names never parse.
    if !h.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
        return None;
    }
    let parts: Vec<&str> = h.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut vals = Vec::with_capacity(4);
    for p in &parts {
        let v = if let Some(x) = p.strip_prefix("0x") {
            u64::from_str_radix(x, 16).ok()?
        } else if p.len() > 1 && p.starts_with('0') {
            u64::from_str_radix(&p[1..], 8).ok()?
        } else {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            p.parse::<u64>().ok()?
        };
        vals.push(v);
    }
    let (last, head) = vals.split_last()?;
    if head.iter().any(|v| *v > 255) {
        return None;
    }
    let rest_bits = 8 * (4 - head.len() as u32);
    if rest_bits < 64 && *last >= (1u64 << rest_bits) {
        return None;
    }
    let mut n: u64 = 0;
    for (i, v) in head.iter().enumerate() {
        n |= v << (24 - 8 * i as u32);
    }
    u32::try_from(n | last).ok()
}

fn ip_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1])) // CGNAT
                || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF assignments (OCI metadata)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return ip_internal(IpAddr::V4(v4));
            }
            let s = v6.segments();
            let low32 = Ipv4Addr::from(((s[6] as u32) << 16) | s[7] as u32);
            // IPv6 forms that carry an IPv4 address: compatible ::a.b.c.d, SIIT
            // ::ffff:0:a.b.c.d, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4 2002::/16.
            let compatible = s[..6] == [0; 6] || s[..6] == [0, 0, 0, 0, 0xffff, 0];
            let nat64 = s[0] == 0x64 && s[1] == 0xff9b && (s[2..6] == [0; 4] || s[2] == 1);
            let embedded = if compatible || nat64 {
                Some(low32)
            } else if s[0] == 0x2002 {
                Some(Ipv4Addr::from(((s[1] as u32) << 16) | s[2] as u32))
            } else {
                None
            };
            if embedded.is_some_and(|v4| ip_internal(IpAddr::V4(v4))) {
                return true;
            }
            v6 == Ipv6Addr::LOCALHOST
                || v6.is_unspecified()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xffc0) == 0xfec0 // deprecated site-local
        }
    }
}

impl Rule for SsrfProtection {
    fn name(&self) -> &str {
        "ssrf_protection"
    }
    fn evaluate(&self, ctx: &RuleContext<'_>) -> RuleOutcome {
        let mut all = Vec::new();
        strings(&ctx.cmd.params, None, &mut all);
        for (key, s) in all {
            if let Some(r) = key.and_then(|k| Self::check_host_field(k, s)) {
                return RuleOutcome::deny(r);
            }
            // A URL has a scheme (':') or is scheme-relative (two slashes or backslashes),
            // a bare address a port (':') or a path ('/'); text without these holds none.
            if !s.contains([':', '/', '\\']) {
                continue;
            }
            // The whole value as a URL parser takes it: WHATWG drops tabs and newlines
            // anywhere ("http://loc<TAB>alhost") and trims C0 controls and spaces.
            if s.contains(['\t', '\n', '\r']) {
                let whole: String = s
                    .chars()
                    .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
                    .collect();
                if let Some(r) = Self::check_token(whole.trim_matches(|c: char| c <= ' ')) {
                    return RuleOutcome::deny(r);
                }
            }
            // URLs may be embedded in free text, so test every token.
            for tok in s.split_whitespace() {
                if let Some(r) = Self::check_token(tok) {
                    return RuleOutcome::deny(r);
                }
            }
        }
        RuleOutcome::allow()
    }
}
