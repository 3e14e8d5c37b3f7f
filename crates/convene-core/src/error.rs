//! The error model (CCCS §11): one table from error codes to wire codes and HTTP statuses.

use serde_json::{Map, Value};

/// Stable error codes shared by every face.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The request is malformed or breaks a rule of the spec.
    InvalidRequest,
    /// The principal may not do this.
    PermissionDenied,
    /// No such group.
    GroupNotFound,
    /// No such actor in the group.
    ActorNotFound,
    /// No such event in the group ledger.
    EventNotFound,
    /// The op is not served by this daemon.
    UnknownOp,
    /// The daemon cannot serve the request right now.
    DaemonUnavailable,
    /// The object already exists.
    AlreadyExists,
    /// A limit (size, count, rate) was exceeded.
    LimitExceeded,
    /// A stream cursor does not name a point in the ledger.
    InvalidCursor,
    /// A runtime delivery attempt is already in progress or may not be retried.
    DeliveryConflict,
    /// The durable store failed; nothing was acknowledged.
    StorageError,
    /// An invariant broke inside the daemon.
    Internal,
}

/// code, wire string, HTTP status: the one table every face uses.
const TABLE: &[(ErrorCode, &str, u16)] = &[
    (ErrorCode::InvalidRequest, "invalid_request", 400),
    (ErrorCode::PermissionDenied, "permission_denied", 403),
    (ErrorCode::GroupNotFound, "group_not_found", 404),
    (ErrorCode::ActorNotFound, "actor_not_found", 404),
    (ErrorCode::EventNotFound, "event_not_found", 404),
    (ErrorCode::UnknownOp, "unknown_op", 404),
    (ErrorCode::DaemonUnavailable, "daemon_unavailable", 503),
    (ErrorCode::AlreadyExists, "already_exists", 409),
    (ErrorCode::LimitExceeded, "limit_exceeded", 413),
    (ErrorCode::InvalidCursor, "invalid_cursor", 400),
    (ErrorCode::DeliveryConflict, "delivery_conflict", 409),
    (ErrorCode::StorageError, "storage_error", 500),
    (ErrorCode::Internal, "internal", 500),
];

impl ErrorCode {
    /// The stable wire spelling of the code.
    pub fn as_str(self) -> &'static str {
        TABLE
            .iter()
            .find(|(c, _, _)| *c == self)
            .map(|(_, s, _)| *s)
            .unwrap_or("internal")
    }

    /// The HTTP status an HTTP face answers with.
    pub fn http_status(self) -> u16 {
        TABLE
            .iter()
            .find(|(c, _, _)| *c == self)
            .map(|(_, _, h)| *h)
            .unwrap_or(500)
    }

    /// Parses a wire spelling back to a code.
    pub fn from_wire(s: &str) -> Option<Self> {
        TABLE.iter().find(|(_, w, _)| *w == s).map(|(c, _, _)| *c)
    }
}

/// An error with a stable code, a human message and structured details.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct CoreError {
    /// The stable code.
    pub code: ErrorCode,
    /// A human-readable explanation.
    pub message: String,
    /// Structured details for programs.
    pub details: Map<String, Value>,
}

impl CoreError {
    /// An error with no details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Map::new(),
        }
    }

    /// Adds one detail.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }

    /// `invalid_request` with a message.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// `permission_denied` with a message.
    pub fn denied(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::PermissionDenied, message)
    }

    /// `group_not_found` for a group id.
    pub fn no_group(group_id: &str) -> Self {
        Self::new(
            ErrorCode::GroupNotFound,
            format!("group not found: {group_id}"),
        )
        .with("group_id", group_id)
    }

    /// `actor_not_found` for an actor id.
    pub fn no_actor(actor_id: &str) -> Self {
        Self::new(
            ErrorCode::ActorNotFound,
            format!("actor not found: {actor_id}"),
        )
        .with("actor_id", actor_id)
    }

    /// `event_not_found` for an event id.
    pub fn no_event(event_id: &str) -> Self {
        Self::new(
            ErrorCode::EventNotFound,
            format!("event not found: {event_id}"),
        )
        .with("event_id", event_id)
    }

    /// `storage_error` wrapping a store failure.
    pub fn storage(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::StorageError, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_unique_wire_spelling_and_round_trips() {
        let mut seen = std::collections::HashSet::new();
        for (code, wire, status) in TABLE {
            assert!(seen.insert(*wire), "duplicate {wire}");
            assert_eq!(ErrorCode::from_wire(wire), Some(*code));
            assert_eq!(code.as_str(), *wire);
            assert!((400..600).contains(status));
        }
    }

    #[test]
    fn cccs_11_recommended_codes_are_spelled_as_the_spec_says() {
        for w in [
            "invalid_request",
            "permission_denied",
            "group_not_found",
            "actor_not_found",
            "event_not_found",
            "unknown_op",
            "daemon_unavailable",
        ] {
            assert!(ErrorCode::from_wire(w).is_some(), "{w}");
        }
    }
}
