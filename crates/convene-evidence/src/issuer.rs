//! The verifier: intake -> rules -> receipt emission -> durable storage (§3, §4, §11.1).

use crate::commit::GroupCommit;
use crate::config::{CanonicalConfig, ChallengePolicy, DeploymentMode, Manifest, SCHEMA_VERSION};
use crate::error::{EvidenceError, IntakeError, IntakeErrorCode};
use crate::intake::{self, Command};
use crate::jcs::{jcs_sha256_hex, sha256_hex};
use crate::keys::KeyMaterial;
use crate::receipt::{action_for, OutcomeStatus, Receipt, Verdict};
use crate::rules::{Rule, RuleContext};
use crate::store::EvidenceStore;
use rand_core::{OsRng, RngCore};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod outcome;

/// Verifier software version bound into the canonical configuration.
pub const VERIFIER_VERSION: &str = concat!("convene-evidence/", env!("CARGO_PKG_VERSION"));

/// Steps of the intake pipeline, named for fault injection and timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Parsing and normalization.
    Normalize,
    /// Rule evaluation.
    Rules,
    /// Hash and binding computation.
    Bind,
    /// HMAC + Ed25519 sealing.
    Sign,
    /// Durable storage.
    Persist,
}

/// All steps in pipeline order.
pub const STEPS: [Step; 5] = [
    Step::Normalize,
    Step::Rules,
    Step::Bind,
    Step::Sign,
    Step::Persist,
];

/// Verifier settings.
#[derive(Debug, Clone)]
pub struct VerifierSettings {
    /// Issuer URI (stable across key rotation).
    pub issuer: String,
    /// Default audience URI.
    pub audience: String,
    /// Policy version.
    pub policy_version: String,
    /// Deployment mode.
    pub deployment_mode: DeploymentMode,
    /// Receipt lifetime, seconds (§6.9 recommends 60).
    pub ttl_secs: f64,
    /// Clock skew tolerance, seconds.
    pub max_clock_skew: f64,
    /// Minimum server profile (§4.4), enforced by the policy_floor rule.
    pub policy_floor: Option<String>,
    /// Intake processing timeout; None = unlimited (§8.2 in-process default).
    pub intake_timeout: Option<Duration>,
    /// Challenge parameters published in the manifest.
    pub challenge_policy: ChallengePolicy,
}

impl Default for VerifierSettings {
    fn default() -> Self {
        Self {
            issuer: "https://convene.local/ccs/v1".into(),
            audience: "https://convene.local/executor".into(),
            policy_version: "2026-08-01".into(),
            deployment_mode: DeploymentMode::InProcess,
            ttl_secs: 60.0,
            max_clock_skew: 30.0,
            policy_floor: None,
            intake_timeout: None,
            challenge_policy: ChallengePolicy::default(),
        }
    }
}

/// A receipt together with what produced it.
#[derive(Debug, Clone)]
pub struct IssuedReceipt {
    /// The sealed receipt.
    pub receipt: Receipt,
    /// The normalized command (kept for bindings and export).
    pub command: Command,
    /// Issuance latency in microseconds.
    pub latency_us: u64,
}

impl IssuedReceipt {
    /// A self-describing bundle (receipt + command) as JSON.
    pub fn bundle(&self) -> Result<Value, EvidenceError> {
        Ok(json!({
            "receipt": self.receipt.to_value()?,
            "command": command_value(&self.command),
            "latency_us": self.latency_us,
        }))
    }
}

/// JSON form of a normalized command.
pub fn command_value(c: &Command) -> Value {
    let mut v = json!({
        "intake_version": intake::INTAKE_VERSION,
        "agent_id": c.agent_id, "tool": c.tool, "params": c.params,
        "timestamp": c.timestamp, "trace_id": c.trace_id,
    });
    if let Some(rc) = &c.runtime_context {
        v["runtime_context"] = rc.clone();
    }
    if let Some(d) = &c.delegation_chain {
        v["delegation_chain"] = d.clone();
    }
    v
}

/// JCS of the §6.1 request object `{agent_id, params, timestamp, tool, trace_id}`, written
/// directly around the already canonical params (no clone of the params tree).
pub(crate) fn request_canonical(c: &Command) -> Result<String, EvidenceError> {
    use crate::jcs::{write_es6, write_string};
    let mut o = String::with_capacity(c.canonical_params.len() + 160);
    o.push_str("{\"agent_id\":");
    write_string(&c.agent_id, &mut o);
    o.push_str(",\"params\":");
    o.push_str(&c.canonical_params);
    o.push_str(",\"timestamp\":");
    write_es6(c.timestamp, &mut o)?;
    o.push_str(",\"tool\":");
    write_string(&c.tool, &mut o);
    o.push_str(",\"trace_id\":");
    write_string(&c.trace_id, &mut o);
    o.push('}');
    Ok(o)
}

/// `runtime_context_hash` of an intake without runtime context: sha256 of JCS(`{}`).
const EMPTY_OBJECT_HASH: &str =
    "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";

/// Receipt nonces: 16 bytes each, drawn from the OS CSPRNG 4 KiB at a time.
///
/// One `getrandom` call serves 256 receipts instead of one. Nonces are published in the
/// receipts anyway; they must be unique and unpredictable to others, not secret.
struct NoncePool {
    buf: Mutex<([u8; 4096], usize)>,
}

impl NoncePool {
    fn new() -> Self {
        Self {
            buf: Mutex::new(([0u8; 4096], 4096)),
        }
    }

    /// The next unused nonce as 32 lowercase hex.
    fn next(&self) -> Result<String, EvidenceError> {
        let mut g = self
            .buf
            .lock()
            .map_err(|_| EvidenceError::Invalid("nonce pool lock poisoned".into()))?;
        let (buf, pos) = &mut *g;
        if *pos + 16 > buf.len() {
            OsRng
                .try_fill_bytes(buf)
                .map_err(|_| EvidenceError::Invalid("OS randomness unavailable".into()))?;
            *pos = 0;
        }
        let n = crate::jcs::hex_lower(&buf[*pos..*pos + 16]);
        *pos += 16;
        Ok(n)
    }
}

/// Test-only fault hook: called before each step; Err or panic aborts the intake.
#[cfg(test)]
pub type FaultHook = Arc<dyn Fn(Step) -> Result<(), String> + Send + Sync>;

/// The CCS verifier: holds the signing key and rule set.
pub struct Verifier {
    settings: VerifierSettings,
    keys: KeyMaterial,
    /// Incoming key during a §7.3 dual-sign overlap, with the time the overlap began.
    next_keys: Option<(KeyMaterial, f64)>,
    rules: Vec<Box<dyn Rule>>,
    manifest: Manifest,
    config: CanonicalConfig,
    config_hash: String,
    sequence: AtomicU64,
    nonces: NoncePool,
    store: Option<GroupCommit>,
    clock: Arc<dyn Fn() -> f64 + Send + Sync>,
    /// Open records whose outcome is indeterminate, by action (§4.5: no blind retries).
    open_indeterminate: Mutex<HashMap<String, String>>,
    /// Open §4.7 challenges by agent|action, with their absolute deadline.
    open_challenges: Mutex<HashMap<String, f64>>,
    #[cfg(test)]
    fault: Option<FaultHook>,
}

/// Adds the entries of `from` to `into` (`into` belongs to a verifier nobody else holds yet).
fn carry<V: Clone>(from: &Mutex<HashMap<String, V>>, into: &Mutex<HashMap<String, V>>) {
    if let (Ok(from), Ok(mut into)) = (from.lock(), into.lock()) {
        into.extend(from.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
}

/// Current Unix time with microsecond resolution.
pub fn now_unix() -> f64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_micros() as f64) / 1e6
}

impl Verifier {
    /// Build a verifier; the manifest is signed and bound via manifest_hash.
    pub fn new(
        settings: VerifierSettings,
        keys: KeyMaterial,
        rules: Vec<Box<dyn Rule>>,
    ) -> Result<Self, EvidenceError> {
        // §6.6/§6.7: issuer and audience are URIs.
        if !crate::config::is_uri(&settings.issuer) || !crate::config::is_uri(&settings.audience) {
            return Err(EvidenceError::Invalid(
                "issuer and audience must be URIs".into(),
            ));
        }
        // A NaN or infinite lifetime makes every freshness and overlap comparison pass.
        // No rules allow every call; a floor no rule enforces is a check that never runs.
        if rules.is_empty()
            || (settings.policy_floor.is_some()
                && !rules.iter().any(|r| r.name() == "policy_floor"))
        {
            return Err(EvidenceError::Invalid(
                "a verifier needs rules, and a policy floor needs the policy_floor rule".into(),
            ));
        }
        let ttl_ok = settings.ttl_secs.is_finite() && settings.ttl_secs > 0.0;
        let skew_ok = settings.max_clock_skew.is_finite() && settings.max_clock_skew >= 0.0;
        if !(ttl_ok && skew_ok) {
            return Err(EvidenceError::Invalid(
                "ttl must be a positive number of seconds and clock skew a non-negative one".into(),
            ));
        }
        let (manifest, config, config_hash) = Self::bind_config(&settings, &keys, None, &rules)?;
        Ok(Self {
            settings,
            keys,
            next_keys: None,
            rules,
            manifest,
            config,
            config_hash,
            sequence: AtomicU64::new(0),
            nonces: NoncePool::new(),
            store: None,
            clock: Arc::new(now_unix),
            open_indeterminate: Mutex::new(HashMap::new()),
            open_challenges: Mutex::new(HashMap::new()),
            #[cfg(test)]
            fault: None,
        })
    }

    /// Signed manifest and canonical configuration for a signing key (and the incoming
    /// key it announces during a dual-sign overlap that began at the given time).
    fn bind_config(
        settings: &VerifierSettings,
        keys: &KeyMaterial,
        next: Option<(&KeyMaterial, f64)>,
        rules: &[Box<dyn Rule>],
    ) -> Result<(Manifest, CanonicalConfig, String), EvidenceError> {
        let now = now_unix();
        let mut manifest = Manifest::build(
            &settings.issuer,
            keys,
            settings.challenge_policy,
            now as u64,
            30 * 24 * 3600,
        )?;
        if let Some((n, since)) = next {
            manifest.announce_next(keys, n, since, since + 2.0 * settings.ttl_secs)?;
        }
        let config = CanonicalConfig {
            rules: rules.iter().map(|r| r.name().to_string()).collect(),
            policy_version: settings.policy_version.clone(),
            signing_key_id: keys.key_id.clone(),
            verifier_version: VERIFIER_VERSION.into(),
            schema_version: SCHEMA_VERSION.into(),
            deployment_mode: settings.deployment_mode,
            manifest_hash: Some(manifest.hash()?),
            policy_floor: settings.policy_floor.clone(),
        };
        let config_hash = config.hash()?;
        Ok((manifest, config, config_hash))
    }

    /// §7.3 phase 2 (dual-sign): from now on every receipt also carries a `cosignature`
    /// by `next`. The overlap starts at the verifier's clock.
    pub fn with_next_key(self, next: KeyMaterial) -> Result<Self, EvidenceError> {
        let since = (self.clock)();
        self.with_next_key_since(next, since)
    }

    /// Dual-sign with `next` for an overlap that began at `since` (a rotation resumed from
    /// a key file). The manifest announces `next` and is re-bound into `config_hash`.
    pub fn with_next_key_since(
        mut self,
        next: KeyMaterial,
        since: f64,
    ) -> Result<Self, EvidenceError> {
        if next.fingerprint() == self.keys.fingerprint() {
            return Err(EvidenceError::Key("next key equals the current key".into()));
        }
        let (manifest, config, config_hash) = Self::bind_config(
            &self.settings,
            &self.keys,
            Some((&next, since)),
            &self.rules,
        )?;
        self.manifest = manifest;
        self.config = config;
        self.config_hash = config_hash;
        self.next_keys = Some((next, since));
        Ok(self)
    }

    /// The incoming key during a dual-sign overlap.
    pub fn next_keys(&self) -> Option<&KeyMaterial> {
        self.next_keys.as_ref().map(|(k, _)| k)
    }

    /// §7.3 phase 3 (cutover): the incoming key becomes the only signing key.
    ///
    /// Refused unless dual-signing has run for at least twice the receipt lifetime
    /// (CCS-7.3-2). The canonical configuration (signing_key_id) and manifest are re-bound
    /// to the new key, so config_hash changes; the sequence continues.
    pub fn cutover(mut self) -> Result<Self, EvidenceError> {
        let Some((next, since)) = self.next_keys.take() else {
            return Err(EvidenceError::Key("no next key: dual-sign first".into()));
        };
        if (self.clock)() - since < 2.0 * self.settings.ttl_secs {
            return Err(EvidenceError::Invalid(
                "overlap window must be >= 2x max receipt lifetime".into(),
            ));
        }
        let (manifest, config, config_hash) =
            Self::bind_config(&self.settings, &next, None, &self.rules)?;
        self.keys = next;
        self.manifest = manifest;
        self.config = config;
        self.config_hash = config_hash;
        Ok(self)
    }

    /// Persist every receipt to this store before returning it (§11.1); sequence resumes from it.
    pub fn with_store(mut self, store: EvidenceStore) -> Result<Self, EvidenceError> {
        let next = store
            .max_sequence(&self.settings.issuer)?
            .map_or(0, |s| s + 1);
        self.sequence = AtomicU64::new(next);
        self.store = Some(GroupCommit::new(store));
        Ok(self)
    }

    /// Carry the running state of `old` into this verifier, rebuilt from a changed key
    /// file (a rotation step): the sequence never goes back, and open challenges and
    /// indeterminate outcomes stay open.
    pub fn continue_from(self, old: &Verifier) -> Self {
        self.sequence
            .fetch_max(old.sequence.load(Ordering::SeqCst), Ordering::SeqCst);
        carry(&old.open_indeterminate, &self.open_indeterminate);
        carry(&old.open_challenges, &self.open_challenges);
        self
    }

    /// Replace the clock (tests, replaying vectors).
    pub fn with_clock(mut self, clock: Arc<dyn Fn() -> f64 + Send + Sync>) -> Self {
        self.clock = clock;
        self
    }

    /// Install a fault hook (test builds only).
    #[cfg(test)]
    pub fn with_fault(mut self, hook: FaultHook) -> Self {
        self.fault = Some(hook);
        self
    }

    /// The canonical configuration.
    pub fn config(&self) -> &CanonicalConfig {
        &self.config
    }

    /// config_hash of this verifier.
    pub fn config_hash(&self) -> &str {
        &self.config_hash
    }

    /// The signed capability manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Settings.
    pub fn settings(&self) -> &VerifierSettings {
        &self.settings
    }

    /// Key material (public parts are safe to publish).
    pub fn keys(&self) -> &KeyMaterial {
        &self.keys
    }

    /// Access the evidence store, if any.
    pub fn with_store_ref<T>(&self, f: impl FnOnce(&EvidenceStore) -> T) -> Option<T> {
        let g = self.store.as_ref()?.lock().ok()?;
        Some(f(&g))
    }

    /// Issue a receipt for raw intake bytes. Any failure yields an error and no receipt.
    pub fn issue_bytes(&self, raw: &[u8]) -> Result<IssuedReceipt, IntakeError> {
        self.guarded(|| intake::parse_bytes(raw))
    }

    /// Issue a receipt for an intake JSON value. Any failure yields an error and no receipt.
    pub fn issue(&self, v: &Value) -> Result<IssuedReceipt, IntakeError> {
        self.guarded(|| intake::parse_value(v))
    }

    /// Issue for an intake, using `audience` instead of the default.
    /// The audience must be an absolute URI (§6.7), as the configured one is.
    pub fn issue_for(&self, v: &Value, audience: &str) -> Result<IssuedReceipt, IntakeError> {
        if !crate::config::is_uri(audience) {
            let mut e = IntakeError::new(
                IntakeErrorCode::IntakeMalformed,
                "audience must be an absolute URI",
            );
            e.trace_id = v.get("trace_id").and_then(Value::as_str).map(String::from);
            return Err(e);
        }
        self.guarded_with(|| intake::parse_value(v), Some(audience))
    }

    fn guarded(
        &self,
        parse: impl FnOnce() -> Result<Command, IntakeError>,
    ) -> Result<IssuedReceipt, IntakeError> {
        self.guarded_with(parse, None)
    }

    fn guarded_with(
        &self,
        parse: impl FnOnce() -> Result<Command, IntakeError>,
        audience: Option<&str>,
    ) -> Result<IssuedReceipt, IntakeError> {
        // §3.3: an exception anywhere in the intake path is an error, never a receipt.
        match catch_unwind(AssertUnwindSafe(|| self.pipeline(parse, audience))) {
            Ok(r) => r,
            Err(_) => Err(IntakeError::new(
                IntakeErrorCode::IntakeFailed,
                "intake processing failed",
            )),
        }
    }

    fn step(&self, s: Step, started: Instant, trace: Option<&str>) -> Result<(), IntakeError> {
        #[cfg(test)]
        if let Some(h) = &self.fault {
            if let Err(m) = h(s) {
                let _ = m; // the message is internal; never surfaced (§3.4)
                let mut e =
                    IntakeError::new(IntakeErrorCode::IntakeFailed, "intake processing failed");
                e.trace_id = trace.map(String::from);
                return Err(e);
            }
        }
        let _ = s;
        if let Some(t) = self.settings.intake_timeout {
            if started.elapsed() > t {
                let mut e = IntakeError::new(
                    IntakeErrorCode::IntakeTimeout,
                    "intake processing exceeded the timeout",
                );
                e.trace_id = trace.map(String::from);
                return Err(e);
            }
        }
        Ok(())
    }

    fn pipeline(
        &self,
        parse: impl FnOnce() -> Result<Command, IntakeError>,
        audience: Option<&str>,
    ) -> Result<IssuedReceipt, IntakeError> {
        let started = Instant::now();
        let mut issued = self.evaluate(parse, audience, started)?;
        self.persist(&[&issued], started)?;
        issued.latency_us = started.elapsed().as_micros() as u64;
        Ok(issued)
    }

    /// Issue receipts for several intakes (e.g. the parallel tool calls of one agent turn)
    /// and persist them in one transaction: one durable commit (fsync) for the batch.
    ///
    /// Results are in input order. Nothing is returned before the commit: if it fails,
    /// every receipt of the batch is an error, so no tool can run on an unpersisted
    /// receipt (§11.1). Intakes that fail on their own get their own error, as with
    /// [`Verifier::issue`].
    pub fn issue_batch(&self, intakes: &[Value]) -> Vec<Result<IssuedReceipt, IntakeError>> {
        let started = Instant::now();
        let mut out: Vec<Result<IssuedReceipt, IntakeError>> = intakes
            .iter()
            .map(|v| {
                catch_unwind(AssertUnwindSafe(|| {
                    self.evaluate(|| intake::parse_value(v), None, started)
                }))
                .unwrap_or_else(|_| Err(Self::failed(None)))
            })
            .collect();
        let persisted = {
            let ok: Vec<&IssuedReceipt> = out.iter().filter_map(|r| r.as_ref().ok()).collect();
            catch_unwind(AssertUnwindSafe(|| self.persist(&ok, started)))
                .unwrap_or_else(|_| Err(Self::failed(None)))
        };
        for r in &mut out {
            match (&persisted, r.as_mut()) {
                (Err(e), Ok(i)) => {
                    let mut e = e.clone();
                    e.trace_id = Some(i.receipt.trace_id.clone());
                    *r = Err(e);
                }
                (Ok(()), Ok(i)) => i.latency_us = started.elapsed().as_micros() as u64,
                (_, Err(_)) => {}
            }
        }
        out
    }

    fn failed(trace: Option<String>) -> IntakeError {
        let mut e = IntakeError::new(IntakeErrorCode::IntakeFailed, "intake processing failed");
        e.trace_id = trace;
        e
    }

    /// The Persist step for issued receipts: one transaction, durable before returning.
    fn persist(&self, items: &[&IssuedReceipt], started: Instant) -> Result<(), IntakeError> {
        for i in items {
            self.step(Step::Persist, started, Some(&i.receipt.trace_id))?;
        }
        let Some(store) = &self.store else {
            return Ok(());
        };
        let trace = (items.len() == 1).then(|| items[0].receipt.trace_id.clone());
        let fail = |m: &str| {
            let mut e = IntakeError::new(IntakeErrorCode::IntakeFailed, m);
            e.trace_id = trace.clone();
            e
        };
        // Owned copies: the commit may run on another caller's thread (group commit).
        let rows = items
            .iter()
            .map(|i| (i.receipt.clone(), Some(command_value(&i.command))))
            .collect();
        store
            .persist(rows)
            .map_err(|_| fail("evidence could not be persisted"))
    }

    /// Everything up to a sealed receipt (normalize, rules, bind, sign); not persisted.
    fn evaluate(
        &self,
        parse: impl FnOnce() -> Result<Command, IntakeError>,
        audience: Option<&str>,
        started: Instant,
    ) -> Result<IssuedReceipt, IntakeError> {
        self.step(Step::Normalize, started, None)?;
        let cmd = parse()?;
        // Borrowed: the trace id is only copied when an error is built.
        let trace = Some(cmd.trace_id.as_str());
        let fail = |m: &str| {
            let mut e = IntakeError::new(IntakeErrorCode::IntakeFailed, m);
            e.trace_id = trace.map(String::from);
            e
        };
        self.step(Step::Rules, started, trace)?;
        let now = (self.clock)();
        // Rules read the parameters with invisible characters removed ("r\u{200b}m -rf /"
        // runs as "rm -rf /" in many shells and reads so to a person); the receipt still
        // binds the parameters exactly as given.
        let visible = crate::rules::without_invisible(&cmd);
        let ctx = RuleContext {
            cmd: visible.as_ref().unwrap_or(&cmd),
            manifest: &self.manifest,
            now,
        };
        let mut summary = String::with_capacity(32 * self.rules.len());
        let mut verdict = Verdict::Allow;
        let mut reason = String::new();
        let mut challenge = None;
        let mut comparison = None;
        for r in &self.rules {
            let o = r.evaluate(&ctx);
            if !summary.is_empty() {
                summary.push('|');
            }
            summary.push_str(r.name());
            summary.push('=');
            summary.push_str(o.verdict.as_str());
            // Deny dominates escalate dominates allow; the first reason of the
            // strongest verdict is reported.
            let stronger = matches!(
                (verdict, o.verdict),
                (Verdict::Allow, Verdict::Deny | Verdict::Escalate)
                    | (Verdict::Escalate, Verdict::Deny)
            );
            if stronger {
                verdict = o.verdict;
                reason = o.reason.clone();
                challenge = o.challenge.clone();
                comparison = o.comparison.clone();
            } else if o.verdict == verdict && o.verdict != Verdict::Allow {
                challenge = challenge.or(o.challenge.clone());
                comparison = comparison.or(o.comparison.clone());
            }
        }

        self.step(Step::Bind, started, trace)?;
        let params_hash = sha256_hex(cmd.canonical_params.as_bytes());
        let action = action_for(&cmd.tool, &params_hash);
        if verdict == Verdict::Allow {
            let open = self
                .open_indeterminate
                .lock()
                .map_err(|_| fail("intake processing failed"))?;
            // The key is only built when some outcome is open (rare).
            if let Some(t) = (!open.is_empty())
                .then(|| open.get(&format!("{}|{}", cmd.agent_id, action)))
                .flatten()
            {
                verdict = Verdict::Deny;
                reason = format!("indeterminate_outcome_open: {t}");
            }
        }
        let mut open = self
            .open_challenges
            .lock()
            .map_err(|_| fail("intake processing failed"))?;
        // Only touched when a challenge is open or being issued (rare).
        if !open.is_empty() || challenge.is_some() {
            let key = format!("{}|{}", cmd.agent_id, action);
            if let Some(deadline) = open.get(&key).copied() {
                if now > deadline {
                    // §4.7 step 6: evidence arriving after expires_at does not
                    // reopen the case; the deny stands for this challenge.
                    open.remove(&key);
                    verdict = Verdict::Deny;
                    reason = "challenge_expired".into();
                    challenge = None;
                } else if verdict == Verdict::Allow {
                    open.remove(&key);
                }
            }
            if let Some(deadline) = challenge
                .as_ref()
                .and_then(|c| c.get("expires_at"))
                .and_then(Value::as_f64)
            {
                // Bound the table: challenges expired for over an hour are forgotten.
                if open.len() >= 10_000 {
                    open.retain(|_, d| *d + 3600.0 >= now);
                }
                open.insert(key, deadline);
            }
        }
        drop(open);
        let request_hash = format!(
            "sha256:{}",
            sha256_hex(
                request_canonical(&cmd)
                    .map_err(|_| fail("intake processing failed"))?
                    .as_bytes()
            )
        );
        let runtime_context_hash = match &cmd.runtime_context {
            Some(rc) => format!(
                "sha256:{}",
                jcs_sha256_hex(rc).map_err(|_| fail("intake processing failed"))?
            ),
            // No runtime context hashes as the empty object.
            None => EMPTY_OBJECT_HASH.to_string(),
        };
        let (previous_receipt_hash, parent_trace_id) = match &cmd.delegation_chain {
            Some(d) => (
                d.get("previous_receipt_hash")
                    .and_then(Value::as_str)
                    .map(String::from),
                d.get("parent_trace_id")
                    .and_then(Value::as_str)
                    .map(String::from),
            ),
            None => (None, None),
        };
        let nonce = self
            .nonces
            .next()
            .map_err(|_| fail("intake processing failed"))?;
        let sequence = self.sequence.fetch_add(1, Ordering::SeqCst);
        let mut receipt = Receipt {
            trace_id: cmd.trace_id.clone(),
            verdict,
            timestamp: now,
            tool: cmd.tool.clone(),
            params_hash,
            rule_summary: summary,
            receipt: String::new(),
            verified_at: now,
            block_reason: if verdict == Verdict::Allow {
                String::new()
            } else {
                reason
            },
            request_hash,
            response_hash: String::new(),
            runtime_context_hash,
            action,
            config_hash: self.config_hash.clone(),
            issuer: self.settings.issuer.clone(),
            audience: audience.unwrap_or(&self.settings.audience).to_string(),
            nonce,
            sequence,
            issued_at: now,
            expires_at: now + self.settings.ttl_secs,
            max_clock_skew: self.settings.max_clock_skew,
            signature: String::new(),
            // A deny is always confirmed; an allow has no outcome evidence yet (§4.5).
            outcome_status: Some(if verdict == Verdict::Allow {
                OutcomeStatus::Dispatched
            } else {
                OutcomeStatus::Confirmed
            }),
            previous_receipt_hash,
            parent_trace_id,
            challenge,
            comparison_axis: comparison,
            cosignature: None,
        };

        self.step(Step::Sign, started, trace)?;
        receipt
            .seal_dual(&self.keys, self.next_keys())
            .map_err(|_| fail("intake processing failed"))?;

        Ok(IssuedReceipt {
            receipt,
            command: cmd,
            latency_us: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jcs::canonicalize;

    #[test]
    fn ccs_6_1_direct_request_writer_equals_generic_jcs() {
        for (params, ts, agent) in [
            (json!({"q": "weather", "n": 10}), 1722384000.0, "agent"),
            (
                json!({"é\u{301}": ["x", 1.5, null, {"b": 1, "a": "\u{2028}"}]}),
                1722384000.123456,
                "agent \"quoted\" ü",
            ),
            (json!({}), 0.0, "a"),
        ] {
            let c = intake::parse_value(&json!({"intake_version": "1.3", "agent_id": agent,
                "tool": "t\u{e9}", "params": params, "timestamp": ts, "trace_id": "tr\\1"}))
            .unwrap();
            let generic = json!({"agent_id": c.agent_id, "tool": c.tool, "params": c.params,
                "timestamp": c.timestamp, "trace_id": c.trace_id});
            assert_eq!(
                request_canonical(&c).unwrap(),
                canonicalize(&generic).unwrap()
            );
        }
        assert_eq!(
            EMPTY_OBJECT_HASH,
            format!("sha256:{}", jcs_sha256_hex(&json!({})).unwrap())
        );
    }

    #[test]
    fn nonces_are_distinct_across_pool_refills() {
        let p = NoncePool::new();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..600 {
            let n = p.next().unwrap();
            assert_eq!(n.len(), 32);
            assert!(seen.insert(n));
        }
    }
}
