//! Error types of the evidence library.

use serde::Serialize;
use serde_json::{json, Value};

/// Intake error codes of §3.4 (Figure 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum IntakeErrorCode {
    /// Input is not valid JSON, or field types are incorrect.
    IntakeMalformed,
    /// A required field is absent.
    IntakeMissingField,
    /// A component exceeds its size limit.
    IntakeOverflow,
    /// Processing exceeded the timeout.
    IntakeTimeout,
    /// The intake_version is not supported.
    IntakeVersionUnsupported,
    /// Any other failure inside the intake path (§3.3 pseudo-code "INTAKE_FAILED").
    IntakeFailed,
}

impl IntakeErrorCode {
    /// Wire name of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IntakeMalformed => "INTAKE_MALFORMED",
            Self::IntakeMissingField => "INTAKE_MISSING_FIELD",
            Self::IntakeOverflow => "INTAKE_OVERFLOW",
            Self::IntakeTimeout => "INTAKE_TIMEOUT",
            Self::IntakeVersionUnsupported => "INTAKE_VERSION_UNSUPPORTED",
            Self::IntakeFailed => "INTAKE_FAILED",
        }
    }

    /// Whether the caller may retry (Figure 3 "Retry" column).
    pub fn retry_allowed(self) -> bool {
        !matches!(self, Self::IntakeOverflow | Self::IntakeVersionUnsupported)
    }
}

/// A structured intake failure (§3.4); never carries a `receipt` field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct IntakeError {
    /// Error code from the taxonomy.
    pub code: IntakeErrorCode,
    /// Human readable message; must not leak internals (paths, key ids, traces).
    pub message: String,
    /// trace_id of the failed intake, when it could be read.
    pub trace_id: Option<String>,
}

impl IntakeError {
    /// Build an intake error.
    pub fn new(code: IntakeErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            trace_id: None,
        }
    }

    /// The §3.4 error response object.
    pub fn to_response(&self) -> Value {
        // retry_after is null: the verifier never asks for a timed retry, and
        // codes whose Retry column is MUST NOT are never retryable anyway.
        json!({
            "error_code": self.code.as_str(),
            "error_message": self.message,
            "retry_after": Value::Null,
            "trace_id": self.trace_id,
        })
    }
}

/// Every error the library can return.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// Intake failed; no receipt was produced (fail-closed).
    #[error(transparent)]
    Intake(#[from] IntakeError),
    /// A value could not be canonicalized (RFC 8785).
    #[error("canonicalization failed: {0}")]
    Canonical(String),
    /// Cryptographic key material was invalid.
    #[error("invalid key: {0}")]
    Key(String),
    /// Signature or MAC check failed.
    #[error("signature invalid")]
    SignatureInvalid,
    /// Receipt validation rejected the receipt.
    #[error("receipt rejected: {0}")]
    Rejected(String),
    /// Evidence store or replay cache failure.
    #[error("storage failure: {0}")]
    Storage(#[from] rusqlite::Error),
    /// I/O failure.
    #[error("i/o failure: {0}")]
    Io(#[from] std::io::Error),
    /// JSON (de)serialization failure.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// The out-of-process verifier did not answer in time (§8.2).
    #[error("verifier timeout")]
    Timeout,
    /// The out-of-process verifier is unreachable (§13.8).
    #[error("verifier unreachable: {0}")]
    Unreachable(String),
    /// Chain or envelope failed a structural requirement.
    #[error("chain: {0}")]
    Chain(String),
    /// Invalid argument or configuration.
    #[error("invalid: {0}")]
    Invalid(String),
}

/// Library result alias.
pub type Result<T, E = EvidenceError> = std::result::Result<T, E>;
