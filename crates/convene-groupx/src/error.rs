//! Protocol errors (§14): one table from code to wire string and HTTP status.

use serde_json::{json, Value};

/// The §14 codes this broker produces, plus the few adapter failures it names itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Malformed request, unknown field, or a field the caller may not set (transport, access).
    InvalidEnvelope,
    /// Unknown actor.
    UnknownActor,
    /// A recipient is not an enabled agent of the room.
    UnknownTarget,
    /// The request tried to name its sender (`from`, `actor`, `provenance`).
    SenderFieldForbidden,
    /// The same clientCommandId was used for a different payload.
    ClientCommandConflict,
    /// A target already has a turn for this message.
    DuplicateDispatch,
    /// A target's lane is full.
    QueueCapacityReached,
    /// The content or the request body is over the limit.
    MessageTooLarge,
    /// No such turn.
    UnknownTurn,
    /// The turn's agent answered outside the protocol (not JSON, wrong shape).
    ProtocolInvalidMessage,
    /// The agent asked for approval / permission / user input (§9).
    UnexpectedNativeInteraction,
    /// The agent process or its session could not be started.
    SessionFailed,
    /// The agent process ended during the turn.
    AgentExited,
    /// The agent answered the prompt with a JSON-RPC error.
    AgentError,
    /// The ledger refused the turn's answer (e.g. the agent was removed over another face).
    ResponseRefused,
    /// The turn was running when the broker stopped; it is not re-run (§5).
    InterruptedByRestart,
    /// The turn produced no output for longer than the idle limit.
    TurnIdleTimeout,
    /// A synchronous ask would wait on an agent already waiting up its chain (§6.6).
    CausalCycle,
    /// The chain is longer than the hop limit (§7).
    HopLimitReached,
    /// The chain has used its turns, or this agent its calls, within one root (§7).
    RootTurnLimitReached,
    /// MCP is not available to this caller (§12).
    McpUnavailable,
    /// The MCP binding names no live session, or not the caller's.
    McpBindingMismatch,
    /// A supervision pair is malformed or names an observer it may not (§4.3).
    SupervisionPairInvalid,
    /// watch/steer from a turn that is not a Watch Turn (§6.7).
    SupervisionWatchRequired,
    /// A Watch Turn tried to send/ask the worker it watches: steer instead (§6.7).
    SupervisionSteerRequired,
    /// The watched turn has been steered as often as allowed (§6.7, §7).
    SteerLimitReached,
    /// A runtime lifecycle request names another runtime (§10.8).
    RuntimeConflict,
    /// The route or method does not exist.
    NotFound,
    /// The method is not allowed on this route.
    MethodNotAllowed,
    /// The broker is shutting down.
    Unavailable,
    /// The ledger failed; nothing was acknowledged.
    StorageError,
    /// No memory record has this id (§10.4).
    UnknownMemory,
    /// The memory record was retracted; it cannot be superseded or retracted again.
    MemoryRetracted,
    /// The memory record has a newer version; only the current version can change.
    MemorySuperseded,
    /// No identity record has this id (§10.4).
    UnknownIdentity,
    /// The identity record was retracted.
    IdentityRetracted,
    /// The identity record has a newer version.
    IdentitySuperseded,
}

/// code, wire string, HTTP status.
const TABLE: &[(ErrorCode, &str, u16)] = &[
    (ErrorCode::InvalidEnvelope, "INVALID_ENVELOPE", 400),
    (ErrorCode::UnknownActor, "UNKNOWN_ACTOR", 404),
    (ErrorCode::UnknownTarget, "UNKNOWN_TARGET", 404),
    (
        ErrorCode::SenderFieldForbidden,
        "SENDER_FIELD_FORBIDDEN",
        400,
    ),
    (
        ErrorCode::ClientCommandConflict,
        "CLIENT_COMMAND_CONFLICT",
        409,
    ),
    (ErrorCode::DuplicateDispatch, "DUPLICATE_DISPATCH", 409),
    (
        ErrorCode::QueueCapacityReached,
        "QUEUE_CAPACITY_REACHED",
        429,
    ),
    (ErrorCode::MessageTooLarge, "MESSAGE_TOO_LARGE", 413),
    (ErrorCode::UnknownTurn, "UNKNOWN_TURN", 404),
    (
        ErrorCode::ProtocolInvalidMessage,
        "PROTOCOL_INVALID_MESSAGE",
        502,
    ),
    (
        ErrorCode::UnexpectedNativeInteraction,
        "UNEXPECTED_NATIVE_INTERACTION",
        502,
    ),
    (ErrorCode::SessionFailed, "SESSION_FAILED", 502),
    (ErrorCode::AgentExited, "AGENT_EXITED", 502),
    (ErrorCode::AgentError, "AGENT_ERROR", 502),
    (ErrorCode::ResponseRefused, "RESPONSE_REFUSED", 502),
    (
        ErrorCode::InterruptedByRestart,
        "INTERRUPTED_BY_RESTART",
        409,
    ),
    (ErrorCode::TurnIdleTimeout, "TURN_IDLE_TIMEOUT", 504),
    (ErrorCode::CausalCycle, "CAUSAL_CYCLE", 409),
    (ErrorCode::HopLimitReached, "HOP_LIMIT_REACHED", 429),
    (
        ErrorCode::RootTurnLimitReached,
        "ROOT_TURN_LIMIT_REACHED",
        429,
    ),
    (ErrorCode::McpUnavailable, "MCP_UNAVAILABLE", 503),
    (ErrorCode::McpBindingMismatch, "MCP_BINDING_MISMATCH", 403),
    (
        ErrorCode::SupervisionPairInvalid,
        "SUPERVISION_PAIR_INVALID",
        400,
    ),
    (
        ErrorCode::SupervisionWatchRequired,
        "SUPERVISION_WATCH_REQUIRED",
        403,
    ),
    (
        ErrorCode::SupervisionSteerRequired,
        "SUPERVISION_STEER_REQUIRED",
        409,
    ),
    (ErrorCode::SteerLimitReached, "STEER_LIMIT_REACHED", 429),
    (ErrorCode::RuntimeConflict, "RUNTIME_CONFLICT", 409),
    (ErrorCode::NotFound, "NOT_FOUND", 404),
    (ErrorCode::MethodNotAllowed, "METHOD_NOT_ALLOWED", 405),
    (ErrorCode::Unavailable, "UNAVAILABLE", 503),
    (ErrorCode::StorageError, "STORAGE_ERROR", 500),
    (ErrorCode::UnknownMemory, "UNKNOWN_MEMORY", 404),
    (ErrorCode::MemoryRetracted, "MEMORY_RETRACTED", 409),
    (ErrorCode::MemorySuperseded, "MEMORY_SUPERSEDED", 409),
    (ErrorCode::UnknownIdentity, "UNKNOWN_IDENTITY", 404),
    (ErrorCode::IdentityRetracted, "IDENTITY_RETRACTED", 409),
    (ErrorCode::IdentitySuperseded, "IDENTITY_SUPERSEDED", 409),
];

impl ErrorCode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        TABLE
            .iter()
            .find(|(c, _, _)| *c == self)
            .map_or("STORAGE_ERROR", |(_, s, _)| s)
    }

    /// The HTTP status a REST answer carries for this code.
    pub fn http_status(self) -> u16 {
        TABLE
            .iter()
            .find(|(c, _, _)| *c == self)
            .map_or(500, |(_, _, s)| *s)
    }
}

/// A refusal: code plus a human-readable message (and optionally the field at fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct GroupxError {
    /// The protocol code.
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub message: String,
    /// The request field at fault, when there is one.
    pub field: Option<String>,
}

impl GroupxError {
    /// An error with a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
        }
    }

    /// Names the field at fault.
    pub fn field(mut self, f: &str) -> Self {
        self.field = Some(f.to_string());
        self
    }

    /// `{"error":{"code","message","field"?}}`: the REST error body.
    pub fn to_body(&self) -> Value {
        let mut e = json!({"code": self.code.as_str(), "message": self.message});
        if let Some(f) = &self.field {
            e["field"] = Value::String(f.clone());
        }
        json!({ "error": e })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_row() {
        for (c, s, st) in TABLE {
            assert_eq!(c.as_str(), *s);
            assert_eq!(c.http_status(), *st);
            assert_eq!(TABLE.iter().filter(|(x, _, _)| x == c).count(), 1);
        }
    }
}
