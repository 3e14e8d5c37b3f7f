//! The tool gate (CCS, issue 4): before an agent's tool call runs, the in-process verifier
//! issues a signed receipt (stored durably in `<home>/evidence/receipts.sqlite`), and the
//! receipt is appended to the group ledger as `x.convene.evidence.receipt`, so collaboration
//! history and evidence share one order. Fail-closed: any error means no permission.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use convene_core::{CoreError, ErrorCode};
use convene_evidence::hook::{self, ToolGate};
use convene_evidence::issuer::{Verifier, VerifierSettings};
use convene_evidence::keys::{KeyFile, KeyMaterial};
use convene_evidence::live::{file_version, FileVersion, LiveVerifier};
use convene_evidence::store::EvidenceStore;
use convene_evidence::{EvidenceError, IntakeError, IntakeErrorCode};

/// What the verifier is built from: the signing key, the incoming key of a rotation in its
/// dual-sign phase (with the phase's start), and the receipt store.
struct Parts {
    keys: KeyMaterial,
    next: Option<(KeyMaterial, f64)>,
    store: EvidenceStore,
    /// The key file version these were read from.
    version: Option<FileVersion>,
}

/// The gate. The key and the receipt store are opened at start (a bad key file or store stops
/// the daemon); the verifier itself (rules, canonical configuration) is built at the first
/// tool call, so an idle daemon does not hold it (~0.4 MB resident; docs/BENCHMARKS.md, idle
/// RSS). From then on it follows the key file: a rotation step (`convene evidence rotate
/// ... --key <home>/evidence/key.json`) takes effect at the next tool call after it.
pub struct Gate {
    dir: PathBuf,
    parts: parking_lot::Mutex<Option<Parts>>,
    verifier: OnceLock<Result<LiveVerifier, CoreError>>,
}

impl Gate {
    /// The verifier for this call, built on first use. A failure of that first build is kept:
    /// every later call is refused too (fail-closed until a restart), as if the daemon had
    /// not started.
    pub fn verifier(&self) -> Result<Arc<Verifier>, CoreError> {
        self.verifier
            .get_or_init(|| {
                let parts = self.parts.lock().take().ok_or_else(|| {
                    CoreError::new(ErrorCode::Internal, "evidence verifier: no key material")
                })?;
                let version = parts.version;
                let v = build(parts)?;
                let dir = self.dir.clone();
                let rebuild = move || match read_parts(&dir).and_then(build) {
                    Ok(v) => {
                        tracing::info!(
                            fingerprint = %v.keys().fingerprint(),
                            dual_sign = v.next_keys().is_some(),
                            "evidence: key file changed; the tool gate follows it"
                        );
                        Some(v)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e.message, "evidence: key file changed but was not loaded; the current key keeps signing");
                        None
                    }
                };
                Ok(LiveVerifier::watching_since(
                    v,
                    &self.dir.join(KEY_FILE),
                    version,
                    Box::new(rebuild),
                ))
            })
            .as_ref()
            .map(LiveVerifier::get)
            .map_err(Clone::clone)
    }
}

const KEY_FILE: &str = "key.json";

fn fail(what: &str, e: &dyn std::fmt::Display) -> CoreError {
    CoreError::new(ErrorCode::Internal, format!("evidence {what}: {e}"))
}

/// Reads the key file (a rotation in progress lives in it: during its dual-sign phase the
/// gate cosigns with the incoming key) and opens the receipt store.
fn read_parts(dir: &Path) -> Result<Parts, CoreError> {
    let key_path = dir.join(KEY_FILE);
    let version = file_version(&key_path);
    let text = std::fs::read_to_string(&key_path).map_err(|e| fail("key file", &e))?;
    let f: KeyFile = serde_json::from_str(&text).map_err(|e| fail("key file", &e))?;
    let (keys, next) =
        convene_evidence::rotation::signing_keys(&f).map_err(|e| fail("key file", &e))?;
    let store = EvidenceStore::open(&dir.join("receipts.sqlite")).map_err(|e| fail("store", &e))?;
    Ok(Parts {
        keys,
        next,
        store,
        version,
    })
}

/// Opens (creating at first start) the signing key and the receipt store.
pub fn open(dir: &Path) -> Result<Gate, CoreError> {
    std::fs::create_dir_all(dir).map_err(|e| fail("dir", &e))?;
    let key_path = dir.join(KEY_FILE);
    if !key_path.exists() {
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
    }
    let parts = read_parts(dir)?;
    Ok(Gate {
        dir: dir.to_path_buf(),
        parts: parking_lot::Mutex::new(Some(parts)),
        verifier: OnceLock::new(),
    })
}

fn build(
    Parts {
        keys, next, store, ..
    }: Parts,
) -> Result<Verifier, CoreError> {
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

/// Evaluates an intake. Intake errors come back as `invalid_request` with the §3.4 error
/// object (`error_code`, `error_message`, `retry_after`, `trace_id`) in `details.ccs`, and
/// no receipt.
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
            // The §3.4 error object, so callers read `error_code` instead of parsing text.
            // Anything that is not an intake error is reported as INTAKE_FAILED without its
            // text (it may name paths or storage internals).
            let detail = match e {
                EvidenceError::Intake(i) => i.to_response(),
                _ => IntakeError::new(IntakeErrorCode::IntakeFailed, "intake processing failed")
                    .to_response(),
            };
            Err(
                CoreError::invalid("tool call refused: no receipt could be issued (fail-closed)")
                    .with("ccs", detail)
                    .with("reason", "evidence_intake_failed"),
            )
        }
    }
}
