//! The Cowchat protocol v2 wire format: one JSON frame per line,
//! `{"id":…,"type":…,"reply_to":…,"payload":{…}}`. Parsing, serializing, the payloads this
//! server understands, its error codes and its limits. No I/O and no engine: the daemon's
//! `cowchat` face maps these onto the ledger.

pub mod frame;
pub mod payload;

pub use frame::{error_frame, parse_frame, Frame, FrameError, OutFrame};
pub use payload::{
    parse, valid_agent_id, CreateRoom, GetHistory, JoinRoom, ListAgents, Register, RoomRef,
    SendMessage,
};

/// The protocol version this server speaks (advertised in the `register` reply).
pub const PROTOCOL_VERSION: u64 = 2;
/// Largest inbound frame, newline excluded; a longer line is skipped and answered with
/// `frame_too_large`.
pub const MAX_FRAME_BYTES: usize = 1 << 20;
/// Largest `content` of one message, in bytes.
pub const MAX_CONTENT_BYTES: usize = 256 * 1024;
/// Largest serialized `metadata` object of one message, in bytes.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// Most `mentions` on one message.
pub const MAX_MENTIONS: usize = 64;
/// `get_history` without `limit` returns this many messages.
pub const DEFAULT_HISTORY_LIMIT: usize = 50;
/// Largest `get_history` `limit` (larger values are clamped, not refused).
pub const MAX_HISTORY_LIMIT: usize = 10_000;
/// Longest room name, in bytes.
pub const MAX_ROOM_NAME_BYTES: usize = 128;

/// Error codes carried in `error` frames (`payload.code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The line is not a JSON object frame with a string `type`.
    InvalidFrame,
    /// The line exceeds [`MAX_FRAME_BYTES`].
    FrameTooLarge,
    /// `register` without `protocol_version` 2.
    UnsupportedProtocolVersion,
    /// A frame other than `register`/`ping` before registering.
    NotRegistered,
    /// A second `register` on the same connection.
    AlreadyRegistered,
    /// The API key is missing or wrong (remote TCP peers only).
    Unauthorized,
    /// The frame `type` is not served.
    UnknownType,
    /// The payload is malformed or a field is out of range.
    InvalidPayload,
    /// The room does not exist.
    RoomNotFound,
    /// A room with that name already exists.
    RoomExists,
    /// The agent is not a member of the room (or a mention names a non-member).
    NotMember,
    /// The server understands the request but does not implement it (yet).
    NotSupported,
    /// The referenced message does not exist in the room.
    MessageNotFound,
    /// The server could not complete the request (storage, shutdown).
    Unavailable,
    /// Anything else.
    Internal,
}

impl ErrorCode {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidFrame => "invalid_frame",
            Self::FrameTooLarge => "frame_too_large",
            Self::UnsupportedProtocolVersion => "unsupported_protocol_version",
            Self::NotRegistered => "not_registered",
            Self::AlreadyRegistered => "already_registered",
            Self::Unauthorized => "unauthorized",
            Self::UnknownType => "unknown_type",
            Self::InvalidPayload => "invalid_payload",
            Self::RoomNotFound => "room_not_found",
            Self::RoomExists => "room_exists",
            Self::NotMember => "not_member",
            Self::NotSupported => "not_supported",
            Self::MessageNotFound => "message_not_found",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
        }
    }
}

/// A refused request: code plus human-readable message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct WireError {
    /// Code.
    pub code: ErrorCode,
    /// Message.
    pub message: String,
}

impl WireError {
    /// A new error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `invalid_payload` with a message.
    pub fn payload(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidPayload, message)
    }
}
