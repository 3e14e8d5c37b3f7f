//! The CCCS v1 event envelope (§4) and the standard kinds.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Envelope version this daemon writes (CCCS §4.2).
pub const ENVELOPE_V: u8 = 1;

/// Standard kinds this engine produces or interprets.
pub mod kinds {
    /// An IM-style message (§6.1).
    pub const CHAT_MESSAGE: &str = "chat.message";
    /// A Mail watermark (§6.2).
    pub const MAIL_READ: &str = "mail.read";
    /// Cancels open reply obligations (§6.3).
    pub const REPLY_CANCELLED: &str = "chat.reply_request.cancelled";
    /// Daemon-authored delivery evidence (§6.4).
    pub const RUNTIME_DELIVERY: &str = "runtime.delivery";
    /// A reaction (§6.5).
    pub const CHAT_REACTION: &str = "chat.reaction";
    /// A system notification (§7.1).
    pub const SYSTEM_NOTIFY: &str = "system.notify";
    /// Group created.
    pub const GROUP_CREATE: &str = "group.create";
    /// Group title/topic changed.
    pub const GROUP_UPDATE: &str = "group.update";
    /// Group settings changed.
    pub const GROUP_SETTINGS_UPDATE: &str = "group.settings_update";
    /// A scope attached.
    pub const GROUP_ATTACH: &str = "group.attach";
    /// A scope detached.
    pub const GROUP_DETACH_SCOPE: &str = "group.detach_scope";
    /// Group running state changed.
    pub const GROUP_SET_STATE: &str = "group.set_state";
    /// Actor added.
    pub const ACTOR_ADD: &str = "actor.add";
    /// Actor changed.
    pub const ACTOR_UPDATE: &str = "actor.update";
    /// Actor removed.
    pub const ACTOR_REMOVE: &str = "actor.remove";
}

/// One ledger event. Field order is the wire order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Envelope version, always 1.
    pub v: u8,
    /// Unique event id (UUIDv7, hex).
    pub id: String,
    /// RFC 3339 UTC time assigned at append.
    pub ts: String,
    /// Per-group, gap-free sequence number assigned at append (starts at 1).
    #[serde(default)]
    pub seq: u64,
    /// Event kind.
    pub kind: String,
    /// Owning group.
    pub group_id: String,
    /// Opaque scope key ("" allowed).
    #[serde(default)]
    pub scope_key: String,
    /// Principal the daemon ascribes the event to.
    pub by: String,
    /// Kind-specific payload; unknown fields preserved.
    #[serde(default = "empty_object")]
    pub data: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

impl Event {
    /// A `data` field as a string, if present and a string.
    pub fn data_str(&self, key: &str) -> Option<&str> {
        self.data.get(key).and_then(Value::as_str)
    }

    /// The serialized NDJSON record (no trailing newline).
    pub fn to_json(&self) -> String {
        // Serializing a struct of strings, numbers and a Value cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A fresh globally unique event id: UUIDv7 as 32 lowercase hex digits, increasing within
/// this process (RFC 9562 §6.2 method 1: a 12-bit counter within the millisecond).
///
/// The 62 random bits come from the OS CSPRNG 4 KiB at a time: one `getrandom` syscall per
/// ~500 ids instead of one per id (every committed event takes one).
pub fn new_event_id() -> String {
    let Some(tail) = id_random() else {
        return uuid::Uuid::now_v7().simple().to_string();
    };
    let (ms, counter) = next_stamp();
    let mut b = [0u8; 10];
    b[0] = (counter >> 8) as u8 & 0x0f;
    b[1] = counter as u8;
    b[2..].copy_from_slice(&tail);
    uuid::Builder::from_unix_timestamp_millis(ms, &b)
        .into_uuid()
        .simple()
        .to_string()
}

/// (Unix ms, counter) strictly increasing across calls: a clock step back or 4,096 ids in
/// one millisecond borrow the next millisecond, as RFC 9562 allows.
fn next_stamp() -> (u64, u16) {
    use std::sync::Mutex;
    static LAST: Mutex<(u64, u16)> = Mutex::new((0, 0));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *last = if now > last.0 {
        (now, 0)
    } else if last.1 < 0x0fff {
        (last.0, last.1 + 1)
    } else {
        (last.0 + 1, 0)
    };
    *last
}

/// Eight bytes from a per-thread pool refilled from the OS CSPRNG; `None` if it fails.
fn id_random() -> Option<[u8; 8]> {
    use std::cell::RefCell;
    const POOL: usize = 4096;
    thread_local! {
        static BUF: RefCell<(Box<[u8; POOL]>, usize)> = RefCell::new((Box::new([0; POOL]), POOL));
    }
    BUF.with(|b| {
        let (buf, at) = &mut *b.borrow_mut();
        if *at + 8 > POOL {
            getrandom::fill(&mut buf[..]).ok()?;
            *at = 0;
        }
        let mut out = [0u8; 8];
        out.copy_from_slice(&buf[*at..*at + 8]);
        *at += 8;
        Some(out)
    })
}

/// RFC 3339 UTC with microseconds, e.g. `2026-01-13T10:00:00.123456Z`.
pub fn format_ts(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

/// Parses an RFC 3339 timestamp (any offset) to UTC.
pub fn parse_ts(s: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.to_offset(time::UtcOffset::UTC))
}

/// The daemon's clock, injectable so tests can pin time.
pub trait Clock: Send + Sync {
    /// Now, in UTC.
    fn now(&self) -> time::OffsetDateTime;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cccs_4_envelope_serializes_fields_in_spec_order() {
        let e = Event {
            v: 1,
            id: "e1".into(),
            ts: "2026-01-13T10:00:00.000000Z".into(),
            seq: 7,
            kind: "chat.message".into(),
            group_id: "g".into(),
            scope_key: String::new(),
            by: "user".into(),
            data: serde_json::json!({"text": "hi", "zz_unknown": {"a": 1}}),
        };
        let s = e.to_json();
        assert_eq!(
            s,
            r#"{"v":1,"id":"e1","ts":"2026-01-13T10:00:00.000000Z","seq":7,"kind":"chat.message","group_id":"g","scope_key":"","by":"user","data":{"text":"hi","zz_unknown":{"a":1}}}"#
        );
        let back: Event = serde_json::from_str(&s).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn timestamps_round_trip_in_utc() {
        let t = parse_ts("2026-01-13T12:00:00+02:00").unwrap();
        assert_eq!(format_ts(t), "2026-01-13T10:00:00.000000Z");
    }

    #[test]
    fn event_ids_are_unique_and_time_ordered_hex() {
        let a = new_event_id();
        let b = new_event_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        // Many in one millisecond (past the 12-bit counter) still increase, and are v7.
        let ids: Vec<String> = (0..10_000).map(|_| new_event_id()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        let u = uuid::Uuid::parse_str(&ids[0]).unwrap();
        assert_eq!(u.get_version_num(), 7);
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let (secs, nanos) = u.get_timestamp().unwrap().to_unix();
        let id_ms = secs * 1000 + u64::from(nanos) / 1_000_000;
        assert!(id_ms <= ms + 10 && id_ms + 60_000 > ms, "{id_ms} vs {ms}");
    }
}
