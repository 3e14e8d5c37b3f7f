//! The server's half of end-to-end encrypted rooms: it never holds a key, it only tells a
//! sealed blob from plaintext so a keyless client cannot leak plaintext into such a room.

/// Prefix written by current Cowchat clients.
pub const PREFIX: &str = "cow1:";
/// Older prefix (same layout, HKDF info `clawchat-e2e-v1:`), still accepted.
pub const LEGACY_PREFIX: &str = "clw1:";
/// Nonce (12) + Poly1305 tag (16): the shortest possible sealed blob.
const MIN_SEALED_BYTES: usize = 28;

/// True when `content` is a sealed blob: a known prefix, then standard base64 (padding
/// optional) of at least nonce + tag.
pub fn is_sealed(content: &str) -> bool {
    let Some(b64) = content
        .strip_prefix(PREFIX)
        .or_else(|| content.strip_prefix(LEGACY_PREFIX))
    else {
        return false;
    };
    let body = b64.trim_end_matches('=');
    if b64.len() - body.len() > 2
        || !body
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/')
    {
        return false;
    }
    // A base64 length of 1 mod 4 cannot be produced by an encoder.
    body.len() % 4 != 1 && body.len() * 3 / 4 >= MIN_SEALED_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_sealed_from_plaintext() {
        // The known answer of the issue: a real blob.
        assert!(is_sealed(
            "cow1:AAECAwQFBgcICQoLIyz9JMG5YnCtToYuqTS/uVRA+WmFnXIPxIAT"
        ));
        assert!(is_sealed(
            "clw1:AAECAwQFBgcICQoLIyz9JMG5YnCtToYuqTS/uVRA+WmFnXIPxIAT"
        ));
        assert!(!is_sealed("hello world"));
        assert!(!is_sealed("cow1:"));
        assert!(!is_sealed("cow1:AAECAwQF"));
        assert!(!is_sealed("cow1:not base64 at all, just words!!"));
        assert!(!is_sealed(
            "cow2:AAECAwQFBgcICQoLIyz9JMG5YnCtToYuqTS/uVRA+WmFnXIPxIAT"
        ));
    }
}
