//! Start-up migrations of room attributes written by earlier builds.
//!
//! Sub-rooms whose parent was given by name used to store that name as `parent_id`, so
//! `list_rooms parent_id=<id>` and `room_info`'s `sub_rooms` never found them. At start-up
//! such a name is replaced by the id of the room it names, when it names exactly one room
//! the sub-room's owning key can see (as `create_room` resolved it). A name that names no
//! such room (the parent was renamed or destroyed since) or several (another face gave two
//! rooms one name) is left as stored and logged: guessing could attach the sub-room to a
//! room its creator never meant.

use convene_core::Command;
use serde_json::{Map, Value};

use super::attrs::Attrs;
use super::{keys, rooms, Face, ATTRS_KEY, SERVICE};

/// Replaces parent names stored as `parent_id` by the parent's room id (see the module docs).
pub(super) async fn parent_names_to_ids(face: &Face) {
    let fixes: Vec<(String, Value)> = {
        let eng = face.d.ledger.engine();
        let mut fixes = Vec::new();
        for g in eng.groups().into_iter().filter(|g| rooms::is_room(g)) {
            let a = Attrs::decode(g);
            let Some(parent) = a.parent_id.as_deref() else {
                continue;
            };
            if eng.group(parent).is_some() {
                continue; // already an id
            }
            let key = a.owner.as_deref().unwrap_or(keys::PRIMARY);
            let named: Vec<&str> = face
                .names
                .named(&eng, parent)
                .into_iter()
                .filter(|p| p.group_id != g.group_id && rooms::visible(face, &eng, p, key))
                .map(|p| p.group_id.as_str())
                .collect();
            let [id] = named[..] else {
                tracing::warn!(
                    room = %g.group_id,
                    parent,
                    rooms_named = named.len(),
                    "cowchat: a sub-room's stored parent is neither a room id nor the name of exactly one room; left as stored"
                );
                continue;
            };
            // Keeps every other field of the stored attributes as it is.
            let mut raw = g.settings.extra.get(ATTRS_KEY).cloned().unwrap_or_default();
            if let Some(o) = raw.as_object_mut() {
                o.insert("parent_id".into(), Value::from(id));
                fixes.push((g.group_id.clone(), raw));
            }
        }
        fixes
    };
    for (gid, attrs) in fixes {
        let mut patch = Map::new();
        patch.insert(ATTRS_KEY.into(), attrs);
        let cmd = Command::GroupSettingsUpdate {
            group_id: gid.clone(),
            by: SERVICE.into(),
            patch,
        };
        match face.d.ledger.execute(cmd).await {
            Ok(_) => {
                tracing::info!(room = %gid, "cowchat: a sub-room's parent name stored as its id")
            }
            Err(e) => {
                tracing::warn!(room = %gid, error = %e, "cowchat: could not migrate a sub-room's parent")
            }
        }
    }
}
