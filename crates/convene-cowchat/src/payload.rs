//! Request payloads this server understands, with their validation. Unknown payload fields
//! are ignored (forward compatibility); known fields with the wrong type are refused.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::{
    ErrorCode, WireError, MAX_CONTENT_BYTES, MAX_MENTIONS, MAX_METADATA_BYTES, MAX_ROOM_NAME_BYTES,
    PROTOCOL_VERSION,
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
    /// Client capabilities (accepted, not interpreted yet).
    #[serde(default)]
    pub capabilities: Option<Value>,
    /// Must be 2; absent means 1.
    #[serde(default)]
    pub protocol_version: Option<u64>,
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

/// `create_room`.
#[derive(Debug, Clone, Deserialize)]
pub struct CreateRoom {
    /// Unique room name.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Parent room id.
    #[serde(default)]
    pub parent_id: Option<String>,
    /// Ephemeral room (not supported yet).
    #[serde(default)]
    pub ephemeral: Option<bool>,
    /// Listed for everyone (private rooms are not supported yet).
    #[serde(default)]
    pub public: Option<bool>,
    /// End-to-end encrypted (not supported yet).
    #[serde(default)]
    pub encrypted: Option<bool>,
}

impl CreateRoom {
    /// Checks the name and refuses the room kinds this server does not implement, rather
    /// than accepting a flag whose promise it would not keep.
    pub fn validate(&self) -> Result<(), WireError> {
        let n = self.name.trim();
        if n.is_empty() || self.name.len() > MAX_ROOM_NAME_BYTES || n.chars().any(char::is_control)
        {
            return Err(WireError::payload(format!(
                "name must be 1-{MAX_ROOM_NAME_BYTES} bytes without control characters"
            )));
        }
        if self.ephemeral == Some(true) {
            return Err(WireError::new(
                ErrorCode::NotSupported,
                "ephemeral rooms are not supported yet",
            ));
        }
        if self.encrypted == Some(true) {
            return Err(WireError::new(
                ErrorCode::NotSupported,
                "encrypted rooms are not supported yet",
            ));
        }
        if self.public == Some(false) {
            return Err(WireError::new(
                ErrorCode::NotSupported,
                "private rooms are not supported yet",
            ));
        }
        Ok(())
    }
}

/// A room named by id or by name (`join_room`, `leave_room`, `room_tip`, `room_info`).
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
    /// Checks sizes and counts.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.content.len() > MAX_CONTENT_BYTES {
            return Err(WireError::payload(format!(
                "content exceeds {MAX_CONTENT_BYTES} bytes"
            )));
        }
        let m = self.mentions.as_deref().unwrap_or_default();
        if m.len() > MAX_MENTIONS {
            return Err(WireError::payload(format!(
                "more than {MAX_MENTIONS} mentions"
            )));
        }
        if m.iter().any(|a| !valid_agent_id(a)) {
            return Err(WireError::payload("mentions must be agent ids"));
        }
        if let Some(md) = &self.metadata {
            let n = serde_json::to_vec(md)
                .map(|v| v.len())
                .unwrap_or(usize::MAX);
            if n > MAX_METADATA_BYTES {
                return Err(WireError::payload(format!(
                    "metadata exceeds {MAX_METADATA_BYTES} bytes"
                )));
            }
        }
        Ok(())
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
    /// Only messages at or after this RFC 3339 time.
    #[serde(default)]
    pub since: Option<String>,
    /// Only messages with `seq` greater than this, oldest first.
    #[serde(default)]
    pub since_seq: Option<u64>,
}

/// `list_agents`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListAgents {
    /// Members of this room; absent = agents connected now.
    #[serde(default)]
    pub room_id: Option<String>,
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
    fn create_room_refuses_unimplemented_kinds() {
        for flags in [
            json!({"ephemeral": true}),
            json!({"encrypted": true}),
            json!({"public": false}),
        ] {
            let mut p = obj(flags);
            p.insert("name".into(), json!("r"));
            let c: CreateRoom = parse(p).unwrap();
            assert_eq!(c.validate().unwrap_err().code, ErrorCode::NotSupported);
        }
        let c: CreateRoom = parse(obj(json!({"name": " "}))).unwrap();
        assert_eq!(c.validate().unwrap_err().code, ErrorCode::InvalidPayload);
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
}
