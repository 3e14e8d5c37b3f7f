//! Receipt fields, HMAC and Ed25519 sealing, hashes and the config hash (§4.1, §4.2, §5, §6).

use super::{intake, verifier};
use crate::config::DeploymentMode;
use crate::issuer::{Verifier, VerifierSettings};
use crate::keys::KeyMaterial;
use crate::receipt::OutcomeStatus;
use crate::rules::default_rules;
use serde_json::json;

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
    assert_eq!(r.verdict, crate::receipt::Verdict::Allow);
    let payload = crate::receipt::tests::signed_bytes_reference(&r);
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
fn ccs_6_7_issue_for_refuses_an_audience_that_is_not_an_absolute_uri() {
    let v = verifier();
    let i = intake("search_web", json!({"query":"weather in Tokyo"}));
    for bad in ["executor", "", "https://a b", "1http://x"] {
        let e = v.issue_for(&i, bad).unwrap_err();
        assert_eq!(
            e.code,
            crate::error::IntakeErrorCode::IntakeMalformed,
            "{bad:?}"
        );
        assert_eq!(e.trace_id.as_deref(), i["trace_id"].as_str());
    }
    let r = v.issue_for(&i, "urn:convene:executor-2").unwrap().receipt;
    assert_eq!(r.audience, "urn:convene:executor-2");
}

#[test]
fn ccs_6_9_a_verifier_refuses_a_lifetime_or_skew_that_is_not_a_number() {
    for (ttl, skew) in [
        (f64::NAN, 30.0),
        (f64::INFINITY, 30.0),
        (0.0, 30.0),
        (60.0, f64::NAN),
    ] {
        let s = VerifierSettings {
            ttl_secs: ttl,
            max_clock_skew: skew,
            ..VerifierSettings::default()
        };
        assert!(
            Verifier::new(s, KeyMaterial::generate(None), default_rules()).is_err(),
            "ttl {ttl} skew {skew}"
        );
    }
}

#[test]
fn ccs_4_4_a_verifier_needs_rules_and_a_floor_needs_its_rule() {
    let k = KeyMaterial::generate(None);
    assert!(Verifier::new(VerifierSettings::default(), k.clone(), Vec::new()).is_err());
    let floored = VerifierSettings {
        policy_floor: Some("mcp-tls-1.2".into()),
        ..VerifierSettings::default()
    };
    assert!(Verifier::new(floored.clone(), k.clone(), default_rules()).is_err());
    let mut rules = default_rules();
    rules.push(crate::rules::builtin("policy_floor", Some("mcp-tls-1.2")).unwrap());
    assert!(Verifier::new(floored, k, rules).is_ok());
}
