//! A client for the Codex app-server protocol (`codex app-server`): one child process, one
//! JSON-RPC 2.0 connection over its stdin/stdout (one JSON object per line, the `"jsonrpc"`
//! member omitted as codex does).
//!
//! The crate owns the wire format and the child process only; the broker decides what to do
//! with threads, turns and failures. See `docs/codex.md`.

mod agent;
mod wire;

use std::path::PathBuf;
use std::time::Duration;

pub use agent::CodexAgent;
pub use convene_agentio::Update;

/// Longest line accepted from the app-server; a longer one is [`CodexError::LineTooLong`].
pub const MAX_LINE_BYTES: usize = convene_agentio::MAX_LINE_BYTES;

/// Capacity of [`TurnRun::updates`]; see [`CodexAgent::start_turn`] for what happens past it.
pub const UPDATE_CHANNEL_CAPACITY: usize = convene_agentio::UPDATE_CHANNEL_CAPACITY;

/// How many bytes of the child's stderr are kept for [`CodexError::Exited`].
pub const STDERR_TAIL_BYTES: usize = convene_agentio::STDERR_TAIL_BYTES;

/// How to start one app-server process.
#[derive(Debug, Clone)]
pub struct CodexConfig {
    /// Program and arguments, e.g. `["codex", "app-server"]`.
    pub command: Vec<String>,
    /// Working directory of the child process.
    pub cwd: PathBuf,
    /// Extra environment variables (added to the inherited environment).
    pub env: Vec<(String, String)>,
    /// Bound on every request except the turn itself.
    pub request_timeout: Duration,
}

/// A running turn: its id, its updates in order, then its outcome.
#[derive(Debug)]
pub struct TurnRun {
    /// The app-server's turn id (`turn/start` result `turn.id`), for [`CodexAgent::interrupt`].
    pub turn_id: String,
    /// Updates of this turn, in the order the app-server sent them.
    pub updates: tokio::sync::mpsc::Receiver<Update>,
    /// Resolves after every update has been handed to `updates` (or `updates` was dropped).
    pub done: tokio::sync::oneshot::Receiver<Result<TurnEnd, CodexError>>,
}

/// How a turn ended (`turn/completed` `turn.status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    /// `completed`.
    Completed,
    /// `interrupted` (after [`CodexAgent::interrupt`], or a refused interaction).
    Interrupted,
    /// `failed`, with `turn.error.message` (or the last `error` notification's message).
    Failed(String),
}

/// Everything that can go wrong talking to the app-server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodexError {
    /// The process could not be started.
    #[error("cannot start codex app-server: {0}")]
    Spawn(String),
    /// The process exited (or closed its stdout).
    #[error("codex app-server exited (code {code:?}): {stderr_tail}")]
    Exited {
        /// Exit code, `None` when killed by a signal or not known in time.
        code: Option<i32>,
        /// The last bytes of its stderr.
        stderr_tail: String,
    },
    /// The app-server broke the wire format: a non-JSON line, or a message of the wrong shape.
    #[error("codex app-server protocol violation: {0}")]
    Protocol(String),
    /// The app-server answered with a JSON-RPC error.
    #[error("codex app-server error {code}: {message}")]
    Rpc {
        /// JSON-RPC error code.
        code: i64,
        /// JSON-RPC error message.
        message: String,
    },
    /// No answer within the request timeout; the argument is the method.
    #[error("no answer to {0} in time")]
    Timeout(&'static str),
    /// The app-server wrote a line longer than [`MAX_LINE_BYTES`].
    #[error("codex app-server wrote a line longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong,
    /// The connection was closed by [`CodexAgent::shutdown`] or a failed write.
    #[error("connection to codex app-server closed")]
    Closed,
    /// The thread already has a turn running (one turn per thread at a time).
    #[error("thread {0} already has a turn running")]
    TurnBusy(String),
}

impl From<convene_agentio::PeerError> for CodexError {
    fn from(e: convene_agentio::PeerError) -> CodexError {
        use convene_agentio::PeerError as P;
        match e {
            P::Spawn(s) => CodexError::Spawn(s),
            P::Exited { code, stderr_tail } => CodexError::Exited { code, stderr_tail },
            P::Protocol(s) => CodexError::Protocol(s),
            P::Rpc { code, message } => CodexError::Rpc { code, message },
            P::Timeout(m) => CodexError::Timeout(m),
            P::LineTooLong => CodexError::LineTooLong,
            P::Closed => CodexError::Closed,
        }
    }
}
