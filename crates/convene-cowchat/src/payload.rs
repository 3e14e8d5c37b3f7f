//! Request payloads this server understands, with their validation. Unknown payload fields
//! are ignored (forward compatibility); known fields with the wrong type are refused.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::{
    ErrorCode, WireError, MAX_CONTENT_BYTES, MAX_DESCRIPTION_BYTES, MAX_MENTIONS,
    MAX_METADATA_BYTES, MAX_ROOM_NAME_CHARS, MAX_TITLE_BYTES, MAX_VOTE_OPTIONS, PROTOCOL_VERSION,
};

/// Decodes a payload object into `T`; type errors become `invalid_payload`.
pub fn parse<T: DeserializeOwned>(payload: Map<String, Value>) -> Result<T, WireError> {
    serde_json::from_value(Value::Object(payload)).map_err(|e| WireError::payload(e.to_string()))
}

/// Agent ids double as ledger actor ids, so they follow the actor id rule: 1-64 of
/// `A-Z a-z 0-9 . _ -`, not a reserved selector name.
pub fn valid_agent_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !matches!(id, "user" | "system" | "all" | "peers" | "foreman")
}

/// `register`.
#[derive(Debug, Clone, Deserialize)]
pub struct Register {
    /// API key ("" = keyless; accepted on local transports only).
    #[serde(default)]
    pub key: Option<String>,
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
    /// Stable id to reconnect as; the server assigns one when absent.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Client capabilities (free strings, shown in `list_agents`).
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    /// Must be 2; absent means 1.
    #[serde(default)]
    pub protocol_version: Option<u64>,
    /// Asks to restore memberships and replay what was missed (memberships are restored
    /// for a known `agent_id` either way).
    #[serde(default)]
    pub reconnect: Option<bool>,
}

impl Register {
    /// Checks the version and the optional agent id.
    pub fn validate(&self) -> Result<(), WireError> {
        let v = self.protocol_version.unwrap_or(1);
        if v != PROTOCOL_VERSION {
            return Err(WireError::new(
                ErrorCode::UnsupportedProtocolVersion,
                format!(
                    "protocol_version {v} is not supported; this server speaks {PROTOCOL_VERSION}"
                ),
            ));
        }
        if let Some(id) = &self.agent_id {
            if !valid_agent_id(id) {
                return Err(WireError::payload(format!(
                    "invalid agent_id {id:?}: 1-64 of A-Z a-z 0-9 . _ -"
                )));
            }
        }
        Ok(())
    }
}

/// A room name as stored: trimmed, 1-100 Unicode scalar values, no control characters.
pub fn room_name(raw: &str) -> Result<String, WireError> {
    let n = raw.trim();
    let count = n.chars().count();
    if count == 0 || count > MAX_ROOM_NAME_CHARS || n.chars().any(char::is_control) {
        return Err(WireError::payload(format!(
            "name must be 1-{MAX_ROOM_NAME_CHARS} characters without control characters"
        )));
    }
    Ok(n.to_string())
}

/// `create_room`.
#[derive(Debug, Clone, Deserialize)]
pub struct CreateRoom {
    /// Unique room name.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Parent room id (a sub-room).
    #[serde(default)]
    pub parent_id: Option<String>,
    /// Removed when its last member leaves.
    #[serde(default)]
    pub ephemeral: Option<bool>,
    /// Visible to every key (default: private to the creator's key).
    #[serde(default)]
    pub public: Option<bool>,
    /// Content must be sealed blobs (end-to-end encrypted).
    #[serde(default)]
    pub encrypted: Option<bool>,
}

impl CreateRoom {
    /// Checks the name and the description; returns the stored name.
    pub fn validate(&self) -> Result<String, WireError> {
        if self.description.as_deref().unwrap_or_default().len() > MAX_DESCRIPTION_BYTES {
            return Err(WireError::payload(format!(
                "description exceeds {MAX_DESCRIPTION_BYTES} bytes"
            )));
        }
        room_name(&self.name)
    }
}

/// `rename_room`.
#[derive(Debug, Clone, Deserialize)]
pub struct RenameRoom {
    /// Room id.
    pub room_id: String,
    /// New name.
    pub name: String,
}

/// A room named by id or by name (`join_room`, `leave_room`, `room_tip`, `room_info`, …).
#[derive(Debug, Clone, Deserialize)]
pub struct RoomRef {
    /// Room id.
    #[serde(default)]
    pub room_id: Option<String>,
    /// Room name (used when `room_id` is absent).
    #[serde(default)]
    pub name: Option<String>,
}

/// `join_room` takes a [`RoomRef`].
pub type JoinRoom = RoomRef;

/// Per-message size limits a server applies (its own policy, e.g. per API key). Each is
/// capped at the matching hard bound ([`MAX_CONTENT_BYTES`], [`MAX_METADATA_BYTES`]);
/// `Default` is the hard bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeLimits {
    /// Largest `content`, in bytes.
    pub content_bytes: usize,
    /// Largest serialized `metadata` object, in bytes.
    pub metadata_bytes: usize,
}

impl Default for SizeLimits {
    fn default() -> Self {
        Self {
            content_bytes: MAX_CONTENT_BYTES,
            metadata_bytes: MAX_METADATA_BYTES,
        }
    }
}

fn check_content(content: &str, l: &SizeLimits) -> Result<(), WireError> {
    let max = l.content_bytes.min(MAX_CONTENT_BYTES);
    if content.len() > max {
        return Err(WireError::payload(format!("content exceeds {max} bytes")));
    }
    Ok(())
}

fn check_metadata(md: Option<&Map<String, Value>>, l: &SizeLimits) -> Result<(), WireError> {
    if let Some(md) = md {
        let max = l.metadata_bytes.min(MAX_METADATA_BYTES);
        let n = serde_json::to_vec(md)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if n > max {
            return Err(WireError::payload(format!("metadata exceeds {max} bytes")));
        }
    }
    Ok(())
}

/// `send_message`.
#[derive(Debug, Clone, Deserialize)]
pub struct SendMessage {
    /// Room id.
    pub room_id: String,
    /// Message text.
    pub content: String,
    /// Message id replied to.
    #[serde(default)]
    pub reply_to: Option<String>,
    /// Mentioned agent ids (members of the room only).
    #[serde(default)]
    pub mentions: Option<Vec<String>>,
    /// Opaque client metadata, returned as given.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

impl SendMessage {
    /// Checks sizes (against the hard bounds) and counts.
    pub fn validate(&self) -> Result<(), WireError> {
        self.validate_with(&SizeLimits::default())
    }

    /// Checks sizes against `l` (never above the hard bounds) and counts.
    pub fn validate_with(&self, l: &SizeLimits) -> Result<(), WireError> {
        check_content(&self.content, l)?;
        let m = self.mentions.as_deref().unwrap_or_default();
        if m.len() > MAX_MENTIONS {
            return Err(WireError::payload(format!(
                "more than {MAX_MENTIONS} mentions"
            )));
        }
        if m.iter().any(|a| !valid_agent_id(a)) {
            return Err(WireError::payload("mentions must be agent ids"));
        }
        check_metadata(self.metadata.as_ref(), l)
    }
}

/// `thinking` and `decision`: content for a room, with optional metadata.
#[derive(Debug, Clone, Deserialize)]
pub struct RoomContent {
    /// Room id.
    pub room_id: String,
    /// Text (or a sealed blob in an encrypted room).
    pub content: String,
    /// Opaque client metadata.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

impl RoomContent {
    /// Checks sizes against the hard bounds.
    pub fn validate(&self) -> Result<(), WireError> {
        self.validate_with(&SizeLimits::default())
    }

    /// Checks sizes against `l` (never above the hard bounds).
    pub fn validate_with(&self, l: &SizeLimits) -> Result<(), WireError> {
        check_content(&self.content, l)?;
        check_metadata(self.metadata.as_ref(), l)
    }
}

/// `get_history`.
#[derive(Debug, Clone, Deserialize)]
pub struct GetHistory {
    /// Room id.
    pub room_id: String,
    /// Most messages returned (default 50, clamped to 10,000).
    #[serde(default)]
    pub limit: Option<u64>,
    /// Only messages before this one: a `seq` (number) or a message id (string).
    #[serde(default)]
    pub before: Option<Value>,
    /// Only messages after this message id, oldest first.
    #[serde(default)]
    pub since: Option<String>,
    /// Only messages with `seq` greater than this, oldest first.
    #[serde(default)]
    pub since_seq: Option<u64>,
}

impl GetHistory {
    /// The lower bound, if any, is given once: `since` (a non-empty message id) and
    /// `since_seq` together are refused rather than one silently winning, even when they
    /// name the same message (the server would have to look the id up to tell).
    pub fn validate(&self) -> Result<(), WireError> {
        let since = self.since.as_deref().is_some_and(|s| !s.is_empty());
        if since && self.since_seq.is_some() {
            return Err(WireError::payload(
                "since (a message id) and since_seq are two lower bounds; send one of them",
            )
            .with_details(serde_json::json!({
                "reason": "conflicting_cursors",
                "fields": ["since", "since_seq"],
            })));
        }
        Ok(())
    }
}

/// `list_rooms`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListRooms {
    /// Only the sub-rooms of this room.
    #[serde(default)]
    pub parent_id: Option<String>,
}

/// `list_agents`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListAgents {
    /// Members of this room; absent = agents connected now.
    #[serde(default)]
    pub room_id: Option<String>,
}

/// `set_typing`.
#[derive(Debug, Clone, Deserialize)]
pub struct SetTyping {
    /// Room id.
    pub room_id: String,
    /// Typing or not.
    pub typing: bool,
}

/// `set_presence`.
#[derive(Debug, Clone, Deserialize)]
pub struct SetPresence {
    /// `idle`, `waiting`, `working` or `thinking`.
    pub status: String,
    /// Free text.
    #[serde(default)]
    pub status_detail: Option<String>,
    /// 0-100.
    #[serde(default)]
    pub progress: Option<u64>,
}

/// Presence statuses the specification allows.
pub const PRESENCE_STATUSES: [&str; 4] = ["idle", "waiting", "working", "thinking"];

impl SetPresence {
    /// Checks the status and the progress range.
    pub fn validate(&self) -> Result<(), WireError> {
        if !PRESENCE_STATUSES.contains(&self.status.as_str()) {
            return Err(WireError::payload(
                "status must be idle, waiting, working or thinking",
            ));
        }
        if self.progress.is_some_and(|p| p > 100) {
            return Err(WireError::payload("progress must be 0-100"));
        }
        if self.status_detail.as_deref().unwrap_or_default().len() > MAX_TITLE_BYTES {
            return Err(WireError::payload(format!(
                "status_detail exceeds {MAX_TITLE_BYTES} bytes"
            )));
        }
        Ok(())
    }
}

/// A frame naming only a room (`elect_leader`, `decline_election`).
#[derive(Debug, Clone, Deserialize)]
pub struct RoomId {
    /// Room id.
    pub room_id: String,
}

fn check_title(what: &str, t: &str) -> Result<(), WireError> {
    if t.trim().is_empty() || t.len() > MAX_TITLE_BYTES {
        return Err(WireError::payload(format!(
            "{what} must be 1-{MAX_TITLE_BYTES} bytes"
        )));
    }
    Ok(())
}

/// `create_vote`.
#[derive(Debug, Clone, Deserialize)]
pub struct CreateVote {
    /// Room id.
    pub room_id: String,
    /// Question.
    pub title: String,
    /// Choices, by index.
    pub options: Vec<String>,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Deadline in seconds; absent = open until every eligible voter voted.
    #[serde(default)]
    pub duration_secs: Option<u64>,
}

impl CreateVote {
    /// Checks the title and the options.
    pub fn validate(&self) -> Result<(), WireError> {
        check_title("title", &self.title)?;
        if self.options.len() < 2 || self.options.len() > MAX_VOTE_OPTIONS {
            return Err(WireError::payload(format!(
                "a vote needs 2-{MAX_VOTE_OPTIONS} options"
            )));
        }
        for o in &self.options {
            check_title("an option", o)?;
        }
        if self.description.as_deref().unwrap_or_default().len() > MAX_DESCRIPTION_BYTES {
            return Err(WireError::payload("description too long"));
        }
        Ok(())
    }
}

/// `cast_vote`.
#[derive(Debug, Clone, Deserialize)]
pub struct CastVote {
    /// Vote id.
    pub vote_id: String,
    /// Chosen option, 0-based.
    pub option_index: u64,
}

/// `get_vote_status`.
#[derive(Debug, Clone, Deserialize)]
pub struct VoteRef {
    /// Vote id.
    pub vote_id: String,
}

/// `list_votes`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListVotes {
    /// Room id.
    pub room_id: String,
    /// Most votes returned (default 20).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Task statuses the specification allows.
pub const TASK_STATUSES: [&str; 4] = ["pending", "in_progress", "completed", "blocked"];

/// `assign_task`.
#[derive(Debug, Clone, Deserialize)]
pub struct AssignTask {
    /// Room id.
    pub room_id: String,
    /// Title.
    pub title: String,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Agent id.
    #[serde(default)]
    pub assignee: Option<String>,
}

impl AssignTask {
    /// Checks the title.
    pub fn validate(&self) -> Result<(), WireError> {
        check_title("title", &self.title)?;
        if self.description.as_deref().unwrap_or_default().len() > MAX_DESCRIPTION_BYTES {
            return Err(WireError::payload("description too long"));
        }
        Ok(())
    }
}

/// `update_task`.
#[derive(Debug, Clone, Deserialize)]
pub struct UpdateTask {
    /// Task id.
    pub task_id: String,
    /// New status.
    #[serde(default)]
    pub status: Option<String>,
    /// New assignee.
    #[serde(default)]
    pub assignee: Option<String>,
    /// Free text.
    #[serde(default)]
    pub note: Option<String>,
}

impl UpdateTask {
    /// Checks the status.
    pub fn validate(&self) -> Result<(), WireError> {
        if let Some(s) = &self.status {
            if !TASK_STATUSES.contains(&s.as_str()) {
                return Err(WireError::payload(
                    "status must be pending, in_progress, completed or blocked",
                ));
            }
        }
        if self.note.as_deref().unwrap_or_default().len() > MAX_DESCRIPTION_BYTES {
            return Err(WireError::payload("note too long"));
        }
        Ok(())
    }
}

/// `list_tasks`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListTasks {
    /// Room id.
    pub room_id: String,
    /// Only tasks in this status.
    #[serde(default)]
    pub status: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn register_requires_version_2() {
        let r: Register = parse(obj(json!({"name": "a"}))).unwrap();
        assert_eq!(
            r.validate().unwrap_err().code,
            ErrorCode::UnsupportedProtocolVersion
        );
        let r: Register = parse(obj(json!({"name": "a", "protocol_version": 1}))).unwrap();
        assert!(r.validate().is_err());
        let r: Register = parse(obj(json!({"protocol_version": 2, "key": ""}))).unwrap();
        r.validate().unwrap();
        let r: Register = parse(obj(json!({"protocol_version": 2, "agent_id": "all"}))).unwrap();
        assert_eq!(r.validate().unwrap_err().code, ErrorCode::InvalidPayload);
    }

    #[test]
    fn wrong_types_are_invalid_payload() {
        let e = parse::<SendMessage>(obj(json!({"room_id": "r", "content": 5}))).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidPayload);
        let e = parse::<GetHistory>(obj(json!({"room_id": "r", "limit": -1}))).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidPayload);
    }

    #[test]
    fn room_names_are_trimmed_and_bounded() {
        let c: CreateRoom = parse(obj(json!({"name": "  war room ", "ephemeral": true}))).unwrap();
        assert_eq!(c.validate().unwrap(), "war room");
        for bad in [json!(" "), json!("a\u{7}b"), json!("é".repeat(101))] {
            let c: CreateRoom = parse(obj(json!({"name": bad}))).unwrap();
            assert_eq!(c.validate().unwrap_err().code, ErrorCode::InvalidPayload);
        }
        let c: CreateRoom = parse(obj(json!({"name": "é".repeat(100)}))).unwrap();
        assert!(c.validate().is_ok());
    }

    #[test]
    fn votes_tasks_presence_are_checked() {
        let v: CreateVote =
            parse(obj(json!({"room_id": "r", "title": "q", "options": ["a"]}))).unwrap();
        assert!(v.validate().is_err());
        let v: CreateVote = parse(obj(
            json!({"room_id": "r", "title": "q", "options": ["a", "b"]}),
        ))
        .unwrap();
        v.validate().unwrap();
        let t: UpdateTask = parse(obj(json!({"task_id": "t", "status": "done"}))).unwrap();
        assert!(t.validate().is_err());
        let p: SetPresence = parse(obj(json!({"status": "working", "progress": 101}))).unwrap();
        assert!(p.validate().is_err());
        let p: SetPresence = parse(obj(json!({"status": "asleep"}))).unwrap();
        assert!(p.validate().is_err());
    }

    #[test]
    fn send_message_limits() {
        let big = "x".repeat(MAX_CONTENT_BYTES + 1);
        let m: SendMessage = parse(obj(json!({"room_id": "r", "content": big}))).unwrap();
        assert!(m.validate().is_err());
        let m: SendMessage = parse(obj(
            json!({"room_id": "r", "content": "hi", "mentions": ["a b"]}),
        ))
        .unwrap();
        assert!(m.validate().is_err());
        let m: SendMessage = parse(obj(
            json!({"room_id": "r", "content": "hi", "mentions": ["bob"], "metadata": {"k": 1}}),
        ))
        .unwrap();
        m.validate().unwrap();
    }

    #[test]
    fn lower_size_limits_apply_and_never_exceed_the_hard_bounds() {
        let l = SizeLimits {
            content_bytes: 4,
            metadata_bytes: 9,
        };
        let m: SendMessage = parse(obj(json!({"room_id": "r", "content": "abcd"}))).unwrap();
        m.validate_with(&l).unwrap();
        let m: SendMessage = parse(obj(json!({"room_id": "r", "content": "abcde"}))).unwrap();
        let e = m.validate_with(&l).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidPayload);
        assert_eq!(e.message, "content exceeds 4 bytes");
        // {"k":12} is 8 bytes, {"k":123} is 9, {"k":1234} is 10.
        let c: RoomContent = parse(obj(
            json!({"room_id": "r", "content": "", "metadata": {"k": 123}}),
        ))
        .unwrap();
        c.validate_with(&l).unwrap();
        let c: RoomContent = parse(obj(
            json!({"room_id": "r", "content": "", "metadata": {"k": 1234}}),
        ))
        .unwrap();
        assert_eq!(
            c.validate_with(&l).unwrap_err().message,
            "metadata exceeds 9 bytes"
        );
        // A limit above the hard bound is the hard bound.
        let huge = SizeLimits {
            content_bytes: usize::MAX,
            metadata_bytes: usize::MAX,
        };
        let big = "x".repeat(MAX_CONTENT_BYTES + 1);
        let m: SendMessage = parse(obj(json!({"room_id": "r", "content": big}))).unwrap();
        assert_eq!(
            m.validate_with(&huge).unwrap_err().message,
            format!("content exceeds {MAX_CONTENT_BYTES} bytes")
        );
    }
}
