//! A room's Cowchat attributes (group settings `cowchat`), decoded once per room and engine
//! revision: `list_rooms`, `room_info` and every visibility check read them, and decoding
//! means cloning the settings value and deserializing it.
//!
//! The cache follows the engine's [`revision`](convene_core::Engine::revision), which
//! moves on every group change from any face (a rename, a destroy, a join, an operator's
//! settings update over CCCS IPC) and never repeats: when it moved, the entries of the groups
//! [`changed_since`](convene_core::Engine::changed_since) are dropped (all of them when the
//! engine cannot tell), so an entry is never stale. It is read under the same engine read
//! guard as the group it describes.

use std::collections::HashMap;
use std::sync::Arc;

use convene_core::{Engine, Group};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::ATTRS_KEY;

/// A room's Cowchat attributes. `owner` is server-internal authorization state and never
/// appears in a wire payload.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Attrs {
    #[serde(default)]
    pub parent_id: Option<String>,
    #[serde(default)]
    pub created_by: Option<String>,
    #[serde(default)]
    pub owner: Option<String>,
    /// Rooms made before attributes existed are public.
    #[serde(default = "yes")]
    pub public: bool,
    #[serde(default)]
    pub ephemeral: bool,
    #[serde(default)]
    pub encrypted: bool,
    /// `lobby` and other system rooms: no rename, no destroy.
    #[serde(default)]
    pub system: bool,
}

fn yes() -> bool {
    true
}

impl Attrs {
    /// True when `principal` may see the room: public and system rooms for everyone, a
    /// private room for its owning key.
    pub(super) fn visible_to(&self, principal: &str) -> bool {
        self.public || self.system || self.owner.as_deref().is_none_or(|o| o == principal)
    }

    /// Decodes the group's attributes (a group without them is a public room).
    pub(super) fn decode(g: &Group) -> Self {
        g.settings
            .extra
            .get(ATTRS_KEY)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_else(|| Attrs {
                public: true,
                ..Attrs::default()
            })
    }
}

/// Decoded attributes of the rooms looked up since the engine's last group change.
#[derive(Default)]
pub(super) struct Cache {
    inner: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    revision: u64,
    by_room: HashMap<String, Arc<Attrs>>,
}

impl Cache {
    /// The attributes of `g`, a group of `eng` (held by the caller's read guard).
    pub(super) fn get(&self, eng: &Engine, g: &Group) -> Arc<Attrs> {
        let mut e = self.inner.lock();
        if e.revision != eng.revision() {
            // Some group changed: forget only those (a join elsewhere keeps this room's entry),
            // or everything when the engine cannot say which (a reload, a long gap).
            let e = &mut *e;
            match eng.changed_since(e.revision) {
                Some(changed) => {
                    for gid in changed {
                        e.by_room.remove(gid);
                    }
                }
                None => e.by_room.clear(),
            }
            e.revision = eng.revision();
        }
        if let Some(a) = e.by_room.get(&g.group_id) {
            return a.clone();
        }
        let a = Arc::new(Attrs::decode(g));
        e.by_room.insert(g.group_id.clone(), a.clone());
        a
    }
}
