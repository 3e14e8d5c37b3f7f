//! The CCS receipt (§4): fields, signed bytes, HMAC and Ed25519 signatures.

use crate::error::EvidenceError;
use crate::jcs::{canonicalize, format_python_float, sha256_hex};
use crate::keys::{verify_sig, KeyMaterial};
use ed25519_dalek::VerifyingKey;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

/// Verdict of the evidence-sufficiency axis (§4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Passed every verification dimension.
    Allow,
    /// Failed one or more dimensions.
    Deny,
    /// The verifier cannot decide.
    Escalate,
}

impl Verdict {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Escalate => "escalate",
        }
    }
}

/// Executor lifecycle axis (§4.5); never a verdict (§14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutcomeStatus {
    /// Outcome fully observable.
    Confirmed,
    /// Authorized, no outcome evidence yet.
    Dispatched,
    /// Outcome cannot be determined; the record stays open.
    Indeterminate,
}

/// A CCS v1.3 receipt: the 22 fields of Figure 4 plus optional extensions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// 1. Trace id of the verification event.
    pub trace_id: String,
    /// 2. Verdict.
    pub verdict: Verdict,
    /// 3. Unix time the verdict was finalized.
    pub timestamp: f64,
    /// 4. Tool name.
    pub tool: String,
    /// 5. Full 64-hex SHA-256 of the canonical params.
    pub params_hash: String,
    /// 6. Pipe-delimited rule=verdict pairs.
    pub rule_summary: String,
    /// 7. HMAC-SHA256 over the extended signed bytes, 32 hex.
    pub receipt: String,
    /// 8. Unix time of verification.
    pub verified_at: f64,
    /// 9. Reason for deny/escalate; empty for allow.
    pub block_reason: String,
    /// 10. "sha256:" + hex of the canonical request bytes (§6.1).
    pub request_hash: String,
    /// 11. "sha256:" + hex of the canonical response, or "" before the tool ran (§6.2).
    pub response_hash: String,
    /// 12. "sha256:" + hex of the canonical runtime context (§6.3).
    pub runtime_context_hash: String,
    /// 13. `ccs:tool-invoke:{tool}:{params sha256}` (§6.4).
    pub action: String,
    /// 14. 64-hex SHA-256 of the canonical configuration (§5.3).
    pub config_hash: String,
    /// 15. Verifier URI.
    pub issuer: String,
    /// 16. Consumer URI.
    pub audience: String,
    /// 17. 32-hex random nonce.
    pub nonce: String,
    /// 18. Monotonic per-issuer counter.
    pub sequence: u64,
    /// 19. Issue time.
    pub issued_at: f64,
    /// 20. Expiry time.
    pub expires_at: f64,
    /// 21. Clock skew tolerance, seconds.
    pub max_clock_skew: f64,
    /// 22. Ed25519 signature (128 hex) over JCS of every other field.
    pub signature: String,
    /// Outcome axis (§4.5, optional per §12.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome_status: Option<OutcomeStatus>,
    /// Hash of the previous hop's receipt when issued under delegation (§11.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_receipt_hash: Option<String>,
    /// Parent trace id under delegation (§11.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_trace_id: Option<String>,
    /// Challenge for missing evidence (§4.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge: Option<Value>,
    /// UNDECIDED scope-comparison result (§4.5.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison_axis: Option<Value>,
}

type HmacSha256 = Hmac<Sha256>;

impl Receipt {
    /// The §4.2 extended signing payload string.
    pub fn signed_bytes(&self) -> String {
        format!(
            "{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}",
            self.trace_id,
            self.verdict.as_str(),
            format_python_float(self.timestamp),
            self.tool,
            self.params_hash,
            self.rule_summary,
            self.request_hash,
            self.response_hash,
            self.runtime_context_hash,
            self.action,
            self.config_hash,
            self.issuer,
            self.audience,
            self.nonce,
            self.sequence,
            format_python_float(self.issued_at),
            format_python_float(self.expires_at),
        )
    }

    /// L0 HMAC: first 32 hex of HMAC-SHA256(secret, signed bytes).
    pub fn compute_hmac(&self, secret: &[u8]) -> String {
        // new_from_slice only fails for invalid key lengths, which HMAC has none of.
        let mut mac = match HmacSha256::new_from_slice(secret) {
            Ok(m) => m,
            Err(_) => return String::new(),
        };
        mac.update(self.signed_bytes().as_bytes());
        hex::encode(mac.finalize().into_bytes())[..32].to_string()
    }

    /// Constant-time check of the L0 HMAC.
    pub fn verify_hmac(&self, secret: &[u8]) -> bool {
        let Ok(mut mac) = HmacSha256::new_from_slice(secret) else {
            return false;
        };
        mac.update(self.signed_bytes().as_bytes());
        let Ok(want) = hex::decode(&self.receipt) else {
            return false;
        };
        if want.len() != 16 {
            return false;
        }
        mac.verify_truncated_left(&want).is_ok()
    }

    /// Canonical bytes covered by the Ed25519 signature (all fields but `signature`).
    pub fn signature_payload(&self) -> Result<String, EvidenceError> {
        let mut v = serde_json::to_value(self)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("signature");
        }
        canonicalize(&v)
    }

    /// Recompute HMAC and Ed25519 signature with the given keys.
    pub fn seal(&mut self, keys: &KeyMaterial) -> Result<(), EvidenceError> {
        self.receipt = self.compute_hmac(keys.hmac_secret());
        let payload = self.signature_payload()?;
        self.signature = hex::encode(keys.sign(payload.as_bytes()).to_bytes());
        Ok(())
    }

    /// Verify the Ed25519 signature with a pinned public key.
    pub fn verify_signature(&self, pk: &VerifyingKey) -> bool {
        match self.signature_payload() {
            Ok(p) => verify_sig(pk, p.as_bytes(), &self.signature),
            Err(_) => false,
        }
    }

    /// "sha256:" + hex SHA-256 of the JCS of the full receipt (chain linkage).
    pub fn receipt_hash(&self) -> Result<String, EvidenceError> {
        let v = serde_json::to_value(self)?;
        Ok(format!(
            "sha256:{}",
            sha256_hex(canonicalize(&v)?.as_bytes())
        ))
    }

    /// JSON value of the receipt.
    pub fn to_value(&self) -> Result<Value, EvidenceError> {
        Ok(serde_json::to_value(self)?)
    }

    /// Parse a receipt, refusing error responses posing as receipts (§3.4).
    pub fn from_value(v: &Value) -> Result<Self, EvidenceError> {
        if v.get("error_code").is_some() {
            return Err(EvidenceError::Invalid(
                "error response is not a receipt".into(),
            ));
        }
        Ok(serde_json::from_value(v.clone())?)
    }
}

/// Compute `action` for a tool and full params hash (§6.4).
pub fn action_for(tool: &str, params_hash: &str) -> String {
    format!("ccs:tool-invoke:{tool}:{params_hash}")
}
