//! The Cowchat protocol v2 face (NDJSON frames on `<home>/daemon/cowchat.sock` and optional
//! TCP). Thin, like the IPC face: the wire format lives in `convene-cowchat`; this module maps
//! rooms onto groups, agents onto actors and messages onto `chat.message` events, so every
//! face sees the same ledger. See docs/cowchat.md for the mapping and what is not done yet.

mod conn;
mod messages;
mod push;
mod rooms;
pub mod webhooks;

use std::collections::HashMap;
use std::sync::Arc;

use convene_core::{CoreError, ErrorCode as Core};
use convene_cowchat::{ErrorCode, WireError};
use parking_lot::Mutex;

use crate::ipc::Trust;
use crate::Daemon;

/// Principal the face uses for room and membership management (`svc:` principals may
/// manage groups; the agents themselves are the `by` of their messages).
pub(crate) const SERVICE: &str = "svc:cowchat";
/// Group settings key holding the room name: the name → group map is derived from it.
pub(crate) const ROOM_KEY: &str = "cowchat_room";
/// Group settings key holding the room's Cowchat attributes.
pub(crate) const ATTRS_KEY: &str = "cowchat";
/// `data` key of `chat.message` events holding Cowchat-only message fields.
pub(crate) const DATA_KEY: &str = "cowchat";
/// Actor `runtime` given to Cowchat agents: a name without a transport, so the runtime
/// worker records no delivery attempts for them (they read pushes instead).
pub(crate) const RUNTIME: &str = "cowchat";

/// Daemon-wide state of the face: presence and the room-creation lock.
pub struct Face {
    d: Arc<Daemon>,
    /// agent id → (display name, open connections).
    presence: Mutex<HashMap<String, (String, usize)>>,
    /// Serializes `create_room` so two clients cannot create the same name.
    create: tokio::sync::Mutex<()>,
    /// Webhook subscriptions, once `webhooks::start` ran.
    hooks: std::sync::OnceLock<Arc<webhooks::Hooks>>,
}

impl Face {
    /// The face over a started daemon.
    pub fn new(d: Arc<Daemon>) -> Arc<Self> {
        Arc::new(Self {
            d,
            presence: Mutex::new(HashMap::new()),
            create: tokio::sync::Mutex::new(()),
            hooks: std::sync::OnceLock::new(),
        })
    }

    fn online(&self, agent_id: &str) -> bool {
        self.presence.lock().contains_key(agent_id)
    }
}

/// Maps an engine error to the Cowchat code closest in meaning.
pub(crate) fn wire(e: CoreError) -> WireError {
    let code = match e.code {
        Core::InvalidRequest | Core::LimitExceeded | Core::InvalidCursor => {
            ErrorCode::InvalidPayload
        }
        Core::PermissionDenied | Core::ActorNotFound => ErrorCode::NotMember,
        Core::GroupNotFound => ErrorCode::RoomNotFound,
        Core::EventNotFound => ErrorCode::MessageNotFound,
        Core::DaemonUnavailable | Core::StorageError => ErrorCode::Unavailable,
        _ => ErrorCode::Internal,
    };
    WireError::new(code, e.message)
}

/// Serves one Cowchat connection (the accept loops are in `crate::listen`).
pub async fn serve<S>(face: Arc<Face>, s: S, trust: Trust)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    conn::serve(face, s, trust).await
}
