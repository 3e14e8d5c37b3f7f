//! Data-driven conformance vectors CV-001..CV-010 and negative cases NV-001..NV-011
//! (draft-04 §10.3, §13; Appendix B format under tests/vectors/).

use base64::Engine;
use convene_evidence::chain::{ChainEntry, CrossOrg, Envelope, EnvelopeRejection, EvidenceChain};
use convene_evidence::enforce::{EnforcementAction, Enforcer, Expected, ReplayCache};
use convene_evidence::hook::{permits, ToolGate};
use convene_evidence::keys::{KeyMaterial, TrustStore};
use convene_evidence::receipt::{Receipt, Verdict};
use convene_evidence::rules::{builtin, Rule, RuleContext, RuleOutcome};
use convene_evidence::server::RemoteVerifier;
use convene_evidence::{IntakeErrorCode, Verifier, VerifierSettings};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T0: f64 = 1722384000.5;

fn load(id: &str) -> Value {
    let p = format!(
        "{}/tests/vectors/{}.json",
        env!("CARGO_MANIFEST_DIR"),
        id.to_lowercase()
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    assert_eq!(v["vector_id"], id);
    v
}

fn key(hex_s: &Value) -> KeyMaterial {
    let b: [u8; 32] = hex::decode(hex_s.as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    KeyMaterial::from_secrets("vector-key", b, b)
}

fn rules(names: &Value) -> Vec<Box<dyn Rule>> {
    names
        .as_array()
        .unwrap()
        .iter()
        .map(|n| builtin(n.as_str().unwrap(), None).unwrap())
        .collect()
}

fn verifier_with(input: &Value, rule_key: &str, settings: VerifierSettings) -> Verifier {
    Verifier::new(
        settings,
        key(&input["signing_key_hex"]),
        rules(&input[rule_key]),
    )
    .unwrap()
    .with_clock(Arc::new(|| T0))
}

fn verifier(input: &Value) -> Verifier {
    verifier_with(input, "rules", VerifierSettings::default())
}

fn intake(cmd: &Value) -> Value {
    let mut c = cmd.clone();
    c["intake_version"] = json!("1.3");
    c
}

fn trust_for(v: &Verifier) -> TrustStore {
    let mut ts = TrustStore::default();
    let pk = base64::engine::general_purpose::STANDARD.encode(v.keys().public().to_bytes());
    ts.enroll(&v.settings().issuer, &pk, &v.keys().fingerprint())
        .unwrap();
    ts
}

fn enforcer(v: &Verifier, identity: &str) -> Enforcer {
    Enforcer::new(identity, trust_for(v), ReplayCache::in_memory().unwrap())
        .with_hmac_secret(&v.settings().issuer, v.keys().hmac_secret())
}

#[test]
fn cv_001_basic_allow_receipt_ccs_10_3_1() {
    let vec = load("CV-001");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let r = v.issue(&intake(&i["command"])).unwrap().receipt;
    assert_eq!(r.verdict.as_str(), e["verdict"]);
    assert_eq!(r.block_reason, e["block_reason"]);
    assert_eq!(r.rule_summary, e["rule_summary_pattern"]);
    assert_eq!(r.verify_hmac(v.keys().hmac_secret()), e["receipt_valid"]);
    assert!(r.verify_signature(&v.keys().public()));
}

#[test]
fn cv_002_basic_deny_receipt() {
    let vec = load("CV-002");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let r = v.issue(&intake(&i["command"])).unwrap().receipt;
    assert_eq!(r.verdict.as_str(), e["verdict"]);
    assert!(r
        .block_reason
        .contains(e["block_reason_contains"].as_str().unwrap()));
    assert!(r
        .rule_summary
        .contains(e["rule_summary_contains"].as_str().unwrap()));
    assert!(r.verify_hmac(v.keys().hmac_secret()));
}

#[test]
fn cv_003_config_hash_binding_ccs_10_3_2() {
    let vec = load("CV-003");
    let i = &vec["input"];
    let a = verifier_with(i, "rules_a", VerifierSettings::default());
    let b = verifier_with(i, "rules_b", VerifierSettings::default());
    let ra = a.issue(&intake(&i["command"])).unwrap().receipt;
    let rb = b.issue(&intake(&i["command"])).unwrap().receipt;
    assert_eq!(
        ra.config_hash != rb.config_hash,
        vec["expected"]["config_hash_differs"]
    );
}

#[test]
fn cv_004_request_hash_binding_ccs_10_3_3() {
    let vec = load("CV-004");
    let i = &vec["input"];
    let v = verifier(i);
    let ra = v.issue(&intake(&i["command_a"])).unwrap().receipt;
    let rb = v.issue(&intake(&i["command_b"])).unwrap().receipt;
    assert_eq!(
        ra.request_hash != rb.request_hash,
        vec["expected"]["request_hash_differs"]
    );
    assert_eq!(
        ra.params_hash != rb.params_hash,
        vec["expected"]["params_hash_differs"]
    );
}

#[test]
fn cv_005_issuer_audience_binding_ccs_10_3_4_ccs_6_9() {
    let vec = load("CV-005");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let s = VerifierSettings {
        issuer: i["issuer"].as_str().unwrap().into(),
        audience: i["audience"].as_str().unwrap().into(),
        ..Default::default()
    };
    let v = verifier_with(i, "rules", s);
    let r = v.issue(&intake(&i["command"])).unwrap().receipt;
    let params = &i["command"]["params"];
    let exp = Expected {
        tool: "search_web",
        params,
    };
    let c = enforcer(&v, i["consumer"].as_str().unwrap());
    let rej = c.validate(&r, &exp, T0).unwrap_err();
    assert_eq!(rej.failure_category.as_str(), e["failure_category"]);
    let b = enforcer(&v, i["audience"].as_str().unwrap());
    assert_eq!(
        b.validate(&r, &exp, T0).is_ok(),
        e["intended_consumer_accepts"]
    );
}

#[test]
fn cv_006_freshness_enforcement_ccs_10_3_5_ccs_8_2_2() {
    let vec = load("CV-006");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let s = VerifierSettings {
        ttl_secs: i["ttl_secs"].as_f64().unwrap(),
        max_clock_skew: i["max_clock_skew"].as_f64().unwrap(),
        ..Default::default()
    };
    let issued = i["issued_at"].as_f64().unwrap();
    let v = Verifier::new(s, key(&i["signing_key_hex"]), rules(&i["rules"]))
        .unwrap()
        .with_clock(Arc::new(move || issued));
    let r = v.issue(&intake(&i["command"])).unwrap().receipt;
    let t = r.expires_at + i["consume_at_offset_from_expiry"].as_f64().unwrap();
    let exp = Expected {
        tool: "search_web",
        params: &i["command"]["params"],
    };
    let c = enforcer(&v, &v.settings().audience);
    let rej = c.validate(&r, &exp, t).unwrap_err();
    assert_eq!(rej.failure_category.as_str(), e["failure_category"]);
    // Everything else is valid: the same receipt is accepted inside its window.
    assert!(c.validate(&r, &exp, r.expires_at).is_ok());
}

#[test]
fn cv_007_intake_fail_closed_ccs_10_3_6_ccs_3_3_1() {
    let vec = load("CV-007");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i)
        .with_store(convene_evidence::store::EvidenceStore::in_memory().unwrap())
        .unwrap();
    let err = v.issue(&i["intake"]).unwrap_err();
    assert_eq!(err.code.as_str(), e["error_code"]);
    assert_eq!(
        v.with_store_ref(|s| s.count().unwrap() > 0),
        Some(e["receipt_produced"].as_bool().unwrap())
    );
}

#[test]
fn cv_008_envelope_propagation_ccs_10_3_7_ccs_11_2_3() {
    let vec = load("CV-008");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let ra = v.issue(&intake(&i["agent_a_command"])).unwrap().receipt;
    let d = &i["delegation"];
    let env = Envelope::wrap(
        &ra,
        d["child_trace_id"].as_str().unwrap(),
        d["reason"].as_str().unwrap(),
        1,
        None,
    )
    .unwrap();
    // Agent B receives the envelope, checks it, and submits through its own intake.
    let parent = env.verify(&trust_for(&v), None).unwrap();
    assert_eq!(parent, ra);
    let mut ib = intake(&d["agent_b_command"]);
    ib["delegation_chain"] = env.delegation_value();
    let rb = v.issue(&ib).unwrap().receipt;
    assert_eq!(env.envelope_version, e["envelope_version"]);
    assert_eq!(env.hop_count, e["hop_count"].as_u64().unwrap());
    assert_eq!(
        rb.previous_receipt_hash.as_deref() == Some(ra.receipt_hash().unwrap().as_str()),
        e["previous_receipt_hash_valid"]
    );
    assert_eq!(rb.parent_trace_id.as_deref(), Some(ra.trace_id.as_str()));
    assert_eq!(
        rb.verify_signature(&v.keys().public()),
        e["agent_b_receipt_produced"]
    );
    let mut c = EvidenceChain::new(ra).unwrap();
    c.append(rb).unwrap();
    assert!(c.verify_full(&trust_for(&v), None).chain_valid);
}

fn cross_org_envelope(i: &Value, v: &Verifier) -> Envelope {
    let ra = v.issue(&intake(&i["agent_a_command"])).unwrap().receipt;
    let x = &i["cross_org"];
    let co = CrossOrg {
        sender_org_id: x["sender_org_id"].as_str().unwrap().into(),
        receiver_org_id: x["receiver_org_id"].as_str().unwrap().into(),
        trust_anchor_reference: format!(
            "sha256:{}",
            convene_evidence::keys::full_fingerprint_of(&v.keys().public())
        ),
        self_contained: true,
    };
    Envelope::wrap(&ra, "c0ffee0000000001", "cross-org delegation", 2, Some(co)).unwrap()
}

#[test]
fn cv_009_cross_org_self_contained_ccs_10_3_8_ccs_11_3_6() {
    let vec = load("CV-009");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let env = cross_org_envelope(i, &v);
    // Serialize/deserialize: the receiver has only the bytes and its own trust store.
    let wire = serde_json::to_string(&env).unwrap();
    let got: Envelope = serde_json::from_str(&wire).unwrap();
    assert_eq!(
        got.cross_org.as_ref().unwrap().self_contained,
        e["self_contained"]
    );
    let receiver = i["cross_org"]["receiver_org_id"].as_str().unwrap();
    let r = got.verify(&trust_for(&v), Some(receiver));
    assert_eq!(r.is_ok(), e["verified_offline"]);
    let c = EvidenceChain::new(r.unwrap()).unwrap();
    assert_eq!(
        c.verify_full(&trust_for(&v), None).chain_valid,
        e["chain_valid"]
    );
    // Without the pre-enrolled anchor the receiver refuses (CCS-11.3-4).
    assert_eq!(
        got.verify(&TrustStore::default(), Some(receiver)),
        Err(EnvelopeRejection::UnknownTrustAnchor)
    );
    assert_eq!(
        got.verify(&trust_for(&v), Some("https://org-c.example")),
        Err(EnvelopeRejection::AudienceMismatch)
    );
}

fn build_chain(v: &Verifier, hops: u64) -> EvidenceChain {
    let mut chain: Option<EvidenceChain> = None;
    let mut prev: Option<Receipt> = None;
    for h in 0..hops {
        let mut c = json!({"intake_version":"1.3","agent_id":format!("agent-{h}"),"tool":"delegate",
            "params":{"hop":h},"timestamp":1722384000.0,"trace_id":format!("{:016x}", 0xa0 + h)});
        if let Some(p) = &prev {
            c["delegation_chain"] = json!({"previous_receipt_hash": p.receipt_hash().unwrap(), "parent_trace_id": p.trace_id});
        }
        let r = v.issue(&c).unwrap().receipt;
        match chain.as_mut() {
            None => chain = Some(EvidenceChain::new(r.clone()).unwrap()),
            Some(ch) => ch.append(r.clone()).unwrap(),
        }
        prev = Some(r);
    }
    chain.unwrap()
}

#[test]
fn cv_010_ec_summary_hash_ccs_10_3_9() {
    let vec = load("CV-010");
    let i = &vec["input"];
    let v = verifier(i);
    let c = build_chain(&v, i["hops"].as_u64().unwrap());
    let mut h = Sha256::new();
    for e in &c.receipts {
        h.update(hex::decode(e.receipt_hash.strip_prefix("sha256:").unwrap()).unwrap());
    }
    assert_eq!(
        c.summary_hash,
        format!("sha256:{}", hex::encode(h.finalize()))
    );
    for k in 0..c.receipts.len() {
        let mut t = c.clone();
        t.receipts[k].receipt.rule_summary.push('x');
        t.receipts[k].receipt_hash = t.receipts[k].receipt.receipt_hash().unwrap();
        assert_ne!(
            convene_evidence::chain::summary_hash(&t.receipts),
            c.summary_hash,
            "hop {k}"
        );
    }
    assert_eq!(vec["expected"]["any_change_changes_summary"], true);
}

#[test]
fn nv_001_changed_arguments_ccs_12_3_5() {
    let vec = load("NV-001");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let r = v.issue(&intake(&i["command"])).unwrap().receipt;
    let c = enforcer(&v, &v.settings().audience);
    let rej = c
        .validate(
            &r,
            &Expected {
                tool: "search_web",
                params: &i["presented_params"],
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(rej.failure_category.as_str(), e["failure_category"]);
}

#[test]
fn nv_002_changed_response_ccs_6_2() {
    let vec = load("NV-002");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let r = v.issue(&intake(&i["command"])).unwrap().receipt;
    let f = v.finalize(&r, &i["response"]).unwrap();
    let presented = format!(
        "sha256:{}",
        convene_evidence::jcs::jcs_sha256_hex(&i["presented_response"]).unwrap()
    );
    assert_eq!(
        presented != f.response_hash,
        e["response_mismatch_detected"]
    );
    assert_eq!(
        f.verify_signature(&v.keys().public()),
        e["receipt_still_valid"]
    );
}

#[test]
fn nv_003_replay_ccs_6_11_ccs_12_3_4() {
    let vec = load("NV-003");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let r = v.issue(&intake(&i["command"])).unwrap().receipt;
    let c = enforcer(&v, &v.settings().audience);
    let exp = Expected {
        tool: "transfer_funds",
        params: &i["command"]["params"],
    };
    assert!(c.validate(&r, &exp, T0).is_ok());
    let rej = c.validate(&r, &exp, T0).unwrap_err();
    assert_eq!(rej.failure_category.as_str(), e["second_failure_category"]);
}

#[test]
fn nv_004_stale_evidence_ccs_12_3_1() {
    let vec = load("NV-004");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let r = v.issue(&intake(&i["command"])).unwrap().receipt;
    let c = enforcer(&v, &v.settings().audience);
    let t = r.issued_at + i["present_after_secs"].as_f64().unwrap();
    let rej = c
        .validate(
            &r,
            &Expected {
                tool: "search_web",
                params: &i["command"]["params"],
            },
            t,
        )
        .unwrap_err();
    assert_eq!(rej.failure_category.as_str(), e["failure_category"]);
}

#[test]
fn nv_005_wrong_audience_ccs_12_3_2_ccs_14_4() {
    let vec = load("NV-005");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let r = v
        .issue_for(&intake(&i["command"]), i["audience"].as_str().unwrap())
        .unwrap()
        .receipt;
    let c = enforcer(&v, i["consumer"].as_str().unwrap());
    let rej = c
        .validate(
            &r,
            &Expected {
                tool: "search_web",
                params: &i["command"]["params"],
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(rej.failure_category.as_str(), e["failure_category"]);
}

#[test]
fn nv_006_key_substitution_ccs_12_3_3_ccs_7_2_4() {
    let vec = load("NV-006");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let honest = verifier(i);
    let attacker = Verifier::new(
        VerifierSettings::default(),
        key(&i["attacker_key_hex"]),
        rules(&i["rules"]),
    )
    .unwrap()
    .with_clock(Arc::new(|| T0));
    // Same issuer URI, forged with the attacker's key.
    let forged = attacker.issue(&intake(&i["command"])).unwrap().receipt;
    assert!(
        forged.verify_signature(&attacker.keys().public()),
        "valid under the attacker's own key"
    );
    let c = enforcer(&honest, &honest.settings().audience);
    let rej = c
        .validate(
            &forged,
            &Expected {
                tool: "shell_exec",
                params: &i["command"]["params"],
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(rej.failure_category.as_str(), e["failure_category"]);
}

struct AlwaysAllow;
impl Rule for AlwaysAllow {
    fn name(&self) -> &str {
        "always_allow"
    }
    fn evaluate(&self, _: &RuleContext<'_>) -> RuleOutcome {
        RuleOutcome::allow()
    }
}

#[test]
fn nv_007_collusion_flagged_by_deny_rate_ccs_13_7() {
    let vec = load("NV-007");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = Verifier::new(
        VerifierSettings::default(),
        key(&i["signing_key_hex"]),
        vec![Box::new(AlwaysAllow)],
    )
    .unwrap()
    .with_clock(Arc::new(|| T0));
    let c = enforcer(&v, &v.settings().audience);
    let params = json!({"command": "rm -rf /"});
    for n in 0..i["sample_receipts"].as_u64().unwrap() {
        let cmd = json!({"intake_version":"1.3","agent_id":"a","tool":"shell_exec","params":params,
            "timestamp":1722384000.0,"trace_id":format!("{n:016x}")});
        let r = v.issue(&cmd).unwrap().receipt;
        assert_eq!(
            r.verdict,
            Verdict::Allow,
            "colluding verifier allows even rm -rf /"
        );
        let ok = c
            .validate(
                &r,
                &Expected {
                    tool: "shell_exec",
                    params: &params,
                },
                T0,
            )
            .is_ok();
        assert_eq!(ok, e["receipts_cryptographically_valid"]);
    }
    let total = i["total_receipts"].as_u64().unwrap();
    let seen = c.monitor().stats(&v.settings().issuer).0;
    for _ in seen..total {
        c.monitor().record(&v.settings().issuer, Verdict::Allow);
    }
    assert_eq!(
        c.monitor().flagged(&v.settings().issuer),
        e["flagged_for_review"]
    );
}

#[test]
fn nv_008_missing_transport_blocks_ccs_8_1_2_ccs_8_2_1_ccs_13_8_1() {
    let vec = load("NV-008");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let dir = tempfile::tempdir().unwrap();
    let timeout = Duration::from_millis(i["timeout_ms"].as_u64().unwrap());
    // 1. No verifier at all.
    let gone = RemoteVerifier::new(&dir.path().join("absent.sock")).with_timeout(timeout);
    let d = gone.decide(&i["intake"]);
    assert!(matches!(
        d,
        Err(convene_evidence::EvidenceError::Unreachable(_))
    ));
    assert_eq!(!permits(&d), e["tool_blocked"]);
    // 2. A verifier that accepts but never answers: blocked after the timeout.
    let path = dir.path().join("silent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let hold = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_millis(800));
        drop(s);
    });
    let started = Instant::now();
    let d = RemoteVerifier::new(&path)
        .with_timeout(timeout)
        .decide(&i["intake"]);
    assert!(
        matches!(d, Err(convene_evidence::EvidenceError::Timeout)),
        "{d:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(700));
    assert_eq!(d.is_ok(), e["receipt_produced"]);
    assert!(!permits(&d));
    hold.join().unwrap();
}

#[test]
fn nv_009_intake_bypass_blocked_ccs_13_9_1_ccs_14_6() {
    let vec = load("NV-009");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let mut tool_ran = false;
    let decision = v.decide(&i["intake"]);
    if permits(&decision) {
        tool_ran = true;
    }
    match &decision {
        Err(convene_evidence::EvidenceError::Intake(err)) => {
            assert_eq!(err.code.as_str(), e["error_code"]);
            assert_eq!(err.code, IntakeErrorCode::IntakeMissingField);
        }
        other => panic!("expected intake error, got {other:?}"),
    }
    assert_eq!(decision.is_ok(), e["receipt_produced"]);
    assert_eq!(!tool_ran, e["tool_blocked"]);
}

#[test]
fn nv_010_chain_tampering_insertion_ccs_13_1() {
    let vec = load("NV-010");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let mut c = build_chain(&v, i["hops"].as_u64().unwrap());
    // The forger runs an enrolled hop verifier, so its receipt is validly signed.
    let forger = Verifier::new(
        VerifierSettings {
            issuer: "https://hop-verifier.example/ccs".into(),
            ..Default::default()
        },
        key(&i["forger_key_hex"]),
        rules(&i["rules"]),
    )
    .unwrap()
    .with_clock(Arc::new(|| T0));
    let mut ts = trust_for(&v);
    let pk = base64::engine::general_purpose::STANDARD.encode(forger.keys().public().to_bytes());
    ts.enroll(&forger.settings().issuer, &pk, &forger.keys().fingerprint())
        .unwrap();
    assert!(c.verify_full(&ts, None).chain_valid);
    let at = i["insert_at"].as_u64().unwrap() as usize;
    let prev_hash = c.receipts[at - 1].receipt_hash.clone();
    let forged = forger
        .issue(
            &json!({"intake_version":"1.3","agent_id":"mallory","tool":"wire_transfer",
            "params":{"amount":1000000},"timestamp":1722384000.0,"trace_id":"f0f0f0f0f0f0f0f0",
            "delegation_chain":{"previous_receipt_hash": prev_hash}}),
        )
        .unwrap()
        .receipt;
    let entry = ChainEntry {
        receipt_hash: forged.receipt_hash().unwrap(),
        receipt: forged,
        hop: at as u64,
        previous_receipt_hash: Some(prev_hash),
    };
    c.receipts.insert(at, entry);
    for e2 in c.receipts.iter_mut().skip(at + 1) {
        e2.hop += 1;
    }
    c.total_hops += 1;
    let res = c.verify_full(&ts, None);
    assert_eq!(res.chain_valid, e["chain_valid"]);
    assert_eq!(res.broken_at, e["broken_at"].as_u64());
    assert_eq!(res.summary_match, e["summary_match"]);
    assert_eq!(
        res.failure_reason.as_deref(),
        Some("previous_receipt_hash mismatch at hop 2")
    );
}

#[test]
fn nv_011_cross_org_not_self_contained_ccs_13_11_1() {
    let vec = load("NV-011");
    let (i, e) = (&vec["input"], &vec["expected"]);
    let v = verifier(i);
    let mut env = cross_org_envelope(i, &v);
    env.original_receipt
        .as_object_mut()
        .unwrap()
        .remove(i["remove_field"].as_str().unwrap());
    let r = env.verify(&trust_for(&v), Some("https://org-b.example.com"));
    assert_eq!(r.is_err(), e["rejected"]);
    let cat = serde_json::to_value(r.unwrap_err()).unwrap();
    assert_eq!(cat, e["failure_category"]);
    // self_contained=false is refused too, even with every field present.
    let mut env2 = cross_org_envelope(i, &v);
    env2.cross_org.as_mut().unwrap().self_contained = false;
    assert_eq!(
        env2.verify(&trust_for(&v), None),
        Err(EnvelopeRejection::CrossOrgNotSelfContained)
    );
}

#[test]
fn hop_limit_16_flags_chain_ccs_6_14() {
    let vec = load("CV-010");
    let v = verifier(&vec["input"]);
    let c = build_chain(&v, 17);
    assert_eq!(c.total_hops, 16);
    assert!(c.verify_full(&trust_for(&v), None).chain_valid);
    let mut long = c.clone();
    let last = long.receipts.last().unwrap().clone();
    let mut extra = last.clone();
    extra.hop = 17;
    extra.previous_receipt_hash = Some(last.receipt_hash.clone());
    long.receipts.push(extra);
    long.total_hops = 17;
    let res = long.verify_full(&trust_for(&v), None);
    assert!(!res.chain_valid && res.flagged_for_review);
    let env = Envelope::wrap(&last.receipt, "x", "too deep", 17, None).unwrap();
    assert_eq!(
        env.verify(&trust_for(&v), None),
        Err(EnvelopeRejection::HopLimitExceeded)
    );
}

#[test]
fn enforcement_allows_confirmed_after_finalize() {
    let vec = load("CV-001");
    let i = &vec["input"];
    let v = verifier(i);
    let r = v.issue(&intake(&i["command"])).unwrap().receipt;
    let f = v.finalize(&r, &json!({"forecast":"sunny"})).unwrap();
    let c = enforcer(&v, &v.settings().audience);
    let a = c
        .validate(
            &f,
            &Expected {
                tool: "search_web",
                params: &i["command"]["params"],
            },
            T0,
        )
        .unwrap();
    assert_eq!(a.action, EnforcementAction::Proceed);
}

#[test]
fn ccs_8_2_a_busy_refusal_reaches_the_client_even_when_the_verifier_closes_before_reading() {
    // A verifier at its connection bound answers BUSY and closes without reading. A request
    // bigger than the socket buffer makes the client's write fail (EPIPE) every time; the
    // client must still report the verifier's refusal rather than "unreachable".
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let busy = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        std::io::Write::write_all(
            &mut s,
            b"{\"ok\":false,\"error\":{\"error_code\":\"BUSY\",\"error_message\":\"too many connections\",\"retry_after\":null,\"trace_id\":null}}\n",
        )
        .unwrap();
        drop(s);
    });
    let big = serde_json::json!({"op": "issue", "pad": "x".repeat(4 << 20)});
    let got = RemoteVerifier::new(&path)
        .with_timeout(Duration::from_secs(5))
        .call(&big)
        .expect("the refusal is read although the write broke off");
    assert_eq!(got["error"]["error_code"], "BUSY", "{got}");
    busy.join().unwrap();
}
