//! The `session` transport: an actor's own connected client (`runtime_attach`) receives the
//! payload on a bounded queue. Accepted = queued for that connection.

use std::collections::HashMap;

use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::{payload, Handoff};

/// Queue depth per attached session; a full queue fails the handoff instead of blocking.
pub const SESSION_QUEUE: usize = 1024;

/// Receiving end held by the attached connection.
pub type SessionRx = mpsc::Receiver<Vec<u8>>;

/// (group, actor) → the attached session's queue.
type SessionMap = HashMap<(String, String), mpsc::Sender<Vec<u8>>>;

/// Attached sessions by (group, actor). A newer attach replaces an older one.
#[derive(Default)]
pub struct Sessions {
    map: Mutex<SessionMap>,
}

impl Sessions {
    /// Attaches a session and returns its queue.
    pub fn attach(&self, group_id: &str, actor_id: &str) -> SessionRx {
        let (tx, rx) = mpsc::channel(SESSION_QUEUE);
        self.map
            .lock()
            .insert((group_id.to_string(), actor_id.to_string()), tx);
        rx
    }

    /// Whether a live session is attached.
    pub fn is_attached(&self, group_id: &str, actor_id: &str) -> bool {
        self.map
            .lock()
            .get(&(group_id.to_string(), actor_id.to_string()))
            .map(|t| !t.is_closed())
            .unwrap_or(false)
    }

    pub(super) fn hand_off(
        &self,
        group_id: &str,
        actor_id: &str,
        delivery_id: &str,
        event_json: &str,
    ) -> Handoff {
        let key = (group_id.to_string(), actor_id.to_string());
        let tx = self.map.lock().get(&key).cloned();
        match tx {
            None => Handoff::Failed("no session attached".into()),
            Some(tx) => match tx.try_send(payload(delivery_id, event_json)) {
                Ok(()) => Handoff::Accepted,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    Handoff::Failed("session queue full".into())
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.map.lock().remove(&key);
                    Handoff::Failed("session detached".into())
                }
            },
        }
    }
}
