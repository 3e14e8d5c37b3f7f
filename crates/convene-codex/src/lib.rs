//! A client for the Codex app-server protocol (`codex app-server`): one child process, one
//! JSON-RPC 2.0 connection over its stdin/stdout (one JSON object per line, the `"jsonrpc"`
//! member omitted as codex does).
//!
//! The crate owns the wire format and the child process only; the broker decides what to do
//! with threads, turns and failures. See `docs/codex.md`.

mod agent;
mod process;
mod sink;
mod wire;

use std::path::PathBuf;
use std::time::Duration;

pub use agent::CodexAgent;

/// Longest line accepted from the app-server; a longer one is [`CodexError::LineTooLong`].
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Capacity of [`TurnRun::updates`]; see [`CodexAgent::start_turn`] for what happens past it.
pub const UPDATE_CHANNEL_CAPACITY: usize = 1024;

/// How many bytes of the child's stderr are kept for [`CodexError::Exited`].
pub const STDERR_TAIL_BYTES: usize = 4096;

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

/// One notification of a running turn, reduced to what the broker uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// `item/agentMessage/delta` text (and `"\n\n"` between two agent messages of one turn).
    MessageChunk(String),
    /// `item/reasoning/summaryTextDelta` or `item/reasoning/textDelta` text.
    ThoughtChunk(String),
    /// `item/started` of a tool-like item (command, file change, MCP / dynamic tool call, ...).
    ToolCall {
        /// The item id.
        id: String,
        /// Human-readable title (the command, the changed paths, `server/tool`, ...).
        title: String,
        /// The item type (`commandExecution`, `fileChange`, `mcpToolCall`, ...).
        kind: Option<String>,
        /// The item status (`inProgress`, ...).
        status: Option<String>,
    },
    /// `item/completed` of a tool-like item.
    ToolCallUpdate {
        /// The item id.
        id: String,
        /// New title, if changed.
        title: Option<String>,
        /// Final status (`completed`, `failed`, `declined`).
        status: Option<String>,
    },
    /// The app-server asked for approval or user input; it was refused and the turn interrupted.
    UnexpectedInteraction {
        /// The JSON-RPC method of the app-server's request.
        method: String,
    },
    /// Any other notification of the turn (`turn/started`, plan, diff, non-tool items, `error`,
    /// future kinds).
    Other {
        /// The notification method, with `:<item type>` for `item/started` / `item/completed`.
        kind: String,
    },
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
