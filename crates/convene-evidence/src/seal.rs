//! Chain seals: a signed statement of where an evidence chain ends.
//!
//! Signed links (§11.4) prove every hop back to the origin, but nothing in a chain proves
//! that it stops where it stops: dropping the last hops leaves a valid, shorter chain. A seal
//! is the closing verifier's signature over the chain id, the last receipt and the hop
//! count. It survives pruning (which keeps the origin, the last receipt and the numbering)
//! and is void once the chain grows.

use crate::chain::EvidenceChain;
use crate::error::EvidenceError;
use crate::jcs::{canonicalize, hex_lower};
use crate::keys::{verify_sig, KeyMaterial, TrustStore};
use serde::{Deserialize, Serialize};

/// Seal schema version.
pub const SEAL_VERSION: &str = "1";

/// A verifier's signed statement that a chain ends at `last_receipt_hash`, hop `total_hops`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainSeal {
    /// Must be [`SEAL_VERSION`].
    pub seal_version: String,
    /// The chain's origin receipt hash.
    pub chain_id: String,
    /// Hash of the last receipt of the chain.
    pub last_receipt_hash: String,
    /// Hop number of the last receipt.
    pub total_hops: u64,
    /// Unix time of sealing (the key must be valid then).
    pub sealed_at: f64,
    /// Issuer URI of the sealing verifier.
    pub issuer: String,
    /// Fingerprint of the sealing key.
    pub signing_key_fingerprint: String,
    /// Ed25519 over the JCS of the seal without this field, 128 lower-case hex.
    #[serde(default)]
    pub signature: String,
}

impl ChainSeal {
    /// Seal `chain` as it stands with `keys` (the chain should have been verified first);
    /// refused unless `issuer` issued the last receipt and `now` is not before it.
    pub fn sign(
        chain: &EvidenceChain,
        keys: &KeyMaterial,
        issuer: &str,
        now: f64,
    ) -> Result<Self, EvidenceError> {
        let last = chain
            .receipts
            .last()
            .ok_or_else(|| EvidenceError::Chain("an empty chain cannot be sealed".into()))?;
        // Refuse what `check` would void rather than sign a seal that proves nothing.
        if issuer != last.receipt.issuer {
            return Err(EvidenceError::Chain(
                "only the issuer of the last receipt can seal the chain".into(),
            ));
        }
        if !at_or_after(now, last.receipt.issued_at - last.receipt.max_clock_skew) {
            return Err(EvidenceError::Chain(
                "a seal cannot be dated before the last receipt was issued".into(),
            ));
        }
        let mut s = Self {
            seal_version: SEAL_VERSION.into(),
            chain_id: chain.chain_id.clone(),
            last_receipt_hash: last.receipt_hash.clone(),
            total_hops: last.hop,
            sealed_at: now,
            issuer: issuer.into(),
            signing_key_fingerprint: keys.fingerprint(),
            signature: String::new(),
        };
        s.resign(keys)?;
        Ok(s)
    }

    /// (Re)compute the signature over the seal's fields as they stand.
    pub(crate) fn resign(&mut self, keys: &KeyMaterial) -> Result<(), EvidenceError> {
        self.signature = hex_lower(&keys.sign(self.payload()?.as_bytes()).to_bytes());
        Ok(())
    }

    /// The signed bytes: JCS of every field but `signature`.
    fn payload(&self) -> Result<String, EvidenceError> {
        let mut v = serde_json::to_value(self)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("signature");
        }
        canonicalize(&v)
    }

    /// Whether this seal is genuine and names `chain`'s end; the reason when not.
    pub fn check(&self, chain: &EvidenceChain, trust: &TrustStore) -> Result<(), String> {
        if self.seal_version != SEAL_VERSION {
            return Err("unsupported seal_version".into());
        }
        let key = trust
            .key_for(&self.issuer, &self.signing_key_fingerprint, self.sealed_at)
            .ok_or("seal signed by a key not trusted for its issuer")?;
        let genuine = self.signature.len() == 128
            && self
                .signature
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            && self
                .payload()
                .is_ok_and(|p| verify_sig(&key, p.as_bytes(), &self.signature));
        if !genuine {
            return Err("seal signature invalid".into());
        }
        let last = chain.receipts.last().ok_or("empty chain")?;
        if self.chain_id != chain.chain_id {
            return Err("seal names another chain".into());
        }
        // The closing verifier is the one that issued the end: any other trusted issuer
        // could otherwise declare someone else's chain finished at any hop.
        if self.issuer != last.receipt.issuer {
            return Err("seal not signed by the issuer of the last receipt".into());
        }
        // A seal cannot predate the receipt it names; a backdated one would let a key
        // retired before that receipt existed still close the chain.
        let r = &last.receipt;
        if !at_or_after(self.sealed_at, r.issued_at - r.max_clock_skew) {
            return Err("seal dated before the last receipt was issued".into());
        }
        if self.last_receipt_hash != last.receipt_hash || self.total_hops != last.hop {
            return Err(format!(
                "seal says the chain ends at hop {}, the chain ends at hop {}",
                self.total_hops, last.hop
            ));
        }
        Ok(())
    }
}

/// `t >= earliest`, false when either is NaN (a NaN date proves no order).
fn at_or_after(t: f64, earliest: f64) -> bool {
    matches!(
        t.partial_cmp(&earliest),
        Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
    )
}
