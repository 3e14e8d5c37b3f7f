//! Consumer-side validation: the six steps, outcome mapping, replay cache, revocation and
//! monitoring (§12, §13, §14).

use super::{intake, verifier};
use crate::enforce::{EnforcementAction, Enforcer, Expected, FailureCategory, ReplayCache};
use crate::issuer::{Verifier, VerifierSettings};
use crate::keys::{KeyMaterial, TrustStore};
use crate::receipt::{OutcomeStatus, Verdict};
use crate::rules::default_rules;
use base64::Engine;
use serde_json::json;

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
