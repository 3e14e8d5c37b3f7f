//! Per-key limits of the Cowchat face.
//!
//! Every key starts from the serve-flag defaults ([`Limits`], `convene serve --cowchat-*`).
//! An operator may give one principal its own values ([`KeyLimits`], written by `convene auth
//! set-limits`) in `<home>/keys.d/<principal>.limits.json` (`primary` included; that name
//! is reserved, so it never collides with a key file). The file is read at each `register`,
//! like the key files, so a change applies to the key's next registration without a restart.
//! Unset fields fall back to the defaults. A file that does not parse or holds a value out of
//! range refuses the key's registrations (`internal_error`): falling back to the defaults
//! could hand a key the operator meant to restrict far looser limits.

use std::path::{Path, PathBuf};
use std::time::Instant;

use convene_cowchat::{SizeLimits, MAX_CONTENT_BYTES, MAX_METADATA_BYTES};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The limits in effect for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Distinct agent ids connected at once per key.
    pub agents_per_key: usize,
    /// Rooms a key may own (create) at once.
    pub rooms_per_key: usize,
    /// Sustained messages (send, thinking, decision) per second per key.
    pub messages_per_sec: u32,
    /// Burst above the sustained rate.
    pub message_burst: u32,
    /// Largest message `content`, in bytes (at most [`MAX_CONTENT_BYTES`]).
    pub max_content_bytes: usize,
    /// Largest serialized message `metadata`, in bytes (at most [`MAX_METADATA_BYTES`]).
    pub max_metadata_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            agents_per_key: 256,
            rooms_per_key: 1000,
            messages_per_sec: 20_000,
            message_burst: 40_000,
            max_content_bytes: MAX_CONTENT_BYTES,
            max_metadata_bytes: MAX_METADATA_BYTES,
        }
    }
}

/// A limit outside its range, or a limits file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    /// A value outside its allowed range.
    #[error("{field} must be between {min} and {max} (got {value})")]
    OutOfRange {
        /// Field name (as in the file).
        field: &'static str,
        /// The value given.
        value: u64,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
    /// Not a principal name (one file name in `keys.d`).
    #[error("invalid principal name {0:?}")]
    BadName(String),
    /// A file holds a value out of range.
    #[error("{0}: {1}")]
    InFile(PathBuf, Box<LimitsError>),
    /// The file is not a JSON object of known limit fields.
    #[error("{0}: {1}")]
    Parse(PathBuf, serde_json::Error),
    /// Filesystem error.
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
}

fn in_range(field: &'static str, value: u64, min: u64, max: u64) -> Result<(), LimitsError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(LimitsError::OutOfRange {
            field,
            value,
            min,
            max,
        })
    }
}

impl Limits {
    /// Checks every value is in range (rates at least 1, sizes 1 to the wire hard bound).
    pub fn check(&self) -> Result<(), LimitsError> {
        KeyLimits::from(*self).check()
    }

    /// The size limits of one message.
    pub fn sizes(&self) -> SizeLimits {
        SizeLimits {
            content_bytes: self.max_content_bytes,
            metadata_bytes: self.max_metadata_bytes,
        }
    }

    /// The wire form (advertised in the `register` reply).
    pub fn to_json(&self) -> Value {
        json!({
            "agents_per_key": self.agents_per_key,
            "rooms_per_key": self.rooms_per_key,
            "messages_per_sec": self.messages_per_sec,
            "message_burst": self.message_burst,
            "max_content_bytes": self.max_content_bytes,
            "max_metadata_bytes": self.max_metadata_bytes,
        })
    }
}

/// One key's own limits: the fields that are set replace the defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyLimits {
    /// See [`Limits::agents_per_key`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents_per_key: Option<usize>,
    /// See [`Limits::rooms_per_key`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rooms_per_key: Option<usize>,
    /// See [`Limits::messages_per_sec`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages_per_sec: Option<u32>,
    /// See [`Limits::message_burst`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_burst: Option<u32>,
    /// See [`Limits::max_content_bytes`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_content_bytes: Option<usize>,
    /// See [`Limits::max_metadata_bytes`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_metadata_bytes: Option<usize>,
}

impl From<Limits> for KeyLimits {
    fn from(l: Limits) -> Self {
        Self {
            agents_per_key: Some(l.agents_per_key),
            rooms_per_key: Some(l.rooms_per_key),
            messages_per_sec: Some(l.messages_per_sec),
            message_burst: Some(l.message_burst),
            max_content_bytes: Some(l.max_content_bytes),
            max_metadata_bytes: Some(l.max_metadata_bytes),
        }
    }
}

impl KeyLimits {
    /// Checks every set value is in range.
    pub fn check(&self) -> Result<(), LimitsError> {
        let big = |v: usize| v as u64;
        if let Some(v) = self.agents_per_key {
            in_range("agents_per_key", big(v), 0, big(usize::MAX))?;
        }
        if let Some(v) = self.rooms_per_key {
            in_range("rooms_per_key", big(v), 0, big(usize::MAX))?;
        }
        if let Some(v) = self.messages_per_sec {
            in_range("messages_per_sec", v.into(), 1, u32::MAX.into())?;
        }
        if let Some(v) = self.message_burst {
            in_range("message_burst", v.into(), 1, u32::MAX.into())?;
        }
        if let Some(v) = self.max_content_bytes {
            in_range("max_content_bytes", big(v), 1, big(MAX_CONTENT_BYTES))?;
        }
        if let Some(v) = self.max_metadata_bytes {
            in_range("max_metadata_bytes", big(v), 1, big(MAX_METADATA_BYTES))?;
        }
        Ok(())
    }

    /// True when no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Sets the fields that `other` sets.
    pub fn merge(&mut self, other: &KeyLimits) {
        let o = *other;
        self.agents_per_key = o.agents_per_key.or(self.agents_per_key);
        self.rooms_per_key = o.rooms_per_key.or(self.rooms_per_key);
        self.messages_per_sec = o.messages_per_sec.or(self.messages_per_sec);
        self.message_burst = o.message_burst.or(self.message_burst);
        self.max_content_bytes = o.max_content_bytes.or(self.max_content_bytes);
        self.max_metadata_bytes = o.max_metadata_bytes.or(self.max_metadata_bytes);
    }

    /// `base` with the fields this sets replaced.
    pub fn apply(&self, base: &Limits) -> Limits {
        Limits {
            agents_per_key: self.agents_per_key.unwrap_or(base.agents_per_key),
            rooms_per_key: self.rooms_per_key.unwrap_or(base.rooms_per_key),
            messages_per_sec: self.messages_per_sec.unwrap_or(base.messages_per_sec),
            message_burst: self.message_burst.unwrap_or(base.message_burst),
            max_content_bytes: self.max_content_bytes.unwrap_or(base.max_content_bytes),
            max_metadata_bytes: self.max_metadata_bytes.unwrap_or(base.max_metadata_bytes),
        }
    }
}

/// `<home>/keys.d/<principal>.limits.json`.
pub fn path(home: &Path, principal: &str) -> Result<PathBuf, LimitsError> {
    // Principals are key file stems; with the suffix the name is one file inside `keys.d`.
    if principal.is_empty() || principal.contains(['/', '\0']) {
        return Err(LimitsError::BadName(principal.to_string()));
    }
    Ok(home.join("keys.d").join(format!("{principal}.limits.json")))
}

/// The principal's own limits; none set when it has no file.
pub fn read(home: &Path, principal: &str) -> Result<KeyLimits, LimitsError> {
    let p = path(home, principal)?;
    let body = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(KeyLimits::default()),
        Err(e) => return Err(LimitsError::Io(p, e)),
    };
    let k: KeyLimits =
        serde_json::from_slice(&body).map_err(|e| LimitsError::Parse(p.clone(), e))?;
    k.check().map_err(|e| LimitsError::InFile(p, Box::new(e)))?;
    Ok(k)
}

/// The limits in effect for `principal` now: its file over `base`.
pub fn effective(home: &Path, principal: &str, base: &Limits) -> Result<Limits, LimitsError> {
    Ok(read(home, principal)?.apply(base))
}

/// Writes the principal's own limits (checked; atomically, so a `register` never reads half
/// a file). An empty set removes the file.
pub fn write(home: &Path, principal: &str, k: &KeyLimits) -> Result<(), LimitsError> {
    k.check()?;
    let p = path(home, principal)?;
    if k.is_empty() {
        return remove(home, principal).map(|_| ());
    }
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e| LimitsError::Io(p, e)
    };
    let dir = home.join("keys.d");
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let tmp = p.with_extension("json.tmp");
    let mut body = serde_json::to_vec_pretty(k).map_err(|e| LimitsError::Parse(p.clone(), e))?;
    body.push(b'\n');
    std::fs::write(&tmp, body).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &p).map_err(io(&p))
}

/// Removes the principal's own limits file; false when there was none.
pub fn remove(home: &Path, principal: &str) -> Result<bool, LimitsError> {
    let p = path(home, principal)?;
    match std::fs::remove_file(&p) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(LimitsError::Io(p, e)),
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

    /// Takes one token, or says when refused. The key's current limits apply, so a lowered
    /// burst also caps the tokens saved up under the old one.
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_keys_file_overrides_only_what_it_sets() {
        let d = tempfile::tempdir().unwrap();
        let base = Limits::default();
        assert_eq!(effective(d.path(), "team-b", &base).unwrap(), base);
        let k = KeyLimits {
            rooms_per_key: Some(0),
            max_content_bytes: Some(10),
            ..KeyLimits::default()
        };
        write(d.path(), "team-b", &k).unwrap();
        let e = effective(d.path(), "team-b", &base).unwrap();
        assert_eq!((e.rooms_per_key, e.max_content_bytes), (0, 10));
        assert_eq!(e.messages_per_sec, base.messages_per_sec);
        // Other keys keep the defaults; `primary` has a file of its own.
        assert_eq!(effective(d.path(), "team-c", &base).unwrap(), base);
        write(d.path(), "primary", &k).unwrap();
        assert!(d.path().join("keys.d/primary.limits.json").exists());
        // A merge keeps what it does not set; an empty set removes the file.
        let mut m = read(d.path(), "team-b").unwrap();
        m.merge(&KeyLimits {
            max_content_bytes: Some(20),
            ..KeyLimits::default()
        });
        assert_eq!((m.rooms_per_key, m.max_content_bytes), (Some(0), Some(20)));
        write(d.path(), "team-b", &KeyLimits::default()).unwrap();
        assert!(!path(d.path(), "team-b").unwrap().exists());
        assert!(!remove(d.path(), "team-b").unwrap());
    }

    #[test]
    fn bad_files_and_values_are_errors() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("keys.d")).unwrap();
        let f = d.path().join("keys.d/k.limits.json");
        let base = Limits::default();
        for (body, want) in [
            ("not json", "expected"),
            (r#"{"messages_per_second": 5}"#, "unknown field"),
            (r#"{"agents_per_key": -1}"#, "invalid value"),
            (
                r#"{"max_content_bytes": 262145}"#,
                "max_content_bytes must be",
            ),
            (r#"{"message_burst": 0}"#, "message_burst must be"),
        ] {
            std::fs::write(&f, body).unwrap();
            let e = effective(d.path(), "k", &base).unwrap_err().to_string();
            assert!(e.contains(want), "{body}: {e}");
        }
        let over = KeyLimits {
            max_metadata_bytes: Some(MAX_METADATA_BYTES + 1),
            ..KeyLimits::default()
        };
        assert!(write(d.path(), "k", &over).is_err());
        assert!(matches!(
            path(d.path(), "../auth"),
            Err(LimitsError::BadName(_))
        ));
        let zero = Limits {
            max_content_bytes: 0,
            ..Limits::default()
        };
        assert!(zero.check().is_err() && base.check().is_ok());
    }
}
