//! A JSON-RPC peer on a child process's stdio, and the ordered update stream of one running
//! turn: what `convene-acp` and `convene-codex` share.
//!
//! The child runs in its own process group ([`process`]); its stdout is read as bounded lines
//! ([`process::read_line`]) of JSON-RPC in one protocol's [`jsonrpc::Dialect`]; a
//! [`peer::Peer`] keeps the request table with its timeouts and fails everything once the
//! connection dies; each running turn hands its [`Update`]s to the consumer through a
//! [`sink::TurnSink`] that never blocks the reader. Protocol crates ([`peer::Protocol`]) keep
//! their methods, message shapes, turn routing, interaction policy and errors.

pub mod error;
pub mod jsonrpc;
pub mod peer;
pub mod process;
pub mod sink;
pub mod update;

pub use error::PeerError;
pub use update::Update;

/// Longest line accepted from the peer; a longer one is [`PeerError::LineTooLong`].
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Capacity of a turn's update channel (see [`sink`] for what happens past it).
pub const UPDATE_CHANNEL_CAPACITY: usize = 1024;

/// How many bytes of the child's stderr are kept for [`PeerError::Exited`].
pub const STDERR_TAIL_BYTES: usize = 4096;
