//! A small synchronous Cowchat client: NDJSON frames over a Unix socket, TCP or a WebSocket
//! (`ws://host:port/ws` or, with TLS, `wss://host/ws`; one frame per text message), plus the
//! pieces the `cowchat` CLI is built from: end-to-end room encryption, atomic cursor files,
//! message filtering for `wait` and the LANTERN structured-reasoning overlay. No async runtime: one blocking socket per
//! client, read timeouts for deadlines.
//!
//! ```no_run
//! use convene_chat::{Client, Endpoint, Identity};
//! # fn main() -> Result<(), convene_chat::Error> {
//! let ep = Endpoint::parse("unix:/home/me/.convene/daemon/cowchat.sock")?;
//! let who = Identity { name: "me".into(), agent_id: Some("me".into()), ..Default::default() };
//! let mut c = Client::connect(&ep, &who)?;
//! let room = c.resolve_room("lobby")?;
//! c.ensure_joined(room["room_id"].as_str().unwrap_or_default())?;
//! c.request("send_message", serde_json::json!({"room_id": room["room_id"], "content": "hi"}))?;
//! while let Some(push) = c.next_push(None)? {
//!     println!("{} {}", push.ftype, push.payload);
//! }
//! # Ok(()) }
//! ```

pub mod client;
pub mod crypto;
pub mod cursor;
pub mod endpoint;
pub mod lantern;
pub mod message;
mod tls;
mod transport;

pub use client::{Client, Frame, Identity};
pub use endpoint::Endpoint;
pub use tls::TlsConfig;

/// Everything the client library can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL given with `--url` / `$COWCHAT_URL` is not understood.
    #[error(
        "bad url {0:?}: use unix:/path, tcp host:port (or host:port), ws://host:port/ws or wss://host[:port]/ws"
    )]
    BadUrl(String),
    /// Socket I/O failed (connect, read, write).
    // Not a `source`: the message already includes it, and `{:#}` would print it twice.
    #[error("i/o: {0}")]
    Io(std::io::Error),
    /// TLS with the server failed: its certificate was rejected (untrusted, wrong name,
    /// expired…) or the handshake broke down. Not retried: it will not fix itself.
    #[error("TLS with {host}: {reason}")]
    Tls {
        /// The host of the URL (the name the certificate had to match).
        host: String,
        /// Why.
        reason: String,
    },
    /// The extra CA file (`--ca-file`, `SSL_CERT_FILE`) is unusable.
    #[error("CA file {}: {reason}", path.display())]
    CaFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// The WebSocket layer failed.
    #[error("websocket: {0}")]
    Ws(String),
    /// The peer closed the connection.
    #[error("connection closed by the server")]
    Closed,
    /// A frame from the server is larger than this client takes (the connection is then
    /// unusable). A catch-up that hits it asks again for smaller history pages.
    #[error("frame too large: {0}")]
    TooLarge(String),
    /// The server sent a line that is not a JSON frame.
    #[error("bad frame from server: {0}")]
    BadFrame(String),
    /// The server answered with an `error` frame.
    #[error("{code}: {message}")]
    Server {
        /// Error code (`room_not_found`, `not_in_room`, …).
        code: String,
        /// Human-readable message.
        message: String,
    },
    /// No answer before the deadline.
    #[error("timed out waiting for the server")]
    Timeout,
    /// A room name matched no visible room.
    #[error("no room named or with id {0:?}")]
    NoSuchRoom(String),
    /// Encryption or decryption failed.
    #[error("crypto: {0}")]
    Crypto(String),
    /// A LANTERN envelope breaks a rule.
    #[error("lantern: {0}")]
    Lantern(String),
}

impl Error {
    /// True for failures a retrying waiter should reconnect after (transport, not logic).
    pub fn is_transport(&self) -> bool {
        matches!(
            self,
            Error::Io(_)
                | Error::Ws(_)
                | Error::Closed
                | Error::TooLarge(_)
                | Error::BadFrame(_)
                | Error::Timeout
        )
    }

    /// The server's error code, if this is a server error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Server { code, .. } => Some(code),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

/// Result alias of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;
