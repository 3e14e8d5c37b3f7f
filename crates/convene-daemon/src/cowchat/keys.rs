//! API-key principals (their limits are in [`super::limits`]).
//!
//! The daemon key (`<home>/auth.key`) is the principal `primary`; more keys live one per
//! file in `<home>/keys.d/<principal>.key` (mode 0600, made by `convene auth add-key`).
//! Files are read at each `register`, so `convene auth rotate-key` and new keys take effect
//! for the next connection without a restart. A keyless `register` is the `primary`
//! principal, and only on the Unix socket or loopback TCP without `--require-key`.

use std::path::Path;

use convene_cowchat::{ErrorCode, WireError};

use crate::ipc::Trust;

/// The principal of the daemon key and of keyless local clients.
pub const PRIMARY: &str = "primary";

fn read_key(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Constant-time comparison: a key check must not leak a prefix through timing.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The principal a `register.key` authenticates as.
pub fn principal(home: &Path, key: Option<&str>, trust: Trust) -> Result<String, WireError> {
    let key = key.map(str::trim).filter(|k| !k.is_empty());
    let Some(key) = key else {
        return if trust == Trust::Local {
            Ok(PRIMARY.to_string())
        } else {
            Err(WireError::new(
                ErrorCode::Unauthorized,
                "this transport requires an API key",
            ))
        };
    };
    if read_key(&home.join("auth.key")).is_some_and(|k| same(&k, key)) {
        return Ok(PRIMARY.to_string());
    }
    if let Ok(dir) = std::fs::read_dir(home.join("keys.d")) {
        for e in dir.flatten() {
            let p = e.path();
            if p.extension().and_then(|x| x.to_str()) != Some("key") {
                continue;
            }
            if read_key(&p).is_some_and(|k| same(&k, key)) {
                if let Some(stem) = p.file_stem().and_then(|s| s.to_str()) {
                    return Ok(stem.to_string());
                }
            }
        }
    }
    Err(WireError::new(ErrorCode::Unauthorized, "invalid API key"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_principals() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("auth.key"), "main-key\n").unwrap();
        std::fs::create_dir(d.path().join("keys.d")).unwrap();
        std::fs::write(d.path().join("keys.d/team-b.key"), "bee").unwrap();
        let p = |k: Option<&str>, t| principal(d.path(), k, t);
        assert_eq!(p(Some("main-key"), Trust::Remote).unwrap(), PRIMARY);
        assert_eq!(p(Some("bee"), Trust::Remote).unwrap(), "team-b");
        assert_eq!(p(None, Trust::Local).unwrap(), PRIMARY);
        assert_eq!(
            p(None, Trust::Remote).unwrap_err().code,
            ErrorCode::Unauthorized
        );
        assert_eq!(
            p(Some("nope"), Trust::Local).unwrap_err().code,
            ErrorCode::Unauthorized
        );
    }
}
