//! Ballot sealing. A ballot is in the ledger (so a vote survives a restart), and the ledger
//! is readable through other faces, so the option index is stored encrypted with
//! ChaCha20-Poly1305 under a daemon-held key (`<home>/cowchat/seal.key`, 32 random bytes,
//! mode 0600, made on first use). The plaintext is a fixed 4 bytes, so ciphertexts all have
//! the same length; the vote id and the voter are authenticated data, so a sealed ballot
//! cannot be replayed into another vote or for another voter.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use chacha20poly1305::aead::rand_core::RngCore;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};

const NONCE_LEN: usize = 12;

/// Why a ballot could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SealError {
    /// The key file could not be read or written.
    #[error("seal key {path}: {source}")]
    Key {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The key file is not 32 bytes.
    #[error("seal key {0} is not 32 bytes")]
    BadKey(PathBuf),
    /// Encryption failed.
    #[error("could not seal the ballot")]
    Seal,
    /// The blob is not a ballot sealed under this key for this vote and voter.
    #[error("sealed ballot does not open")]
    Open,
}

/// The daemon's ballot key.
pub(crate) struct Sealer {
    cipher: ChaCha20Poly1305,
}

impl Sealer {
    /// Loads `<home>/cowchat/seal.key`, creating it (0600) when absent.
    pub fn load(home: &Path) -> Result<Self, SealError> {
        let dir = home.join("cowchat");
        let path = dir.join("seal.key");
        let err = |source| SealError::Key {
            path: path.clone(),
            source,
        };
        let key = match std::fs::read(&path) {
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&dir).map_err(err)?;
                let mut k = vec![0u8; 32];
                OsRng.fill_bytes(&mut k);
                create_private(&path, &k).map_err(err)?;
                // A concurrent first use may have won the race: read what is on disk.
                std::fs::read(&path).map_err(err)?
            }
            Err(e) => return Err(err(e)),
        };
        if key.len() != 32 {
            return Err(SealError::BadKey(path));
        }
        Ok(Self {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        })
    }

    /// Seals option `index` of `vote_id` for `agent`: base64(nonce ‖ ciphertext).
    pub fn seal(&self, vote_id: &str, agent: &str, index: u32) -> Result<String, SealError> {
        let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = aad(vote_id, agent);
        let ct = self
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: &index.to_le_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| SealError::Seal)?;
        let mut blob = nonce.to_vec();
        blob.extend_from_slice(&ct);
        Ok(base64::engine::general_purpose::STANDARD.encode(blob))
    }

    /// Opens a sealed ballot of `vote_id` cast by `agent`.
    pub fn open(&self, vote_id: &str, agent: &str, sealed: &str) -> Result<u32, SealError> {
        let blob = base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .map_err(|_| SealError::Open)?;
        if blob.len() <= NONCE_LEN {
            return Err(SealError::Open);
        }
        let (n, ct) = blob.split_at(NONCE_LEN);
        let aad = aad(vote_id, agent);
        let pt = self
            .cipher
            .decrypt(Nonce::from_slice(n), Payload { msg: ct, aad: &aad })
            .map_err(|_| SealError::Open)?;
        let b: [u8; 4] = pt.as_slice().try_into().map_err(|_| SealError::Open)?;
        Ok(u32::from_le_bytes(b))
    }
}

fn aad(vote_id: &str, agent: &str) -> Vec<u8> {
    format!("convene-cowchat-ballot\0{vote_id}\0{agent}").into_bytes()
}

fn create_private(path: &Path, key: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => {
            f.write_all(key)?;
            f.sync_all()
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// A random id with a prefix: `vote-` / `task-` and 16 hex digits.
pub(crate) fn new_id(prefix: &str) -> String {
    let mut b = [0u8; 8];
    OsRng.fill_bytes(&mut b);
    format!("{prefix}-{}", hex::encode(b))
}

/// A uniformly random index below `n` (n > 0).
pub(crate) fn pick(n: usize) -> usize {
    // Rejection sampling keeps the pick unbiased.
    let n64 = n as u64;
    let zone = u64::MAX - (u64::MAX % n64);
    loop {
        let x = OsRng.next_u64();
        if x < zone {
            return (x % n64) as usize;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_ballots_open_only_for_their_vote_and_voter() {
        let home = tempfile::tempdir().unwrap();
        let s = Sealer::load(home.path()).unwrap();
        let a = s.seal("v1", "alice", 2).unwrap();
        let b = s.seal("v1", "alice", 2).unwrap();
        assert_ne!(a, b, "fresh nonce per ballot");
        assert_eq!(a.len(), s.seal("v1", "alice", 31).unwrap().len());
        assert_eq!(s.open("v1", "alice", &a).unwrap(), 2);
        assert!(s.open("v2", "alice", &a).is_err());
        assert!(s.open("v1", "bob", &a).is_err());
        // The key persists: a second load opens the same ballot.
        let again = Sealer::load(home.path()).unwrap();
        assert_eq!(again.open("v1", "alice", &a).unwrap(), 2);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(home.path().join("cowchat/seal.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn pick_stays_in_range() {
        for n in 1..20 {
            assert!(pick(n) < n);
        }
    }
}
