//! Issuer-side §7.3 key rotation kept in the key file, driven by `evidence rotate`.
//!
//! A key file is the issuer's whole signing state, so the phase of a rotation lives in
//! it too (`rotation`): every process that loads the file (`evidence issue`, `verifier
//! serve`, the daemon) signs the way the phase says, with no second file to keep in step.
//!
//! * announce: the incoming key is stored beside the current one; from then on every
//!   receipt is dual-signed and the signed manifest names the incoming key.
//! * cutover: allowed once dual-signing has run for at least 2 × the receipt lifetime
//!   (CCS-7.3-2); the incoming key becomes the file's key and the outgoing secret is
//!   dropped (only its public part is kept, to be reported until retire).
//! * retire: allowed once every receipt the old key signed has expired (cutover + lifetime);
//!   the record of the old key is removed.

use crate::error::EvidenceError;
use crate::keys::{KeyFile, KeyMaterial};
use serde::{Deserialize, Serialize};

/// Where a key file stands in a rotation.
#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Rotation {
    /// Announced: receipts are signed by the file's key and cosigned by `next`.
    DualSign {
        /// The incoming key (secrets; the file stays owner-only).
        next: Box<KeyFile>,
        /// When dual-signing began, Unix seconds.
        since: f64,
        /// Longest receipt lifetime issued during the overlap, seconds.
        ttl_secs: f64,
    },
    /// Cut over: the file's key is the new one; the old key no longer signs.
    CutOver {
        /// Key id of the outgoing key.
        previous_key_id: String,
        /// Outgoing public key, padded standard base64.
        previous_public_key: String,
        /// 16-hex fingerprint of the outgoing key.
        previous_fingerprint: String,
        /// When the outgoing key stopped signing, Unix seconds.
        cutover_at: f64,
        /// Longest receipt lifetime the outgoing key signed for, seconds.
        ttl_secs: f64,
    },
}

impl std::fmt::Debug for Rotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The incoming key's secrets never reach logs.
        f.write_str(self.phase())
    }
}

impl Rotation {
    /// Phase name as written in the file.
    pub fn phase(&self) -> &'static str {
        match self {
            Self::DualSign { .. } => "dual-sign",
            Self::CutOver { .. } => "cut-over",
        }
    }

    /// Earliest cutover time of a dual-sign phase (CCS-7.3-2).
    pub fn cutover_not_before(&self) -> Option<f64> {
        match self {
            Self::DualSign {
                since, ttl_secs, ..
            } => Some(since + 2.0 * ttl_secs),
            Self::CutOver { .. } => None,
        }
    }

    /// Earliest retire time of a cut-over phase: every old-key receipt has expired.
    pub fn retire_not_before(&self) -> Option<f64> {
        match self {
            Self::CutOver {
                cutover_at,
                ttl_secs,
                ..
            } => Some(cutover_at + ttl_secs),
            Self::DualSign { .. } => None,
        }
    }
}

/// Signing keys a key file calls for: the key, and during dual-sign the incoming key
/// with the time the overlap began.
pub fn signing_keys(
    f: &KeyFile,
) -> Result<(KeyMaterial, Option<(KeyMaterial, f64)>), EvidenceError> {
    let keys = KeyMaterial::from_file(f)?;
    let next = match &f.rotation {
        Some(Rotation::DualSign { next, since, .. }) => {
            Some((KeyMaterial::from_file(next)?, *since))
        }
        _ => None,
    };
    Ok((keys, next))
}

/// Why a phase change was refused (the CLI answers these with exit 1).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The file is not in the phase the step starts from.
    #[error("{0}")]
    WrongPhase(String),
    /// The phase's waiting time has not elapsed; the step is allowed from `not_before`.
    #[error("too early: allowed from {not_before}")]
    TooEarly {
        /// Earliest time the step is allowed, Unix seconds.
        not_before: f64,
    },
}

/// Announce `next` and start dual-signing at `now`, for receipts living up to `ttl_secs`.
pub fn announce(
    f: &mut KeyFile,
    next: &KeyMaterial,
    now: f64,
    ttl_secs: f64,
) -> Result<(), Refused> {
    if let Some(r) = &f.rotation {
        return Err(Refused::WrongPhase(format!(
            "a rotation is already in phase {}",
            r.phase()
        )));
    }
    if next.fingerprint() == f.fingerprint {
        return Err(Refused::WrongPhase(
            "the incoming key equals the current key".into(),
        ));
    }
    if !(ttl_secs.is_finite() && ttl_secs > 0.0) {
        return Err(Refused::WrongPhase("receipt lifetime must be > 0".into()));
    }
    f.rotation = Some(Rotation::DualSign {
        next: Box::new(next.to_file()),
        since: now,
        ttl_secs,
    });
    Ok(())
}

/// Cut over to the incoming key; refused before `since + 2 × ttl` (CCS-7.3-2).
pub fn cutover(f: &KeyFile, now: f64) -> Result<KeyFile, Refused> {
    let Some(r @ Rotation::DualSign { next, ttl_secs, .. }) = &f.rotation else {
        return Err(Refused::WrongPhase("no key has been announced".into()));
    };
    let not_before = r.cutover_not_before().unwrap_or(f64::INFINITY);
    if now < not_before {
        return Err(Refused::TooEarly { not_before });
    }
    let mut out = (**next).clone();
    out.rotation = Some(Rotation::CutOver {
        previous_key_id: f.key_id.clone(),
        previous_public_key: f.public_key.clone(),
        previous_fingerprint: f.fingerprint.clone(),
        cutover_at: now,
        ttl_secs: *ttl_secs,
    });
    Ok(out)
}

/// Retire the outgoing key once all its receipts have expired; returns its fingerprint.
pub fn retire(f: &mut KeyFile, now: f64) -> Result<String, Refused> {
    let Some(
        r @ Rotation::CutOver {
            previous_fingerprint,
            ..
        },
    ) = &f.rotation
    else {
        return Err(Refused::WrongPhase("no cut-over key to retire".into()));
    };
    let not_before = r.retire_not_before().unwrap_or(f64::INFINITY);
    if now < not_before {
        return Err(Refused::TooEarly { not_before });
    }
    let fp = previous_fingerprint.clone();
    f.rotation = None;
    Ok(fp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ccs_7_3_phases_in_order_with_waiting_times() {
        let old = KeyMaterial::generate(Some("old".into()));
        let new = KeyMaterial::generate(Some("new".into()));
        let mut f = old.to_file();
        assert!(matches!(cutover(&f, 0.0), Err(Refused::WrongPhase(_))));
        assert!(matches!(retire(&mut f, 0.0), Err(Refused::WrongPhase(_))));
        assert!(announce(&mut f, &old, 100.0, 60.0).is_err(), "same key");
        announce(&mut f, &new, 100.0, 60.0).unwrap();
        assert!(
            announce(&mut f, &new, 101.0, 60.0).is_err(),
            "one at a time"
        );
        let (k, next) = signing_keys(&f).unwrap();
        assert_eq!(k.fingerprint(), old.fingerprint());
        let (n, since) = next.unwrap();
        assert_eq!((n.fingerprint(), since), (new.fingerprint(), 100.0));
        // CCS-7.3-2: the overlap is at least twice the receipt lifetime.
        match cutover(&f, 219.0) {
            Err(Refused::TooEarly { not_before }) => assert_eq!(not_before, 220.0),
            other => panic!("{:?}", other.map(|_| ())),
        }
        let mut g = cutover(&f, 220.0).unwrap();
        assert_eq!(g.fingerprint, new.fingerprint());
        assert_eq!(g.key_id, "new");
        let (k, next) = signing_keys(&g).unwrap();
        assert_eq!(k.fingerprint(), new.fingerprint());
        assert!(next.is_none());
        let text = serde_json::to_string(&g).unwrap();
        assert!(
            !text.contains(&old.to_file().ed25519_secret_hex),
            "old secret dropped"
        );
        assert!(matches!(
            retire(&mut g, 279.0),
            Err(Refused::TooEarly { not_before }) if not_before == 280.0
        ));
        assert_eq!(retire(&mut g, 280.0).unwrap(), old.fingerprint());
        assert!(g.rotation.is_none());
    }
}
