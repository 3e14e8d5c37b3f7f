//! Pluggable rules and the built-in rule set.

use crate::config::{challenge, compare_profile, profile_rank, ChallengePolicy, Manifest};
use crate::intake::Command;
use crate::receipt::Verdict;
use aho_corasick::AhoCorasick;
use serde_json::Value;
use std::sync::OnceLock;

mod credential;
mod rce;
mod ssrf;

pub use credential::CredentialLeak;
pub use rce::RceProtection;
pub use ssrf::SsrfProtection;

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

/// Characters that render as nothing (zero-width space/joiners, word joiner, BOM, soft
/// hyphen): inside a key word they hide it from a substring match.
const INVISIBLE: [char; 6] = [
    '\u{200b}', '\u{200c}', '\u{200d}', '\u{2060}', '\u{feff}', '\u{ad}',
];

fn has_invisible(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains(INVISIBLE),
        Value::Array(a) => a.iter().any(has_invisible),
        Value::Object(m) => m
            .iter()
            .any(|(k, x)| k.contains(INVISIBLE) || has_invisible(x)),
        _ => false,
    }
}

fn strip_invisible(v: &Value) -> Value {
    let clean = |s: &str| {
        s.chars()
            .filter(|c| !INVISIBLE.contains(c))
            .collect::<String>()
    };
    match v {
        Value::String(s) => Value::String(clean(s)),
        Value::Array(a) => Value::Array(a.iter().map(strip_invisible).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (clean(k), strip_invisible(x)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The command with invisible characters removed from its parameters, or `None` when it has
/// none (the common case costs one scan, no copy).
pub(crate) fn without_invisible(cmd: &Command) -> Option<Command> {
    has_invisible(&cmd.params).then(|| Command {
        params: strip_invisible(&cmd.params),
        ..cmd.clone()
    })
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

/// Every array of two or more strings, joined with single spaces, with the array's key: an
/// argv such as `["bash", "-c", "id"]` read as the command line it runs, so a pattern cannot
/// be split across elements.
fn argv_lines<'a>(v: &'a Value, key: Option<&'a str>, out: &mut Vec<(Option<&'a str>, String)>) {
    match v {
        Value::Array(a) => {
            if a.len() >= 2 && a.iter().all(Value::is_string) {
                let words: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
                out.push((key, words.join(" ")));
            } else {
                a.iter().for_each(|x| argv_lines(x, key, out));
            }
        }
        Value::Object(m) => m.iter().for_each(|(k, x)| argv_lines(x, Some(k), out)),
        _ => {}
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
