//! Key management (§7): generation, enrollment, rotation and revocation.

use crate::error::EvidenceError;
use crate::jcs::sha256_hex;
use crate::receipt::HmacKey;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::hazmat::{raw_sign, ExpandedSecretKey};
use ed25519_dalek::{Signature, SigningKey, Verifier, VerifyingKey};
use rand_core::{OsRng, RngCore};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Verifier key material: an Ed25519 key pair plus the L0 HMAC secret.
#[derive(Clone)]
pub struct KeyMaterial {
    /// Stable key identifier bound into the canonical configuration.
    pub key_id: String,
    signing: SigningKey,
    /// SHA-512 expansion of the seed, computed once instead of at every signature.
    expanded: Arc<ExpandedSecretKey>,
    fingerprint: String,
    hmac_secret: [u8; 32],
    /// `hmac_secret` prepared for HMAC once.
    hmac_key: HmacKey,
}

impl std::fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print secrets, even in debug logs.
        f.debug_struct("KeyMaterial")
            .field("key_id", &self.key_id)
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

/// On-disk form of a private key file (JSON).
#[derive(Clone, Serialize, Deserialize)]
pub struct KeyFile {
    /// Key identifier.
    pub key_id: String,
    /// Ed25519 secret seed, hex.
    pub ed25519_secret_hex: String,
    /// HMAC secret, hex.
    pub hmac_secret_hex: String,
    /// Public key, padded standard base64 (for convenience).
    pub public_key: String,
    /// 16-hex fingerprint of the public key.
    pub fingerprint: String,
    /// A §7.3 rotation in progress (`evidence rotate`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<crate::rotation::Rotation>,
}

impl KeyMaterial {
    /// Generate fresh keys from the OS CSPRNG (§7.1: never from predictable sources).
    pub fn generate(key_id: Option<String>) -> Self {
        let mut seed = [0u8; 32];
        OsRng.fill_bytes(&mut seed);
        let mut hmac_secret = [0u8; 32];
        OsRng.fill_bytes(&mut hmac_secret);
        let mut k = Self::from_secrets("", seed, hmac_secret);
        k.key_id = key_id.unwrap_or_else(|| format!("key-{}", k.fingerprint));
        k
    }

    /// Build from known secrets (test vectors, key files).
    pub fn from_secrets(key_id: &str, seed: [u8; 32], hmac_secret: [u8; 32]) -> Self {
        let signing = SigningKey::from_bytes(&seed);
        Self {
            key_id: key_id.to_string(),
            expanded: Arc::new(ExpandedSecretKey::from(&seed)),
            fingerprint: fingerprint_of(&signing.verifying_key()),
            signing,
            hmac_secret,
            hmac_key: HmacKey::new(&hmac_secret),
        }
    }

    /// The Ed25519 public key.
    pub fn public(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }

    /// 16-hex fingerprint: first 16 hex of sha256(raw public key).
    pub fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }

    /// The HMAC secret prepared for computing receipt HMACs.
    pub fn hmac_key(&self) -> &HmacKey {
        &self.hmac_key
    }

    /// HMAC secret bytes (shared-secret deployments only).
    pub fn hmac_secret(&self) -> &[u8; 32] {
        &self.hmac_secret
    }

    /// Sign bytes with Ed25519.
    pub fn sign(&self, msg: &[u8]) -> Signature {
        // RFC 8032 signing with the cached expansion; byte-identical to SigningKey::sign
        // (held by keys::tests::cached_expansion_signs_like_signing_key).
        raw_sign::<sha2::Sha512>(&self.expanded, msg, self.signing.as_ref())
    }

    /// Serialize to a key file.
    pub fn to_file(&self) -> KeyFile {
        KeyFile {
            key_id: self.key_id.clone(),
            ed25519_secret_hex: hex::encode(self.signing.to_bytes()),
            hmac_secret_hex: hex::encode(self.hmac_secret),
            public_key: B64.encode(self.public().to_bytes()),
            fingerprint: self.fingerprint(),
            rotation: None,
        }
    }

    /// Load from a key file.
    pub fn from_file(f: &KeyFile) -> Result<Self, EvidenceError> {
        let seed = decode32(&f.ed25519_secret_hex)?;
        let h = decode32(&f.hmac_secret_hex)?;
        let k = Self::from_secrets(&f.key_id, seed, h);
        if k.fingerprint() != f.fingerprint {
            return Err(EvidenceError::Key("fingerprint does not match key".into()));
        }
        Ok(k)
    }
}

fn decode32(h: &str) -> Result<[u8; 32], EvidenceError> {
    let v = hex::decode(h).map_err(|_| EvidenceError::Key("bad hex".into()))?;
    v.try_into()
        .map_err(|_| EvidenceError::Key("expected 32 bytes".into()))
}

/// 16-hex fingerprint of a public key.
pub fn fingerprint_of(pk: &VerifyingKey) -> String {
    sha256_hex(pk.as_bytes())[..16].to_string()
}

/// Full 64-hex SHA-256 fingerprint (used as trust_anchor_reference).
pub fn full_fingerprint_of(pk: &VerifyingKey) -> String {
    sha256_hex(pk.as_bytes())
}

/// Parse a padded standard base64 public key.
pub fn public_from_b64(s: &str) -> Result<VerifyingKey, EvidenceError> {
    let raw = B64
        .decode(s)
        .map_err(|_| EvidenceError::Key("public key is not base64".into()))?;
    let arr: [u8; 32] = raw
        .try_into()
        .map_err(|_| EvidenceError::Key("public key must be 32 bytes".into()))?;
    VerifyingKey::from_bytes(&arr).map_err(|_| EvidenceError::Key("invalid Ed25519 key".into()))
}

/// Verify an Ed25519 signature given as hex (128 chars) or base64.
pub fn verify_sig(pk: &VerifyingKey, msg: &[u8], sig: &str) -> bool {
    let mut arr = [0u8; 64];
    if sig.len() == 128 {
        if hex::decode_to_slice(sig, &mut arr).is_err() {
            return false;
        }
    } else {
        let Ok(raw) = B64.decode(sig) else {
            return false;
        };
        let Ok(a) = <[u8; 64]>::try_from(raw.as_slice()) else {
            return false;
        };
        arr = a;
    }
    pk.verify(msg, &Signature::from_bytes(&arr)).is_ok()
}

/// Lifecycle state of an enrolled key (§7.3 phases plus revocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    /// Announced; not yet accepted.
    Announced,
    /// Accepted (current, or in the dual-sign overlap).
    Active,
    /// Accepted only for receipts issued before `retire_after`.
    Retiring,
    /// No longer accepted.
    Retired,
    /// Compromised: never accepted again, and in-flight evidence must be re-validated.
    Revoked,
}

/// One pinned public key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EnrolledKey {
    /// Issuer URI the key is pinned for.
    pub issuer: String,
    /// Padded standard base64 public key.
    pub public_key: String,
    /// 16-hex fingerprint.
    pub fingerprint: String,
    /// Lifecycle state.
    pub state: KeyState,
    /// For Retiring keys: receipts issued after this instant are refused.
    pub retire_after: Option<f64>,
    /// Decoded key, cached so verification does not re-decompress the point.
    #[serde(skip)]
    pub parsed: Option<VerifyingKey>,
}

/// Consumer-side trust store of pinned keys (§7.2).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TrustStore {
    /// Keys by fingerprint.
    #[serde(deserialize_with = "keys_decoded")]
    pub keys: BTreeMap<String, EnrolledKey>,
}

/// Keys read from a trust file, decoded once here: `parsed` is not serialized, and without
/// it every verification would decode and decompress the key again.
fn keys_decoded<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, EnrolledKey>, D::Error> {
    let mut keys = BTreeMap::<String, EnrolledKey>::deserialize(d)?;
    for k in keys.values_mut() {
        // An undecodable key stays None and is refused at use, as before.
        k.parsed = public_from_b64(&k.public_key).ok();
    }
    Ok(keys)
}

impl TrustStore {
    /// Enroll a key pinned out-of-band; the fingerprint must match the key (§7.2).
    pub fn enroll(
        &mut self,
        issuer: &str,
        public_key_b64: &str,
        expected_fingerprint: &str,
    ) -> Result<(), EvidenceError> {
        let pk = public_from_b64(public_key_b64)?;
        let fp = fingerprint_of(&pk);
        if fp != expected_fingerprint && full_fingerprint_of(&pk) != expected_fingerprint {
            return Err(EvidenceError::Key("pinned fingerprint mismatch".into()));
        }
        if let Some(k) = self.keys.get(&fp) {
            if k.state == KeyState::Revoked {
                return Err(EvidenceError::Key("key was revoked".into()));
            }
        }
        self.keys.insert(
            fp.clone(),
            EnrolledKey {
                issuer: issuer.to_string(),
                public_key: public_key_b64.to_string(),
                fingerprint: fp,
                state: KeyState::Active,
                retire_after: None,
                parsed: Some(pk),
            },
        );
        Ok(())
    }

    /// Phase 1 (announce) of a rotation: the new key is known but not yet accepted.
    pub fn announce(
        &mut self,
        issuer: &str,
        public_key_b64: &str,
        fp: &str,
    ) -> Result<(), EvidenceError> {
        self.enroll(issuer, public_key_b64, fp)?;
        if let Some(k) = self.keys.get_mut(&fp[..16.min(fp.len())]) {
            k.state = KeyState::Announced;
        }
        Ok(())
    }

    /// Phase 2 (dual-sign): accept the announced key alongside the old one.
    pub fn activate(&mut self, fp: &str) -> Result<(), EvidenceError> {
        let k = self
            .keys
            .get_mut(fp)
            .ok_or_else(|| EvidenceError::Key("unknown key".into()))?;
        if k.state == KeyState::Revoked {
            return Err(EvidenceError::Key("key was revoked".into()));
        }
        k.state = KeyState::Active;
        Ok(())
    }

    /// Phase 3 (cutover): the old key only validates receipts issued before `cutover_at`.
    ///
    /// `overlap_secs` must be at least twice the maximum receipt lifetime (§7.3).
    pub fn cutover(
        &mut self,
        old_fp: &str,
        cutover_at: f64,
        overlap_secs: f64,
        max_receipt_lifetime: f64,
    ) -> Result<(), EvidenceError> {
        if overlap_secs < 2.0 * max_receipt_lifetime {
            return Err(EvidenceError::Invalid(
                "overlap window must be >= 2x max receipt lifetime".into(),
            ));
        }
        let k = self.unrevoked(old_fp)?;
        k.state = KeyState::Retiring;
        k.retire_after = Some(cutover_at);
        Ok(())
    }

    /// Phase 4 (retire): the old key is no longer accepted at all.
    pub fn retire(&mut self, fp: &str) -> Result<(), EvidenceError> {
        self.unrevoked(fp)?.state = KeyState::Retired;
        Ok(())
    }

    /// An enrolled key that may still change phase: revocation is final, so a revoked
    /// key can never be made Retiring (usable again) or Retired (re-enrollable).
    fn unrevoked(&mut self, fp: &str) -> Result<&mut EnrolledKey, EvidenceError> {
        let k = self
            .keys
            .get_mut(fp)
            .ok_or_else(|| EvidenceError::Key("unknown key".into()))?;
        if k.state == KeyState::Revoked {
            return Err(EvidenceError::Key("key was revoked".into()));
        }
        Ok(k)
    }

    /// Revoke a compromised trust anchor (§14); it can never be re-enrolled.
    pub fn revoke(&mut self, fp: &str) -> Result<(), EvidenceError> {
        let k = self
            .keys
            .get_mut(fp)
            .ok_or_else(|| EvidenceError::Key("unknown key".into()))?;
        k.state = KeyState::Revoked;
        Ok(())
    }

    /// Key usable for a receipt by `issuer` with this fingerprint issued at `issued_at`.
    pub fn key_for(&self, issuer: &str, fp: &str, issued_at: f64) -> Option<VerifyingKey> {
        let k = self.keys.get(fp)?;
        if k.issuer != issuer {
            return None;
        }
        Self::usable(k, issued_at)
    }

    /// Any enrolled key of `issuer` with this 16-hex fingerprint, whatever its state.
    pub fn enrolled(&self, issuer: &str, fp: &str) -> Option<(VerifyingKey, KeyState)> {
        let k = self.keys.get(fp).filter(|k| k.issuer == issuer)?;
        let pk = match k.parsed {
            Some(pk) => pk,
            None => public_from_b64(&k.public_key).ok()?,
        };
        Some((pk, k.state))
    }

    /// All usable keys of an issuer (for receipts that do not name their key).
    pub fn keys_for_issuer(&self, issuer: &str, issued_at: f64) -> Vec<VerifyingKey> {
        self.usable_keys(issuer, issued_at).collect()
    }

    /// Iterator form of [`TrustStore::keys_for_issuer`] (no allocation, one map walk).
    pub fn usable_keys<'a>(
        &'a self,
        issuer: &'a str,
        issued_at: f64,
    ) -> impl Iterator<Item = VerifyingKey> + 'a {
        self.keys
            .values()
            .filter(move |k| k.issuer == issuer)
            .filter_map(move |k| Self::usable(k, issued_at))
    }

    fn usable(k: &EnrolledKey, issued_at: f64) -> Option<VerifyingKey> {
        let ok = match k.state {
            KeyState::Active => true,
            KeyState::Retiring => k.retire_after.is_some_and(|t| issued_at <= t),
            _ => false,
        };
        if !ok {
            return None;
        }
        match k.parsed {
            Some(pk) => Some(pk),
            None => public_from_b64(&k.public_key).ok(),
        }
    }

    /// Whether a fingerprint (16 or 64 hex, optional "sha256:" prefix) is enrolled and usable.
    pub fn has_anchor(&self, reference: &str) -> bool {
        let r = reference.strip_prefix("sha256:").unwrap_or(reference);
        self.keys.values().any(|k| {
            matches!(k.state, KeyState::Active | KeyState::Retiring)
                && (k.fingerprint == r
                    || public_from_b64(&k.public_key)
                        .map(|pk| full_fingerprint_of(&pk) == r)
                        .unwrap_or(false))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ccs_7_1_1_keys_are_random_and_distinct() {
        let a = KeyMaterial::generate(None);
        let b = KeyMaterial::generate(None);
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.hmac_secret(), b.hmac_secret());
        assert_ne!(a.hmac_secret(), &[0u8; 32]);
    }

    #[test]
    fn trust_store_read_from_json_has_its_keys_decoded() {
        let k = KeyMaterial::generate(None);
        let mut ts = TrustStore::default();
        ts.enroll(
            "urn:i",
            &B64.encode(k.public().to_bytes()),
            &k.fingerprint(),
        )
        .unwrap();
        let mut json = serde_json::to_value(&ts).unwrap();
        let loaded: TrustStore = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(loaded.keys[&k.fingerprint()].parsed, Some(k.public()));
        assert_eq!(loaded.usable_keys("urn:i", 0.0).count(), 1);
        // A key that does not decode stays unusable.
        json["keys"][k.fingerprint()]["public_key"] = "AAAA".into();
        let bad: TrustStore = serde_json::from_value(json).unwrap();
        assert!(bad.keys[&k.fingerprint()].parsed.is_none());
        assert_eq!(bad.usable_keys("urn:i", 0.0).count(), 0);
    }

    #[test]
    fn cached_expansion_signs_like_signing_key() {
        use ed25519_dalek::Signer;
        for n in [0usize, 1, 64, 900, 5000] {
            let k = KeyMaterial::generate(None);
            let msg: Vec<u8> = (0..n).map(|i| (i * 7 + n) as u8).collect();
            assert_eq!(k.sign(&msg), k.signing.sign(&msg));
            assert!(k.public().verify(&msg, &k.sign(&msg)).is_ok());
        }
    }

    #[test]
    fn key_file_round_trip_and_tamper() {
        let a = KeyMaterial::generate(Some("k1".into()));
        let mut f = a.to_file();
        let b = KeyMaterial::from_file(&f).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        f.fingerprint = "0000000000000000".into();
        assert!(KeyMaterial::from_file(&f).is_err());
    }

    #[test]
    fn ccs_7_2_4_enrollment_requires_matching_pin() {
        let a = KeyMaterial::generate(None);
        let pk = B64.encode(a.public().to_bytes());
        let mut ts = TrustStore::default();
        assert!(ts.enroll("https://v", &pk, "deadbeefdeadbeef").is_err());
        ts.enroll("https://v", &pk, &a.fingerprint()).unwrap();
        assert!(ts.key_for("https://v", &a.fingerprint(), 1.0).is_some());
        assert!(ts.key_for("https://other", &a.fingerprint(), 1.0).is_none());
    }

    #[test]
    fn ccs_7_3_1_phased_rotation_and_revocation() {
        let old = KeyMaterial::generate(None);
        let new = KeyMaterial::generate(None);
        let mut ts = TrustStore::default();
        ts.enroll(
            "i",
            &B64.encode(old.public().to_bytes()),
            &old.fingerprint(),
        )
        .unwrap();
        ts.announce(
            "i",
            &B64.encode(new.public().to_bytes()),
            &new.fingerprint(),
        )
        .unwrap();
        assert!(
            ts.key_for("i", &new.fingerprint(), 10.0).is_none(),
            "announced not accepted"
        );
        ts.activate(&new.fingerprint()).unwrap();
        assert!(ts.key_for("i", &new.fingerprint(), 10.0).is_some());
        // CCS-7.3-2: overlap shorter than 2x lifetime is refused.
        assert!(ts.cutover(&old.fingerprint(), 100.0, 60.0, 60.0).is_err());
        ts.cutover(&old.fingerprint(), 100.0, 120.0, 60.0).unwrap();
        assert!(ts.key_for("i", &old.fingerprint(), 99.0).is_some());
        assert!(ts.key_for("i", &old.fingerprint(), 101.0).is_none());
        ts.retire(&old.fingerprint()).unwrap();
        assert!(ts.key_for("i", &old.fingerprint(), 99.0).is_none());
        ts.revoke(&new.fingerprint()).unwrap();
        assert!(ts.key_for("i", &new.fingerprint(), 10.0).is_none());
        // Revocation is final: no later phase change brings the key back.
        assert!(ts.retire(&new.fingerprint()).is_err());
        assert!(ts.cutover(&new.fingerprint(), 100.0, 120.0, 60.0).is_err());
        assert!(ts.activate(&new.fingerprint()).is_err());
        assert!(ts.key_for("i", &new.fingerprint(), 10.0).is_none());
        assert!(!ts.has_anchor(&new.fingerprint()));
        assert!(ts
            .enroll(
                "i",
                &B64.encode(new.public().to_bytes()),
                &new.fingerprint()
            )
            .is_err());
    }
}
