//! Key rotation on the issuer (§7.3): dual-signing and dual HMAC during the overlap, the announce
//! manifest and cutover.

use super::intake;
use crate::enforce::{Enforcer, Expected, FailureCategory, ReplayCache};
use crate::issuer::{Verifier, VerifierSettings};
use crate::keys::{KeyMaterial, TrustStore};
use crate::rules::default_rules;
use base64::Engine;
use serde_json::{json, Value};
use std::sync::Arc;

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
