//! Evidence propagation (§11): envelopes, chains, pruning and chain verification.

use crate::error::EvidenceError;
use crate::keys::TrustStore;
use crate::receipt::Receipt;
use crate::seal::ChainSeal;
use crate::store::EvidenceStore;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Envelope / chain schema version.
pub const CHAIN_VERSION: &str = "1.3";
/// Maximum hop count (§11.2); longer chains are flagged and not verified.
pub const MAX_HOPS: u64 = 16;

/// Cross-organization profile (§11.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrossOrg {
    /// Sending organization URI.
    pub sender_org_id: String,
    /// Receiving organization URI.
    pub receiver_org_id: String,
    /// "sha256:" + fingerprint of the verifying key; must be pre-enrolled by the receiver.
    pub trust_anchor_reference: String,
    /// Must be true.
    pub self_contained: bool,
}

/// Evidence envelope carried with a delegation (§11.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Must be "1.3".
    pub envelope_version: String,
    /// The delegating agent's full receipt (kept as JSON so omissions are detectable).
    pub original_receipt: Value,
    /// Delegating agent's trace id.
    pub parent_trace_id: String,
    /// Receiving agent's trace id.
    pub child_trace_id: String,
    /// Why the task was delegated.
    pub delegation_reason: String,
    /// Hops traversed.
    pub hop_count: u64,
    /// Hash of the delegating agent's receipt.
    pub previous_receipt_hash: String,
    /// Cross-org profile, when crossing an organizational boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_org: Option<CrossOrg>,
}

/// Envelope rejection reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EnvelopeRejection {
    /// Cross-org envelope lacks data needed for offline verification.
    CrossOrgNotSelfContained,
    /// trust_anchor_reference is not enrolled.
    UnknownTrustAnchor,
    /// Envelope addressed to another organization.
    AudienceMismatch,
    /// previous_receipt_hash does not match the original receipt.
    LinkageMismatch,
    /// Original receipt signature invalid.
    SignatureInvalid,
    /// hop_count beyond 16 (flagged for review).
    HopLimitExceeded,
    /// Structurally invalid envelope.
    Malformed,
}

impl Envelope {
    /// Wrap a receipt for delegation to another agent.
    pub fn wrap(
        parent: &Receipt,
        child_trace_id: &str,
        reason: &str,
        hop_count: u64,
        cross_org: Option<CrossOrg>,
    ) -> Result<Self, EvidenceError> {
        Ok(Self {
            envelope_version: CHAIN_VERSION.into(),
            original_receipt: parent.to_value()?,
            parent_trace_id: parent.trace_id.clone(),
            child_trace_id: child_trace_id.into(),
            delegation_reason: reason.into(),
            hop_count,
            previous_receipt_hash: parent.receipt_hash()?,
            cross_org,
        })
    }

    /// The `delegation_chain` object the child submits through its own intake.
    pub fn delegation_value(&self) -> Value {
        json!({
            "parent_trace_id": self.parent_trace_id,
            "previous_receipt_hash": self.previous_receipt_hash,
            "hop_count": self.hop_count,
            "delegation_reason": self.delegation_reason,
        })
    }

    /// Verify offline: version, hop limit, self-containment, trust anchor, linkage, signature.
    pub fn verify(
        &self,
        trust: &TrustStore,
        receiver: Option<&str>,
    ) -> Result<Receipt, EnvelopeRejection> {
        if self.envelope_version != CHAIN_VERSION {
            return Err(EnvelopeRejection::Malformed);
        }
        if self.hop_count > MAX_HOPS {
            return Err(EnvelopeRejection::HopLimitExceeded);
        }
        if let Some(x) = &self.cross_org {
            const NEEDED: [&str; 7] = [
                "signature",
                "issuer",
                "issued_at",
                "expires_at",
                "max_clock_skew",
                "nonce",
                "audience",
            ];
            let complete = self.original_receipt.is_object()
                && NEEDED.iter().all(|f| match self.original_receipt.get(f) {
                    Some(Value::String(s)) => !s.is_empty(),
                    Some(Value::Null) | None => false,
                    Some(_) => true,
                });
            // §11.3: organization ids are stable URIs.
            if !crate::config::is_uri(&x.sender_org_id)
                || !crate::config::is_uri(&x.receiver_org_id)
            {
                return Err(EnvelopeRejection::Malformed);
            }
            if !x.self_contained || !complete || self.previous_receipt_hash.is_empty() {
                return Err(EnvelopeRejection::CrossOrgNotSelfContained);
            }
            if !trust.has_anchor(&x.trust_anchor_reference) {
                return Err(EnvelopeRejection::UnknownTrustAnchor);
            }
            if receiver.is_some_and(|me| me != x.receiver_org_id) {
                return Err(EnvelopeRejection::AudienceMismatch);
            }
        }
        let r = Receipt::from_value(&self.original_receipt)
            .map_err(|_| EnvelopeRejection::Malformed)?;
        // parent_trace_id is unsigned here but ends up signed in the child's receipt
        // (delegation_value), so it must be the parent receipt's own.
        if r.receipt_hash().ok().as_deref() != Some(self.previous_receipt_hash.as_str())
            || r.trace_id != self.parent_trace_id
        {
            return Err(EnvelopeRejection::LinkageMismatch);
        }
        if !r.verify_with_trust(trust) {
            return Err(EnvelopeRejection::SignatureInvalid);
        }
        Ok(r)
    }
}

/// One receipt in an evidence chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainEntry {
    /// The receipt.
    pub receipt: Receipt,
    /// Hop index (original numbering is kept after pruning).
    pub hop: u64,
    /// "sha256:" hash of the receipt.
    pub receipt_hash: String,
    /// Hash of the preceding entry (absent at hop 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_receipt_hash: Option<String>,
}

/// Evidence chain (§11.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceChain {
    /// Must be "1.3".
    pub aec_version: String,
    /// Hash of the origin receipt.
    pub chain_id: String,
    /// Entries in insertion order.
    pub receipts: Vec<ChainEntry>,
    /// SHA-256 over the concatenated receipt digests.
    pub summary_hash: String,
    /// Highest hop index.
    pub total_hops: u64,
    /// Pruned entries kept for audit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pruned_receipts: Vec<ChainEntry>,
    /// The closing verifier's signed statement of where the chain ends (absent: unsealed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<ChainSeal>,
}

/// Chain verification result (§11.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainResult {
    /// Whether the chain verified.
    pub chain_valid: bool,
    /// Hop at which it broke.
    pub broken_at: Option<u64>,
    /// Hop numbers absent and not accounted for by pruning.
    pub missing_hops: Vec<u64>,
    /// Highest hop index.
    pub total_hops: u64,
    /// "full" or "spot".
    pub verification_mode: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Whether the stored summary hash matches the recomputed one.
    pub summary_match: bool,
    /// Set when the chain exceeds the hop limit.
    #[serde(default)]
    pub flagged_for_review: bool,
    /// Whether a genuine seal proves that the chain ends at its last hop.
    #[serde(default)]
    pub sealed: bool,
}

/// summary_hash = SHA-256(digest_0 || digest_1 || ...), raw 32-byte digests in insertion order.
pub fn summary_hash(entries: &[ChainEntry]) -> String {
    let mut h = Sha256::new();
    for e in entries {
        let hex_part = e
            .receipt_hash
            .strip_prefix("sha256:")
            .unwrap_or(&e.receipt_hash);
        match hex::decode(hex_part) {
            Ok(b) => h.update(b),
            // A malformed hash still changes the summary instead of being skipped.
            Err(_) => h.update(e.receipt_hash.as_bytes()),
        }
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

impl EvidenceChain {
    /// Start a chain at its origin receipt (one issued without a parent).
    pub fn new(origin: Receipt) -> Result<Self, EvidenceError> {
        if origin.previous_receipt_hash.is_some() {
            return Err(EvidenceError::Chain(
                "the origin receipt links to a parent outside the chain".into(),
            ));
        }
        let h = origin.receipt_hash()?;
        let entries = vec![ChainEntry {
            receipt: origin,
            hop: 0,
            receipt_hash: h.clone(),
            previous_receipt_hash: None,
        }];
        Ok(Self {
            aec_version: CHAIN_VERSION.into(),
            chain_id: h,
            summary_hash: summary_hash(&entries),
            receipts: entries,
            total_hops: 0,
            pruned_receipts: Vec::new(),
            seal: None,
        })
    }

    /// Append the next hop's receipt; its signed link must point at the current tail.
    pub fn append(&mut self, r: Receipt) -> Result<(), EvidenceError> {
        let last = self
            .receipts
            .last()
            .ok_or_else(|| EvidenceError::Chain("empty chain".into()))?;
        // A receipt without a signed link could sit at any position of any chain.
        if r.previous_receipt_hash.as_deref() != Some(last.receipt_hash.as_str()) {
            return Err(EvidenceError::Chain(
                "receipt does not link to the chain tail".into(),
            ));
        }
        let hop = last.hop + 1;
        if hop > MAX_HOPS {
            return Err(EvidenceError::Chain("hop limit of 16 exceeded".into()));
        }
        let prev = last.receipt_hash.clone();
        self.receipts.push(ChainEntry {
            receipt_hash: r.receipt_hash()?,
            receipt: r,
            hop,
            previous_receipt_hash: Some(prev),
        });
        self.total_hops = hop;
        self.summary_hash = summary_hash(&self.receipts);
        // A chain that grows past its seal has not ended there.
        self.seal = None;
        Ok(())
    }

    /// Build the chain ending at `leaf_hash` by following links in the store.
    pub fn from_store(store: &EvidenceStore, leaf_hash: &str) -> Result<Self, EvidenceError> {
        let mut stack = Vec::new();
        let mut cur = Some(leaf_hash.to_string());
        while let Some(h) = cur {
            if stack.len() as u64 > MAX_HOPS {
                return Err(EvidenceError::Chain("hop limit of 16 exceeded".into()));
            }
            let r = store
                .by_hash(&h)?
                .ok_or_else(|| EvidenceError::Chain(format!("receipt {h} not in store")))?;
            cur = r.previous_receipt_hash.clone();
            stack.push(r);
        }
        let mut it = stack.into_iter().rev();
        let origin = it
            .next()
            .ok_or_else(|| EvidenceError::Chain("empty chain".into()))?;
        let mut c = Self::new(origin)?;
        for r in it {
            c.append(r)?;
        }
        Ok(c)
    }

    /// Prune an intermediate hop, keeping linkage and the pruned receipt for audit (§11.4).
    pub fn prune(&mut self, hop: u64) -> Result<(), EvidenceError> {
        let i = self
            .receipts
            .iter()
            .position(|e| e.hop == hop)
            .ok_or_else(|| EvidenceError::Chain(format!("no hop {hop}")))?;
        if i == 0 || i + 1 >= self.receipts.len() {
            return Err(EvidenceError::Chain(
                "only intermediate receipts can be pruned".into(),
            ));
        }
        let prev = self.receipts[i - 1].receipt_hash.clone();
        let removed = self.receipts.remove(i);
        self.receipts[i].previous_receipt_hash = Some(prev);
        self.pruned_receipts.push(removed);
        self.summary_hash = summary_hash(&self.receipts);
        Ok(())
    }

    /// Check entry `i` (hash, signature, freshness, linkage); returns the indices of the
    /// pruned receipts its signed link passes through on the way to its kept predecessor.
    fn check_entry(
        &self,
        i: usize,
        trust: &TrustStore,
        now: Option<f64>,
    ) -> Result<Vec<usize>, String> {
        let e = &self.receipts[i];
        let r = &e.receipt;
        if r.receipt_hash().ok().as_deref() != Some(e.receipt_hash.as_str()) {
            return Err(format!("receipt_hash mismatch at hop {}", e.hop));
        }
        if !r.verify_with_trust(trust) {
            return Err(format!("signature invalid at hop {}", e.hop));
        }
        let skew = r.max_clock_skew;
        if r.expires_at < r.issued_at {
            return Err(format!("freshness window invalid at hop {}", e.hop));
        }
        if let Some(t) = now {
            if t > r.expires_at + skew || t < r.issued_at - skew {
                return Err(format!("receipt expired at hop {}", e.hop));
            }
        }
        if i == 0 {
            // The origin is hop 0, names the chain, and was issued without a parent: a
            // delegated receipt here means the hops before it were cut off.
            if e.previous_receipt_hash.is_some() || r.previous_receipt_hash.is_some() {
                return Err(format!(
                    "origin has a previous_receipt_hash at hop {}",
                    e.hop
                ));
            }
            if e.hop != 0 || self.chain_id != e.receipt_hash {
                return Err(format!(
                    "chain_id does not name the origin at hop {}",
                    e.hop
                ));
            }
            return Ok(Vec::new());
        }
        let before = &self.receipts[i - 1];
        let mismatch = || format!("previous_receipt_hash mismatch at hop {}", e.hop);
        if e.previous_receipt_hash.as_deref() != Some(before.receipt_hash.as_str()) {
            return Err(mismatch());
        }
        // The receipt's own (signed) link may point at a pruned receipt; follow pruned
        // links back until the preceding kept receipt is reached. Without a signed link a
        // receipt could be spliced in anywhere, so it has no place after the origin.
        let mut passed = Vec::new();
        let mut cur = r.previous_receipt_hash.clone();
        for _ in 0..=MAX_HOPS {
            match cur {
                None => return Err(mismatch()),
                Some(ref h) if h == &before.receipt_hash => {
                    // Hop numbers are unsigned: they must agree with the signed path.
                    let gap = e.hop.saturating_sub(before.hop);
                    return if gap == passed.len() as u64 + 1 {
                        Ok(passed)
                    } else {
                        Err(format!(
                            "hop numbering does not match the links at hop {}",
                            e.hop
                        ))
                    };
                }
                Some(ref h) => {
                    let found = self
                        .pruned_receipts
                        .iter()
                        .position(|p| &p.receipt_hash == h)
                        .filter(|&k| {
                            let p = &self.pruned_receipts[k];
                            p.receipt.receipt_hash().ok().as_deref() == Some(h.as_str())
                                && e.hop.checked_sub(p.hop) == Some(passed.len() as u64 + 1)
                        });
                    let Some(k) = found else {
                        return Err(mismatch());
                    };
                    passed.push(k);
                    cur = self.pruned_receipts[k]
                        .receipt
                        .previous_receipt_hash
                        .clone();
                }
            }
        }
        Err(mismatch())
    }

    fn result(
        &self,
        mode: &str,
        broken: Option<(u64, String)>,
        summary_match: bool,
    ) -> ChainResult {
        let mut present: Vec<u64> = self.receipts.iter().map(|e| e.hop).collect();
        present.extend(self.pruned_receipts.iter().map(|e| e.hop));
        let missing_hops = (0..=self.total_hops)
            .filter(|h| !present.contains(h))
            .collect::<Vec<_>>();
        let (broken_at, mut reason) = match broken {
            Some((h, m)) => (Some(h), Some(m)),
            None => (None, None),
        };
        if reason.is_none() && !summary_match {
            reason = Some("summary_hash mismatch".into());
        }
        if reason.is_none() && !missing_hops.is_empty() {
            reason = Some(format!("missing hops {missing_hops:?}"));
        }
        ChainResult {
            chain_valid: reason.is_none(),
            broken_at,
            missing_hops,
            total_hops: self.total_hops,
            verification_mode: mode.into(),
            failure_reason: reason,
            summary_match,
            flagged_for_review: false,
            sealed: false,
        }
    }

    fn hop_limit(&self, mode: &str) -> Option<ChainResult> {
        let count = (self.receipts.len() + self.pruned_receipts.len()) as u64;
        let hops = self.total_hops.max(count.saturating_sub(1));
        let empty = self.receipts.is_empty();
        (empty || hops > MAX_HOPS || self.aec_version != CHAIN_VERSION).then(|| ChainResult {
            chain_valid: false,
            broken_at: None,
            missing_hops: vec![],
            total_hops: self.total_hops,
            verification_mode: mode.into(),
            failure_reason: Some(if empty {
                "empty chain".into()
            } else if hops > MAX_HOPS {
                "hop limit of 16 exceeded; flagged for review".into()
            } else {
                "unsupported aec_version".into()
            }),
            summary_match: false,
            flagged_for_review: hops > MAX_HOPS,
            sealed: false,
        })
    }

    /// Full, offline verification of every hop (§11.5). `now` adds a live freshness check.
    pub fn verify_full(&self, trust: &TrustStore, now: Option<f64>) -> ChainResult {
        if let Some(r) = self.hop_limit("full") {
            return r;
        }
        let summary_match = summary_hash(&self.receipts) == self.summary_hash;
        let mut on_path = vec![false; self.pruned_receipts.len()];
        for i in 0..self.receipts.len() {
            match self.check_entry(i, trust, now) {
                Ok(passed) => passed.into_iter().for_each(|k| on_path[k] = true),
                Err(m) => {
                    return self.result("full", Some((self.receipts[i].hop, m)), summary_match)
                }
            }
        }
        // A pruning record must be a receipt the signed links pass through; anything
        // else is a claim about hops that were never on this chain.
        if let Some(k) = on_path.iter().position(|seen| !seen) {
            let hop = self.pruned_receipts[k].hop;
            return self.result(
                "full",
                Some((
                    hop,
                    format!("pruned receipt at hop {hop} is not on the chain"),
                )),
                summary_match,
            );
        }
        let last = self.receipts.last().map_or(0, |e| e.hop);
        if self.total_hops != last {
            return self.result(
                "full",
                Some((
                    last,
                    format!("total_hops {} does not match the last hop", self.total_hops),
                )),
                summary_match,
            );
        }
        self.sealed(self.result("full", None, summary_match), trust)
    }

    /// A verified result with the seal checked: a present seal must be genuine and name
    /// this chain's end, or the chain fails at its last hop.
    fn sealed(&self, mut res: ChainResult, trust: &TrustStore) -> ChainResult {
        let Some(seal) = &self.seal else {
            return res;
        };
        if !res.chain_valid {
            return res;
        }
        match seal.check(self, trust) {
            Ok(()) => res.sealed = true,
            Err(m) => {
                res.chain_valid = false;
                res.broken_at = self.receipts.last().map(|e| e.hop);
                res.failure_reason = Some(m);
            }
        }
        res
    }

    /// Spot verification of one hop plus the summary hash (§11.5).
    pub fn verify_spot(&self, hop: u64, trust: &TrustStore, now: Option<f64>) -> ChainResult {
        if let Some(r) = self.hop_limit("spot") {
            return r;
        }
        let summary_match = summary_hash(&self.receipts) == self.summary_hash;
        let Some(i) = self.receipts.iter().position(|e| e.hop == hop) else {
            return self.result(
                "spot",
                Some((hop, format!("hop {hop} not present"))),
                summary_match,
            );
        };
        let broken = self.check_entry(i, trust, now).err().map(|m| (hop, m));
        // The origin names the chain: a spot check of any hop still requires that.
        let broken = broken.or_else(|| {
            (self.chain_id != self.receipts[0].receipt_hash)
                .then(|| (0, "chain_id does not name the origin at hop 0".to_string()))
        });
        self.sealed(self.result("spot", broken, summary_match), trust)
    }
}
