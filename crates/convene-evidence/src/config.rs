//! Canonical configuration (§5), capability manifest (§4.6) and challenges (§4.7).

use crate::error::EvidenceError;
use crate::jcs::{canonicalize, jcs_sha256_hex};
use crate::keys::{verify_sig, KeyMaterial};
use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Receipt schema version produced by this crate.
pub const SCHEMA_VERSION: &str = "1.3";

/// Deployment mode (§8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeploymentMode {
    /// Verifier shares the agent's address space.
    #[serde(rename = "in-process")]
    InProcess,
    /// Verifier is a separate process that alone holds the key.
    #[serde(rename = "out-of-process")]
    OutOfProcess,
}

impl DeploymentMode {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProcess => "in-process",
            Self::OutOfProcess => "out-of-process",
        }
    }
}

/// Canonical configuration (Figure 5, plus §4.4 policy_floor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanonicalConfig {
    /// Ordered rule names.
    pub rules: Vec<String>,
    /// Policy version.
    pub policy_version: String,
    /// Signing key identifier.
    pub signing_key_id: String,
    /// Verifier software version.
    pub verifier_version: String,
    /// Receipt schema version.
    pub schema_version: String,
    /// Deployment mode.
    pub deployment_mode: DeploymentMode,
    /// SHA-256 of the capability manifest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest_hash: Option<String>,
    /// Minimum server security profile (§4.4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_floor: Option<String>,
}

impl CanonicalConfig {
    /// JCS bytes of the configuration (§5.2).
    pub fn canonical(&self) -> Result<String, EvidenceError> {
        canonicalize(&serde_json::to_value(self)?)
    }

    /// config_hash = hex SHA-256 of the canonical configuration (§5.3).
    pub fn hash(&self) -> Result<String, EvidenceError> {
        jcs_sha256_hex(&serde_json::to_value(self)?)
    }
}

/// Minimal RFC 3986 absolute-URI shape: `scheme:rest`, no whitespace.
pub fn is_uri(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once(':') else {
        return false;
    };
    let mut sc = scheme.chars();
    sc.next().is_some_and(|c| c.is_ascii_alphabetic())
        && sc.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Security profiles known to this verifier, weakest first (§4.4 ordering).
pub const PROFILE_ORDER: &[&str] = &["mcp-plain", "mcp-tls-1.2", "mcp-tls-1.3", "mcp-mtls"];

/// Rank of a profile, if this verifier holds it.
pub fn profile_rank(p: &str) -> Option<usize> {
    PROFILE_ORDER.iter().position(|x| *x == p)
}

/// Challenge-loop parameters published in the manifest (§4.6).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChallengePolicy {
    /// Expected issuer response time, seconds.
    pub expected_response_duration: u64,
    /// Multiplier applied to the expected duration.
    pub deadline_multiplier: u64,
    /// Absolute cap, seconds.
    pub max_deadline: u64,
}

impl Default for ChallengePolicy {
    fn default() -> Self {
        Self {
            expected_response_duration: 10,
            deadline_multiplier: 3,
            max_deadline: 120,
        }
    }
}

/// Signed verifier capability manifest (§4.6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest schema version.
    pub manifest_version: String,
    /// Stable verifier identifier.
    pub verifier_id: String,
    /// Profiles the verifier can evaluate.
    pub profiles: Vec<Value>,
    /// Challenge loop parameters.
    pub challenge_policy: ChallengePolicy,
    /// 16-hex fingerprint of the signing key.
    pub signing_key_fingerprint: String,
    /// Validity start.
    pub published_at: u64,
    /// Validity end.
    pub expires_at: u64,
    /// §7.3 announce (extension): the incoming key while receipts are dual-signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_signing_key: Option<NextSigningKey>,
    /// Ed25519 signature (hex) over JCS of the other fields.
    pub signature: String,
}

/// The incoming key a manifest announces during a §7.3 overlap. The draft names no field
/// for the announcement ("the new key identifier and effective date"); this one is ours.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NextSigningKey {
    /// Key identifier of the incoming key (its `signing_key_id` after cutover).
    pub key_id: String,
    /// 16-hex fingerprint of the incoming key, as in `cosignature.signing_key_fingerprint`.
    pub signing_key_fingerprint: String,
    /// Incoming public key, padded standard base64.
    pub public_key: String,
    /// When dual-signing began, Unix seconds.
    pub dual_sign_since: u64,
    /// Earliest cutover (dual_sign_since + 2 × receipt lifetime), Unix seconds.
    pub effective_at: u64,
}

impl Manifest {
    /// Build and sign a manifest declaring every profile in [`PROFILE_ORDER`].
    pub fn build(
        verifier_id: &str,
        keys: &KeyMaterial,
        policy: ChallengePolicy,
        published_at: u64,
        validity_secs: u64,
    ) -> Result<Self, EvidenceError> {
        let profiles = PROFILE_ORDER
            .iter()
            .enumerate()
            .map(|(i, p)| {
                json!({"profile_id": p, "capabilities": ["compare", "validate"],
                       "comparison_scope": PROFILE_ORDER[..=i]})
            })
            .collect();
        let mut m = Self {
            manifest_version: "1.0".into(),
            verifier_id: verifier_id.into(),
            profiles,
            challenge_policy: policy,
            signing_key_fingerprint: keys.fingerprint(),
            published_at,
            expires_at: published_at + validity_secs,
            next_signing_key: None,
            signature: String::new(),
        };
        m.sign(keys)?;
        Ok(m)
    }

    /// Announce the incoming key (§7.3 phase 1) and re-sign with the current key, so a
    /// consumer that trusts the current key learns the next one from a document it signed.
    pub fn announce_next(
        &mut self,
        keys: &KeyMaterial,
        next: &KeyMaterial,
        since: f64,
        effective_at: f64,
    ) -> Result<(), EvidenceError> {
        use base64::Engine;
        self.next_signing_key = Some(NextSigningKey {
            key_id: next.key_id.clone(),
            signing_key_fingerprint: next.fingerprint(),
            public_key: base64::engine::general_purpose::STANDARD.encode(next.public().to_bytes()),
            dual_sign_since: since.max(0.0) as u64,
            effective_at: effective_at.max(0.0).ceil() as u64,
        });
        self.sign(keys)
    }

    fn sign(&mut self, keys: &KeyMaterial) -> Result<(), EvidenceError> {
        let payload = self.payload()?;
        self.signature = hex::encode(keys.sign(payload.as_bytes()).to_bytes());
        Ok(())
    }

    fn payload(&self) -> Result<String, EvidenceError> {
        let mut v = serde_json::to_value(self)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("signature");
        }
        canonicalize(&v)
    }

    /// Verify the manifest signature and validity window.
    pub fn verify(&self, pk: &VerifyingKey, now: f64) -> bool {
        let Ok(p) = self.payload() else { return false };
        verify_sig(pk, p.as_bytes(), &self.signature)
            && (self.published_at as f64) <= now
            && now <= self.expires_at as f64
    }

    /// manifest_hash: hex SHA-256 of the canonical (signed) manifest.
    pub fn hash(&self) -> Result<String, EvidenceError> {
        jcs_sha256_hex(&serde_json::to_value(self)?)
    }

    /// Whether the manifest holds a profile.
    pub fn holds(&self, profile: &str) -> bool {
        self.profiles
            .iter()
            .any(|p| p.get("profile_id").and_then(Value::as_str) == Some(profile))
    }
}

/// Build a §4.7 challenge with the derivation-based deadline, capped by max_deadline.
pub fn challenge(
    missing: &[&str],
    format: &str,
    issued_at: u64,
    policy: &ChallengePolicy,
) -> Value {
    let derived = policy.expected_response_duration * policy.deadline_multiplier;
    let expires_at = issued_at + derived.min(policy.max_deadline);
    json!({
        "missing": missing,
        "format": format,
        "issued_at": issued_at,
        "expires_at": expires_at,
        "deadline_multiplier_applied": policy.deadline_multiplier,
        "base_duration": policy.expected_response_duration,
        "derivation": "expires_at = issued_at + (base_duration x deadline_multiplier)",
    })
}

/// Scope-comparison result (§4.5.1): UNDECIDED is per-comparison, never a verdict.
pub fn compare_profile(
    requested: &str,
    manifest: &Manifest,
    known_elsewhere: bool,
) -> Option<Value> {
    if manifest.holds(requested) {
        return None;
    }
    let reason = if known_elsewhere {
        "PROFILE_NOT_HELD"
    } else {
        "NO_COMPARISON_RELATION"
    };
    let held: Vec<&Value> = manifest
        .profiles
        .iter()
        .filter_map(|p| p.get("profile_id"))
        .collect();
    Some(json!({"verdict": "UNDECIDED", "reason": reason,
                "requested_profile": requested, "verifier_profiles": held}))
}

#[cfg(test)]
mod tests {
    use super::is_uri;

    #[test]
    fn ccs_6_7_uri_shape() {
        assert!(is_uri("https://verifier.example.com/ccs/v1"));
        assert!(is_uri("urn:convene:executor"));
        assert!(!is_uri("verifier"));
        assert!(!is_uri("1http://x"));
        assert!(!is_uri("https://a b"));
        assert!(!is_uri("https:"));
    }
}
