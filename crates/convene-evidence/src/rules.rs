//! Pluggable rules and the built-in rule set.

use crate::config::{challenge, compare_profile, profile_rank, ChallengePolicy, Manifest};
use crate::intake::Command;
use crate::receipt::Verdict;
use aho_corasick::AhoCorasick;
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

/// One automaton over `patterns`, built on first use: a single pass over a string tells
/// whether any pattern occurs, so clean input (the common case) costs one scan instead of
/// one substring search per pattern. `None` only if the automaton cannot be built, and
/// then callers fall back to their exact per-pattern scan.
fn prefilter<'p>(
    cell: &'static OnceLock<Option<AhoCorasick>>,
    patterns: impl IntoIterator<Item = &'p str>,
) -> Option<&'static AhoCorasick> {
    cell.get_or_init(|| AhoCorasick::new(patterns).ok())
        .as_ref()
}

/// What a rule sees.
pub struct RuleContext<'a> {
    /// The normalized command.
    pub cmd: &'a Command,
    /// Verifier capability manifest.
    pub manifest: &'a Manifest,
    /// Current Unix time.
    pub now: f64,
}

/// A rule's decision.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleOutcome {
    /// Verdict of this rule.
    pub verdict: Verdict,
    /// Reason (empty for allow).
    pub reason: String,
    /// Optional §4.7 challenge.
    pub challenge: Option<Value>,
    /// Optional §4.5.1 comparison result.
    pub comparison: Option<Value>,
}

impl RuleOutcome {
    /// An allow outcome.
    pub fn allow() -> Self {
        Self {
            verdict: Verdict::Allow,
            reason: String::new(),
            challenge: None,
            comparison: None,
        }
    }

    /// A deny outcome with a reason.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Deny,
            reason: reason.into(),
            challenge: None,
            comparison: None,
        }
    }
}

/// A verification rule; implementations must be deterministic and side-effect free.
pub trait Rule: Send + Sync {
    /// Registered name (appears in rule_summary and the canonical config).
    fn name(&self) -> &str;
    /// Evaluate the command.
    fn evaluate(&self, ctx: &RuleContext<'_>) -> RuleOutcome;
}

/// Every string in a JSON value, with its object key (if any).
fn strings<'a>(v: &'a Value, key: Option<&'a str>, out: &mut Vec<(Option<&'a str>, &'a str)>) {
    match v {
        Value::String(s) => out.push((key, s)),
        Value::Array(a) => a.iter().for_each(|x| strings(x, key, out)),
        Value::Object(m) => m.iter().for_each(|(k, x)| {
            out.push((None, k));
            strings(x, Some(k), out)
        }),
        _ => {}
    }
}

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
        {
            return true;
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

    /// A URL starting at its (lower-cased) scheme; `None` when it is not one we check.
    fn check_url(u: &str) -> Option<String> {
        for scheme in FORBIDDEN_SCHEMES {
            if u.starts_with(scheme) {
                return Some(format!("SSRF: forbidden URL scheme {scheme}"));
            }
        }
        let (scheme, rest) = u.split_once(':')?;
        if !HOST_SCHEMES.contains(&scheme) {
            return None;
        }
        // WHATWG parsers take any run of slashes and backslashes (or none: "http:10.0.0.1")
        // before the host of a special scheme.
        Self::check_authority(rest.trim_start_matches(['/', '\\']))
    }

    /// The host of `authority[/path...]`, read as WHATWG does (a backslash ends it) and as
    /// parsers that keep backslashes in the authority do (Python's urlsplit): either internal
    /// host denies.
    fn check_authority(rest: &str) -> Option<String> {
        for ends in [&['/', '?', '#', '\\'][..], &['/', '?', '#'][..]] {
            let authority = rest.split(ends).next().unwrap_or("");
            let hostport = authority.rsplit('@').next().unwrap_or("");
            let host = if hostport.starts_with('[') {
                hostport
                    .split(']')
                    .next()
                    .map(|h| format!("{h}]"))
                    .unwrap_or_default()
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
        let b = lower.as_bytes();
        for (colon, _) in lower.match_indices(':') {
            // The scheme is the run of scheme characters before the ':'.
            let start = b[..colon]
                .iter()
                .rposition(|c| !(c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.')))
                .map_or(0, |p| p + 1);
            if start < colon {
                if let Some(r) = Self::check_url(&lower[start..]) {
                    return Some(r);
                }
            }
        }
        None
    }
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
        for (_, s) in all {
            // A URL has a scheme (':') or is scheme-relative (two slashes or backslashes);
            // text without either holds none.
            if !s.contains(':') && !s.contains("//") && !s.contains("\\\\") {
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

/// Blocks remote/arbitrary command execution payloads.
pub struct RceProtection;

const RCE_PATTERNS: &[(&str, &str)] = &[
    ("rm -rf /", "recursive delete of filesystem root"),
    ("rm -rf ~", "recursive delete of home"),
    ("rm -rf *", "recursive wildcard delete"),
    ("rm -fr /", "recursive delete of filesystem root"),
    ("mkfs", "filesystem format"),
    ("dd if=", "raw disk write"),
    (":(){", "fork bomb"),
    ("| sh", "pipe to shell"),
    ("|sh", "pipe to shell"),
    ("| bash", "pipe to shell"),
    ("|bash", "pipe to shell"),
    ("bash -c", "shell spawn"),
    ("sh -c", "shell spawn"),
    ("/bin/sh", "shell spawn"),
    ("/bin/bash", "shell spawn"),
    ("nc -e", "reverse shell"),
    ("ncat -e", "reverse shell"),
    ("/dev/tcp/", "reverse shell"),
    ("mkfifo", "reverse shell pipe"),
    ("$(", "command substitution"),
    ("`", "command substitution"),
    ("os.system(", "code execution"),
    ("subprocess.", "code execution"),
    ("eval(", "code execution"),
    ("exec(", "code execution"),
    ("__import__(", "code execution"),
    ("python -c", "interpreter one-liner"),
    ("perl -e", "interpreter one-liner"),
    ("chmod 777", "permission weakening"),
    ("chmod +s", "setuid"),
    ("> /dev/sd", "raw disk write"),
    ("shutdown -", "host shutdown"),
    ("rm -r -f /", "recursive delete of filesystem root"),
    ("rm -f -r /", "recursive delete of filesystem root"),
    ("rm --recursive", "recursive delete"),
    ("| python", "pipe to interpreter"),
    ("|python", "pipe to interpreter"),
    ("| perl", "pipe to interpreter"),
    ("base64 -d |", "decode and execute"),
    ("base64 -d|", "decode and execute"),
    ("${ifs}", "shell field-separator evasion"),
    (";rm ", "chained delete"),
    ("&&rm ", "chained delete"),
    ("; rm ", "chained delete"),
    ("&& rm ", "chained delete"),
    ("powershell -enc", "encoded powershell"),
    ("--no-preserve-root", "recursive delete of filesystem root"),
    ("sh <(", "process substitution into a shell"),
    ("bash <(", "process substitution into a shell"),
    ("source <(", "process substitution into a shell"),
    ("<(curl", "process substitution of a download"),
    ("<(wget", "process substitution of a download"),
    ("| zsh", "pipe to shell"),
    ("|zsh", "pipe to shell"),
    ("| ksh", "pipe to shell"),
    ("| dash", "pipe to shell"),
    ("| sudo sh", "pipe to shell"),
    ("|sudo sh", "pipe to shell"),
    ("| sudo bash", "pipe to shell"),
    ("|sudo bash", "pipe to shell"),
    ("python3 -c", "interpreter one-liner"),
    ("ruby -e", "interpreter one-liner"),
    ("node -e", "interpreter one-liner"),
    ("php -r", "interpreter one-liner"),
    ("/dev/udp/", "reverse shell"),
];

impl Rule for RceProtection {
    fn name(&self) -> &str {
        "rce_protection"
    }
    fn evaluate(&self, ctx: &RuleContext<'_>) -> RuleOutcome {
        let mut all = Vec::new();
        strings(&ctx.cmd.params, None, &mut all);
        static AC: OnceLock<Option<AhoCorasick>> = OnceLock::new();
        let ac = prefilter(&AC, RCE_PATTERNS.iter().map(|(p, _)| *p));
        let mut norm = String::new();
        for (_, s) in all {
            // Collapse whitespace runs so "rm   -rf  /" cannot dodge the match.
            norm.clear();
            for w in s.split_whitespace() {
                if !norm.is_empty() {
                    norm.push(' ');
                }
                norm.extend(w.chars().map(|c| c.to_ascii_lowercase()));
            }
            if ac.is_some_and(|ac| !ac.is_match(&norm)) {
                continue;
            }
            // Something matched: report the first pattern in table order, as always.
            for (pat, what) in RCE_PATTERNS {
                if norm.contains(pat) {
                    return RuleOutcome::deny(format!("RCE pattern detected: {what}"));
                }
            }
        }
        RuleOutcome::allow()
    }
}

/// Blocks parameters that carry secrets (cloud keys, tokens, private keys, passwords).
pub struct CredentialLeak;

const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "api_key",
    "apikey",
    "access_token",
    "private_key",
    "client_secret",
    "authorization",
    "aws_secret_access_key",
    "refresh_token",
    "session_token",
    "auth_token",
    "bearer_token",
];

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn has_prefixed_token(s: &str, prefix: &str, min_len: usize, charset: fn(char) -> bool) -> bool {
    let mut from = 0;
    while let Some(i) = s[from..].find(prefix) {
        let start = from + i + prefix.len();
        let n = s[start..].chars().take_while(|c| charset(*c)).count();
        if n >= min_len {
            return true;
        }
        from = start;
    }
    false
}

/// `password`, `db_password`, `API_KEY`, `userPassword`, `X-API-Key`... : the name in
/// snake case (camelCase humps, '-', '.' and ' ' become '_'), then the secret name exactly or
/// as a `_`-separated suffix.
fn secret_key_name(k: &str) -> bool {
    let mut norm = String::with_capacity(k.len() + 4);
    let mut after_lower = false;
    for c in k.chars() {
        if matches!(c, '-' | '.' | ' ') {
            norm.push('_');
            after_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && after_lower {
            norm.push('_');
        }
        after_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        norm.push(c.to_ascii_lowercase());
    }
    SECRET_KEYS.iter().any(|sk| {
        norm.ends_with(sk)
            && (norm.len() == sk.len() || norm.as_bytes()[norm.len() - sk.len() - 1] == b'_')
    })
}

/// A necessary substring of every finding of [`CredentialLeak::scan`].
const CREDENTIAL_MARKERS: &[&str] = &[
    "AKIA",
    "-----BEGIN",
    "ghp_",
    "gho_",
    "ghs_",
    "github_pat_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxs-",
    "sk_live_",
    "rk_live_",
    "sk-",
    "eyJ",
    "=",
];

impl CredentialLeak {
    fn scan(s: &str) -> Option<&'static str> {
        static AC: OnceLock<Option<AhoCorasick>> = OnceLock::new();
        if prefilter(&AC, CREDENTIAL_MARKERS.iter().copied()).is_some_and(|ac| !ac.is_match(s)) {
            return None;
        }
        if has_prefixed_token(s, "AKIA", 16, |c| {
            c.is_ascii_uppercase() || c.is_ascii_digit()
        }) {
            return Some("AWS access key id");
        }
        if s.contains("-----BEGIN") && s.contains("PRIVATE KEY") {
            return Some("private key block");
        }
        for p in ["ghp_", "gho_", "ghs_", "github_pat_"] {
            if has_prefixed_token(s, p, 30, is_token_char) {
                return Some("GitHub token");
            }
        }
        for p in ["xoxb-", "xoxp-", "xoxa-", "xoxs-"] {
            if has_prefixed_token(s, p, 10, is_token_char) {
                return Some("Slack token");
            }
        }
        for p in ["sk_live_", "rk_live_"] {
            if has_prefixed_token(s, p, 16, is_token_char) {
                return Some("Stripe secret key");
            }
        }
        if has_prefixed_token(s, "sk-", 32, is_token_char) {
            return Some("API secret key");
        }
        // JWT: three base64url segments, the first two starting with '{"' encoded.
        if s.contains("eyJ") {
            for w in s.split(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
                let mut parts = w.split('.');
                if let (Some(a), Some(b), Some(c), None) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                {
                    if a.starts_with("eyJ") && b.starts_with("eyJ") && c.len() >= 16 {
                        return Some("JWT bearer token");
                    }
                }
            }
        }
        // Inline assignments need an '='; skip the lowercase copy otherwise.
        if s.contains('=') {
            let lower = s.to_ascii_lowercase();
            for k in [
                "password=",
                "passwd=",
                "api_key=",
                "apikey=",
                "secret=",
                "token=",
            ] {
                if let Some(i) = lower.find(k) {
                    let n = lower[i + k.len()..]
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != '&')
                        .count();
                    if n >= 6 {
                        return Some("inline credential assignment");
                    }
                }
            }
        }
        None
    }
}

impl Rule for CredentialLeak {
    fn name(&self) -> &str {
        "credential_leak"
    }
    fn evaluate(&self, ctx: &RuleContext<'_>) -> RuleOutcome {
        let mut all = Vec::new();
        strings(&ctx.cmd.params, None, &mut all);
        for (key, s) in all {
            if let Some(k) = key.filter(|_| s.len() >= 4) {
                if secret_key_name(k) {
                    return RuleOutcome::deny(format!(
                        "credential leak: secret-bearing field '{k}'"
                    ));
                }
            }
            if let Some(what) = Self::scan(s) {
                return RuleOutcome::deny(format!("credential leak: {what}"));
            }
        }
        RuleOutcome::allow()
    }
}

/// Enforces a minimum server security profile (§4.4) with challenges for missing evidence (§4.7).
pub struct PolicyFloor {
    /// Minimum acceptable profile.
    pub floor: String,
    /// Challenge parameters (from the manifest).
    pub policy: ChallengePolicy,
}

impl PolicyFloor {
    /// Evidence items a profile must be backed by (taken from runtime_context.evidence).
    fn required_evidence(profile_rank: usize) -> &'static [&'static str] {
        match profile_rank {
            0 => &[],
            1 | 2 => &["server_tls_certificate_chain"],
            _ => &["server_tls_certificate_chain", "mutual_auth_client_proof"],
        }
    }
}

impl Rule for PolicyFloor {
    fn name(&self) -> &str {
        "policy_floor"
    }
    fn evaluate(&self, ctx: &RuleContext<'_>) -> RuleOutcome {
        let rc = ctx.cmd.runtime_context.as_ref();
        let declared = rc
            .and_then(|r| r.get("server_profile"))
            .and_then(Value::as_str);
        // No declaration means no server claim to downgrade to; the floor binds claims.
        let Some(declared) = declared else {
            return RuleOutcome::allow();
        };
        let Some(floor_rank) = profile_rank(&self.floor) else {
            // A floor we cannot rank is a configuration error: fail closed.
            return RuleOutcome::deny("policy_floor_violation");
        };
        let Some(rank) = profile_rank(declared) else {
            let mut o = RuleOutcome {
                verdict: Verdict::Escalate,
                reason: "policy_floor_undecided".into(),
                challenge: None,
                comparison: None,
            };
            o.comparison = compare_profile(declared, ctx.manifest, false);
            return o;
        };
        if rank < floor_rank {
            return RuleOutcome::deny("policy_floor_violation");
        }
        let have: Vec<&str> = rc
            .and_then(|r| r.get("evidence"))
            .and_then(Value::as_object)
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let missing: Vec<&str> = Self::required_evidence(rank)
            .iter()
            .copied()
            .filter(|e| !have.contains(e))
            .collect();
        if !missing.is_empty() {
            let mut o = RuleOutcome::deny("evidence_incomplete");
            o.challenge = Some(challenge(&missing, "pem", ctx.now as u64, &self.policy));
            return o;
        }
        RuleOutcome::allow()
    }
}

/// The default rule set: ssrf_protection, rce_protection, credential_leak.
pub fn default_rules() -> Vec<Box<dyn Rule>> {
    vec![
        Box::new(SsrfProtection),
        Box::new(RceProtection),
        Box::new(CredentialLeak),
    ]
}

/// Look up a built-in rule by name.
pub fn builtin(name: &str, floor: Option<&str>) -> Option<Box<dyn Rule>> {
    match name {
        "ssrf_protection" => Some(Box::new(SsrfProtection)),
        "rce_protection" => Some(Box::new(RceProtection)),
        "credential_leak" => Some(Box::new(CredentialLeak)),
        "policy_floor" => Some(Box::new(PolicyFloor {
            floor: floor.unwrap_or("mcp-tls-1.2").to_string(),
            policy: ChallengePolicy::default(),
        })),
        _ => None,
    }
}
