//! The CCS receipt (§4): fields, signed bytes, HMAC and Ed25519 signatures.

use crate::error::EvidenceError;
use crate::jcs::sha256_hex;
use crate::keys::{verify_sig, KeyMaterial, KeyState, TrustStore};
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

impl OutcomeStatus {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Confirmed => "confirmed",
            Self::Dispatched => "dispatched",
            Self::Indeterminate => "indeterminate",
        }
    }
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
    /// Second signature by the incoming key during a §7.3 dual-sign overlap (extension).
    ///
    /// Signs the same bytes as `signature` ([`Receipt::signature_payload`]), which never
    /// include this field: the primary signature means the same with or without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosignature: Option<Cosignature>,
}

/// The dual-sign extension (§7.3): the incoming key's signature over the primary payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cosignature {
    /// 16-hex fingerprint of the incoming key (how a consumer finds it in its trust store).
    pub signing_key_fingerprint: String,
    /// Ed25519 signature, 128 hex, over the same bytes as the primary `signature`.
    pub signature: String,
    /// L0 HMAC by the incoming key's secret over the same §4.2 bytes as the primary
    /// `receipt` (32 hex), so consumers holding only the new shared secret can check it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

type HmacSha256 = Hmac<Sha256>;

/// An HMAC-SHA256 key with its inner and outer pads already hashed: built once per
/// secret, cloned per message (saves two SHA-256 blocks per receipt).
#[derive(Clone)]
pub struct HmacKey(Option<HmacSha256>);

impl HmacKey {
    /// Prepare `secret` (HMAC takes keys of any length, so this does not fail in practice;
    /// a refused key yields no tag and verifies nothing).
    pub fn new(secret: &[u8]) -> Self {
        Self(HmacSha256::new_from_slice(secret).ok())
    }

    /// First 32 hex of HMAC-SHA256(secret, msg).
    fn tag_hex(&self, msg: &[u8]) -> String {
        let Some(mut mac) = self.0.clone() else {
            return String::new();
        };
        mac.update(msg);
        crate::jcs::hex_lower(&mac.finalize().into_bytes()[..16])
    }

    /// Constant-time check of a 32-hex truncated HMAC-SHA256 tag.
    fn verify(&self, msg: &[u8], tag: &str) -> bool {
        let mut want = [0u8; 16];
        if tag.len() != 32 || hex::decode_to_slice(tag, &mut want).is_err() {
            return false;
        }
        let Some(mut mac) = self.0.clone() else {
            return false;
        };
        mac.update(msg);
        mac.verify_truncated_left(&want).is_ok()
    }
}

impl Receipt {
    /// The §4.2 extended signing payload string.
    pub fn signed_bytes(&self) -> String {
        let mut o = String::with_capacity(768);
        self.write_signed_bytes(&mut o);
        o
    }

    /// Append the §4.2 payload (`:`-joined fields) to `o`.
    fn write_signed_bytes(&self, o: &mut String) {
        use crate::jcs::write_python_float;
        use std::fmt::Write;
        o.push_str(&self.trace_id);
        o.push(':');
        o.push_str(self.verdict.as_str());
        o.push(':');
        write_python_float(self.timestamp, o);
        for part in [
            &self.tool,
            &self.params_hash,
            &self.rule_summary,
            &self.request_hash,
            &self.response_hash,
            &self.runtime_context_hash,
            &self.action,
            &self.config_hash,
            &self.issuer,
            &self.audience,
            &self.nonce,
        ] {
            o.push(':');
            o.push_str(part);
        }
        let _ = write!(o, ":{}:", self.sequence);
        write_python_float(self.issued_at, o);
        o.push(':');
        write_python_float(self.expires_at, o);
    }

    /// L0 HMAC: first 32 hex of HMAC-SHA256(secret, signed bytes).
    pub fn compute_hmac(&self, secret: &[u8]) -> String {
        HmacKey::new(secret).tag_hex(self.signed_bytes().as_bytes())
    }

    /// Constant-time check of the L0 HMAC.
    pub fn verify_hmac(&self, secret: &[u8]) -> bool {
        HmacKey::new(secret).verify(self.signed_bytes().as_bytes(), &self.receipt)
    }

    /// Constant-time check of the L0 HMAC, accepting the cosignature's HMAC too (§7.3
    /// overlap): true if either was made with `secret` over the §4.2 bytes.
    pub fn verify_any_hmac(&self, secret: &[u8]) -> bool {
        self.verify_any_hmac_with(std::slice::from_ref(&HmacKey::new(secret)))
    }

    /// As [`Receipt::verify_any_hmac`], for prepared keys: true if the receipt's or its
    /// cosignature's HMAC verifies under any of `keys` (the §4.2 bytes are built once).
    pub fn verify_any_hmac_with(&self, keys: &[HmacKey]) -> bool {
        let payload = self.signed_bytes();
        let msg = payload.as_bytes();
        let co = self.cosignature.as_ref().and_then(|c| c.receipt.as_deref());
        keys.iter()
            .any(|k| k.verify(msg, &self.receipt) || co.is_some_and(|tag| k.verify(msg, tag)))
    }

    /// Canonical bytes covered by the Ed25519 signature (all fields but `signature`).
    pub fn signature_payload(&self) -> Result<String, EvidenceError> {
        self.canonical(false)
    }

    /// RFC 8785 form written directly (hot path); equal to JCS of the serde value.
    fn canonical(&self, with_signature: bool) -> Result<String, EvidenceError> {
        use crate::jcs::{write_es6, write_string, write_value, MAX_SAFE_INTEGER};
        use std::fmt::Write;
        let mut o = String::with_capacity(1024);
        let mut first = true;
        let mut key = |o: &mut String, k: &str| {
            o.push(if first { '{' } else { ',' });
            first = false;
            write_string(k, o);
            o.push(':');
        };
        // Keys in RFC 8785 order (all ASCII, so byte order is UTF-16 order).
        key(&mut o, "action");
        write_string(&self.action, &mut o);
        key(&mut o, "audience");
        write_string(&self.audience, &mut o);
        key(&mut o, "block_reason");
        write_string(&self.block_reason, &mut o);
        if let Some(c) = &self.challenge {
            key(&mut o, "challenge");
            write_value(c, &mut o)?;
        }
        if let Some(c) = &self.comparison_axis {
            key(&mut o, "comparison_axis");
            write_value(c, &mut o)?;
        }
        key(&mut o, "config_hash");
        write_string(&self.config_hash, &mut o);
        // The cosignature is part of the full receipt (receipt_hash) but not of the
        // primary signature's payload.
        if let (true, Some(c)) = (with_signature, &self.cosignature) {
            key(&mut o, "cosignature");
            o.push('{');
            if let Some(tag) = &c.receipt {
                o.push_str("\"receipt\":");
                write_string(tag, &mut o);
                o.push(',');
            }
            o.push_str("\"signature\":");
            write_string(&c.signature, &mut o);
            o.push_str(",\"signing_key_fingerprint\":");
            write_string(&c.signing_key_fingerprint, &mut o);
            o.push('}');
        }
        key(&mut o, "expires_at");
        write_es6(self.expires_at, &mut o)?;
        key(&mut o, "issued_at");
        write_es6(self.issued_at, &mut o)?;
        key(&mut o, "issuer");
        write_string(&self.issuer, &mut o);
        key(&mut o, "max_clock_skew");
        write_es6(self.max_clock_skew, &mut o)?;
        key(&mut o, "nonce");
        write_string(&self.nonce, &mut o);
        if let Some(st) = self.outcome_status {
            key(&mut o, "outcome_status");
            write_string(st.as_str(), &mut o);
        }
        key(&mut o, "params_hash");
        write_string(&self.params_hash, &mut o);
        if let Some(p) = &self.parent_trace_id {
            key(&mut o, "parent_trace_id");
            write_string(p, &mut o);
        }
        if let Some(p) = &self.previous_receipt_hash {
            key(&mut o, "previous_receipt_hash");
            write_string(p, &mut o);
        }
        key(&mut o, "receipt");
        write_string(&self.receipt, &mut o);
        key(&mut o, "request_hash");
        write_string(&self.request_hash, &mut o);
        key(&mut o, "response_hash");
        write_string(&self.response_hash, &mut o);
        key(&mut o, "rule_summary");
        write_string(&self.rule_summary, &mut o);
        key(&mut o, "runtime_context_hash");
        write_string(&self.runtime_context_hash, &mut o);
        key(&mut o, "sequence");
        if self.sequence > MAX_SAFE_INTEGER {
            return Err(EvidenceError::Canonical("sequence beyond 2^53".into()));
        }
        let _ = write!(o, "{}", self.sequence);
        if with_signature {
            key(&mut o, "signature");
            write_string(&self.signature, &mut o);
        }
        key(&mut o, "timestamp");
        write_es6(self.timestamp, &mut o)?;
        key(&mut o, "tool");
        write_string(&self.tool, &mut o);
        key(&mut o, "trace_id");
        write_string(&self.trace_id, &mut o);
        key(&mut o, "verdict");
        write_string(self.verdict.as_str(), &mut o);
        key(&mut o, "verified_at");
        write_es6(self.verified_at, &mut o)?;
        o.push('}');
        Ok(o)
    }

    /// Recompute HMAC and Ed25519 signature with the given keys (single signature).
    pub fn seal(&mut self, keys: &KeyMaterial) -> Result<(), EvidenceError> {
        self.seal_dual(keys, None)
    }

    /// Recompute HMAC and signature with `keys`; during a §7.3 overlap also cosign with
    /// the incoming key `next` (None removes any cosignature).
    pub fn seal_dual(
        &mut self,
        keys: &KeyMaterial,
        next: Option<&KeyMaterial>,
    ) -> Result<(), EvidenceError> {
        let l0 = self.signed_bytes();
        self.receipt = keys.hmac_key().tag_hex(l0.as_bytes());
        let payload = self.signature_payload()?;
        self.signature = crate::jcs::hex_lower(&keys.sign(payload.as_bytes()).to_bytes());
        self.cosignature = next.map(|n| Cosignature {
            signing_key_fingerprint: n.fingerprint(),
            signature: crate::jcs::hex_lower(&n.sign(payload.as_bytes()).to_bytes()),
            receipt: Some(n.hmac_key().tag_hex(l0.as_bytes())),
        });
        Ok(())
    }

    /// Verify the cosignature, if any, with a given key.
    pub fn verify_cosignature(&self, pk: &VerifyingKey) -> bool {
        match (&self.cosignature, self.signature_payload()) {
            (Some(c), Ok(p)) if is_lower_hex(&c.signature, 128) => {
                verify_sig(pk, p.as_bytes(), &c.signature)
            }
            _ => false,
        }
    }

    /// Step 3 against a consumer's trust store, dual-sign aware (§7.3).
    ///
    /// Accepted when the primary signature or the cosignature verifies under a key the
    /// store accepts for this issuer at `issued_at`. A cosignature is refused outright
    /// when it is malformed, names a revoked key, or names a key the store holds (in any
    /// other state) and does not verify under it. A cosignature naming a key the store
    /// does not hold cannot be checked and adds nothing: acceptance then rests on the
    /// primary signature alone (the same as if it were stripped).
    pub fn verify_with_trust(&self, trust: &TrustStore) -> bool {
        // Only the issued encoding counts: the signature is outside its own payload, so an
        // upper-case or base64 copy would be a second, differently hashed "same" receipt.
        if !is_lower_hex(&self.signature, 128) {
            return false;
        }
        let Ok(payload) = self.signature_payload() else {
            return false;
        };
        let msg = payload.as_bytes();
        let mut accepted = false;
        if let Some(c) = &self.cosignature {
            if !is_lower_hex(&c.signing_key_fingerprint, 16) || !is_lower_hex(&c.signature, 128) {
                return false;
            }
            if let Some((pk, state)) = trust.enrolled(&self.issuer, &c.signing_key_fingerprint) {
                if state == KeyState::Revoked || !verify_sig(&pk, msg, &c.signature) {
                    return false;
                }
                accepted = trust
                    .key_for(&self.issuer, &c.signing_key_fingerprint, self.issued_at)
                    .is_some();
            }
        }
        accepted
            || trust
                .usable_keys(&self.issuer, self.issued_at)
                .any(|k| verify_sig(&k, msg, &self.signature))
    }

    /// Verify the Ed25519 signature with a pinned public key.
    pub fn verify_signature(&self, pk: &VerifyingKey) -> bool {
        if !is_lower_hex(&self.signature, 128) {
            return false;
        }
        match self.signature_payload() {
            Ok(p) => verify_sig(pk, p.as_bytes(), &self.signature),
            Err(_) => false,
        }
    }

    /// "sha256:" + hex SHA-256 of the JCS of the full receipt (chain linkage).
    pub fn receipt_hash(&self) -> Result<String, EvidenceError> {
        Ok(format!(
            "sha256:{}",
            sha256_hex(self.canonical(true)?.as_bytes())
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Receipt {
        Receipt {
            trace_id: "t\u{e9}\"x".into(),
            verdict: Verdict::Deny,
            timestamp: 1722384000.123456,
            tool: "shell_exec".into(),
            params_hash: "ab".repeat(32),
            rule_summary: "a=allow|b=deny".into(),
            receipt: "00".repeat(16),
            verified_at: 1722384000.5,
            block_reason: "RCE\n".into(),
            request_hash: "sha256:x".into(),
            response_hash: String::new(),
            runtime_context_hash: "sha256:y".into(),
            action: "ccs:tool-invoke:shell_exec:ab".into(),
            config_hash: "cd".repeat(32),
            issuer: "https://i".into(),
            audience: "https://a".into(),
            nonce: "ef".repeat(16),
            sequence: 42,
            issued_at: 1722384000.0,
            expires_at: 1722384060.0,
            max_clock_skew: 30.0,
            signature: "ff".repeat(64),
            outcome_status: Some(OutcomeStatus::Confirmed),
            previous_receipt_hash: Some("sha256:p".into()),
            parent_trace_id: Some("parent".into()),
            challenge: Some(json!({"missing":["x"],"\u{20ac}":1,"a":1.5})),
            comparison_axis: Some(json!({"verdict":"UNDECIDED"})),
            cosignature: Some(Cosignature {
                signing_key_fingerprint: "0123456789abcdef".into(),
                signature: "ee".repeat(64),
                receipt: Some("\u{e9}d".repeat(16)),
            }),
        }
    }

    fn generic(r: &Receipt, with_sig: bool) -> String {
        let mut v = serde_json::to_value(r).unwrap();
        if !with_sig {
            let o = v.as_object_mut().unwrap();
            o.remove("signature");
            o.remove("cosignature");
        }
        crate::jcs::canonicalize(&v).unwrap()
    }

    #[test]
    fn ccs_14_1_direct_canonical_writer_equals_generic_jcs() {
        let mut r = sample();
        assert_eq!(r.canonical(false).unwrap(), generic(&r, false));
        assert_eq!(r.canonical(true).unwrap(), generic(&r, true));
        if let Some(c) = r.cosignature.as_mut() {
            c.receipt = None;
        }
        assert_eq!(r.canonical(true).unwrap(), generic(&r, true));
        r.outcome_status = None;
        r.previous_receipt_hash = None;
        r.parent_trace_id = None;
        r.challenge = None;
        r.comparison_axis = None;
        r.cosignature = None;
        r.verdict = Verdict::Allow;
        assert_eq!(r.canonical(false).unwrap(), generic(&r, false));
        assert_eq!(r.canonical(true).unwrap(), generic(&r, true));
    }

    /// The pre-optimization §4.2 payload, kept as the reference.
    pub(crate) fn signed_bytes_reference(r: &Receipt) -> String {
        use crate::jcs::format_python_float as p;
        format!(
            "{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}",
            r.trace_id,
            r.verdict.as_str(),
            p(r.timestamp),
            r.tool,
            r.params_hash,
            r.rule_summary,
            r.request_hash,
            r.response_hash,
            r.runtime_context_hash,
            r.action,
            r.config_hash,
            r.issuer,
            r.audience,
            r.nonce,
            r.sequence,
            p(r.issued_at),
            p(r.expires_at),
        )
    }

    #[test]
    fn ccs_4_2_signed_bytes_writer_equals_reference_format() {
        let mut r = sample();
        for (t, i, e) in [
            (1722384000.123456, 1722384000.0, 1722384060.0),
            (0.0, -0.0, 1e-5),
            (1e16, 1.5e300, 123.456e-10),
            (f64::NAN, f64::INFINITY, f64::NEG_INFINITY),
        ] {
            r.timestamp = t;
            r.issued_at = i;
            r.expires_at = e;
            assert_eq!(r.signed_bytes(), signed_bytes_reference(&r));
            let secret = [7u8; 32];
            let h = r.compute_hmac(&secret);
            assert_eq!(h.len(), 32);
            r.receipt = h;
            assert!(r.verify_hmac(&secret));
            r.receipt
                .replace_range(0..1, if r.receipt.starts_with('0') { "1" } else { "0" });
            assert!(!r.verify_hmac(&secret));
        }
    }
}
