//! API-key principals and their limits.
//!
//! The daemon key (`<home>/auth.key`) is the principal `primary`; more keys live one per
//! file in `<home>/keys.d/<principal>.key` (mode 0600, made by `convene auth add-key`).
//! Files are read at each `register`, so `convene auth rotate-key` and new keys take effect
//! for the next connection without a restart. A keyless `register` is the `primary`
//! principal, and only on the Unix socket or loopback TCP without `--require-key`.

use std::path::Path;
use std::time::Instant;

use convene_cowchat::{ErrorCode, WireError};

use crate::ipc::Trust;

/// The principal of the daemon key and of keyless local clients.
pub const PRIMARY: &str = "primary";

/// Per-key limits (explicit, tested; `convene serve --cowchat-*` flags).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Distinct agent ids connected at once per key.
    pub agents_per_key: usize,
    /// Rooms a key may own (create) at once.
    pub rooms_per_key: usize,
    /// Sustained messages (send, thinking, decision) per second per key.
    pub messages_per_sec: u32,
    /// Burst above the sustained rate.
    pub message_burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            agents_per_key: 256,
            rooms_per_key: 1000,
            messages_per_sec: 20_000,
            message_burst: 40_000,
        }
    }
}

/// A token bucket (one per key).
#[derive(Debug, Clone)]
pub struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn full(l: &Limits) -> Self {
        Self {
            tokens: f64::from(l.message_burst.max(1)),
            at: Instant::now(),
        }
    }

    /// Takes one token, or says when refused.
    pub fn take(&mut self, l: &Limits) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * f64::from(l.messages_per_sec);
        self.tokens = (self.tokens + refill).min(f64::from(l.message_burst.max(1)));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

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

    #[test]
    fn bucket_refuses_past_the_burst() {
        let l = Limits {
            messages_per_sec: 1,
            message_burst: 3,
            ..Limits::default()
        };
        let mut b = Bucket::full(&l);
        assert!(b.take(&l) && b.take(&l) && b.take(&l));
        assert!(!b.take(&l));
    }
}
