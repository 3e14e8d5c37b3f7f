//! Export in the "L1 1.1" interop profile (30 fields) checked by ccs-conformance-check.

use crate::error::EvidenceError;
use crate::jcs::{canonicalize, jcs_sha256_hex, sha256_hex};
use crate::keys::KeyMaterial;
use crate::receipt::{Receipt, Verdict};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Map, Value};
use std::path::Path;

/// Profile name accepted by `export --profile`.
pub const PROFILE: &str = "l1-1.1";
/// receipt_version of the profile.
pub const RECEIPT_VERSION: &str = "1.1";
/// verifier_source_class: Class A, self-built (§9.1).
pub const SOURCE_CLASS: &str = "A";

/// The 30 fields of the profile, in documentation order.
pub const L1_FIELDS: [&str; 30] = [
    "trace_id",
    "receipt_version",
    "verdict",
    "timestamp",
    "tool",
    "tool_call_id",
    "params_hash",
    "args_digest",
    "rule_summary",
    "rule_version",
    "request_hash",
    "response_hash",
    "runtime_context_hash",
    "config_hash",
    "verifier_source_class",
    "deployment_mode",
    "issuer",
    "audience",
    "nonce",
    "sequence",
    "issued_at",
    "expires_at",
    "max_clock_skew",
    "action",
    "signature",
    "signing_algorithm",
    "public_key_fingerprint",
    "public_key",
    "verified_at",
    "latency_us",
];

/// One exported receipt with the companion files that let a checker re-derive its hashes.
#[derive(Debug, Clone)]
pub struct L1Export {
    /// The signed 30-field receipt.
    pub receipt: Value,
    /// tool-args (the params).
    pub tool_args: Value,
    /// Request envelope hashed into request_hash.
    pub request_envelope: Value,
    /// Runtime context hashed into runtime_context_hash (carries prev_receipt_digest in chains).
    pub runtime_context: Value,
    /// Canonical configuration hashed into config_hash.
    pub config: Option<Value>,
    /// Response body hashed into response_hash, when one was committed.
    pub response_body: Option<Value>,
}

/// Source material for one export: the native receipt and what produced it.
pub struct Source<'a> {
    /// Native receipt.
    pub receipt: &'a Receipt,
    /// The normalized command (from the issue bundle).
    pub command: &'a Value,
    /// Canonical configuration, if known.
    pub config: Option<&'a Value>,
    /// Tool response, if the receipt was finalized with one.
    pub response: Option<&'a Value>,
    /// Issuance latency, microseconds.
    pub latency_us: u64,
}

fn strip(h: &str) -> String {
    h.strip_prefix("sha256:").unwrap_or(h).to_string()
}

/// "sha256:" + hex SHA-256 of JCS(receipt minus signature): the profile's chain digest.
pub fn l1_digest(r: &Value) -> Result<String, EvidenceError> {
    let mut v = r.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("signature");
    }
    Ok(format!("sha256:{}", jcs_sha256_hex(&v)?))
}

/// Convert and sign. `trace_id` groups a chain; `prev_digest` links to the previous export.
pub fn export(
    src: &Source<'_>,
    keys: &KeyMaterial,
    trace_id: &str,
    prev_digest: Option<&str>,
) -> Result<L1Export, EvidenceError> {
    let r = src.receipt;
    let verdict = match r.verdict {
        Verdict::Allow => "allow",
        Verdict::Deny => "block",
        Verdict::Escalate => {
            return Err(EvidenceError::Invalid(
                "escalate receipts have no l1-1.1 representation".into(),
            ))
        }
    };
    let params = src
        .command
        .get("params")
        .cloned()
        .ok_or_else(|| EvidenceError::Invalid("bundle command has no params".into()))?;
    let params_hash = jcs_sha256_hex(&params)?;
    if params_hash != r.params_hash {
        return Err(EvidenceError::Invalid(
            "bundle params do not match the receipt".into(),
        ));
    }
    let request_envelope = json!({
        "agent_id": src.command.get("agent_id"), "tool": r.tool, "params": params,
        "timestamp": src.command.get("timestamp"), "trace_id": r.trace_id,
    });
    if format!("sha256:{}", jcs_sha256_hex(&request_envelope)?) != r.request_hash {
        return Err(EvidenceError::Invalid(
            "bundle command does not match request_hash".into(),
        ));
    }
    let mut rc = src
        .command
        .get("runtime_context")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(p) = prev_digest {
        if let Some(o) = rc.as_object_mut() {
            o.insert("prev_receipt_digest".into(), json!(p));
            if let Some(n) = &r.previous_receipt_hash {
                o.insert("ccs_previous_receipt_hash".into(), json!(n));
            }
        }
    }
    // A block commits to the block envelope, never to a tool response.
    let response_body = match (r.verdict, src.response) {
        (Verdict::Deny, _) => Some(json!({"blocked": true, "reason": r.block_reason})),
        (_, Some(resp)) => Some(resp.clone()),
        _ => None,
    };
    let response_hash = match &response_body {
        Some(b) => jcs_sha256_hex(b)?,
        // No response committed yet: the hash of JSON null marks "nothing".
        None => sha256_hex(b"null"),
    };
    let mut m = Map::new();
    let pk = keys.public();
    let fields: Vec<(&str, Value)> = vec![
        ("trace_id", json!(trace_id)),
        ("receipt_version", json!(RECEIPT_VERSION)),
        ("verdict", json!(verdict)),
        ("timestamp", json!(r.timestamp)),
        ("tool", json!(r.tool)),
        ("tool_call_id", json!(r.trace_id)),
        ("params_hash", json!(params_hash)),
        ("args_digest", json!(params_hash)),
        ("rule_summary", json!(r.rule_summary)),
        (
            "rule_version",
            json!(src
                .config
                .and_then(|c| c.get("policy_version"))
                .and_then(Value::as_str)
                .unwrap_or("unknown")),
        ),
        ("request_hash", json!(strip(&r.request_hash))),
        ("response_hash", json!(response_hash)),
        ("runtime_context_hash", json!(jcs_sha256_hex(&rc)?)),
        ("config_hash", json!(r.config_hash)),
        ("verifier_source_class", json!(SOURCE_CLASS)),
        (
            "deployment_mode",
            json!(src
                .config
                .and_then(|c| c.get("deployment_mode"))
                .and_then(Value::as_str)
                .unwrap_or("in-process")),
        ),
        ("issuer", json!(r.issuer)),
        ("audience", json!(r.audience)),
        ("nonce", json!(r.nonce)),
        ("sequence", json!(r.sequence)),
        ("issued_at", json!(r.issued_at)),
        ("expires_at", json!(r.expires_at)),
        ("max_clock_skew", json!(r.max_clock_skew)),
        ("action", json!(r.action)),
        ("signing_algorithm", json!("Ed25519")),
        ("public_key_fingerprint", json!(keys.fingerprint())),
        ("public_key", json!(B64.encode(pk.to_bytes()))),
        ("verified_at", json!(r.verified_at)),
        ("latency_us", json!(src.latency_us)),
    ];
    for (k, v) in fields {
        m.insert(k.into(), v);
    }
    let payload = canonicalize(&Value::Object(m.clone()))?;
    m.insert(
        "signature".into(),
        json!(B64.encode(keys.sign(payload.as_bytes()).to_bytes())),
    );
    Ok(L1Export {
        receipt: Value::Object(m),
        tool_args: src.command.get("params").cloned().unwrap_or(Value::Null),
        request_envelope,
        runtime_context: rc,
        config: src.config.cloned(),
        response_body,
    })
}

fn write_json(path: &Path, v: &Value) -> Result<(), EvidenceError> {
    let mut s = serde_json::to_string_pretty(v)?;
    s.push('\n');
    std::fs::write(path, s)?;
    Ok(())
}

/// Write a case folder (receipts, companions, expected.json, chain.json when chained).
pub fn write_case(dir: &Path, exports: &[L1Export], chained: bool) -> Result<(), EvidenceError> {
    std::fs::create_dir_all(dir)?;
    let mut order = Vec::new();
    for (i, e) in exports.iter().enumerate() {
        let n = format!("{:02}", i + 1);
        let name = format!("receipt-{n}.json");
        write_json(&dir.join(&name), &e.receipt)?;
        // checker 1.4.2 resolves numbered companions with `str.rstrip(".json")`,
        // which turns "tool-args" into "tool-arg"; only the unnumbered
        // tool-args.json is found, so single-receipt cases use that name.
        let args_name = if exports.len() == 1 {
            "tool-args.json".to_string()
        } else {
            format!("tool-args-{n}.json")
        };
        write_json(&dir.join(args_name), &e.tool_args)?;
        write_json(
            &dir.join(format!("request-envelope-{n}.json")),
            &e.request_envelope,
        )?;
        write_json(
            &dir.join(format!("runtime-context-{n}.json")),
            &e.runtime_context,
        )?;
        if let Some(c) = &e.config {
            write_json(&dir.join(format!("config-envelope-{n}.json")), c)?;
        }
        if let Some(b) = &e.response_body {
            write_json(&dir.join(format!("response-body-{n}.json")), b)?;
        }
        order.push(name);
    }
    write_json(&dir.join("expected.json"), &json!({"verdict": "valid"}))?;
    if chained {
        let first = exports
            .first()
            .and_then(|e| e.receipt.get("sequence"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let mut prevs = vec![Value::Null];
        for e in exports.iter().take(exports.len().saturating_sub(1)) {
            prevs.push(json!(l1_digest(&e.receipt)?));
        }
        write_json(
            &dir.join("chain.json"),
            &json!({"order": order, "first_sequence": first,
                    "expects_predecessor": false, "expected_prev_digests": prevs}),
        )?;
    }
    Ok(())
}

/// Rewrite `root/manifest.json` listing every file under `root` with its SHA-256.
pub fn write_manifest(root: &Path) -> Result<(), EvidenceError> {
    let mut files = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let p = entry?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p != root.join("manifest.json") {
                let rel = p
                    .strip_prefix(root)
                    .map_err(|_| EvidenceError::Invalid("path outside root".into()))?
                    .to_string_lossy()
                    .replace('\\', "/");
                files.insert(rel, sha256_hex(&std::fs::read(&p)?));
            }
        }
    }
    write_json(&root.join("manifest.json"), &json!({ "files": files }))
}

/// Structural + signature check of an exported receipt (our own reading of the profile).
pub fn check(r: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(o) = r.as_object() else {
        return vec!["not an object".into()];
    };
    for f in L1_FIELDS {
        if !o.contains_key(f) {
            problems.push(format!("missing field {f}"));
        }
    }
    if o.len() != 30 {
        problems.push(format!("expected 30 fields, got {}", o.len()));
    }
    let pk = o
        .get("public_key")
        .and_then(Value::as_str)
        .map(crate::keys::public_from_b64);
    match pk {
        Some(Ok(pk)) => {
            let mut v = r.clone();
            if let Some(m) = v.as_object_mut() {
                m.remove("signature");
            }
            let ok = canonicalize(&v).is_ok_and(|p| {
                crate::keys::verify_sig(
                    &pk,
                    p.as_bytes(),
                    o.get("signature").and_then(Value::as_str).unwrap_or(""),
                )
            });
            if !ok {
                problems.push("signature mismatch".into());
            }
            if o.get("public_key_fingerprint").and_then(Value::as_str)
                != Some(crate::keys::fingerprint_of(&pk).as_str())
            {
                problems.push("fingerprint mismatch".into());
            }
        }
        _ => problems.push("public key invalid".into()),
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::default_rules;
    use crate::{Verifier, VerifierSettings};

    #[test]
    fn export_is_30_fields_signed_and_self_checks() {
        let keys = KeyMaterial::generate(None);
        let v = Verifier::new(VerifierSettings::default(), keys.clone(), default_rules()).unwrap();
        let cmd = json!({"intake_version":"1.3","agent_id":"a","tool":"shell_exec",
            "params":{"command":"rm -rf /"},"timestamp":1722384000.0,"trace_id":"t"});
        let issued = v.issue(&cmd).unwrap();
        let b = issued.bundle().unwrap();
        let config = serde_json::to_value(v.config()).unwrap();
        let src = Source {
            receipt: &issued.receipt,
            command: &b["command"],
            config: Some(&config),
            response: None,
            latency_us: issued.latency_us,
        };
        let e = export(&src, &keys, "t", None).unwrap();
        assert!(check(&e.receipt).is_empty(), "{:?}", check(&e.receipt));
        assert_eq!(e.receipt["verdict"], "block");
        assert_eq!(e.receipt["config_hash"], jcs_sha256_hex(&config).unwrap());
        assert_eq!(
            e.receipt["request_hash"],
            jcs_sha256_hex(&e.request_envelope).unwrap()
        );
        let mut t = e.receipt.clone();
        t["tool"] = json!("other");
        assert_eq!(check(&t), vec!["signature mismatch".to_string()]);
        // A bundle whose params do not match the receipt is refused.
        let mut wrong = b["command"].clone();
        wrong["params"] = json!({"command": "ls"});
        let src2 = Source {
            command: &wrong,
            ..src
        };
        assert!(export(&src2, &keys, "t", None).is_err());
        // escalate has no representation
        let mut esc = issued.receipt.clone();
        esc.verdict = crate::receipt::Verdict::Escalate;
        let src3 = Source {
            receipt: &esc,
            command: &b["command"],
            config: None,
            response: None,
            latency_us: 0,
        };
        assert!(export(&src3, &keys, "t", None).is_err());
    }
}
