//! The Cowchat protocol v2 face (NDJSON frames on `<home>/daemon/cowchat.sock`, TCP and
//! WebSocket). Thin, like the IPC face: the wire format lives in `convene-cowchat`; this
//! module maps rooms onto groups, agents onto actors and messages onto `chat.message`
//! events, so every face sees the same ledger. Live-only state (connections, presence, the
//! turn token, reconnect cursors) is in [`live`]. See docs/cowchat.md.

mod agents;
mod attrs;
mod conn;
mod coord;
mod follow;
mod keys;
pub mod limits;
mod live;
mod messages;
mod migrate;
mod names;
mod push;
mod replay;
mod rooms;
pub mod webhooks;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use convene_core::{CoreError, ErrorCode as Core};
use convene_cowchat::{ErrorCode, WireError};
use parking_lot::Mutex;

use crate::ipc::Trust;
use crate::Daemon;

pub use limits::Limits;

/// Principal the face uses for room and membership management (`svc:` principals may
/// manage groups; the agents themselves are the `by` of their messages).
pub(crate) const SERVICE: &str = "svc:cowchat";
/// Group settings key holding the room name: the room directory (`names.rs`) is derived from it.
pub(crate) const ROOM_KEY: &str = "cowchat_room";
/// Group settings key holding the room's Cowchat attributes.
pub(crate) const ATTRS_KEY: &str = "cowchat";
/// Actor field holding the API-key principal the member joined with: an agent id stays bound
/// to its key across a restart (the live binding is memory only), or another key could
/// register the id and inherit its private rooms and replay.
pub(crate) const PRINCIPAL_KEY: &str = "cowchat_principal";
/// `data` key of `chat.message` events holding Cowchat-only message fields.
pub(crate) const DATA_KEY: &str = "cowchat";
/// Actor `runtime` given to Cowchat agents: a name without a transport, so the runtime
/// worker records no delivery attempts for them (they read pushes instead).
pub(crate) const RUNTIME: &str = "cowchat";
/// Event kind of a thinking pulse: persisted, in history, never a `chat.message` (so it
/// neither wakes `wait` nor lands in CCCS inboxes).
pub(crate) const THINKING_KIND: &str = "x.cowchat.thinking";
/// The Cowchat default TCP address (`convene serve` takes it when free).
pub const DEFAULT_TCP: &str = "127.0.0.1:9229";
/// How long a disconnected agent keeps its memberships and its replay cursors (the
/// specification's window; `serve --cowchat-reconnect-secs` changes it, for tests).
pub const RECONNECT_WINDOW: Duration = Duration::from_secs(120);

/// Settings of the face.
#[derive(Debug, Clone)]
pub struct FaceConfig {
    /// The daemon home (`auth.key`, `keys.d/`).
    pub home: PathBuf,
    /// Per-key limits: the defaults (a key's own file may override them).
    pub limits: Limits,
    /// How long a disconnected agent keeps its rooms and replay cursors.
    pub reconnect_window: Duration,
}

/// Daemon-wide state of the face.
pub struct Face {
    d: Arc<Daemon>,
    cfg: FaceConfig,
    live: Mutex<live::Live>,
    /// Serializes room creation, rename and removal so a name is taken once.
    rooms_lock: tokio::sync::Mutex<()>,
    /// Votes, elections, leaders and tasks (projection of the `x.cowchat.*` events).
    coord: coord::Coord,
    /// Webhook subscriptions, once `webhooks::attach` ran.
    hooks: std::sync::OnceLock<Arc<webhooks::Hooks>>,
    /// Decoded room attributes.
    attrs: attrs::Cache,
    /// Room name → room, and rooms per owning key.
    names: names::Directory,
    /// Members this face is removing right now (the change follower leaves them to it).
    departing: follow::Departures,
    /// What clients were last shown of each room (the change follower pushes the difference).
    shown: follow::Shown,
}

impl Face {
    /// The face over a started daemon. Agents that were members when the daemon stopped
    /// count as just disconnected: they keep their rooms for the reconnect window.
    pub async fn new(d: Arc<Daemon>, cfg: FaceConfig) -> Arc<Self> {
        let face = Arc::new(Self {
            d,
            cfg,
            live: Mutex::new(live::Live::default()),
            rooms_lock: tokio::sync::Mutex::new(()),
            coord: coord::Coord::new(),
            hooks: std::sync::OnceLock::new(),
            attrs: attrs::Cache::default(),
            names: names::Directory::default(),
            departing: follow::Departures::default(),
            shown: follow::Shown::default(),
        });
        rooms::ensure_lobby(&face).await;
        migrate::parent_names_to_ids(&face).await;
        // Before anything start-up appends to the rooms (a reveal or election result that
        // came due while the daemon was down, a stale leader's clearing): a member without a
        // saved replay point resumes from the head as it was at the stop, so reconnecting it
        // is pushed those too, however soon the timers armed below fire.
        live::adopt_members_at_start(&face);
        coord::start(&face).await;
        follow::start(&face).await;
        live::spawn_reaper(face.clone());
        keys::spawn_revoker(face.clone());
        face
    }

    /// Saves every agent's replay points (the daemon calls this once more as it stops).
    pub fn save_replay_points(&self) {
        let points = self.live.lock().replay_points();
        if let Err(e) = replay::save(&self.cfg.home, &points) {
            tracing::warn!(error = %e, "cannot save cowchat replay points");
        }
    }
}

/// Imports events into a group for [`crate::Daemon::import`]: the coordination events among
/// them are folded into this face's projection before it returns.
pub(crate) async fn import(
    face: &Arc<Face>,
    group_id: String,
    events: Vec<serde_json::Value>,
) -> crate::ledger::Answer {
    coord::import(face, group_id, events).await
}

/// Maps an engine error to the Cowchat code closest in meaning.
pub(crate) fn wire(e: CoreError) -> WireError {
    let code = match e.code {
        Core::InvalidRequest | Core::LimitExceeded | Core::InvalidCursor => {
            ErrorCode::InvalidPayload
        }
        Core::PermissionDenied | Core::ActorNotFound => ErrorCode::NotInRoom,
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
