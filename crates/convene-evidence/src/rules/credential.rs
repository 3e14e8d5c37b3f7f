//! `credential_leak`: parameters that carry secrets.

use super::{argv_lines, prefilter, strings, Rule, RuleContext, RuleOutcome};
use aho_corasick::AhoCorasick;
use std::sync::OnceLock;

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

/// A field name in snake case: camelCase humps, '-', '.' and ' ' become '_', all lower case.
fn snake(k: &str) -> String {
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
    norm
}

/// Whether the snake-case name is `word` or ends with `_word`.
fn names(norm: &str, word: &str) -> bool {
    norm.ends_with(word)
        && (norm.len() == word.len() || norm.as_bytes()[norm.len() - word.len() - 1] == b'_')
}

/// `password`, `db_password`, `API_KEY`, `userPassword`, `X-API-Key`... : the secret name
/// exactly or as a `_`-separated suffix of the snake-case name.
fn secret_key_name(k: &str) -> bool {
    let norm = snake(k);
    SECRET_KEYS.iter().any(|sk| names(&norm, sk))
}

/// `pass`, `pwd`, `pw`, `db_pass`, `mysqlPwd`: abbreviations too short to match inside other
/// names, so only whole names or `_`-separated suffixes count, and only with a value that
/// looks like a secret (`{"pass": "true"}` is not one).
fn short_secret_name(key: &str) -> bool {
    let norm = snake(key);
    ["pass", "pwd", "pw", "passphrase"]
        .iter()
        .any(|w| names(&norm, w))
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
        // Checked apart from the markers: ':' and "-p" are in most URLs and commands, so
        // as markers they would send nearly every string through the token scan.
        if s.contains(':') {
            if colon_assignment(s) {
                return Some("inline credential assignment");
            }
            if s.contains('@') && url_password(s) {
                return Some("password in a URL");
            }
        }
        if s.contains("-p") || s.contains("-u") {
            if let Some(what) = command_line_password(s) {
                return Some(what);
            }
        }
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
                "mysql_pwd=",
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

/// Names whose `name: value` form (YAML, headers, prose) assigns a secret.
const COLON_KEYS: [&str; 10] = [
    "password",
    "passwd",
    "api_key",
    "apikey",
    "api key",
    "api-key",
    "secret",
    "client_secret",
    "access_token",
    "authorization",
];

/// HTTP authentication schemes: after `Authorization:` the secret is the word that follows.
const AUTH_SCHEMES: [&str; 5] = ["bearer", "basic", "token", "bot", "digest"];

/// `password: hunter2`, `"api_key": "k3y-..."`, `Secret: 8f2!x...`: a secret name, an
/// optional closing quote, a ':' and a value that looks like a secret (see [`secretish`]).
fn colon_assignment(s: &str) -> bool {
    static AC: OnceLock<Option<AhoCorasick>> = OnceLock::new();
    let ac = AC.get_or_init(|| {
        AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(COLON_KEYS)
            .ok()
    });
    let found = |i: usize, end: usize| {
        // A whole word, or the last part of a snake-case name ("DB_PASSWORD:"):
        // "bypassword:" or "secretary:" are not these names.
        let before = s[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric()) {
            return false;
        }
        let rest = s[end..].trim_start_matches(['"', '\'']);
        let Some(rest) = rest.trim_start().strip_prefix(':') else {
            return false;
        };
        let value = rest.trim_start().trim_start_matches(['"', '\'']);
        let first = |t: &'_ str| -> usize {
            t.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | '}' | '&'))
                .unwrap_or(t.len())
        };
        let mut v = &value[..first(value)];
        // "Authorization: Bearer abc...": the credential is the word after the scheme.
        if s[i..end].eq_ignore_ascii_case("authorization")
            && AUTH_SCHEMES.iter().any(|a| a.eq_ignore_ascii_case(v))
        {
            let next = value[v.len()..].trim_start();
            v = &next[..first(next)];
        }
        secretish(v)
    };
    match ac {
        Some(ac) => ac.find_iter(s).any(|m| found(m.start(), m.end())),
        // No automaton (cannot happen with these patterns): the same search, one name at a
        // time, on a lower-case copy (ASCII lower-casing keeps byte offsets).
        None => {
            let lower = s.to_ascii_lowercase();
            COLON_KEYS
                .iter()
                .any(|k| lower.match_indices(k).any(|(i, _)| found(i, i + k.len())))
        }
    }
}

/// `https://bob:S3cret@host/`, `postgres://app:Pr0d!@db/app`: a URL whose userinfo carries a
/// password that reads as a secret (`user:${TOKEN}@` placeholders stay allowed).
fn url_password(s: &str) -> bool {
    s.match_indices("://").any(|(i, _)| {
        let rest = &s[i + 3..];
        let authority = rest
            .split(|c: char| c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\''))
            .next()
            .unwrap_or("");
        authority
            .rsplit_once('@')
            .and_then(|(userinfo, _)| userinfo.split_once(':'))
            .is_some_and(|(_, password)| secretish(password))
    })
}

/// A value that reads as a secret, not as prose or a placeholder: at least 6 characters with
/// a digit, a symbol or mixed case, or 12 and more of anything; not a `$VAR`, `<name>`,
/// `{{template}}` or `****` placeholder.
fn secretish(v: &str) -> bool {
    if v.len() < 6 || v.starts_with(['$', '<', '{', '*', '%']) {
        return false;
    }
    let first = v.chars().next().unwrap_or(' ');
    if v.chars().all(|c| c == first) {
        return false;
    }
    let digit = v.chars().any(|c| c.is_ascii_digit());
    let symbol = v.chars().any(|c| !c.is_alphanumeric());
    let mixed = v.chars().any(char::is_uppercase) && v.chars().any(char::is_lowercase);
    digit || symbol || mixed || v.chars().count() >= 12
}

/// Database clients that take the password glued to `-p` (`mysql -uroot -pS3cret`).
const GLUED_P_CLIENTS: [&str; 9] = [
    "mysql",
    "mysqldump",
    "mysqladmin",
    "mysqlimport",
    "mysqlshow",
    "mysqlcheck",
    "mariadb",
    "mariadb-dump",
    "mariadb-admin",
];

/// Which password-taking client a command word names.
enum Client {
    /// MySQL/MariaDB: the password glued to `-p`.
    GluedP,
    /// `sshpass -p PASS` or `-pPASS`.
    Sshpass,
    /// `curl -u user:pass` and its long forms.
    Curl,
    /// Anything else.
    Other,
}

/// A password written on a command line: `mysql -pS3cret`, `sshpass -p S3cret ssh ...`,
/// `curl -u bob:S3cret ...` / `--user bob:S3cret`.
///
/// One pass over each command (words between `;`, `&&`, `||`, `|`): a word is judged as an
/// argument of every client named before it, so many client names cost no rescans (one
/// rescan per "curl" made a 64 KB parameter take seconds).
fn command_line_password(s: &str) -> Option<&'static str> {
    let words: Vec<&str> = s.split_whitespace().collect();
    let client = |w: &'_ str| -> Client {
        let b = w.rsplit('/').next().unwrap_or("").trim_matches(['"', '\'']);
        if GLUED_P_CLIENTS.contains(&b) {
            Client::GluedP
        } else if b == "sshpass" {
            Client::Sshpass
        } else if b == "curl" {
            Client::Curl
        } else {
            Client::Other
        }
    };
    let userpass = |v: &str| {
        v.trim_matches(['"', '\''])
            .split_once(':')
            .is_some_and(|(_, p)| !p.is_empty())
    };
    for command in words.split(|w| matches!(*w, ";" | "&&" | "||" | "|")) {
        let (mut glued_p, mut sshpass, mut curl) = (false, false, false);
        let mut prev = "";
        for w in command {
            let glued_pass = w.len() > 2 && w.starts_with("-p");
            let curl_glued = if w.starts_with("--") {
                w.strip_prefix("--user=")
                    .or_else(|| w.strip_prefix("--proxy-user="))
            } else {
                w.strip_prefix("-u")
            };
            if (glued_p && glued_pass)
                || (sshpass && (glued_pass || (prev == "-p" && !w.starts_with('-'))))
                || (curl
                    && ((matches!(prev, "-u" | "--user" | "--proxy-user") && userpass(w))
                        || curl_glued.is_some_and(userpass)))
            {
                return Some("password on a command line");
            }
            match client(w) {
                Client::GluedP => glued_p = true,
                Client::Sshpass => sshpass = true,
                Client::Curl => curl = true,
                Client::Other => {}
            }
            prev = w;
        }
    }
    None
}

/// `{"name": "Authorization", "value": "Bearer ..."}` (HAR, fetch and Postman header lists,
/// `key`/`value` env lists): the secret-named field spelled as a pair. Returns the name.
fn named_secret(v: &serde_json::Value) -> Option<&str> {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let name = ["name", "key", "header", "variable"]
                .iter()
                .find_map(|k| m.get(*k).and_then(Value::as_str));
            let value = m.get("value").and_then(Value::as_str);
            if let (Some(n), Some(val)) = (name, value) {
                if val.len() >= 4 && secret_key_name(n) {
                    return Some(n);
                }
            }
            m.values().find_map(named_secret)
        }
        Value::Array(a) => a.iter().find_map(named_secret),
        _ => None,
    }
}

impl Rule for CredentialLeak {
    fn name(&self) -> &str {
        "credential_leak"
    }
    fn evaluate(&self, ctx: &RuleContext<'_>) -> RuleOutcome {
        let mut lines = Vec::new();
        argv_lines(&ctx.cmd.params, None, &mut lines);
        let mut all = Vec::new();
        strings(&ctx.cmd.params, None, &mut all);
        all.extend(lines.iter().map(|(k, l)| (*k, l.as_str())));
        for (key, s) in all {
            if let Some(k) = key.filter(|_| s.len() >= 4) {
                if secret_key_name(k) || (short_secret_name(k) && secretish(s)) {
                    return RuleOutcome::deny(format!(
                        "credential leak: secret-bearing field '{k}'"
                    ));
                }
            }
            if let Some(what) = Self::scan(s) {
                return RuleOutcome::deny(format!("credential leak: {what}"));
            }
        }
        if let Some(k) = named_secret(&ctx.cmd.params) {
            return RuleOutcome::deny(format!("credential leak: secret-bearing field '{k}'"));
        }
        RuleOutcome::allow()
    }
}
