//! The Cowchat protocol v2 wire format: one JSON frame per line,
//! `{"id":…,"type":…,"reply_to":…,"payload":{…}}`. Parsing, serializing, the payloads this
//! server understands, its error codes and its limits. No I/O and no engine: the daemon's
//! `cowchat` face maps these onto the ledger.

pub mod e2e;
pub mod frame;
pub mod payload;

pub use frame::{error_frame, parse_frame, Frame, FrameError, OutFrame};
pub use payload::*;

/// The protocol version this server speaks (advertised in the `register` reply).
pub const PROTOCOL_VERSION: u64 = 2;
/// Largest inbound frame, newline excluded; a longer line is skipped and answered with
/// `frame_too_large`.
pub const MAX_FRAME_BYTES: usize = 1 << 20;
/// Largest `content` of one message, in bytes: the hard bound (a server may set a lower
/// limit, see [`SizeLimits`]).
pub const MAX_CONTENT_BYTES: usize = 256 * 1024;
/// Largest serialized `metadata` object of one message, in bytes: the hard bound (a server
/// may set a lower limit, see [`SizeLimits`]).
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// Most `mentions` on one message.
pub const MAX_MENTIONS: usize = 64;
/// `get_history` without `limit` returns this many messages.
pub const DEFAULT_HISTORY_LIMIT: usize = 50;
/// Largest `get_history` `limit` (larger values are clamped, not refused).
pub const MAX_HISTORY_LIMIT: usize = 10_000;
/// Most bytes of messages one `get_history` answer carries: a page of long messages is cut
/// (with `has_more`) so an answer stays well under the 16 MiB a WebSocket client takes in one
/// frame, and no request makes the daemon build gigabytes (10,000 × 256 KiB).
pub const MAX_HISTORY_BYTES: usize = 8 << 20;
/// Longest room name, in Unicode scalar values (after trimming).
pub const MAX_ROOM_NAME_CHARS: usize = 100;
/// Longest room description, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Most options of one vote.
pub const MAX_VOTE_OPTIONS: usize = 32;
/// Longest vote/task title or option, in bytes.
pub const MAX_TITLE_BYTES: usize = 1024;

/// Error codes carried in `error` frames (`payload.code`): the specification's table plus
/// the framing codes it leaves open.
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
    /// The API key is missing or wrong.
    Unauthorized,
    /// The frame `type` is not served.
    UnknownType,
    /// The payload is malformed or a field is out of range.
    InvalidPayload,
    /// The room does not exist (or is not visible to this key).
    RoomNotFound,
    /// The agent must join the room first (or a mention names a non-member).
    NotInRoom,
    /// The agent is already a member of the room.
    AlreadyInRoom,
    /// The agent id is bound to another API key.
    AgentIdTaken,
    /// A room with that name already exists.
    RoomNameTaken,
    /// The referenced message does not exist in the room.
    MessageNotFound,
    /// The vote does not exist.
    VoteNotFound,
    /// The vote has already been closed.
    VoteClosed,
    /// The agent has already cast a ballot.
    AlreadyVoted,
    /// The option index is out of range.
    InvalidOption,
    /// Only the elected leader can issue decisions.
    NotLeader,
    /// An election is already running in this room.
    ElectionInProgress,
    /// No active election to decline.
    NoElectionActive,
    /// Too many agents for this API key.
    RateLimitAgents,
    /// Message rate limit exceeded.
    RateLimitMessages,
    /// Room limit exceeded.
    RateLimitRooms,
    /// Private room of another key, or a destructive action by a non-creator.
    AccessDenied,
    /// The task does not exist.
    TaskNotFound,
    /// Plaintext sent to an end-to-end encrypted room.
    PlaintextInEncryptedRoom,
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
            Self::NotInRoom => "not_in_room",
            Self::AlreadyInRoom => "already_in_room",
            Self::AgentIdTaken => "agent_id_taken",
            Self::RoomNameTaken => "room_name_taken",
            Self::MessageNotFound => "message_not_found",
            Self::VoteNotFound => "vote_not_found",
            Self::VoteClosed => "vote_closed",
            Self::AlreadyVoted => "already_voted",
            Self::InvalidOption => "invalid_option",
            Self::NotLeader => "not_leader",
            Self::ElectionInProgress => "election_in_progress",
            Self::NoElectionActive => "no_election_active",
            Self::RateLimitAgents => "rate_limit_agents",
            Self::RateLimitMessages => "rate_limit_messages",
            Self::RateLimitRooms => "rate_limit_rooms",
            Self::AccessDenied => "access_denied",
            Self::TaskNotFound => "task_not_found",
            Self::PlaintextInEncryptedRoom => "plaintext_in_encrypted_room",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal_error",
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
    /// Machine-readable particulars (`payload.details` of the error frame), when any.
    pub details: Option<serde_json::Value>,
}

impl WireError {
    /// A new error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
        }
    }

    /// The same error with machine-readable `details`.
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `invalid_payload` with a message.
    pub fn payload(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidPayload, message)
    }
}
