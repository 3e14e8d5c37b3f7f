//! End-to-end room encryption. Room key = HKDF-SHA256(ikm = secret, no salt,
//! info = "cowchat-e2e-v1:" + room_id, 32 bytes); ChaCha20-Poly1305 with a random 96-bit
//! nonce; blob = nonce ‖ ciphertext ‖ tag in unpadded standard base64, written `cow1:<b64>`.
//! The older `clw1:` blobs (info "clawchat-e2e-v1:" + room_id) are read too.

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hkdf::Hkdf;
use sha2::Sha256;

use crate::{Error, Result};

/// Prefix this client writes.
pub const PREFIX: &str = "cow1:";
/// Older prefix, read only.
pub const LEGACY_PREFIX: &str = "clw1:";

fn room_key(secret: &str, info_prefix: &str, room_id: &str) -> Key {
    let hk = Hkdf::<Sha256>::new(None, secret.as_bytes());
    let mut okm = [0u8; 32];
    let info = format!("{info_prefix}{room_id}");
    // 32 bytes is far below HKDF-SHA256's 8160-byte limit: expand cannot fail.
    hk.expand(info.as_bytes(), &mut okm)
        .unwrap_or_else(|_| unreachable!("32-byte HKDF output"));
    Key::from(okm)
}

/// Seals `plaintext` for `room_id` with the given nonce (tests pin it; use [`seal`]).
pub fn seal_with_nonce(
    secret: &str,
    room_id: &str,
    nonce: [u8; 12],
    plaintext: &str,
) -> Result<String> {
    let cipher = ChaCha20Poly1305::new(&room_key(secret, "cowchat-e2e-v1:", room_id));
    let ct = cipher
        .encrypt(Nonce::from_slice(&nonce), plaintext.as_bytes())
        .map_err(|e| Error::Crypto(e.to_string()))?;
    let mut blob = Vec::with_capacity(12 + ct.len());
    blob.extend_from_slice(&nonce);
    blob.extend_from_slice(&ct);
    Ok(format!("{PREFIX}{}", STANDARD_NO_PAD.encode(blob)))
}

/// Seals `plaintext` for `room_id` with a fresh random nonce.
pub fn seal(secret: &str, room_id: &str, plaintext: &str) -> Result<String> {
    let mut nonce = [0u8; 12];
    getrandom::getrandom(&mut nonce).map_err(|e| Error::Crypto(e.to_string()))?;
    seal_with_nonce(secret, room_id, nonce, plaintext)
}

/// True when `content` looks like a sealed blob (either prefix).
pub fn is_sealed(content: &str) -> bool {
    content.starts_with(PREFIX) || content.starts_with(LEGACY_PREFIX)
}

/// Opens a `cow1:` or `clw1:` blob sealed for `room_id`.
pub fn open(secret: &str, room_id: &str, content: &str) -> Result<String> {
    let (info, b64) = if let Some(b) = content.strip_prefix(PREFIX) {
        ("cowchat-e2e-v1:", b)
    } else if let Some(b) = content.strip_prefix(LEGACY_PREFIX) {
        ("clawchat-e2e-v1:", b)
    } else {
        return Err(Error::Crypto("not a sealed blob".into()));
    };
    // Writers omit padding; tolerate it anyway.
    let blob = STANDARD_NO_PAD
        .decode(b64.trim_end_matches('='))
        .map_err(|e| Error::Crypto(format!("bad base64: {e}")))?;
    if blob.len() < 12 + 16 {
        return Err(Error::Crypto("blob too short".into()));
    }
    let (nonce, ct) = blob.split_at(12);
    let cipher = ChaCha20Poly1305::new(&room_key(secret, info, room_id));
    let pt = cipher
        .decrypt(Nonce::from_slice(nonce), ct)
        .map_err(|_| Error::Crypto("wrong room key or tampered message".into()))?;
    String::from_utf8(pt).map_err(|e| Error::Crypto(e.to_string()))
}

/// A random room secret for `keygen`: 32 random bytes, unpadded URL-safe base64.
pub fn keygen() -> Result<String> {
    let mut b = [0u8; 32];
    getrandom::getrandom(&mut b).map_err(|e| Error::Crypto(e.to_string()))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "correct horse battery staple";
    const NONCE: [u8; 12] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];

    #[test]
    fn known_answer() {
        let blob = seal_with_nonce(SECRET, "room-abc", NONCE, "hello world").unwrap();
        assert_eq!(
            blob,
            "cow1:AAECAwQFBgcICQoLIyz9JMG5YnCtToYuqTS/uVRA+WmFnXIPxIAT"
        );
        assert_eq!(open(SECRET, "room-abc", &blob).unwrap(), "hello world");
    }

    #[test]
    fn wrong_room_or_secret_fails_and_random_nonces_differ() {
        let a = seal(SECRET, "r1", "x").unwrap();
        let b = seal(SECRET, "r1", "x").unwrap();
        assert_ne!(a, b);
        assert_eq!(open(SECRET, "r1", &b).unwrap(), "x");
        assert!(open(SECRET, "r2", &a).is_err());
        assert!(open("other", "r1", &a).is_err());
        assert!(open(SECRET, "r1", "plain").is_err());
        assert!(open(SECRET, "r1", "cow1:AAAA").is_err());
    }

    #[test]
    fn reads_legacy_prefix_with_its_own_info() {
        // Build a clw1 blob by hand: same cipher, legacy HKDF info.
        let key = room_key(SECRET, "clawchat-e2e-v1:", "room-abc");
        let ct = ChaCha20Poly1305::new(&key)
            .encrypt(Nonce::from_slice(&NONCE), b"legacy".as_ref())
            .unwrap();
        let mut blob = NONCE.to_vec();
        blob.extend_from_slice(&ct);
        let s = format!("clw1:{}", STANDARD_NO_PAD.encode(&blob));
        assert!(is_sealed(&s));
        assert_eq!(open(SECRET, "room-abc", &s).unwrap(), "legacy");
        // The same bytes under the cow1 prefix use the other key: refused.
        let wrong = format!("cow1:{}", STANDARD_NO_PAD.encode(&blob));
        assert!(open(SECRET, "room-abc", &wrong).is_err());
    }

    #[test]
    fn keygen_is_random_and_long() {
        let (a, b) = (keygen().unwrap(), keygen().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
    }
}
