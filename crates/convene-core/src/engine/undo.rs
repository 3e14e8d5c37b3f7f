//! What a refused command must put back: the groups it may have changed, as they were.
//!
//! Commands validate as they go, so one can fail after changing a group in memory (a group
//! created, then its settings refused). The store never sees a refused command, so memory
//! must not either. Only group-changing commands (rare) are snapshotted; a refused message
//! only reserved `seq`s, which `Engine::execute` hands back.

use std::collections::{HashMap, HashSet};

use crate::command::Command;
use crate::model::Group;

/// The state to restore if the command is refused.
pub(super) enum Undo {
    /// The command changes no group but by appending to it.
    Nothing,
    /// The command may change this group (or create it, when it was absent).
    Group(String, Option<Box<Group>>),
    /// The command may create a group under a new id: the ids that existed before.
    Created(HashSet<String>),
}

impl Undo {
    /// Takes what `cmd` may change, before it runs.
    pub fn of(groups: &HashMap<String, Group>, cmd: &Command) -> Undo {
        let target = match cmd {
            Command::GroupCreate { .. } => None,
            Command::Attach { group_id, .. } if group_id.is_empty() => None,
            Command::Attach { group_id, .. }
            | Command::GroupUpdate { group_id, .. }
            | Command::GroupSettingsUpdate { group_id, .. }
            | Command::GroupSetState { group_id, .. }
            | Command::GroupDelete { group_id, .. }
            | Command::DetachScope { group_id, .. }
            | Command::ActorAdd { group_id, .. }
            | Command::ActorUpdate { group_id, .. }
            | Command::ActorRemove { group_id, .. }
            | Command::Import { group_id, .. } => Some(group_id),
            _ => return Undo::Nothing,
        };
        match target {
            Some(gid) => Undo::Group(gid.clone(), groups.get(gid).cloned().map(Box::new)),
            None => Undo::Created(groups.keys().cloned().collect()),
        }
    }

    /// Puts the snapshot back after a refusal.
    pub fn restore(self, groups: &mut HashMap<String, Group>) {
        match self {
            Undo::Nothing => {}
            Undo::Group(gid, Some(g)) => {
                groups.insert(gid, *g);
            }
            Undo::Group(gid, None) => {
                groups.remove(&gid);
            }
            Undo::Created(before) => groups.retain(|gid, _| before.contains(gid)),
        }
    }
}
