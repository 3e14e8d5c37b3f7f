//! Rule outcomes: policy floor, challenges, the signed manifest and indeterminate outcomes
//! (§4.4-§4.7).

use super::{intake, verifier};
use crate::issuer::{Verifier, VerifierSettings};
use crate::keys::KeyMaterial;
use crate::receipt::{OutcomeStatus, Verdict};
use crate::rules::{builtin, default_rules};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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
