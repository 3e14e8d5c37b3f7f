//! Fail-closed intake (§3.3, §3.4, §8.1): injected faults, panics and timeouts at every step yield
//! an error and no receipt.

use super::{intake, verifier, verifier_with_store};
use crate::error::IntakeErrorCode;
use crate::issuer::{FaultHook, Step, Verifier, VerifierSettings, STEPS};
use crate::keys::KeyMaterial;
use crate::rules::default_rules;
use crate::store::EvidenceStore;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
