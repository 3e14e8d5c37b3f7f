//! Command line: `convene evidence ...` and `convene verifier serve`.
//!
//! Exit codes: 0 ok / allow / valid; 1 rejected / invalid / rotation step refused; 2 usage;
//! 3 receipt issued with verdict deny or escalate, or (verify) a valid receipt that does not
//! permit the call; 4 intake error (no receipt); 5 internal error.

use crate::chain::{CrossOrg, Envelope};
use crate::config::{ChallengePolicy, DeploymentMode, Manifest};
use crate::enforce::{report_json, Enforcer, Expected, ReplayCache};
use crate::error::EvidenceError;
use crate::issuer::{now_unix, Verifier, VerifierSettings};
use crate::keys::{full_fingerprint_of, KeyFile, KeyMaterial, TrustStore};
use crate::live::LiveVerifier;
use crate::receipt::{Receipt, Verdict};
use crate::rotation::{self, Rotation};
use crate::rules::{builtin, Rule};
use crate::store::EvidenceStore;
use crate::{l1, server};
use base64::Engine;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[path = "cli_chain.rs"]
mod chain_cmd;
#[path = "cli_rotate.rs"]
mod rotate;

/// Success / allow / valid.
pub const EXIT_OK: i32 = 0;
/// Rejected or invalid evidence.
pub const EXIT_REJECTED: i32 = 1;
/// Usage error.
pub const EXIT_USAGE: i32 = 2;
/// A receipt was issued but its verdict is deny or escalate; or `verify` found a valid
/// receipt that does not permit the call (deny, escalate, allow with an unknown outcome).
pub const EXIT_NOT_ALLOWED: i32 = 3;
/// Intake failed; no receipt.
pub const EXIT_INTAKE: i32 = 4;
/// Internal or I/O error.
pub const EXIT_INTERNAL: i32 = 5;

const USAGE: &str = "usage:
  evidence keygen --out KEY.json [--key-id ID]
  evidence issue --key KEY.json --intake IN.json|- [--out R.json] [--bundle B.json]
                 [--issuer URI] [--audience URI] [--store DB] [--rules a,b,c]
                 [--policy-floor PROFILE] [--ttl SECS] [--parent R.json] [--response RESP.json]
  evidence verify --receipt R.json (--key KEY.json | --trust TRUST.json) --audience URI
                  (--intake IN.json | --tool T --params P.json) [--replay-db DB] [--now T]
  evidence trust enroll --trust TRUST.json --issuer URI --public-key B64 --fingerprint FP
  evidence trust revoke|retire --trust TRUST.json --fingerprint FP
  evidence chain build --out C.json RECEIPT_OR_BUNDLE...
  evidence chain verify --chain C.json (--key KEY.json | --trust TRUST.json) [--issuer URI]
                        [--mode full|spot] [--hop N] [--now T] [--require-seal]
  evidence chain prune --chain C.json --hop N [--out C2.json]
  evidence chain seal --chain C.json --key KEY.json [--trust TRUST.json] [--issuer URI]
                      [--now T] [--out C2.json]
  evidence envelope wrap --parent R.json --child-trace ID --reason TEXT [--hop N]
                         [--sender URI --receiver URI --key KEY.json] [--out E.json]
  evidence envelope verify --envelope E.json (--key KEY.json | --trust TRUST.json) [--receiver URI]
  evidence manifest --key KEY.json [--issuer URI] [--out M.json]
  evidence rotate announce --key KEY.json [--next NEXT.json] [--ttl SECS] [--issuer URI]
                           [--manifest M.json]
  evidence rotate cutover|retire|status --key KEY.json [--issuer URI] [--manifest M.json]
  evidence export --profile l1-1.1 --key KEY.json --out DIR --case NAME [--chained] BUNDLE...
  verifier serve --key KEY.json --socket PATH [--store DB] [--issuer URI] [--audience URI]
                 [--rules a,b,c] [--policy-floor PROFILE] [--max-conns N]";

struct Args {
    flags: HashMap<String, String>,
    bools: Vec<String>,
    pos: Vec<String>,
}

const BOOL_FLAGS: [&str; 2] = ["chained", "require-seal"];

impl Args {
    fn parse(a: &[String]) -> Result<Self, String> {
        let mut flags = HashMap::new();
        let mut bools = Vec::new();
        let mut pos = Vec::new();
        let mut i = 0;
        while i < a.len() {
            if let Some(name) = a[i].strip_prefix("--") {
                if BOOL_FLAGS.contains(&name) {
                    bools.push(name.to_string());
                } else {
                    let v = a.get(i + 1).ok_or(format!("--{name} needs a value"))?;
                    flags.insert(name.to_string(), v.clone());
                    i += 1;
                }
            } else {
                pos.push(a[i].clone());
            }
            i += 1;
        }
        Ok(Self { flags, bools, pos })
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.flags.get(k).map(String::as_str)
    }
    fn req(&self, k: &str) -> Result<&str, Fail> {
        self.get(k)
            .ok_or_else(|| Fail::Usage(format!("missing --{k}")))
    }
    fn has(&self, k: &str) -> bool {
        self.bools.iter().any(|b| b == k)
    }
}

enum Fail {
    Usage(String),
    Code(i32, Value),
    Internal(String),
}

impl Fail {
    /// One line for a log.
    fn describe(&self) -> String {
        match self {
            Fail::Usage(m) | Fail::Internal(m) => m.clone(),
            Fail::Code(_, v) => v.to_string(),
        }
    }
}

impl From<EvidenceError> for Fail {
    fn from(e: EvidenceError) -> Self {
        match e {
            EvidenceError::Intake(i) => Fail::Code(EXIT_INTAKE, i.to_response()),
            other => Fail::Internal(other.to_string()),
        }
    }
}

impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Self {
        Fail::Internal(e.to_string())
    }
}

impl From<serde_json::Error> for Fail {
    fn from(e: serde_json::Error) -> Self {
        Fail::Internal(format!("invalid JSON input: {e}"))
    }
}

fn read_json(p: &str) -> Result<Value, Fail> {
    let s = if p == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        s
    } else {
        std::fs::read_to_string(p).map_err(|e| Fail::Internal(format!("{p}: {e}")))?
    };
    Ok(serde_json::from_str(&s)?)
}

fn write_out(path: Option<&str>, v: &Value) -> Result<(), Fail> {
    let s = serde_json::to_string_pretty(v)?;
    match path {
        Some(p) => std::fs::write(p, s + "\n")?,
        None => println!("{s}"),
    }
    Ok(())
}

fn load_key_file(p: &str) -> Result<KeyFile, Fail> {
    Ok(serde_json::from_value(read_json(p)?)?)
}

fn load_key(p: &str) -> Result<KeyMaterial, Fail> {
    Ok(KeyMaterial::from_file(&load_key_file(p)?)?)
}

/// Entry point: `args[0]` is "evidence" or "verifier"; returns the process exit code.
pub fn run(args: Vec<String>) -> i32 {
    let result = match args.first().map(String::as_str) {
        Some("evidence") => evidence(&args[1..]),
        Some("verifier") => verifier(&args[1..]),
        _ => Err(Fail::Usage("expected 'evidence' or 'verifier'".into())),
    };
    match result {
        Ok(code) => code,
        Err(Fail::Usage(m)) => {
            eprintln!("error: {m}\n{USAGE}");
            EXIT_USAGE
        }
        Err(Fail::Code(c, v)) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            c
        }
        Err(Fail::Internal(m)) => {
            eprintln!("error: {m}");
            EXIT_INTERNAL
        }
    }
}

fn evidence(a: &[String]) -> Result<i32, Fail> {
    let (cmd, rest) = a
        .split_first()
        .ok_or_else(|| Fail::Usage("missing subcommand".into()))?;
    match cmd.as_str() {
        "keygen" => keygen(&Args::parse(rest).map_err(Fail::Usage)?),
        "issue" => issue(&Args::parse(rest).map_err(Fail::Usage)?),
        "verify" => verify(&Args::parse(rest).map_err(Fail::Usage)?),
        "manifest" => manifest(&Args::parse(rest).map_err(Fail::Usage)?),
        "export" => export(&Args::parse(rest).map_err(Fail::Usage)?),
        "chain" | "trust" | "envelope" | "rotate" => {
            let (sub, rest2) = rest
                .split_first()
                .ok_or_else(|| Fail::Usage("missing subcommand".into()))?;
            let args = Args::parse(rest2).map_err(Fail::Usage)?;
            match (cmd.as_str(), sub.as_str()) {
                ("chain", step) => chain_cmd::run(step, &args),
                ("trust", "enroll") => trust_enroll(&args),
                ("trust", "revoke") => trust_revoke(&args),
                ("trust", "retire") => trust_retire(&args),
                ("envelope", "wrap") => envelope_wrap(&args),
                ("envelope", "verify") => envelope_verify(&args),
                ("rotate", step) => rotate::run(step, &args),
                _ => Err(Fail::Usage(format!("unknown subcommand {cmd} {sub}"))),
            }
        }
        "help" | "--help" => {
            println!("{USAGE}");
            Ok(EXIT_OK)
        }
        other => Err(Fail::Usage(format!("unknown subcommand {other}"))),
    }
}

fn keygen(a: &Args) -> Result<i32, Fail> {
    let out = a.req("out")?;
    let k = KeyMaterial::generate(a.get("key-id").map(String::from));
    let f = k.to_file();
    let s = serde_json::to_string_pretty(&f)? + "\n";
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        // The private key file is created owner-only from the start.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(out)?;
        file.write_all(s.as_bytes())?;
    }
    write_out(
        None,
        &json!({"key_id": f.key_id, "public_key": f.public_key, "fingerprint": f.fingerprint}),
    )?;
    Ok(EXIT_OK)
}

/// The rule set of `--rules` (default: the three built-ins). A `--policy-floor` brings the
/// `policy_floor` rule along: a floor bound into the configuration but enforced by no rule
/// would tell consumers of a check that never ran. An empty or repeated list and an unknown
/// floor profile are usage errors (an empty rule set would allow everything).
fn rules_from(a: &Args) -> Result<Vec<Box<dyn Rule>>, Fail> {
    let floor = a.get("policy-floor");
    if let Some(f) = floor {
        if crate::config::profile_rank(f).is_none() {
            return Err(Fail::Usage(format!(
                "unknown --policy-floor {f} (one of {})",
                crate::config::PROFILE_ORDER.join(", ")
            )));
        }
    }
    let mut names: Vec<&str> = a
        .get("rules")
        .unwrap_or("ssrf_protection,rce_protection,credential_leak")
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return Err(Fail::Usage(
            "--rules names no rule: a verifier without rules would allow every call".into(),
        ));
    }
    if let Some(dup) = names
        .iter()
        .enumerate()
        .find_map(|(i, n)| names[..i].contains(n).then_some(*n))
    {
        return Err(Fail::Usage(format!("rule {dup} named twice in --rules")));
    }
    if floor.is_some() && !names.contains(&"policy_floor") {
        names.push("policy_floor");
    }
    names
        .into_iter()
        .map(|n| builtin(n, floor).ok_or_else(|| Fail::Usage(format!("unknown rule {n}"))))
        .collect()
}

fn build_verifier(a: &Args, mode: DeploymentMode) -> Result<Verifier, Fail> {
    let file = load_key_file(a.req("key")?)?;
    let (keys, next) = rotation::signing_keys(&file)?;
    let d = VerifierSettings::default();
    // During a dual-sign overlap, receipts may not outlive what the overlap was sized for.
    let overlap_ttl = match &file.rotation {
        Some(Rotation::DualSign { ttl_secs, .. }) => Some(*ttl_secs),
        _ => None,
    };
    let ttl = ttl_flag(a)?.or(overlap_ttl).unwrap_or(d.ttl_secs);
    if overlap_ttl.is_some_and(|o| ttl > o) {
        return Err(Fail::Usage(format!(
            "--ttl {ttl} exceeds the {} s the rotation in progress was announced for",
            overlap_ttl.unwrap_or_default()
        )));
    }
    let settings = VerifierSettings {
        issuer: a.get("issuer").map(String::from).unwrap_or(d.issuer),
        audience: a.get("audience").map(String::from).unwrap_or(d.audience),
        deployment_mode: mode,
        ttl_secs: ttl,
        policy_floor: a.get("policy-floor").map(String::from),
        challenge_policy: ChallengePolicy::default(),
        ..d
    };
    // Settings the verifier refuses (issuer or audience not a URI) are the caller's to fix.
    let mut v = Verifier::new(settings, keys, rules_from(a)?).map_err(|e| match e {
        EvidenceError::Invalid(m) => Fail::Usage(m),
        other => other.into(),
    })?;
    if let Some((n, since)) = next {
        v = v.with_next_key_since(n, since)?;
    }
    if let Some(db) = a.get("store") {
        v = v.with_store(EvidenceStore::open(Path::new(db))?)?;
    }
    Ok(v)
}

fn receipt_of(v: &Value) -> Result<Receipt, Fail> {
    // Accept a bare receipt or an issue bundle.
    Ok(Receipt::from_value(
        v.get("receipt").filter(|r| r.is_object()).unwrap_or(v),
    )?)
}

fn issue(a: &Args) -> Result<i32, Fail> {
    let v = build_verifier(a, DeploymentMode::InProcess)?;
    let mut intake = read_json(a.req("intake")?).map_err(|f| match f {
        Fail::Internal(_) => Fail::Code(
            EXIT_INTAKE,
            crate::IntakeError::new(
                crate::IntakeErrorCode::IntakeMalformed,
                "intake message is not valid JSON",
            )
            .to_response(),
        ),
        other => other,
    })?;
    if let Some(p) = a.get("parent") {
        let parent = receipt_of(&read_json(p)?)?;
        if let Some(o) = intake.as_object_mut() {
            o.entry("delegation_chain").or_insert(json!({
                "parent_trace_id": parent.trace_id,
                "previous_receipt_hash": parent.receipt_hash()?,
            }));
        }
    }
    let issued = v.issue(&intake).map_err(EvidenceError::from)?;
    let mut receipt = issued.receipt.clone();
    let response = match a.get("response") {
        Some(p) if receipt.verdict == Verdict::Allow => {
            let resp = read_json(p)?;
            receipt = v.finalize(&receipt, &resp)?;
            Some(resp)
        }
        _ => None,
    };
    let rv = receipt.to_value()?;
    if let Some(b) = a.get("bundle") {
        let mut bundle = issued.bundle()?;
        bundle["receipt"] = rv.clone();
        bundle["config"] = serde_json::to_value(v.config())?;
        if let Some(r) = response {
            bundle["response"] = r;
        }
        write_out(Some(b), &bundle)?;
    }
    write_out(a.get("out"), &rv)?;
    Ok(if receipt.verdict == Verdict::Allow {
        EXIT_OK
    } else {
        EXIT_NOT_ALLOWED
    })
}

fn trust_from(
    a: &Args,
    issuer_hint: Option<&str>,
) -> Result<(TrustStore, Option<KeyMaterial>), Fail> {
    if let Some(t) = a.get("trust") {
        return Ok((serde_json::from_value(read_json(t)?)?, None));
    }
    let k = load_key(a.req("key")?)?;
    let issuer = a
        .get("issuer")
        .or(issuer_hint)
        .map(String::from)
        .unwrap_or(VerifierSettings::default().issuer);
    let mut ts = TrustStore::default();
    let pk = base64::engine::general_purpose::STANDARD.encode(k.public().to_bytes());
    ts.enroll(&issuer, &pk, &k.fingerprint())?;
    Ok((ts, Some(k)))
}

/// `--NAME SECS`, if given: a number that `ok` accepts, else a usage error saying `what`.
/// (NaN compares false with everything, so an unchecked one passes every time comparison.)
fn seconds_flag(
    a: &Args,
    name: &str,
    ok: fn(f64) -> bool,
    what: &str,
) -> Result<Option<f64>, Fail> {
    a.get(name)
        .map(|t| {
            t.parse::<f64>()
                .ok()
                .filter(|t| ok(*t))
                .ok_or_else(|| Fail::Usage(format!("bad --{name} ({what})")))
        })
        .transpose()
}

/// `--ttl SECS`, if given: a positive, finite number (a NaN lifetime would pass every
/// freshness and rotation-overlap comparison).
fn ttl_flag(a: &Args) -> Result<Option<f64>, Fail> {
    seconds_flag(
        a,
        "ttl",
        |t| t.is_finite() && t > 0.0,
        "a positive number of seconds",
    )
}

/// `--now T` (seconds since the epoch), if given: a finite number.
fn now_flag(a: &Args) -> Result<Option<f64>, Fail> {
    seconds_flag(a, "now", f64::is_finite, "seconds since the epoch")
}

fn verify(a: &Args) -> Result<i32, Fail> {
    // A file that is not JSON is a receipt that does not verify (exit 1, SIGNATURE_INVALID),
    // like JSON that is not a receipt; only a file that cannot be read is an I/O error.
    let raw = match read_json(a.req("receipt")?) {
        Err(Fail::Internal(m)) if m.starts_with("invalid JSON input") => Value::Null,
        r => r?,
    };
    // A bare receipt or an issue bundle (as receipt_of).
    let raw = raw.get("receipt").filter(|r| r.is_object()).unwrap_or(&raw);
    let field = |k: &str| raw.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let parsed = Receipt::from_value(raw);
    let issuer = field("issuer");
    let (ts, key) = trust_from(a, Some(&issuer))?;
    let replay = match a.get("replay-db") {
        Some(p) => ReplayCache::open(Path::new(p))?,
        None => ReplayCache::in_memory()?,
    };
    let mut e = Enforcer::new(a.req("audience")?, ts, replay);
    if let Some(k) = &key {
        e = e.with_hmac_secret(&issuer, k.hmac_secret());
    }
    // Consumers holding the whole request (--intake) bind it all (request_hash, §6.1).
    let request = match a.get("intake") {
        Some(p) => {
            let i = read_json(p)?;
            Some(crate::intake::parse_value(&i).map_err(EvidenceError::from)?)
        }
        None => None,
    };
    // Without --intake: --tool and --params (only used then).
    let (tool, params) = match &request {
        Some(_) => (String::new(), Value::Null),
        None => (a.req("tool")?.to_string(), read_json(a.req("params")?)?),
    };
    let now = now_flag(a)?.unwrap_or_else(now_unix);
    let outcome = match &parsed {
        Err(_) => Err(e.reject_unparsed(&field("trace_id"), &issuer, now)),
        Ok(r) => match &request {
            Some(c) => e.validate_request(r, c, now),
            None => e.validate(
                r,
                &Expected {
                    tool: &tool,
                    params: &params,
                },
                now,
            ),
        },
    };
    match outcome {
        Ok(acc) => {
            let permits = acc.action.permits_invocation();
            write_out(
                None,
                &json!({"accepted": true, "permits": permits,
                "verdict": parsed.as_ref().ok().map(|r| r.verdict),
                "action": acc.action, "warning": acc.warning.as_ref().map(report_json)}),
            )?;
            // A genuine receipt that does not permit the call (deny, escalate, an allow
            // whose outcome is unknown) must not read as "go ahead" to a script.
            Ok(if permits { EXIT_OK } else { EXIT_NOT_ALLOWED })
        }
        Err(rep) => {
            write_out(
                None,
                &json!({"accepted": false, "failure": report_json(&rep)}),
            )?;
            Ok(EXIT_REJECTED)
        }
    }
}

fn trust_enroll(a: &Args) -> Result<i32, Fail> {
    let p = a.req("trust")?;
    let mut ts: TrustStore = match std::fs::read_to_string(p) {
        Ok(s) => serde_json::from_str(&s)?,
        Err(_) => TrustStore::default(),
    };
    ts.enroll(
        a.req("issuer")?,
        a.req("public-key")?,
        a.req("fingerprint")?,
    )?;
    write_out(Some(p), &serde_json::to_value(&ts)?)?;
    Ok(EXIT_OK)
}

fn trust_revoke(a: &Args) -> Result<i32, Fail> {
    trust_update(a, TrustStore::revoke)
}

fn trust_retire(a: &Args) -> Result<i32, Fail> {
    trust_update(a, TrustStore::retire)
}

/// Apply one state change to the key `--fingerprint` of the trust file `--trust`.
fn trust_update(
    a: &Args,
    change: fn(&mut TrustStore, &str) -> Result<(), EvidenceError>,
) -> Result<i32, Fail> {
    let p = a.req("trust")?;
    let mut ts: TrustStore = serde_json::from_value(read_json(p)?)?;
    if let Err(e) = change(&mut ts, a.req("fingerprint")?) {
        // An unknown or revoked fingerprint: nothing is written.
        write_out(None, &json!({"changed": false, "reason": e.to_string()}))?;
        return Ok(EXIT_REJECTED);
    }
    write_out(Some(p), &serde_json::to_value(&ts)?)?;
    Ok(EXIT_OK)
}

fn envelope_wrap(a: &Args) -> Result<i32, Fail> {
    let parent = receipt_of(&read_json(a.req("parent")?)?)?;
    let hop = match a.get("hop") {
        Some(h) => h.parse().map_err(|_| Fail::Usage("bad --hop".into()))?,
        None => 1,
    };
    let cross_org = match (a.get("sender"), a.get("receiver")) {
        (Some(s), Some(r)) => {
            let k = load_key(a.req("key")?)?;
            Some(CrossOrg {
                sender_org_id: s.into(),
                receiver_org_id: r.into(),
                trust_anchor_reference: format!("sha256:{}", full_fingerprint_of(&k.public())),
                self_contained: true,
            })
        }
        (None, None) => None,
        _ => return Err(Fail::Usage("--sender and --receiver go together".into())),
    };
    let env = Envelope::wrap(
        &parent,
        a.req("child-trace")?,
        a.req("reason")?,
        hop,
        cross_org,
    )?;
    write_out(a.get("out"), &serde_json::to_value(&env)?)?;
    Ok(EXIT_OK)
}

fn envelope_verify(a: &Args) -> Result<i32, Fail> {
    let env: Envelope = serde_json::from_value(read_json(a.req("envelope")?)?)?;
    let issuer = env
        .original_receipt
        .get("issuer")
        .and_then(Value::as_str)
        .map(String::from);
    let (ts, _) = trust_from(a, issuer.as_deref())?;
    match env.verify(&ts, a.get("receiver")) {
        Ok(r) => {
            write_out(
                None,
                &json!({"valid": true, "parent_trace_id": r.trace_id,
                "delegation_chain": env.delegation_value()}),
            )?;
            Ok(EXIT_OK)
        }
        Err(rej) => {
            write_out(None, &json!({"valid": false, "failure_category": rej}))?;
            Ok(EXIT_REJECTED)
        }
    }
}

/// The signed manifest for a key file; during dual-sign it announces the incoming key.
fn manifest_for(a: &Args, f: &KeyFile) -> Result<Manifest, Fail> {
    let issuer = a
        .get("issuer")
        .map(String::from)
        .unwrap_or(VerifierSettings::default().issuer);
    let (k, next) = rotation::signing_keys(f)?;
    let mut m = Manifest::build(
        &issuer,
        &k,
        ChallengePolicy::default(),
        now_unix() as u64,
        30 * 24 * 3600,
    )?;
    if let (Some((n, since)), Some(r)) = (next, &f.rotation) {
        m.announce_next(&k, &n, since, r.cutover_not_before().unwrap_or(since))?;
    }
    Ok(m)
}

fn manifest(a: &Args) -> Result<i32, Fail> {
    let m = manifest_for(a, &load_key_file(a.req("key")?)?)?;
    let mut v = serde_json::to_value(&m)?;
    if a.get("out").is_some() {
        write_out(a.get("out"), &v)?;
        write_out(None, &json!({"manifest_hash": m.hash()?}))?;
    } else {
        v["manifest_hash"] = json!(m.hash()?);
        write_out(None, &v)?;
    }
    Ok(EXIT_OK)
}

fn export(a: &Args) -> Result<i32, Fail> {
    if a.req("profile")? != l1::PROFILE {
        return Err(Fail::Usage(format!(
            "only --profile {} is supported",
            l1::PROFILE
        )));
    }
    let k = load_key(a.req("key")?)?;
    let root = PathBuf::from(a.req("out")?);
    let case = a.req("case")?;
    if case.contains('/') || case.contains("..") {
        return Err(Fail::Usage("--case must be a plain folder name".into()));
    }
    let bundles: Vec<Value> = a
        .pos
        .iter()
        .map(|p| read_json(p))
        .collect::<Result<_, _>>()?;
    if bundles.is_empty() {
        return Err(Fail::Usage("no bundles given".into()));
    }
    let chained = a.has("chained");
    let mut exports = Vec::new();
    let mut root_trace: Option<String> = None;
    let mut prev: Option<String> = None;
    for b in &bundles {
        let r = receipt_of(b)?;
        let cmd = b
            .get("command")
            .ok_or_else(|| Fail::Usage("export needs issue bundles (--bundle)".into()))?;
        let src = l1::Source {
            receipt: &r,
            command: cmd,
            config: b.get("config"),
            response: b.get("response"),
            latency_us: b.get("latency_us").and_then(Value::as_u64).unwrap_or(0),
        };
        let trace = if chained {
            root_trace.get_or_insert_with(|| r.trace_id.clone()).clone()
        } else {
            r.trace_id.clone()
        };
        let e = match l1::export(
            &src,
            &k,
            &trace,
            if chained { prev.as_deref() } else { None },
        ) {
            Ok(e) => e,
            Err(EvidenceError::Invalid(m)) => {
                return Err(Fail::Code(
                    EXIT_REJECTED,
                    json!({"exported": false, "reason": m}),
                ))
            }
            Err(e) => return Err(e.into()),
        };
        prev = Some(l1::l1_digest(&e.receipt)?);
        exports.push(e);
    }
    if chained {
        l1::write_case(&root.join(case), &exports, true)?;
    } else if exports.len() == 1 {
        l1::write_case(&root.join(case), &exports, false)?;
    } else {
        for (i, e) in exports.into_iter().enumerate() {
            l1::write_case(&root.join(format!("{case}-{:02}", i + 1)), &[e], false)?;
        }
    }
    l1::write_manifest(&root)?;
    write_out(
        None,
        &json!({"exported": bundles.len(), "dir": root.display().to_string()}),
    )?;
    Ok(EXIT_OK)
}

fn verifier(a: &[String]) -> Result<i32, Fail> {
    let (cmd, rest) = a
        .split_first()
        .ok_or_else(|| Fail::Usage("missing subcommand".into()))?;
    if cmd != "serve" {
        return Err(Fail::Usage(format!("unknown verifier subcommand {cmd}")));
    }
    let args = Args::parse(rest).map_err(Fail::Usage)?;
    // The file's version before it is read: a change while starting is picked up at once.
    let key = PathBuf::from(args.req("key")?);
    let built_from = crate::live::file_version(&key);
    let v = build_verifier(&args, DeploymentMode::OutOfProcess)?;
    let socket = PathBuf::from(args.req("socket")?);
    let max = match args.get("max-conns") {
        Some(n) => Some(
            n.parse()
                .map_err(|_| Fail::Usage("bad --max-conns".into()))?,
        ),
        None => None,
    };
    // A rotation step on the key file takes effect while serving (crate::live).
    let rebuild = move || match build_verifier(&args, DeploymentMode::OutOfProcess) {
        Ok(v) => {
            let phase = v.next_keys().map_or("single key", |_| "dual-sign");
            eprintln!(
                "verifier: key file changed; signing with {} ({phase})",
                v.keys().fingerprint()
            );
            Some(v)
        }
        Err(e) => {
            eprintln!(
                "verifier: key file changed but was not loaded: {}",
                e.describe()
            );
            None
        }
    };
    let live = Arc::new(LiveVerifier::watching_since(
        v,
        &key,
        built_from,
        Box::new(rebuild),
    ));
    eprintln!("verifier listening on {}", socket.display());
    server::serve(live, &socket, max)?;
    // Give in-flight connections a moment before the process exits.
    std::thread::sleep(Duration::from_millis(50));
    Ok(EXIT_OK)
}
