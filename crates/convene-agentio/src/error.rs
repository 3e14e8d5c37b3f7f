//! [`PeerError`]: what can go wrong on the connection itself, whatever the protocol.

/// A failure of the child process or of its JSON-RPC connection. Each protocol crate maps it
/// one-to-one onto its own error enum (which words the messages for its peer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// The process could not be started.
    #[error("cannot start child: {0}")]
    Spawn(String),
    /// The process exited (or closed its stdout).
    #[error("child exited (code {code:?}): {stderr_tail}")]
    Exited {
        /// Exit code, `None` when killed by a signal or not known in time.
        code: Option<i32>,
        /// The last bytes of its stderr.
        stderr_tail: String,
    },
    /// The peer broke the wire format: a non-JSON line, or a message of the wrong shape.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The peer answered with a JSON-RPC error.
    #[error("peer error {code}: {message}")]
    Rpc {
        /// JSON-RPC error code.
        code: i64,
        /// JSON-RPC error message.
        message: String,
    },
    /// No answer within the request timeout; the argument is the method.
    #[error("no answer to {0} in time")]
    Timeout(&'static str),
    /// The peer wrote a line longer than [`crate::MAX_LINE_BYTES`].
    #[error("peer wrote a line longer than {} bytes", crate::MAX_LINE_BYTES)]
    LineTooLong,
    /// The connection was closed (shut down, or a failed write).
    #[error("connection closed")]
    Closed,
}
