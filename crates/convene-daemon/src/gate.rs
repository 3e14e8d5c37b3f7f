//! The tool gate (CCS, issue 4): before an agent's tool call runs, the in-process verifier
//! issues a signed receipt (stored durably in `<home>/evidence/receipts.sqlite`), and the
//! receipt is appended to the group ledger as `x.convene.evidence.receipt`, so collaboration
//! history and evidence share one order. Fail-closed: any error means no permission.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::OnceLock;

use convene_core::{CoreError, ErrorCode};
use convene_evidence::hook::{self, ToolGate};
use convene_evidence::issuer::{Verifier, VerifierSettings};
use convene_evidence::keys::{KeyFile, KeyMaterial};
use convene_evidence::store::EvidenceStore;

/// What the verifier is built from: the signing key, the incoming key of a rotation in its
/// dual-sign phase (with the phase's start), and the receipt store.
struct Parts {
    keys: KeyMaterial,
    next: Option<(KeyMaterial, f64)>,
    store: EvidenceStore,
}

/// The gate. The key and the receipt store are opened at start (a bad key file or store stops
/// the daemon, and the key state is the one at start); the verifier itself (rules, canonical
/// configuration) is built at the first tool call, so an idle daemon does not hold it
/// (~0.4 MB resident; docs/BENCHMARKS.md, idle RSS).
pub struct Gate {
    parts: parking_lot::Mutex<Option<Parts>>,
    verifier: OnceLock<Result<Verifier, CoreError>>,
}

impl Gate {
    /// The verifier, built on first use. A failure is kept: every later call is refused too
    /// (fail-closed until a restart), as if the daemon had not started.
    pub fn verifier(&self) -> Result<&Verifier, CoreError> {
        self.verifier
            .get_or_init(|| {
                let parts = self.parts.lock().take().ok_or_else(|| {
                    CoreError::new(ErrorCode::Internal, "evidence verifier: no key material")
                })?;
                build(parts)
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// Opens (creating at first start) the signing key and the receipt store.
pub fn open(dir: &Path) -> Result<Gate, CoreError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        CoreError::new(ErrorCode::Internal, format!("evidence {what}: {e}"))
    };
    std::fs::create_dir_all(dir).map_err(|e| fail("dir", &e))?;
    let key_path = dir.join("key.json");
    // A rotation in progress (`convene evidence rotate`) lives in the key file: during its
    // dual-sign phase the gate cosigns with the incoming key.
    let (keys, next) = match std::fs::read_to_string(&key_path) {
        Ok(text) => {
            let f: KeyFile = serde_json::from_str(&text).map_err(|e| fail("key file", &e))?;
            convene_evidence::rotation::signing_keys(&f).map_err(|e| fail("key file", &e))?
        }
        Err(_) => {
            let k = KeyMaterial::generate(None);
            let body = serde_json::to_vec_pretty(&k.to_file()).map_err(|e| fail("key file", &e))?;
            // The private key is owner-only from the moment it exists.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&key_path)
                .map_err(|e| fail("key file", &e))?;
            f.write_all(&body)
                .and_then(|_| f.sync_all())
                .map_err(|e| fail("key file", &e))?;
            (k, None)
        }
    };
    let store = EvidenceStore::open(&dir.join("receipts.sqlite")).map_err(|e| fail("store", &e))?;
    Ok(Gate {
        parts: parking_lot::Mutex::new(Some(Parts { keys, next, store })),
        verifier: OnceLock::new(),
    })
}

fn build(Parts { keys, next, store }: Parts) -> Result<Verifier, CoreError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        CoreError::new(ErrorCode::Internal, format!("evidence {what}: {e}"))
    };
    Verifier::new(
        VerifierSettings::default(),
        keys,
        convene_evidence::rules::default_rules(),
    )
    .and_then(|v| match next {
        Some((n, since)) => v.with_next_key_since(n, since),
        None => Ok(v),
    })
    .and_then(|v| v.with_store(store))
    .map_err(|e| fail("verifier", &e))
}

/// A gate decision: whether the tool may run, and the ledger event data for the receipt.
pub struct Decision {
    /// True only for an `allow` receipt.
    pub permitted: bool,
    /// `x.convene.evidence.receipt` data.
    pub event_data: serde_json::Value,
}

/// Evaluates an intake. Intake errors come back as `invalid_request` with the CCS error
/// object in `details.ccs` (and no receipt).
pub fn decide(g: &Gate, intake: &serde_json::Value) -> Result<Decision, CoreError> {
    let res = g.verifier()?.decide(intake);
    let permitted = hook::permits(&res);
    match res {
        Ok(r) => {
            let event_data = hook::event_payload(&r.receipt)
                .map_err(|e| CoreError::new(ErrorCode::Internal, e.to_string()))?;
            Ok(Decision {
                permitted,
                event_data,
            })
        }
        Err(e) => {
            let detail = serde_json::to_value(format!("{e}")).unwrap_or_default();
            Err(
                CoreError::invalid("tool call refused: no receipt could be issued (fail-closed)")
                    .with("ccs", detail)
                    .with("reason", "evidence_intake_failed"),
            )
        }
    }
}
