//! A client for the Agent Client Protocol (ACP): one agent CLI child process, one JSON-RPC 2.0
//! connection over its stdin/stdout (one JSON object per line).
//!
//! The crate owns the wire format and the child process only; the broker decides what to do
//! with sessions, turns and failures. See `docs/acp.md`.

mod agent;
mod wire;

use std::path::PathBuf;
use std::time::Duration;

pub use agent::AcpAgent;
pub use convene_agentio::Update;

/// Longest line accepted from the agent; a longer one is [`AcpError::LineTooLong`].
pub const MAX_LINE_BYTES: usize = convene_agentio::MAX_LINE_BYTES;

/// Capacity of [`PromptRun::updates`]; see [`AcpAgent::prompt`] for what happens past it.
pub const UPDATE_CHANNEL_CAPACITY: usize = convene_agentio::UPDATE_CHANNEL_CAPACITY;

/// How many bytes of the child's stderr are kept for [`AcpError::Exited`].
pub const STDERR_TAIL_BYTES: usize = convene_agentio::STDERR_TAIL_BYTES;

/// How to start one agent process.
#[derive(Debug, Clone)]
pub struct AcpConfig {
    /// Program and arguments, e.g. `["gemini", "--experimental-acp"]`.
    pub command: Vec<String>,
    /// Working directory of the child process.
    pub cwd: PathBuf,
    /// Extra environment variables (added to the inherited environment).
    pub env: Vec<(String, String)>,
    /// Bound on every request except `session/prompt`.
    pub request_timeout: Duration,
}

/// What the agent answered to `initialize`.
#[derive(Debug, Clone)]
pub struct AgentInfo {
    /// The protocol version the agent chose.
    pub protocol_version: u64,
    /// `agentCapabilities.loadSession`: whether `session/load` is supported.
    pub load_session: bool,
    /// The whole `initialize` result, for capabilities this crate does not model.
    pub raw: serde_json::Value,
}

/// A session created by [`AcpAgent::new_session_full`].
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The agent's session id.
    pub session_id: String,
    /// `modes.currentModeId`, when the agent reports modes.
    pub current_mode: Option<String>,
    /// Ids of `modes.availableModes`, empty when the agent reports none.
    pub available_modes: Vec<String>,
}

/// A running prompt turn: its updates in order, then its outcome.
#[derive(Debug)]
pub struct PromptRun {
    /// Updates of this prompt's session, in the order the agent sent them.
    pub updates: tokio::sync::mpsc::Receiver<Update>,
    /// Resolves after every update has been handed to `updates` (or `updates` was dropped).
    pub done: tokio::sync::oneshot::Receiver<Result<StopReason, AcpError>>,
}

/// Why a prompt turn ended (`stopReason`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// `end_turn`.
    EndTurn,
    /// `max_tokens`.
    MaxTokens,
    /// `max_turn_requests`.
    MaxTurnRequests,
    /// `refusal`.
    Refusal,
    /// `cancelled`.
    Cancelled,
    /// A reason this crate does not know.
    Other(String),
}

impl StopReason {
    /// Maps the wire string to a reason.
    pub fn from_wire(s: &str) -> StopReason {
        match s {
            "end_turn" => StopReason::EndTurn,
            "max_tokens" => StopReason::MaxTokens,
            "max_turn_requests" => StopReason::MaxTurnRequests,
            "refusal" => StopReason::Refusal,
            "cancelled" => StopReason::Cancelled,
            other => StopReason::Other(other.to_string()),
        }
    }
}

/// Everything that can go wrong talking to an agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcpError {
    /// The process could not be started.
    #[error("cannot start agent: {0}")]
    Spawn(String),
    /// The agent process exited (or closed its stdout).
    #[error("agent exited (code {code:?}): {stderr_tail}")]
    Exited {
        /// Exit code, `None` when killed by a signal or not known in time.
        code: Option<i32>,
        /// The last bytes of its stderr.
        stderr_tail: String,
    },
    /// The agent broke the wire format: a non-JSON line, or a message of the wrong shape.
    #[error("ACP protocol violation: {0}")]
    Protocol(String),
    /// The agent answered with a JSON-RPC error.
    #[error("agent error {code}: {message}")]
    Rpc {
        /// JSON-RPC error code.
        code: i64,
        /// JSON-RPC error message.
        message: String,
    },
    /// No answer within the request timeout; the argument is the method.
    #[error("no answer to {0} in time")]
    Timeout(&'static str),
    /// The agent wrote a line longer than [`MAX_LINE_BYTES`].
    #[error("agent wrote a line longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong,
    /// The session already has a prompt running (ACP allows one turn per session).
    #[error("session {0} already has a prompt running")]
    SessionBusy(String),
    /// The connection was closed by [`AcpAgent::shutdown`] or a failed write.
    #[error("connection to agent closed")]
    Closed,
}

impl From<convene_agentio::PeerError> for AcpError {
    fn from(e: convene_agentio::PeerError) -> AcpError {
        use convene_agentio::PeerError as P;
        match e {
            P::Spawn(s) => AcpError::Spawn(s),
            P::Exited { code, stderr_tail } => AcpError::Exited { code, stderr_tail },
            P::Protocol(s) => AcpError::Protocol(s),
            P::Rpc { code, message } => AcpError::Rpc { code, message },
            P::Timeout(m) => AcpError::Timeout(m),
            P::LineTooLong => AcpError::LineTooLong,
            P::Closed => AcpError::Closed,
        }
    }
}
