//! Delegation chains and envelopes: linkage, pruning and cross-org identifiers (§11.2-§11.4).

use super::{intake, verifier};
use crate::chain::EvidenceChain;
use crate::issuer::{Verifier, VerifierSettings};
use crate::keys::{KeyMaterial, TrustStore};
use crate::rules::default_rules;
use base64::Engine;
use serde_json::json;

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

#[test]
fn ccs_11_4_a_seal_is_void_once_the_chain_grows_and_needs_a_trusted_key() {
    let v = verifier();
    let mut i = intake("delegate", json!({"hop": 0}));
    i["trace_id"] = json!("00000000000000a0");
    let r0 = v.issue(&i).unwrap().receipt;
    let mut c = EvidenceChain::new(r0.clone()).unwrap();
    let mut ts = TrustStore::default();
    let pk = base64::engine::general_purpose::STANDARD.encode(v.keys().public().to_bytes());
    ts.enroll(&v.settings().issuer, &pk, &v.keys().fingerprint())
        .unwrap();
    let issuer = v.settings().issuer.clone();
    let at = r0.issued_at + 1.0;
    c.seal = Some(crate::seal::ChainSeal::sign(&c, v.keys(), &issuer, at).unwrap());
    assert!(c.verify_full(&ts, None).sealed);
    // A seal by a key the relying party does not trust proves nothing.
    let stranger = KeyMaterial::generate(None);
    let mut foreign = c.clone();
    foreign.seal = Some(crate::seal::ChainSeal::sign(&c, &stranger, &issuer, at).unwrap());
    let res = foreign.verify_full(&ts, None);
    assert!(!res.chain_valid && !res.sealed, "{res:?}");
    // The next hop appended: the old seal no longer claims the end.
    let mut i = intake("delegate", json!({"hop": 1}));
    i["trace_id"] = json!("00000000000000a1");
    i["delegation_chain"] = json!({"previous_receipt_hash": r0.receipt_hash().unwrap(),
                                    "parent_trace_id": r0.trace_id});
    c.append(v.issue(&i).unwrap().receipt).unwrap();
    assert!(c.seal.is_none());
    let res = c.verify_full(&ts, None);
    assert!(res.chain_valid && !res.sealed, "{res:?}");
}

#[test]
fn ccs_11_4_a_seal_comes_from_the_last_receipts_issuer_and_not_before_that_receipt() {
    let (v, other) = (verifier(), verifier_as("https://other.example"));
    let mut ts = TrustStore::default();
    for x in [&v, &other] {
        let pk = base64::engine::general_purpose::STANDARD.encode(x.keys().public().to_bytes());
        ts.enroll(&x.settings().issuer, &pk, &x.keys().fingerprint())
            .unwrap();
    }
    let mut i = intake("delegate", json!({"hop": 0}));
    i["trace_id"] = json!("00000000000000b0");
    let r0 = v.issue(&i).unwrap().receipt;
    let mut c = EvidenceChain::new(r0.clone()).unwrap();
    let at = r0.issued_at + 1.0;
    let vi = v.settings().issuer.clone();
    let good = crate::seal::ChainSeal::sign(&c, v.keys(), &vi, at).unwrap();
    // Another trusted verifier, whose receipt is not the chain's end, cannot close it
    // (sign refuses; a hand-made seal does not verify).
    let oi = other.settings().issuer.clone();
    assert!(crate::seal::ChainSeal::sign(&c, other.keys(), &oi, at).is_err());
    let mut foreign = good.clone();
    foreign.issuer = oi;
    foreign.signing_key_fingerprint = other.keys().fingerprint();
    foreign.resign(other.keys()).unwrap();
    c.seal = Some(foreign);
    let res = c.verify_full(&ts, None);
    assert!(!res.chain_valid && !res.sealed, "{res:?}");
    // A seal dated before the receipt it names (a retired key's window) is void.
    let early = r0.issued_at - r0.max_clock_skew - 3600.0;
    assert!(crate::seal::ChainSeal::sign(&c, v.keys(), &vi, early).is_err());
    let mut backdated = good.clone();
    backdated.sealed_at = early;
    backdated.resign(v.keys()).unwrap();
    c.seal = Some(backdated);
    let res = c.verify_full(&ts, None);
    assert!(!res.chain_valid && !res.sealed, "{res:?}");
    c.seal = Some(good);
    assert!(c.verify_full(&ts, None).sealed);
}

fn verifier_as(issuer: &str) -> Verifier {
    let settings = VerifierSettings {
        issuer: issuer.into(),
        ..VerifierSettings::default()
    };
    Verifier::new(settings, KeyMaterial::generate(None), default_rules()).unwrap()
}
