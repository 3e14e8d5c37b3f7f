//! The append-only evidence store: indexing, durability across a restart and batch transactions
//! (§11.1).

use super::{intake, verifier, verifier_with_store};
use crate::error::IntakeErrorCode;
use crate::issuer::{FaultHook, Step, Verifier, VerifierSettings};
use crate::keys::KeyMaterial;
use crate::receipt::Verdict;
use crate::rules::default_rules;
use crate::store::EvidenceStore;
use serde_json::{json, Value};
use std::sync::Arc;

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
