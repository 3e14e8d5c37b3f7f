//! API-key principals (their limits are in [`super::limits`]).
//!
//! The daemon key (`<home>/auth.key`) is the principal `primary`; more keys live one per
//! file in `<home>/keys.d/<principal>.key` (mode 0600, made by `convene auth add-key`).
//! Files are read at each `register`, so `convene auth rotate-key` and new keys take effect
//! for the next connection without a restart. A keyless `register` is the `primary`
//! principal, and only on the Unix socket or loopback TCP without `--require-key`. Open
//! connections whose key was rotated or removed are closed ([`spawn_revoker`]).

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

/// SHA-256 (hex) of a key: what a webhook subscription records of the key it was made with.
pub fn fingerprint(key: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// True when `key` (None: a keyless local client) still authenticates as `principal`.
pub fn still_valid(home: &Path, principal: &str, key: Option<&str>) -> bool {
    match key {
        None => true,
        Some(k) => principal_of_key(home, k).as_deref() == Some(principal),
    }
}

fn principal_of_key(home: &Path, key: &str) -> Option<String> {
    table(home)
        .into_iter()
        .find(|(k, _)| same(k, key))
        .map(|(_, p)| p)
}

/// Every key's (fingerprint, principal) as the key files are now.
pub fn fingerprints(home: &Path) -> Vec<(String, String)> {
    fingerprints_of(&table(home))
}

fn fingerprints_of(t: &[(String, String)]) -> Vec<(String, String)> {
    t.iter().map(|(k, p)| (fingerprint(k), p.clone())).collect()
}

/// How often the key files are read to find connections whose key was rotated or removed.
const REVOKE_TICK: std::time::Duration = std::time::Duration::from_millis(500);

/// Every key file's key and its principal, as they are now.
fn table(home: &Path) -> Vec<(String, String)> {
    let mut t: Vec<(String, String)> = read_key(&home.join("auth.key"))
        .map(|k| (k, PRIMARY.to_string()))
        .into_iter()
        .collect();
    if let Ok(dir) = std::fs::read_dir(home.join("keys.d")) {
        for e in dir.flatten() {
            let p = e.path();
            if p.extension().and_then(|x| x.to_str()) != Some("key") {
                continue;
            }
            if let (Some(k), Some(stem)) = (read_key(&p), p.file_stem().and_then(|s| s.to_str())) {
                t.push((k, stem.to_string()));
            }
        }
    }
    t.sort();
    t
}

/// Closes, with `unauthorized`, every open connection whose `register` key no longer
/// authenticates as its principal: rotating or removing a key locks out the connections
/// made with it too, not only new registers (the spec: "all agents must reconnect").
/// Connections are checked when the key files change and once after they register (a
/// register that read the old file just before a rotation is caught on the next tick).
/// When the key files change, webhook subscriptions made with a key that no longer
/// authenticates are revoked too (a subscription made as the files change re-checks its key
/// after it is stored: `webhooks::subscribe`).
pub(super) fn spawn_revoker(face: std::sync::Arc<super::Face>) {
    tokio::spawn(async move {
        let mut stop = face.d.shutdown_rx();
        let mut tick = tokio::time::interval(REVOKE_TICK);
        let mut last: Option<Vec<(String, String)>> = None;
        let mut checked_up_to = 0u64;
        let mut hooks_checked = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            let home = face.cfg.home.clone();
            let Ok(now) = tokio::task::spawn_blocking(move || table(&home)).await else {
                continue;
            };
            let all = last.as_ref() != Some(&now);
            if all || !hooks_checked {
                if let Some(h) = face.hooks.get() {
                    hooks_checked = true;
                    if let Err(e) = h.revoke_stale(fingerprints_of(&now)).await {
                        tracing::warn!(error = %e, "cannot revoke webhook subscriptions of rotated keys");
                        hooks_checked = false; // try again next tick
                    }
                }
            }
            let stale: Vec<std::sync::Arc<super::conn::Outbox>> = {
                let live = face.live.lock();
                let newest = live.conns.keys().max().copied().unwrap_or(checked_up_to);
                let v = live
                    .conns
                    .iter()
                    .filter(|(id, _)| all || **id > checked_up_to)
                    .filter_map(|(_, c)| {
                        let key = c.key.as_deref()?;
                        let ok = now.iter().any(|(k, p)| *p == c.principal && same(k, key));
                        (!ok).then(|| c.out.clone())
                    })
                    .collect();
                checked_up_to = checked_up_to.max(newest);
                v
            };
            let e = WireError::new(
                ErrorCode::Unauthorized,
                "the API key of this connection was rotated or removed; register again with the current key",
            );
            for out in stale {
                out.revoke(&e);
            }
            last = Some(now);
        }
    });
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
