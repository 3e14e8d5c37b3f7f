//! Enforcement interface (§12): six-step validation, failure reports, outcome mapping.

use crate::error::EvidenceError;
use crate::intake::Command;
use crate::jcs::sha256_hex;
use crate::keys::TrustStore;
use crate::receipt::{HmacKey, OutcomeStatus, Receipt, Verdict};
use rusqlite::{params, Connection};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// Rejection categories of Figure 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureCategory {
    /// Outside the validity window.
    FreshnessExpired,
    /// Not intended for this consumer.
    AudienceMismatch,
    /// Cryptographic integrity compromised (or issuer/key not trusted).
    SignatureInvalid,
    /// Nonce already consumed.
    ReplayDetected,
    /// Receipt does not match the current request.
    BindingMismatch,
    /// Outcome unknown; conservative policy.
    OutcomeIndeterminate,
}

impl FailureCategory {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FreshnessExpired => "FRESHNESS_EXPIRED",
            Self::AudienceMismatch => "AUDIENCE_MISMATCH",
            Self::SignatureInvalid => "SIGNATURE_INVALID",
            Self::ReplayDetected => "REPLAY_DETECTED",
            Self::BindingMismatch => "BINDING_MISMATCH",
            Self::OutcomeIndeterminate => "OUTCOME_INDETERMINATE",
        }
    }

    /// Severity column of Figure 7.
    pub fn severity(self) -> &'static str {
        if self == Self::OutcomeIndeterminate {
            "WARNING"
        } else {
            "CRITICAL"
        }
    }
}

/// §12.3 failure report; carries only the defined category (no internals).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureReport {
    /// Category.
    pub failure_category: FailureCategory,
    /// CRITICAL or WARNING.
    pub severity: &'static str,
    /// trace_id of the rejected receipt.
    pub receipt_trace_id: String,
    /// When the failure was detected.
    pub timestamp: f64,
}

/// Enforcement action of Figure 9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnforcementAction {
    /// allow + confirmed.
    Proceed,
    /// allow + dispatched: proceed, reconciliation pending before finalizing.
    ProceedReconciliationPending,
    /// allow + indeterminate: unverified, conservative policy (do not proceed; may escalate).
    Conservative,
    /// deny: block.
    Block,
    /// escalate: defer to higher authority (do not proceed).
    Defer,
}

impl EnforcementAction {
    /// Whether the tool invocation may run. Only allow-with-known-outcome proceeds.
    pub fn permits_invocation(self) -> bool {
        matches!(self, Self::Proceed | Self::ProceedReconciliationPending)
    }
}

/// The fixed Figure 9 mapping. Not configurable: custom mappings are forbidden (§14).
pub fn map_outcome(verdict: Verdict, outcome: Option<OutcomeStatus>) -> EnforcementAction {
    // A missing outcome_status gives no outcome visibility: treat as indeterminate.
    let outcome = outcome.unwrap_or(OutcomeStatus::Indeterminate);
    match (verdict, outcome) {
        (Verdict::Escalate, _) => EnforcementAction::Defer,
        // outcome_status never overrides a deny (§14 outcome status confusion).
        (Verdict::Deny, _) => EnforcementAction::Block,
        (Verdict::Allow, OutcomeStatus::Confirmed) => EnforcementAction::Proceed,
        (Verdict::Allow, OutcomeStatus::Dispatched) => {
            EnforcementAction::ProceedReconciliationPending
        }
        (Verdict::Allow, OutcomeStatus::Indeterminate) => EnforcementAction::Conservative,
    }
}

/// (issuer, nonce) replay cache (§6.8): a SQLite file that survives restarts, or an
/// in-memory set for single-process use.
pub struct ReplayCache {
    backend: Backend,
}

enum Backend {
    Sqlite(Mutex<Connection>),
    /// Nonces by issuer (lookups by `&str`, one allocation per new nonce) and the failure log.
    Memory(Mutex<(NoncesByIssuer, Vec<String>)>),
}

/// issuer -> nonce -> expires_at.
type NoncesByIssuer = HashMap<String, HashMap<String, f64>>;

fn poisoned<T>(_: T) -> EvidenceError {
    EvidenceError::Invalid("replay cache lock poisoned".into())
}

impl ReplayCache {
    /// Open a cache file (every insert is committed with `synchronous=FULL` before the
    /// receipt is accepted, so an accepted nonce survives a crash or power loss).
    pub fn open(path: &Path) -> Result<Self, EvidenceError> {
        let conn = Connection::open(path)?;
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")?;
        conn.execute_batch(
            // Clustered on (nonce, issuer): one b-tree per insert (no rowid table plus
            // index), and the random nonce first ends key comparisons early.
            // Files created with the older (issuer, nonce) rowid schema keep working.
            "CREATE TABLE IF NOT EXISTS seen (nonce TEXT NOT NULL, issuer TEXT NOT NULL,
               expires_at REAL NOT NULL, PRIMARY KEY (nonce, issuer)) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS failures (id INTEGER PRIMARY KEY AUTOINCREMENT,
               issuer TEXT NOT NULL, report TEXT NOT NULL);",
        )?;
        Ok(Self {
            backend: Backend::Sqlite(Mutex::new(conn)),
        })
    }

    /// In-memory cache: a hash set that does not survive restarts (tests, one-shot CLI
    /// checks, and consumers that keep their own durable record).
    pub fn in_memory() -> Result<Self, EvidenceError> {
        Ok(Self {
            backend: Backend::Memory(Mutex::new((HashMap::new(), Vec::new()))),
        })
    }

    /// Record the pair; returns false if it was already seen.
    pub fn check_and_insert(
        &self,
        issuer: &str,
        nonce: &str,
        expires_at: f64,
    ) -> Result<bool, EvidenceError> {
        match &self.backend {
            Backend::Sqlite(c) => {
                let c = c.lock().map_err(poisoned)?;
                let mut st = c.prepare_cached(
                    "INSERT OR IGNORE INTO seen (issuer, nonce, expires_at) VALUES (?1, ?2, ?3)",
                )?;
                Ok(st.execute(params![issuer, nonce, expires_at])? == 1)
            }
            Backend::Memory(m) => {
                let mut g = m.lock().map_err(poisoned)?;
                let by_issuer = match g.0.get_mut(issuer) {
                    Some(n) => n,
                    None => g.0.entry(issuer.to_string()).or_default(),
                };
                // One hash lookup; the key is allocated anyway when the nonce is new.
                match by_issuer.entry(nonce.to_string()) {
                    std::collections::hash_map::Entry::Occupied(_) => Ok(false),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(expires_at);
                        Ok(true)
                    }
                }
            }
        }
    }

    /// Drop entries that can no longer pass freshness anyway.
    pub fn prune(&self, now: f64, max_skew: f64) -> Result<usize, EvidenceError> {
        match &self.backend {
            Backend::Sqlite(c) => Ok(c.lock().map_err(poisoned)?.execute(
                "DELETE FROM seen WHERE expires_at + ?2 < ?1",
                params![now, max_skew],
            )?),
            Backend::Memory(m) => {
                let mut g = m.lock().map_err(poisoned)?;
                let mut n = 0;
                for nonces in g.0.values_mut() {
                    let before = nonces.len();
                    nonces.retain(|_, exp| *exp + max_skew >= now);
                    n += before - nonces.len();
                }
                Ok(n)
            }
        }
    }

    /// Append a failure report to the audit log (§12.3).
    pub fn log_failure(&self, issuer: &str, report: &FailureReport) -> Result<(), EvidenceError> {
        let text = serde_json::to_string(report)?;
        match &self.backend {
            Backend::Sqlite(c) => {
                c.lock().map_err(poisoned)?.execute(
                    "INSERT INTO failures (issuer, report) VALUES (?1, ?2)",
                    params![issuer, text],
                )?;
            }
            Backend::Memory(m) => m.lock().map_err(poisoned)?.1.push(text),
        }
        Ok(())
    }

    /// Logged failure reports, oldest first.
    pub fn failures(&self) -> Result<Vec<Value>, EvidenceError> {
        let texts: Vec<String> = match &self.backend {
            Backend::Sqlite(c) => {
                let c = c.lock().map_err(poisoned)?;
                let mut st = c.prepare("SELECT report FROM failures ORDER BY id")?;
                let rows = st.query_map([], |r| r.get::<_, String>(0))?;
                rows.collect::<Result<_, _>>()?
            }
            Backend::Memory(m) => m.lock().map_err(poisoned)?.1.clone(),
        };
        Ok(texts
            .iter()
            .map(|t| serde_json::from_str(t))
            .collect::<Result<_, _>>()?)
    }
}

/// §13.7 monitor: flags verifiers that (almost) never deny.
#[derive(Debug, Default)]
pub struct DenyRateMonitor {
    counts: Mutex<HashMap<String, (u64, u64)>>,
}

impl DenyRateMonitor {
    /// Minimum sample before a verifier can be flagged.
    pub const MIN_RECEIPTS: u64 = 10_000;
    /// Deny rate below which a verifier is flagged.
    pub const MIN_DENY_RATE: f64 = 0.001;

    /// Count one receipt of an issuer.
    pub fn record(&self, issuer: &str, verdict: Verdict) {
        if let Ok(mut m) = self.counts.lock() {
            // No key allocation once the issuer is known (hot path).
            let e = match m.get_mut(issuer) {
                Some(e) => e,
                None => m.entry(issuer.to_string()).or_insert((0, 0)),
            };
            e.0 += 1;
            if verdict != Verdict::Allow {
                e.1 += 1;
            }
        }
    }

    /// (total, denies) for an issuer.
    pub fn stats(&self, issuer: &str) -> (u64, u64) {
        self.counts
            .lock()
            .ok()
            .and_then(|m| m.get(issuer).copied())
            .unwrap_or((0, 0))
    }

    /// Whether the issuer should be flagged for review (treated as Class C).
    pub fn flagged(&self, issuer: &str) -> bool {
        let (total, denies) = self.stats(issuer);
        total > Self::MIN_RECEIPTS && (denies as f64 / total as f64) < Self::MIN_DENY_RATE
    }
}

/// What the consumer expects the receipt to bind to (step 5).
#[derive(Debug, Clone)]
pub struct Expected<'a> {
    /// Tool about to be invoked.
    pub tool: &'a str,
    /// Params about to be used.
    pub params: &'a Value,
}

/// Accepted receipt with its enforcement action.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accepted {
    /// Figure 9 action.
    pub action: EnforcementAction,
    /// Warning report when the outcome is indeterminate.
    pub warning: Option<FailureReport>,
}

/// A consumer that validates receipts (§12.2).
pub struct Enforcer {
    identity: String,
    trust: TrustStore,
    hmac_secrets: HashMap<String, Vec<HmacKey>>,
    replay: ReplayCache,
    monitor: DenyRateMonitor,
    alert_threshold: u64,
    failures_by_issuer: Mutex<HashMap<String, u64>>,
    max_skew: f64,
}

impl Enforcer {
    /// Build an enforcer for consumer `identity` with pinned keys and a replay cache.
    pub fn new(identity: &str, trust: TrustStore, replay: ReplayCache) -> Self {
        Self {
            identity: identity.to_string(),
            trust,
            hmac_secrets: HashMap::new(),
            replay,
            monitor: DenyRateMonitor::default(),
            alert_threshold: 5,
            failures_by_issuer: Mutex::new(HashMap::new()),
            max_skew: Self::DEFAULT_MAX_SKEW,
        }
    }

    /// Default cap on a receipt's declared max_clock_skew, seconds.
    pub const DEFAULT_MAX_SKEW: f64 = 300.0;

    /// Cap the clock skew this consumer tolerates, whatever a receipt declares.
    pub fn with_max_skew(mut self, secs: f64) -> Self {
        self.max_skew = secs;
        self
    }

    /// Enroll a shared HMAC secret for an issuer (distributed out of band, §7.2). Called
    /// again for the same issuer (a §7.3 rotation), every enrolled secret is accepted.
    pub fn with_hmac_secret(mut self, issuer: &str, secret: &[u8]) -> Self {
        self.hmac_secrets
            .entry(issuer.to_string())
            .or_default()
            .push(HmacKey::new(secret));
        self
    }

    /// Trust store (revocation updates).
    pub fn trust_mut(&mut self) -> &mut TrustStore {
        &mut self.trust
    }

    /// Deny-rate monitor.
    pub fn monitor(&self) -> &DenyRateMonitor {
        &self.monitor
    }

    /// Replay cache / failure log.
    pub fn replay(&self) -> &ReplayCache {
        &self.replay
    }

    /// Whether repeated failures from this issuer crossed the alert threshold.
    pub fn alert(&self, issuer: &str) -> bool {
        self.failures_by_issuer
            .lock()
            .ok()
            .and_then(|m| m.get(issuer).copied())
            .is_some_and(|n| n >= self.alert_threshold)
    }

    fn reject(&self, r: &Receipt, c: FailureCategory, now: f64) -> FailureReport {
        let rep = FailureReport {
            failure_category: c,
            severity: c.severity(),
            receipt_trace_id: r.trace_id.clone(),
            timestamp: now,
        };
        self.log(&r.issuer, &rep);
        rep
    }

    fn log(&self, issuer: &str, rep: &FailureReport) {
        // Logging must not turn a rejection into an acceptance: errors are ignored
        // here because the caller is denied regardless.
        let _ = self.replay.log_failure(issuer, rep);
        if let Ok(mut m) = self.failures_by_issuer.lock() {
            *m.entry(issuer.to_string()).or_insert(0) += 1;
        }
    }

    /// Signature-only check (step 3) against pinned keys (and HMAC when enrolled).
    ///
    /// During a §7.3 overlap either signature may carry the receipt; a cosignature that is
    /// present but invalid rejects it ([`Receipt::verify_with_trust`]).
    pub fn signature_ok(&self, r: &Receipt) -> bool {
        let ed = r.verify_with_trust(&self.trust);
        // With shared secrets enrolled, the receipt's HMAC or (during a rotation overlap)
        // its cosignature's HMAC must verify under one of them.
        let mac = match self.hmac_secrets.get(&r.issuer) {
            Some(keys) => r.verify_any_hmac_with(keys),
            None => true,
        };
        ed && mac
    }

    /// Run the six steps of §12.2 at local time `now`.
    pub fn validate(
        &self,
        r: &Receipt,
        expected: &Expected<'_>,
        now: f64,
    ) -> Result<Accepted, FailureReport> {
        self.validate_bound(r, expected, None, now)
    }

    /// As [`Enforcer::validate`], for a consumer that holds the whole request: step 5 also
    /// requires the receipt's `request_hash` (§6.1) to be this request's, so a receipt
    /// issued for another agent's (or another trace's) identical call does not pass.
    pub fn validate_request(
        &self,
        r: &Receipt,
        request: &Command,
        now: f64,
    ) -> Result<Accepted, FailureReport> {
        let expected = Expected {
            tool: &request.tool,
            params: &request.params,
        };
        let request_hash = match crate::issuer::request_canonical(request) {
            Ok(c) => format!("sha256:{}", sha256_hex(c.as_bytes())),
            Err(_) => return Err(self.reject(r, FailureCategory::BindingMismatch, now)),
        };
        self.validate_bound(r, &expected, Some(&request_hash), now)
    }

    /// Reject a receipt that does not even parse as one (an altered or truncated copy):
    /// reported and logged as SIGNATURE_INVALID, the category whose integrity it fails,
    /// without the parser's details (§12.3).
    pub fn reject_unparsed(&self, trace_id: &str, issuer: &str, now: f64) -> FailureReport {
        let rep = FailureReport {
            failure_category: FailureCategory::SignatureInvalid,
            severity: FailureCategory::SignatureInvalid.severity(),
            receipt_trace_id: trace_id.to_string(),
            timestamp: now,
        };
        self.log(issuer, &rep);
        rep
    }

    fn validate_bound(
        &self,
        r: &Receipt,
        expected: &Expected<'_>,
        request_hash: Option<&str>,
        now: f64,
    ) -> Result<Accepted, FailureReport> {
        // Step 1: freshness. The receipt's own skew is honoured only up to the
        // consumer's cap, so an issuer cannot stretch validity with a huge skew.
        let skew = if r.max_clock_skew.is_finite() && r.max_clock_skew >= 0.0 {
            r.max_clock_skew.min(self.max_skew)
        } else {
            30.0
        };
        if now > r.expires_at + skew
            || now < r.issued_at - skew
            || matches!(
                r.expires_at.partial_cmp(&r.issued_at),
                None | Some(std::cmp::Ordering::Less)
            )
        {
            return Err(self.reject(r, FailureCategory::FreshnessExpired, now));
        }
        // Step 2: audience.
        if r.audience != self.identity {
            return Err(self.reject(r, FailureCategory::AudienceMismatch, now));
        }
        // Step 3: signature with the issuer's pinned key(s).
        if !self.signature_ok(r) {
            return Err(self.reject(r, FailureCategory::SignatureInvalid, now));
        }
        // Step 4: replay (after the signature so forged nonces cannot poison the cache).
        match self
            .replay
            .check_and_insert(&r.issuer, &r.nonce, r.expires_at)
        {
            Ok(true) => {}
            // A cache failure must fail closed, reported as a replay.
            Ok(false) | Err(_) => return Err(self.reject(r, FailureCategory::ReplayDetected, now)),
        }
        // Step 5: bindings.
        let params_hash = match crate::jcs::canonicalize(expected.params) {
            Ok(c) => sha256_hex(c.as_bytes()),
            Err(_) => return Err(self.reject(r, FailureCategory::BindingMismatch, now)),
        };
        // action must be exactly `ccs:tool-invoke:{tool}:{params_hash}` (compared in place).
        let action_ok = r
            .action
            .strip_prefix("ccs:tool-invoke:")
            .and_then(|a| a.strip_prefix(expected.tool))
            .and_then(|a| a.strip_prefix(':'))
            == Some(params_hash.as_str());
        let request_ok = request_hash.is_none_or(|h| h == r.request_hash);
        if r.tool != expected.tool || r.params_hash != params_hash || !action_ok || !request_ok {
            return Err(self.reject(r, FailureCategory::BindingMismatch, now));
        }
        self.monitor.record(&r.issuer, r.verdict);
        // Step 6: outcome mapping.
        let action = map_outcome(r.verdict, r.outcome_status);
        let warning = (action == EnforcementAction::Conservative)
            .then(|| self.reject(r, FailureCategory::OutcomeIndeterminate, now));
        Ok(Accepted { action, warning })
    }

    /// Re-validate in-flight evidence after a revocation (§14); returns the trace ids now invalid.
    pub fn revalidate(&self, in_flight: &[Receipt]) -> Vec<String> {
        in_flight
            .iter()
            .filter(|r| !self.signature_ok(r))
            .map(|r| r.trace_id.clone())
            .collect()
    }
}

/// Report JSON for CLI output.
pub fn report_json(r: &FailureReport) -> Value {
    json!({
        "failure_category": r.failure_category.as_str(),
        "severity": r.severity,
        "receipt_trace_id": r.receipt_trace_id,
        "timestamp": r.timestamp,
    })
}
