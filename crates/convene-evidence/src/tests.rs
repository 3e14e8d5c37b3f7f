//! Crate-internal tests: fail-closed fault injection and end-to-end issuance.

use crate::chain::EvidenceChain;
use crate::config::DeploymentMode;
use crate::enforce::{EnforcementAction, Enforcer, Expected, FailureCategory, ReplayCache};
use crate::error::IntakeErrorCode;
use crate::issuer::{FaultHook, Step, Verifier, VerifierSettings, STEPS};
use crate::keys::{KeyMaterial, TrustStore};
use crate::receipt::{OutcomeStatus, Verdict};
use crate::rules::{builtin, default_rules};
use crate::store::EvidenceStore;
use base64::Engine;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn intake(tool: &str, params: Value) -> Value {
    json!({"intake_version":"1.3","agent_id":"test-agent","tool":tool,"params":params,
           "timestamp":1722384000.0,"trace_id":"0000000000000001"})
}

fn verifier() -> Verifier {
    Verifier::new(
        VerifierSettings::default(),
        KeyMaterial::generate(None),
        default_rules(),
    )
    .unwrap()
}

fn verifier_with_store() -> Verifier {
    verifier()
        .with_store(EvidenceStore::in_memory().unwrap())
        .unwrap()
}

#[test]
fn ccs_3_3_1_fault_at_every_step_yields_error_and_no_receipt() {
    for target in STEPS {
        for panic in [false, true] {
            let hook: FaultHook = Arc::new(move |s: Step| {
                if s == target {
                    if panic {
                        panic!("injected panic at {s:?}");
                    }
                    return Err(format!("injected fault at {s:?} /secret/path"));
                }
                Ok(())
            });
            let v = verifier_with_store().with_fault(hook);
            let e = v
                .issue(&intake("search_web", json!({"query":"weather in Tokyo"})))
                .unwrap_err();
            assert_eq!(
                e.code,
                IntakeErrorCode::IntakeFailed,
                "{target:?} panic={panic}"
            );
            // CCS-3.4-1: no internals (paths, panic text) in the response.
            let resp = e.to_response().to_string();
            assert!(
                !resp.contains("secret") && !resp.contains("injected"),
                "{resp}"
            );
            assert!(e.to_response().get("receipt").is_none());
            // CCS-11.1-4: nothing was persisted either.
            assert_eq!(
                v.with_store_ref(|s| s.count().unwrap()),
                Some(0),
                "{target:?}"
            );
        }
    }
}

#[test]
fn ccs_3_4_1_intake_timeout_at_every_step() {
    for target in STEPS {
        let calls = Arc::new(AtomicUsize::new(0));
        let c2 = calls.clone();
        let hook: FaultHook = Arc::new(move |s: Step| {
            c2.fetch_add(1, Ordering::SeqCst);
            if s == target {
                std::thread::sleep(Duration::from_millis(30));
            }
            Ok(())
        });
        let settings = VerifierSettings {
            intake_timeout: Some(Duration::from_millis(10)),
            ..Default::default()
        };
        let v = Verifier::new(settings, KeyMaterial::generate(None), default_rules())
            .unwrap()
            .with_store(EvidenceStore::in_memory().unwrap())
            .unwrap()
            .with_fault(hook);
        let r = v.issue(&intake("search_web", json!({"q":"x"})));
        if target == Step::Persist {
            // Delay inside the last step: it is checked before persisting, then the
            // step's own delay happens before the check, so it must time out too.
            assert!(r.is_err());
        }
        let e = r.unwrap_err();
        assert_eq!(e.code, IntakeErrorCode::IntakeTimeout, "{target:?}");
        assert_eq!(v.with_store_ref(|s| s.count().unwrap()), Some(0));
    }
}

#[test]
fn ccs_4_1_1_receipt_has_all_22_fields_and_valid_crypto() {
    let v = verifier();
    let r = v
        .issue(&intake("search_web", json!({"query":"weather in Tokyo"})))
        .unwrap()
        .receipt;
    let val = r.to_value().unwrap();
    for f in [
        "trace_id",
        "verdict",
        "timestamp",
        "tool",
        "params_hash",
        "rule_summary",
        "receipt",
        "verified_at",
        "block_reason",
        "request_hash",
        "response_hash",
        "runtime_context_hash",
        "action",
        "config_hash",
        "issuer",
        "audience",
        "nonce",
        "sequence",
        "issued_at",
        "expires_at",
        "max_clock_skew",
        "signature",
    ] {
        assert!(val.get(f).is_some(), "missing {f}");
    }
    assert!(val.get("error_code").is_none(), "CCS-3.4-3");
    assert_eq!(r.params_hash.len(), 64);
    assert_eq!(
        r.action,
        format!("ccs:tool-invoke:search_web:{}", r.params_hash)
    );
    assert_eq!(r.receipt.len(), 32);
    assert_eq!(r.signature.len(), 128);
    assert_eq!(r.nonce.len(), 32);
    assert!(r.verify_hmac(v.keys().hmac_secret()));
    assert!(r.verify_signature(&v.keys().public()));
    assert_eq!(r.expires_at - r.issued_at, 60.0);
    assert_eq!(r.outcome_status, Some(OutcomeStatus::Dispatched));
    // CCS-4.2-1: every signed field is covered by both HMAC and Ed25519.
    let mut t = r.clone();
    t.issuer = "https://evil".into();
    assert!(
        !t.verify_hmac(v.keys().hmac_secret()),
        "CCS-6-8 issuer covered"
    );
    assert!(!t.verify_signature(&v.keys().public()));
    let mut t = r.clone();
    t.config_hash = "0".repeat(64);
    assert!(
        !t.verify_hmac(v.keys().hmac_secret()),
        "CCS-5.3-1 config_hash covered"
    );
}

#[test]
fn ccs_4_2_1_hmac_matches_reference_payload() {
    use hmac::{Hmac, Mac};
    let v = verifier();
    let r = v
        .issue(&intake("search_web", json!({"query":"x"})))
        .unwrap()
        .receipt;
    let payload = format!(
        "{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}",
        r.trace_id,
        "allow",
        crate::jcs::format_python_float(r.timestamp),
        r.tool,
        r.params_hash,
        r.rule_summary,
        r.request_hash,
        r.response_hash,
        r.runtime_context_hash,
        r.action,
        r.config_hash,
        r.issuer,
        r.audience,
        r.nonce,
        r.sequence,
        crate::jcs::format_python_float(r.issued_at),
        crate::jcs::format_python_float(r.expires_at)
    );
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(v.keys().hmac_secret()).unwrap();
    mac.update(payload.as_bytes());
    assert_eq!(hex::encode(mac.finalize().into_bytes())[..32], r.receipt);
}

#[test]
fn sequence_is_monotonic_and_nonce_unique() {
    let v = verifier();
    let a = v.issue(&intake("t", json!({}))).unwrap().receipt;
    let b = v.issue(&intake("t", json!({}))).unwrap().receipt;
    assert_eq!(b.sequence, a.sequence + 1);
    assert_ne!(a.nonce, b.nonce);
}

#[test]
fn ccs_4_4_2_policy_floor_violation_denies() {
    let mut rules = default_rules();
    rules.push(builtin("policy_floor", Some("mcp-tls-1.2")).unwrap());
    let settings = VerifierSettings {
        policy_floor: Some("mcp-tls-1.2".into()),
        ..Default::default()
    };
    let v = Verifier::new(settings, KeyMaterial::generate(None), rules).unwrap();
    let mut i = intake("search_web", json!({"q":"x"}));
    i["runtime_context"] = json!({"server_profile":"mcp-plain"});
    let r = v.issue(&i).unwrap().receipt;
    assert_eq!(r.verdict, Verdict::Deny);
    assert_eq!(r.block_reason, "policy_floor_violation");
    assert!(r.rule_summary.contains("policy_floor=deny"));
    // CCS-4.4-1: no downgrade, and the floor is bound in the config.
    assert_eq!(v.config().policy_floor.as_deref(), Some("mcp-tls-1.2"));
    // Strong profile but no evidence: deny + challenge (§4.7).
    i["runtime_context"] = json!({"server_profile":"mcp-tls-1.3"});
    let r = v.issue(&i).unwrap().receipt;
    assert_eq!(r.verdict, Verdict::Deny);
    assert_eq!(r.block_reason, "evidence_incomplete");
    let ch = r.challenge.clone().unwrap();
    assert_eq!(ch["missing"], json!(["server_tls_certificate_chain"]));
    assert_eq!(
        ch["expires_at"].as_u64().unwrap() - ch["issued_at"].as_u64().unwrap(),
        30,
        "10s x 3"
    );
    // Challenge answered with the missing evidence: allow.
    i["runtime_context"] = json!({"server_profile":"mcp-tls-1.3",
        "evidence":{"server_tls_certificate_chain":"-----BEGIN CERTIFICATE-----..."}});
    assert_eq!(v.issue(&i).unwrap().receipt.verdict, Verdict::Allow);
    // Unknown profile: UNDECIDED on the comparison axis, verdict escalate (not a 4th verdict).
    i["runtime_context"] = json!({"server_profile":"mcp-quic-9"});
    let r = v.issue(&i).unwrap().receipt;
    assert_eq!(r.verdict, Verdict::Escalate);
    let ca = r.comparison_axis.unwrap();
    assert_eq!(ca["verdict"], "UNDECIDED");
    assert_eq!(ca["reason"], "NO_COMPARISON_RELATION");
}

#[test]
fn ccs_4_6_manifest_signed_and_bound_into_config() {
    let v = verifier();
    let m = v.manifest();
    assert!(m.verify(&v.keys().public(), crate::issuer::now_unix()));
    assert_eq!(
        v.config().manifest_hash.as_deref(),
        Some(m.hash().unwrap().as_str())
    );
    let mut t = m.clone();
    t.challenge_policy.deadline_multiplier = 1;
    assert!(!t.verify(&v.keys().public(), crate::issuer::now_unix()));
    assert_ne!(t.hash().unwrap(), m.hash().unwrap());
}

#[test]
fn ccs_4_5_1_indeterminate_blocks_blind_retry_until_reconciled() {
    let v = verifier();
    let i = intake("transfer_funds", json!({"amount": 10}));
    let r = v.issue(&i).unwrap().receipt;
    let ind = v.mark_indeterminate(&r, "test-agent").unwrap();
    assert_eq!(ind.outcome_status, Some(OutcomeStatus::Indeterminate));
    let retry = v.issue(&i).unwrap().receipt;
    assert_eq!(retry.verdict, Verdict::Deny);
    assert!(retry.block_reason.starts_with("indeterminate_outcome_open"));
    let done = v.reconcile(&ind, &json!({"ok": true})).unwrap();
    assert_eq!(done.outcome_status, Some(OutcomeStatus::Confirmed));
    assert!(done.response_hash.starts_with("sha256:"));
    assert_eq!(v.issue(&i).unwrap().receipt.verdict, Verdict::Allow);
}

#[test]
fn ccs_6_4_response_hash_bound_after_invocation() {
    let v = verifier();
    let r = v
        .issue(&intake("search_web", json!({"q":"x"})))
        .unwrap()
        .receipt;
    assert_eq!(r.response_hash, "");
    let f = v.finalize(&r, &json!({"results":[1,2]})).unwrap();
    assert_eq!(
        f.response_hash,
        format!("sha256:{}", crate::jcs::sha256_hex(br#"{"results":[1,2]}"#))
    );
    assert!(f.verify_signature(&v.keys().public()));
    assert!(f.verify_hmac(v.keys().hmac_secret()));
    // NV-002: a changed response no longer matches.
    let other = format!("sha256:{}", crate::jcs::sha256_hex(br#"{"results":[1,3]}"#));
    assert_ne!(f.response_hash, other);
}

fn enforcer_for(v: &Verifier, identity: &str) -> Enforcer {
    let mut ts = TrustStore::default();
    let pk = base64::engine::general_purpose::STANDARD.encode(v.keys().public().to_bytes());
    ts.enroll(&v.settings().issuer, &pk, &v.keys().fingerprint())
        .unwrap();
    Enforcer::new(identity, ts, ReplayCache::in_memory().unwrap())
        .with_hmac_secret(&v.settings().issuer, v.keys().hmac_secret())
}

#[test]
fn ccs_12_2_1_six_steps_in_order() {
    let v = verifier();
    let params = json!({"q":"x"});
    let r = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    let e = enforcer_for(&v, &v.settings().audience);
    let exp = Expected {
        tool: "search_web",
        params: &params,
    };
    let now = r.issued_at + 1.0;
    // Expired AND wrong audience: step 1 wins.
    let late = r.expires_at + r.max_clock_skew + 1.0;
    assert_eq!(
        e.validate(&r, &exp, late).unwrap_err().failure_category,
        FailureCategory::FreshnessExpired
    );
    let early = r.issued_at - r.max_clock_skew - 1.0;
    assert_eq!(
        e.validate(&r, &exp, early).unwrap_err().failure_category,
        FailureCategory::FreshnessExpired
    );
    let other = enforcer_for(&v, "https://someone-else");
    assert_eq!(
        other.validate(&r, &exp, now).unwrap_err().failure_category,
        FailureCategory::AudienceMismatch
    );
    let mut forged = r.clone();
    forged.verdict = Verdict::Allow;
    forged.tool = "shell_exec".into();
    assert_eq!(
        e.validate(&forged, &exp, now).unwrap_err().failure_category,
        FailureCategory::SignatureInvalid
    );
    let changed = json!({"q":"y"});
    let exp2 = Expected {
        tool: "search_web",
        params: &changed,
    };
    assert_eq!(
        e.validate(&r, &exp2, now).unwrap_err().failure_category,
        FailureCategory::BindingMismatch
    );
    // The nonce was consumed by the binding-mismatch attempt (step 4 precedes step 5).
    assert_eq!(
        e.validate(&r, &exp, now).unwrap_err().failure_category,
        FailureCategory::ReplayDetected
    );
    let r2 = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    let ok = e.validate(&r2, &exp, now).unwrap();
    assert_eq!(ok.action, EnforcementAction::ProceedReconciliationPending);
    // CCS-12.3-7: failures were logged, with categories only.
    let log = e.replay().failures().unwrap();
    assert_eq!(log.len(), 5);
    assert_eq!(log[0]["failure_category"], "FRESHNESS_EXPIRED");
    assert_eq!(log[0]["severity"], "CRITICAL");
}

#[test]
fn ccs_12_4_1_outcome_mapping_table() {
    use crate::enforce::map_outcome;
    use EnforcementAction::*;
    use OutcomeStatus::*;
    assert_eq!(map_outcome(Verdict::Allow, Some(Confirmed)), Proceed);
    assert_eq!(
        map_outcome(Verdict::Allow, Some(Dispatched)),
        ProceedReconciliationPending
    );
    assert_eq!(
        map_outcome(Verdict::Allow, Some(Indeterminate)),
        Conservative
    );
    assert_eq!(map_outcome(Verdict::Allow, None), Conservative);
    for o in [Some(Confirmed), Some(Dispatched), Some(Indeterminate), None] {
        // CCS-14-2: outcome_status never overrides the verdict.
        assert_eq!(map_outcome(Verdict::Deny, o), Block);
        assert_eq!(map_outcome(Verdict::Escalate, o), Defer);
    }
    assert!(
        !Conservative.permits_invocation()
            && !Block.permits_invocation()
            && !Defer.permits_invocation()
    );
}

#[test]
fn ccs_12_3_6_indeterminate_yields_warning_report() {
    let v = verifier();
    let params = json!({"q":"x"});
    let r = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    let ind = v.mark_indeterminate(&r, "test-agent").unwrap();
    let e = enforcer_for(&v, &v.settings().audience);
    let a = e
        .validate(
            &ind,
            &Expected {
                tool: "search_web",
                params: &params,
            },
            r.issued_at,
        )
        .unwrap();
    assert_eq!(a.action, EnforcementAction::Conservative);
    let w = a.warning.unwrap();
    assert_eq!(w.failure_category, FailureCategory::OutcomeIndeterminate);
    assert_eq!(w.severity, "WARNING");
}

#[test]
fn ccs_6_12_replay_cache_persists_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replay.db");
    let v = verifier();
    let params = json!({"q":"x"});
    let r = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    let exp = Expected {
        tool: "search_web",
        params: &params,
    };
    {
        let mut ts = TrustStore::default();
        let pk = base64::engine::general_purpose::STANDARD.encode(v.keys().public().to_bytes());
        ts.enroll(&v.settings().issuer, &pk, &v.keys().fingerprint())
            .unwrap();
        let e = Enforcer::new(
            &v.settings().audience,
            ts,
            ReplayCache::open(&path).unwrap(),
        );
        assert!(e.validate(&r, &exp, r.issued_at).is_ok());
    }
    let mut ts = TrustStore::default();
    let pk = base64::engine::general_purpose::STANDARD.encode(v.keys().public().to_bytes());
    ts.enroll(&v.settings().issuer, &pk, &v.keys().fingerprint())
        .unwrap();
    let e = Enforcer::new(
        &v.settings().audience,
        ts,
        ReplayCache::open(&path).unwrap(),
    );
    assert_eq!(
        e.validate(&r, &exp, r.issued_at)
            .unwrap_err()
            .failure_category,
        FailureCategory::ReplayDetected
    );
}

#[test]
fn ccs_13_7_deny_rate_monitor_flags_always_allow_verifier() {
    let m = crate::enforce::DenyRateMonitor::default();
    for _ in 0..10_001 {
        m.record("https://lazy", Verdict::Allow);
    }
    assert!(m.flagged("https://lazy"));
    for _ in 0..10_001 {
        m.record("https://strict", Verdict::Allow);
    }
    for _ in 0..20 {
        m.record("https://strict", Verdict::Deny);
    }
    assert!(!m.flagged("https://strict"));
    let small = crate::enforce::DenyRateMonitor::default();
    small.record("x", Verdict::Allow);
    assert!(!small.flagged("x"), "needs > 10000 receipts");
}

#[test]
fn ccs_14_9_revocation_revalidates_in_flight() {
    let v = verifier();
    let params = json!({"q":"x"});
    let r = v.issue(&intake("search_web", params)).unwrap().receipt;
    let mut e = enforcer_for(&v, &v.settings().audience);
    assert!(e.revalidate(std::slice::from_ref(&r)).is_empty());
    e.trust_mut().revoke(&v.keys().fingerprint()).unwrap();
    assert_eq!(
        e.revalidate(std::slice::from_ref(&r)),
        vec![r.trace_id.clone()]
    );
}

#[test]
fn ccs_11_1_2_store_is_append_only_and_indexed() {
    let v = verifier_with_store();
    let a = v
        .issue(&intake("search_web", json!({"q":"x"})))
        .unwrap()
        .receipt;
    let mut i = intake("shell_exec", json!({"command":"rm -rf /"}));
    i["trace_id"] = json!("0000000000000002");
    let b = v.issue(&i).unwrap().receipt;
    v.with_store_ref(|s| {
        assert_eq!(s.count().unwrap(), 2);
        assert_eq!(s.by_trace("0000000000000001").unwrap(), vec![a.clone()]);
        assert_eq!(s.by_tool("shell_exec").unwrap(), vec![b.clone()]);
        assert_eq!(s.by_verdict(Verdict::Deny).unwrap(), vec![b.clone()]);
        assert_eq!(
            s.by_time(a.issued_at - 1.0, b.issued_at + 1.0)
                .unwrap()
                .len(),
            2
        );
        assert!(s
            .raw()
            .execute("UPDATE receipts SET verdict='allow'", [])
            .is_err());
        assert!(s.raw().execute("DELETE FROM receipts", []).is_err());
        assert_eq!(s.count().unwrap(), 2);
    })
    .unwrap();
}

#[test]
fn ccs_11_1_5_receipt_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ev.db");
    let keys = KeyMaterial::generate(None);
    let r = {
        let v = Verifier::new(VerifierSettings::default(), keys.clone(), default_rules())
            .unwrap()
            .with_store(EvidenceStore::open(&path).unwrap())
            .unwrap();
        v.issue(&intake("search_web", json!({"q":"x"})))
            .unwrap()
            .receipt
        // dropped here without any explicit flush: simulates a crash before the tool runs
    };
    let s = EvidenceStore::open(&path).unwrap();
    assert_eq!(s.by_trace(&r.trace_id).unwrap(), vec![r.clone()]);
    // The sequence resumes after restart instead of repeating.
    let v = Verifier::new(VerifierSettings::default(), keys, default_rules())
        .unwrap()
        .with_store(s)
        .unwrap();
    assert_eq!(
        v.issue(&intake("t", json!({}))).unwrap().receipt.sequence,
        r.sequence + 1
    );
}

#[test]
fn ccs_11_4_chain_prune_keeps_linkage() {
    let v = verifier();
    let mut prev: Option<crate::receipt::Receipt> = None;
    let mut chain: Option<EvidenceChain> = None;
    for hop in 0..4 {
        let mut i = intake("delegate", json!({"hop": hop}));
        i["trace_id"] = json!(format!("{:016x}", hop + 10));
        if let Some(p) = &prev {
            i["delegation_chain"] = json!({"previous_receipt_hash": p.receipt_hash().unwrap(),
                                            "parent_trace_id": p.trace_id});
        }
        let r = v.issue(&i).unwrap().receipt;
        match chain.as_mut() {
            None => chain = Some(EvidenceChain::new(r.clone()).unwrap()),
            Some(c) => c.append(r.clone()).unwrap(),
        }
        prev = Some(r);
    }
    let mut c = chain.unwrap();
    let mut ts = TrustStore::default();
    let pk = base64::engine::general_purpose::STANDARD.encode(v.keys().public().to_bytes());
    ts.enroll(&v.settings().issuer, &pk, &v.keys().fingerprint())
        .unwrap();
    let full = c.verify_full(&ts, None);
    assert!(full.chain_valid, "{full:?}");
    assert_eq!(full.total_hops, 3);
    let before = c.summary_hash.clone();
    c.prune(2).unwrap();
    assert_ne!(c.summary_hash, before, "CCS-11.4-4");
    assert_eq!(c.pruned_receipts.len(), 1, "CCS-11.4-5");
    assert_eq!(
        c.receipts[2].previous_receipt_hash.as_deref(),
        Some(c.receipts[1].receipt_hash.as_str())
    );
    let after = c.verify_full(&ts, None);
    assert!(after.chain_valid, "{after:?}");
    assert!(after.missing_hops.is_empty());
    assert!(c.prune(0).is_err() && c.prune(3).is_err());
    // Removing a receipt without recording it as pruned is detected.
    let mut t = c.clone();
    t.pruned_receipts.clear();
    let res = t.verify_full(&ts, None);
    assert!(!res.chain_valid);
    assert_eq!(res.broken_at, Some(3));
    let spot = c.verify_spot(3, &ts, None);
    assert!(spot.chain_valid && spot.verification_mode == "spot");
}

#[test]
fn deployment_modes_change_config_hash() {
    let keys = KeyMaterial::generate(None);
    let a = Verifier::new(VerifierSettings::default(), keys.clone(), default_rules()).unwrap();
    let s = VerifierSettings {
        deployment_mode: DeploymentMode::OutOfProcess,
        ..Default::default()
    };
    let b = Verifier::new(s, keys, default_rules()).unwrap();
    assert_ne!(a.config_hash(), b.config_hash());
}

#[test]
fn ccs_5_1_1_config_fields_and_hash() {
    let v = verifier();
    let c = serde_json::to_value(v.config()).unwrap();
    for f in [
        "rules",
        "policy_version",
        "signing_key_id",
        "verifier_version",
        "schema_version",
        "deployment_mode",
        "manifest_hash",
    ] {
        assert!(c.get(f).is_some(), "CCS-5.1-1 missing {f}");
    }
    assert_eq!(c["schema_version"], "1.3");
    assert_eq!(c["deployment_mode"], "in-process");
    // CCS-5.2-1 / CCS-5.3-1: hex SHA-256 over the RFC 8785 form.
    let want = crate::jcs::sha256_hex(crate::jcs::canonicalize(&c).unwrap().as_bytes());
    assert_eq!(v.config_hash(), want);
}

#[test]
fn ccs_6_1_request_hash_and_key_never_in_band() {
    let v = verifier();
    let i = intake("search_web", json!({"query":"weather in Tokyo"}));
    let r = v.issue(&i).unwrap().receipt;
    let req = json!({"agent_id":"test-agent","tool":"search_web","params":{"query":"weather in Tokyo"},
                     "timestamp":1722384000.0,"trace_id":"0000000000000001"});
    assert_eq!(
        r.request_hash,
        format!("sha256:{}", crate::jcs::jcs_sha256_hex(&req).unwrap())
    );
    // CCS-7.2-3: the HMAC secret is never transmitted with the receipt.
    let wire = r.to_value().unwrap().to_string();
    assert!(!wire.contains(&hex::encode(v.keys().hmac_secret())));
    assert!(!wire.contains(&hex::encode(&v.keys().hmac_secret()[..8])));
}

#[test]
fn ccs_3_4_3_error_response_is_never_a_receipt() {
    let v = verifier();
    let mut bad = intake("search_web", json!({}));
    bad.as_object_mut().unwrap().remove("trace_id");
    let err = v.issue(&bad).unwrap_err().to_response();
    assert!(crate::receipt::Receipt::from_value(&err).is_err());
    let mut r = v
        .issue(&intake("t", json!({})))
        .unwrap()
        .receipt
        .to_value()
        .unwrap();
    r["error_code"] = json!("INTAKE_MALFORMED");
    assert!(crate::receipt::Receipt::from_value(&r).is_err());
}

#[test]
fn ccs_11_2_2_envelope_version_must_be_1_3() {
    let v = verifier();
    let r = v.issue(&intake("t", json!({}))).unwrap().receipt;
    let mut env = crate::chain::Envelope::wrap(&r, "child", "why", 1, None).unwrap();
    let mut ts = TrustStore::default();
    let pk = base64::engine::general_purpose::STANDARD.encode(v.keys().public().to_bytes());
    ts.enroll(&v.settings().issuer, &pk, &v.keys().fingerprint())
        .unwrap();
    assert!(env.verify(&ts, None).is_ok());
    env.envelope_version = "1.2".into();
    assert_eq!(
        env.verify(&ts, None),
        Err(crate::chain::EnvelopeRejection::Malformed)
    );
}

#[test]
fn ccs_4_7_challenge_answered_in_time_or_deny_stands() {
    use std::sync::atomic::AtomicU64;
    let t = Arc::new(AtomicU64::new(1000f64.to_bits()));
    let t2 = t.clone();
    let mut rules = default_rules();
    rules.push(builtin("policy_floor", Some("mcp-tls-1.2")).unwrap());
    let v = Verifier::new(
        VerifierSettings::default(),
        KeyMaterial::generate(None),
        rules,
    )
    .unwrap()
    .with_clock(Arc::new(move || f64::from_bits(t2.load(Ordering::SeqCst))));
    let set = |x: f64| t.store(x.to_bits(), Ordering::SeqCst);
    let mut bare = intake("search_web", json!({"q":"x"}));
    bare["runtime_context"] = json!({"server_profile":"mcp-tls-1.3"});
    let mut with_ev = bare.clone();
    with_ev["runtime_context"]["evidence"] = json!({"server_tls_certificate_chain":"pem"});
    // Answered before the deadline: allow.
    let r = v.issue(&bare).unwrap().receipt;
    assert_eq!(r.challenge.as_ref().unwrap()["expires_at"], 1030);
    set(1010.0);
    assert_eq!(v.issue(&with_ev).unwrap().receipt.verdict, Verdict::Allow);
    // Answered after the deadline: the deny stands.
    set(2000.0);
    assert_eq!(
        v.issue(&bare).unwrap().receipt.block_reason,
        "evidence_incomplete"
    );
    set(2031.0);
    let late = v.issue(&with_ev).unwrap().receipt;
    assert_eq!(late.verdict, Verdict::Deny);
    assert_eq!(late.block_reason, "challenge_expired");
    // A fresh evaluation afterwards starts a new case.
    set(2032.0);
    assert_eq!(v.issue(&with_ev).unwrap().receipt.verdict, Verdict::Allow);
}

#[test]
fn ccs_6_9_consumer_caps_declared_clock_skew() {
    let settings = VerifierSettings {
        max_clock_skew: 86_400.0,
        ..Default::default()
    };
    let v = Verifier::new(settings, KeyMaterial::generate(None), default_rules()).unwrap();
    let params = json!({"q":"x"});
    let r = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    let e = enforcer_for(&v, &v.settings().audience).with_max_skew(30.0);
    let exp = Expected {
        tool: "search_web",
        params: &params,
    };
    let rej = e.validate(&r, &exp, r.expires_at + 31.0).unwrap_err();
    assert_eq!(rej.failure_category, FailureCategory::FreshnessExpired);
    assert!(e.validate(&r, &exp, r.expires_at + 29.0).is_ok());
}

#[test]
fn ccs_4_2_empty_or_headless_chain_is_invalid() {
    let v = verifier();
    let r = v.issue(&intake("t", json!({}))).unwrap().receipt;
    let mut c = EvidenceChain::new(r).unwrap();
    let mut ts = TrustStore::default();
    let pk = base64::engine::general_purpose::STANDARD.encode(v.keys().public().to_bytes());
    ts.enroll(&v.settings().issuer, &pk, &v.keys().fingerprint())
        .unwrap();
    assert!(c.verify_full(&ts, None).chain_valid);
    let mut headless = c.clone();
    c.receipts.clear();
    c.summary_hash = crate::chain::summary_hash(&c.receipts);
    let res = c.verify_full(&ts, None);
    assert!(!res.chain_valid);
    assert_eq!(res.failure_reason.as_deref(), Some("empty chain"));
    // An origin that claims a predecessor is not an origin.
    headless.receipts[0].previous_receipt_hash = Some(format!("sha256:{}", "0".repeat(64)));
    assert_eq!(headless.verify_full(&ts, None).broken_at, Some(0));
}

#[test]
fn ccs_11_3_2_org_ids_and_issuer_must_be_uris() {
    let bad = VerifierSettings {
        issuer: "not a uri".into(),
        ..Default::default()
    };
    assert!(Verifier::new(bad, KeyMaterial::generate(None), default_rules()).is_err());
    let v = verifier();
    let r = v.issue(&intake("t", json!({}))).unwrap().receipt;
    let mut ts = TrustStore::default();
    let pk = base64::engine::general_purpose::STANDARD.encode(v.keys().public().to_bytes());
    ts.enroll(&v.settings().issuer, &pk, &v.keys().fingerprint())
        .unwrap();
    let co = |s: &str, r: &str| crate::chain::CrossOrg {
        sender_org_id: s.into(),
        receiver_org_id: r.into(),
        trust_anchor_reference: v.keys().fingerprint(),
        self_contained: true,
    };
    let ok = crate::chain::Envelope::wrap(
        &r,
        "c",
        "x",
        1,
        Some(co("https://a.example", "https://b.example")),
    )
    .unwrap();
    assert!(ok.verify(&ts, Some("https://b.example")).is_ok());
    let bad = crate::chain::Envelope::wrap(&r, "c", "x", 1, Some(co("org-a", "https://b.example")))
        .unwrap();
    assert_eq!(
        bad.verify(&ts, None),
        Err(crate::chain::EnvelopeRejection::Malformed)
    );
}

// ---- §7.3 dual-signing during the rotation overlap ----

fn b64(k: &KeyMaterial) -> String {
    base64::engine::general_purpose::STANDARD.encode(k.public().to_bytes())
}

/// Ed25519-only consumer (cross-domain: no shared HMAC secret) pinning exactly `keys`.
fn consumer(v: &Verifier, keys: &[&KeyMaterial]) -> Enforcer {
    let mut ts = TrustStore::default();
    for k in keys {
        ts.enroll(&v.settings().issuer, &b64(k), &k.fingerprint())
            .unwrap();
    }
    Enforcer::new(
        &v.settings().audience,
        ts,
        ReplayCache::in_memory().unwrap(),
    )
}

/// A verifier on a settable clock, dual-signing with `new` from t = 1000.
fn overlap_verifier(
    old: &KeyMaterial,
    new: &KeyMaterial,
) -> (Verifier, Arc<std::sync::Mutex<f64>>) {
    let t = Arc::new(std::sync::Mutex::new(1000.0));
    let tc = t.clone();
    let v = Verifier::new(VerifierSettings::default(), old.clone(), default_rules())
        .unwrap()
        .with_clock(Arc::new(move || *tc.lock().unwrap()))
        .with_next_key(new.clone())
        .unwrap();
    (v, t)
}

fn validate_at_issue(e: &Enforcer, r: &crate::receipt::Receipt, params: &Value) -> bool {
    let exp = Expected {
        tool: "search_web",
        params,
    };
    match e.validate(r, &exp, r.issued_at) {
        Ok(_) => true,
        Err(rep) => {
            assert_eq!(rep.failure_category, FailureCategory::SignatureInvalid);
            false
        }
    }
}

#[test]
fn ccs_7_3_1_dual_sign_overlap_carries_two_signatures_that_both_verify() {
    let (old, new) = (KeyMaterial::generate(None), KeyMaterial::generate(None));
    let (v, _t) = overlap_verifier(&old, &new);
    let params = json!({"q":"x"});
    let r = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    let c = r
        .cosignature
        .as_ref()
        .expect("dual-signed during the overlap");
    assert_eq!(c.signing_key_fingerprint, new.fingerprint());
    assert_eq!(c.signature.len(), 128);
    // Primary signature and HMAC are by the current key, unchanged in meaning.
    assert!(r.verify_signature(&old.public()));
    assert!(r.verify_hmac(old.hmac_secret()));
    assert!(r.verify_cosignature(&new.public()));
    assert!(!r.verify_signature(&new.public()));
    assert!(!r.verify_cosignature(&old.public()));
    // config_hash still binds the current key during the overlap.
    assert_eq!(v.config().signing_key_id, old.key_id);
    // The cosignature is part of the full receipt (chain hash), not of the signed payload.
    let mut stripped = r.clone();
    stripped.cosignature = None;
    assert_eq!(
        stripped.signature_payload().unwrap(),
        r.signature_payload().unwrap()
    );
    assert_ne!(stripped.receipt_hash().unwrap(), r.receipt_hash().unwrap());
    let round: crate::receipt::Receipt = serde_json::from_value(r.to_value().unwrap()).unwrap();
    assert_eq!(round, r);
    assert!(validate_at_issue(&consumer(&v, &[&old, &new]), &r, &params));
    // finalize re-seals with both keys.
    let f = v.finalize(&r, &json!({"ok":true})).unwrap();
    assert!(f.verify_signature(&old.public()) && f.verify_cosignature(&new.public()));
}

#[test]
fn ccs_7_3_1_dual_signed_receipt_accepted_with_only_old_or_only_new_key() {
    let (old, new) = (KeyMaterial::generate(None), KeyMaterial::generate(None));
    let (v, _t) = overlap_verifier(&old, &new);
    let params = json!({"q":"x"});
    let r = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    assert!(validate_at_issue(&consumer(&v, &[&old]), &r, &params));
    assert!(validate_at_issue(&consumer(&v, &[&new]), &r, &params));
    // Without the cosignature a new-key-only consumer has nothing it can check.
    let mut stripped = r.clone();
    stripped.cosignature = None;
    assert!(!validate_at_issue(
        &consumer(&v, &[&new]),
        &stripped,
        &params
    ));
    assert!(validate_at_issue(
        &consumer(&v, &[&old]),
        &stripped,
        &params
    ));
    // An announced (not yet activated) key does not carry a receipt on its own.
    let mut ts = TrustStore::default();
    ts.announce(&v.settings().issuer, &b64(&new), &new.fingerprint())
        .unwrap();
    let e = Enforcer::new(
        &v.settings().audience,
        ts,
        ReplayCache::in_memory().unwrap(),
    );
    assert!(!validate_at_issue(&e, &r, &params));
}

#[test]
fn ccs_7_3_1_invalid_second_signature_is_rejected() {
    let (old, new) = (KeyMaterial::generate(None), KeyMaterial::generate(None));
    let (v, _t) = overlap_verifier(&old, &new);
    let params = json!({"q":"x"});
    let r = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    let mut bad = r.clone();
    let c = bad.cosignature.as_mut().unwrap();
    let flip = if c.signature.starts_with('0') {
        "1"
    } else {
        "0"
    };
    c.signature.replace_range(0..1, flip);
    // Tampered second signature: rejected by every consumer that holds the key,
    // even though the primary signature is intact.
    assert!(!validate_at_issue(
        &consumer(&v, &[&old, &new]),
        &bad,
        &params
    ));
    assert!(!validate_at_issue(&consumer(&v, &[&new]), &bad, &params));
    // Redirecting it to the old key does not help either.
    let mut bad = r.clone();
    bad.cosignature.as_mut().unwrap().signing_key_fingerprint = old.fingerprint();
    assert!(!validate_at_issue(&consumer(&v, &[&old]), &bad, &params));
    // Malformed cosignatures are rejected by everyone.
    for sig in ["", "zz", &"ab".repeat(63), &"AB".repeat(64)] {
        let mut bad = r.clone();
        bad.cosignature.as_mut().unwrap().signature = sig.to_string();
        assert!(
            !validate_at_issue(&consumer(&v, &[&old]), &bad, &params),
            "{sig}"
        );
    }
    // A cosignature by a revoked key invalidates the receipt (fail closed, §14).
    let mut e = consumer(&v, &[&old, &new]);
    e.trust_mut().revoke(&new.fingerprint()).unwrap();
    assert!(!validate_at_issue(&e, &r, &params));
    assert_eq!(
        e.revalidate(std::slice::from_ref(&r)),
        vec![r.trace_id.clone()]
    );
    // The intact receipt still passes.
    assert!(validate_at_issue(&consumer(&v, &[&old, &new]), &r, &params));
}

#[test]
fn ccs_7_3_2_cutover_needs_overlap_then_signs_with_new_key_only() {
    let (old, new) = (KeyMaterial::generate(None), KeyMaterial::generate(None));
    let (v, t) = overlap_verifier(&old, &new);
    let params = json!({"q":"x"});
    let during = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    let ttl = v.settings().ttl_secs;
    let old_config = v.config_hash().to_string();
    // CCS-7.3-2: cutover before 2x the receipt lifetime is refused.
    *t.lock().unwrap() = 1000.0 + 2.0 * ttl - 1.0;
    let Err(_) = v.cutover() else {
        panic!("cutover before 2x lifetime must be refused")
    };
    let (v, t) = overlap_verifier(&old, &new);
    let during = {
        let r = v
            .issue(&intake("search_web", params.clone()))
            .unwrap()
            .receipt;
        assert_eq!(r.sequence, during.sequence);
        r
    };
    *t.lock().unwrap() = 1000.0 + 2.0 * ttl;
    let v = v.cutover().unwrap();
    assert!(v.next_keys().is_none());
    assert_eq!(v.keys().fingerprint(), new.fingerprint());
    assert_eq!(v.config().signing_key_id, new.key_id);
    assert_ne!(v.config_hash(), old_config);
    assert_eq!(v.manifest().signing_key_fingerprint, new.fingerprint());
    let after = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    assert!(
        after.cosignature.is_none(),
        "single signature after cutover"
    );
    assert!(after.verify_signature(&new.public()));
    assert!(after.verify_hmac(new.hmac_secret()));
    assert!(!after.verify_signature(&old.public()));
    assert_eq!(after.sequence, during.sequence + 1, "sequence continues");
    assert!(validate_at_issue(&consumer(&v, &[&new]), &after, &params));
    assert!(!validate_at_issue(&consumer(&v, &[&old]), &after, &params));
    // Overlap receipts can still be finalized by the new key (it cosigned them).
    let f = v.finalize(&during, &json!({"ok":true})).unwrap();
    assert!(f.cosignature.is_none() && f.verify_signature(&new.public()));
    // No rotation in progress: nothing to cut over to.
    assert!(v.cutover().is_err());
}

#[test]
fn ccs_6_8_replay_cache_file_with_older_rowid_schema_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE seen (issuer TEXT NOT NULL, nonce TEXT NOT NULL,
               expires_at REAL NOT NULL, PRIMARY KEY (issuer, nonce));
             INSERT INTO seen VALUES ('https://i', 'n1', 10.0);",
        )
        .unwrap();
    }
    let rc = ReplayCache::open(&path).unwrap();
    assert!(!rc.check_and_insert("https://i", "n1", 10.0).unwrap());
    assert!(rc.check_and_insert("https://i", "n2", 10.0).unwrap());
    assert!(!rc.check_and_insert("https://i", "n2", 10.0).unwrap());
    assert!(rc.check_and_insert("https://j", "n2", 10.0).unwrap());
    assert_eq!(rc.prune(100.0, 0.0).unwrap(), 3);
    drop(rc);
    // A fresh file gets the clustered schema and the same semantics across a restart.
    let path = dir.path().join("new.sqlite");
    assert!(ReplayCache::open(&path)
        .unwrap()
        .check_and_insert("https://i", "n1", 10.0)
        .unwrap());
    let rc = ReplayCache::open(&path).unwrap();
    assert!(!rc.check_and_insert("https://i", "n1", 10.0).unwrap());
    assert!(rc.check_and_insert("https://j", "n1", 10.0).unwrap());
}

#[test]
fn ccs_7_3_1_dual_hmac_lets_holders_of_either_secret_check_overlap_receipts() {
    let (old, new) = (KeyMaterial::generate(None), KeyMaterial::generate(None));
    let (v, _t) = overlap_verifier(&old, &new);
    let params = json!({"q":"x"});
    let r = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    let tag = r.cosignature.as_ref().and_then(|c| c.receipt.clone());
    assert_eq!(tag, Some(r.compute_hmac(new.hmac_secret())));
    assert!(r.verify_hmac(old.hmac_secret()) && !r.verify_hmac(new.hmac_secret()));
    let shared = |keys: &[&KeyMaterial], secrets: &[&KeyMaterial]| {
        secrets.iter().fold(consumer(&v, keys), |e, s| {
            e.with_hmac_secret(&v.settings().issuer, s.hmac_secret())
        })
    };
    // Old pin + old secret, new pin + new secret, both: all accept the overlap receipt.
    for (keys, secrets) in [
        (&[&old][..], &[&old][..]),
        (&[&new][..], &[&new][..]),
        (&[&old, &new][..], &[&old, &new][..]),
    ] {
        assert!(validate_at_issue(&shared(keys, secrets), &r, &params));
    }
    // A secret the issuer never used fails the HMAC (step 3), whatever the key.
    let stranger = KeyMaterial::generate(None);
    assert!(!validate_at_issue(
        &shared(&[&new], &[&stranger]),
        &r,
        &params
    ));
    // A forged cosignature HMAC does not pass for holders of the new secret only.
    let mut forged = r.clone();
    let bad_tag = forged.compute_hmac(stranger.hmac_secret());
    if let Some(c) = forged.cosignature.as_mut() {
        c.receipt = Some(bad_tag);
    }
    assert!(!validate_at_issue(
        &shared(&[&new], &[&new]),
        &forged,
        &params
    ));
    // Stripping it leaves holders of the old secret unaffected.
    let mut stripped = r.clone();
    if let Some(c) = stripped.cosignature.as_mut() {
        c.receipt = None;
    }
    assert!(validate_at_issue(
        &shared(&[&old], &[&old]),
        &stripped,
        &params
    ));
    assert!(!validate_at_issue(
        &shared(&[&new], &[&new]),
        &stripped,
        &params
    ));
}

#[test]
fn ccs_7_3_announce_manifest_names_incoming_key_and_is_bound() {
    let (old, new) = (KeyMaterial::generate(None), KeyMaterial::generate(None));
    let plain = Verifier::new(VerifierSettings::default(), old.clone(), default_rules()).unwrap();
    assert!(plain.manifest().next_signing_key.is_none());
    let v = Verifier::new(VerifierSettings::default(), old.clone(), default_rules())
        .unwrap()
        .with_next_key_since(new.clone(), 1000.0)
        .unwrap();
    let m = v.manifest();
    let n = m.next_signing_key.as_ref().unwrap();
    assert_eq!(n.signing_key_fingerprint, new.fingerprint());
    assert_eq!(n.public_key, b64(&new));
    assert_eq!((n.dual_sign_since, n.effective_at), (1000, 1120));
    // Signed by the current key, and bound into config_hash through manifest_hash.
    assert!(m.verify(&old.public(), m.published_at as f64));
    assert_eq!(
        v.config().manifest_hash.as_deref(),
        Some(m.hash().unwrap().as_str())
    );
    let mut tampered = m.clone();
    tampered.next_signing_key.as_mut().unwrap().public_key = b64(&old);
    assert!(!tampered.verify(&old.public(), m.published_at as f64));
}

#[test]
fn ccs_12_2_step5_action_must_match_exactly() {
    let v = verifier();
    let params = json!({"q":"x"});
    let exp = Expected {
        tool: "search_web",
        params: &params,
    };
    let base = v
        .issue(&intake("search_web", params.clone()))
        .unwrap()
        .receipt;
    let good = base.action.clone();
    let hash = base.params_hash.clone();
    // Correctly signed by the issuer, but the action does not bind this call exactly.
    for action in [
        format!("{good}0"),
        format!("ccs:tool-invoke:search_web::{hash}"),
        format!("ccs:tool-invoke:search_we:{hash}"),
        format!("ccs:tool-invoke:search_web:{}", &hash[1..]),
        format!("ccs:tool-call:search_web:{hash}"),
        hash.clone(),
    ] {
        let mut r = base.clone();
        r.action = action;
        r.nonce = format!("{:032x}", r.action.len());
        r.seal(v.keys()).unwrap();
        let e = enforcer_for(&v, &v.settings().audience);
        assert_eq!(
            e.validate(&r, &exp, r.issued_at)
                .unwrap_err()
                .failure_category,
            FailureCategory::BindingMismatch,
            "{}",
            r.action
        );
    }
    let e = enforcer_for(&v, &v.settings().audience);
    assert!(e.validate(&base, &exp, base.issued_at).is_ok());
}

#[test]
fn ccs_11_1_batch_is_persisted_in_one_transaction_before_any_receipt_is_returned() {
    let batch = |traces: &[&str]| -> Vec<Value> {
        traces
            .iter()
            .map(|t| {
                let mut i = intake("search_web", json!({"q": t}));
                i["trace_id"] = json!(t);
                i
            })
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let v = verifier()
        .with_store(EvidenceStore::open(&dir.path().join("ev.db")).unwrap())
        .unwrap();
    // One malformed intake fails alone; the others are issued and stored, in order.
    let mut items = batch(&["a", "b", "c"]);
    items[1]["params"] = json!("not an object");
    let out = v.issue_batch(&items);
    assert_eq!(
        out[1].as_ref().unwrap_err().code,
        IntakeErrorCode::IntakeMalformed
    );
    let (a, c) = (out[0].as_ref().unwrap(), out[2].as_ref().unwrap());
    assert_eq!(c.receipt.sequence, a.receipt.sequence + 1);
    assert_eq!(v.with_store_ref(|s| s.count().unwrap()), Some(2));
    for r in [a, c] {
        let stored = v.with_store_ref(|s| s.by_trace(&r.receipt.trace_id).unwrap());
        assert_eq!(stored, Some(vec![r.receipt.clone()]));
    }
    // The store refuses the second row mid-transaction: the first is rolled back too,
    // and no receipt of the batch is returned.
    v.with_store_ref(|s| {
        s.execute_batch_for_test(
            "CREATE TRIGGER refuse_e BEFORE INSERT ON receipts WHEN NEW.trace_id = 'e'
             BEGIN SELECT RAISE(ABORT, 'disk full'); END;",
        )
        .unwrap()
    });
    let out = v.issue_batch(&batch(&["d", "e", "f"]));
    for (r, t) in out.iter().zip(["d", "e", "f"]) {
        let e = r.as_ref().unwrap_err();
        assert_eq!(e.code, IntakeErrorCode::IntakeFailed);
        assert_eq!(e.trace_id.as_deref(), Some(t));
        assert!(!e.to_response().to_string().contains("disk full"));
    }
    assert_eq!(v.with_store_ref(|s| s.count().unwrap()), Some(2));
    // A fault (or panic) at the Persist step of any item blocks the whole batch.
    for panic in [false, true] {
        let hook: FaultHook = Arc::new(move |s: Step| {
            if s == Step::Persist {
                if panic {
                    panic!("injected");
                }
                return Err("injected".into());
            }
            Ok(())
        });
        let v = verifier_with_store().with_fault(hook);
        assert!(v
            .issue_batch(&batch(&["g", "h"]))
            .iter()
            .all(Result::is_err));
        assert_eq!(v.with_store_ref(|s| s.count().unwrap()), Some(0));
    }
}
