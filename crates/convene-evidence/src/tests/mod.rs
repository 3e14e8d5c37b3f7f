//! Crate-internal tests, one file per topic; shared fixtures live here.

mod chains;
mod enforcement;
mod faults;
mod receipts;
mod rotation;
mod rules;
mod store;

use crate::issuer::{Verifier, VerifierSettings};
use crate::keys::KeyMaterial;
use crate::rules::default_rules;
use crate::store::EvidenceStore;
use serde_json::{json, Value};

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
