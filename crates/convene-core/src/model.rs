//! Groups, scopes and actors (CCCS §3, Management Profile §13.2).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Actor role (§3.3). The first collaboration actor of a group is the foreman.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Leads the group; addressed by `@foreman`.
    Foreman,
    /// Any other collaboration actor.
    Peer,
}

/// An actor of a group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Actor {
    /// Stable identifier.
    pub id: String,
    /// Derived from position: the first non-internal actor is the foreman.
    pub role: Role,
    /// Display title.
    #[serde(default)]
    pub title: String,
    /// Runtime adapter name (`session`, `command`, or a foreign name kept as given).
    #[serde(default)]
    pub runtime: String,
    /// Command for the `command` runtime (payload on stdin).
    #[serde(default)]
    pub command: Vec<String>,
    /// Disabled actors receive no deliveries.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Internal assistants are not members of any selector (§5.1).
    #[serde(default)]
    pub internal: bool,
    /// Bumped each time the actor id is (re)added: part of `delivery_id` (§6.4).
    #[serde(default)]
    pub generation: u64,
    /// Default scope for events by this actor.
    #[serde(default)]
    pub default_scope_key: String,
    /// When the actor was added.
    #[serde(default)]
    pub created_at: String,
    /// When the actor last changed.
    #[serde(default)]
    pub updated_at: String,
    /// Fields we do not interpret, kept as given.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn yes() -> bool {
    true
}

/// A scope attached to a group (§3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scope {
    /// Opaque key assigned by the daemon.
    pub scope_key: String,
    /// Project root URL or path.
    pub url: String,
    /// Display label.
    #[serde(default)]
    pub label: String,
}

/// Default recipients for a send with no `to` (§5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DefaultSendTo {
    /// `@foreman`.
    #[default]
    Foreman,
    /// `@all`.
    All,
}

impl DefaultSendTo {
    /// The selector the policy materializes to.
    pub fn selector(self) -> &'static str {
        match self {
            Self::Foreman => "@foreman",
            Self::All => "@all",
        }
    }
}

/// Group settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Settings {
    /// Policy for an empty `to`.
    #[serde(default)]
    pub default_send_to: DefaultSendTo,
    /// Other settings, kept as given.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A working group and its members.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// Group id (`g_` + 12 hex).
    pub group_id: String,
    /// Display title.
    #[serde(default)]
    pub title: String,
    /// Topic.
    #[serde(default)]
    pub topic: String,
    /// Creation time.
    pub created_at: String,
    /// Last change.
    pub updated_at: String,
    /// `active`, `idle`, `paused` or `stopped`; stopped groups attempt no runtime delivery.
    #[serde(default = "active")]
    pub state: String,
    /// Whether runtimes are started for this group.
    #[serde(default)]
    pub running: bool,
    /// Attached scopes.
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// Scope used for events when none is given.
    #[serde(default)]
    pub active_scope_key: String,
    /// Settings.
    #[serde(default)]
    pub settings: Settings,
    /// Actors, in order of addition.
    #[serde(default)]
    pub actors: Vec<Actor>,
    /// Highest `seq` appended so far (derived from the ledger, not stored in snapshots).
    #[serde(skip)]
    pub last_seq: u64,
    /// Generations of removed actors, so a re-added id gets a new `delivery_id` space.
    #[serde(default)]
    pub retired_generations: Map<String, Value>,
    /// The `seq` ranges (inclusive) that `ledger_import` appended: history, not live traffic.
    /// An imported delivery record names a delivery only of a message in these ranges (or
    /// one the group does not have), never one appended live here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub imported_seqs: Vec<[u64; 2]>,
}

fn active() -> String {
    "active".to_string()
}

impl Group {
    /// A new, empty, active group.
    pub fn new(
        group_id: String,
        title: String,
        topic: String,
        created_at: String,
        updated_at: String,
    ) -> Self {
        Self {
            group_id,
            title,
            topic,
            created_at,
            updated_at,
            state: active(),
            running: false,
            scopes: Vec::new(),
            active_scope_key: String::new(),
            settings: Settings::default(),
            actors: Vec::new(),
            last_seq: 0,
            retired_generations: Map::new(),
            imported_seqs: Vec::new(),
        }
    }

    /// Whether the event at `seq` was appended by an import (history).
    pub fn is_imported(&self, seq: u64) -> bool {
        self.imported_seqs
            .iter()
            .any(|[lo, hi]| (*lo..=*hi).contains(&seq))
    }

    /// Records that an import appended `lo..=hi`, merged into the range it continues.
    pub fn mark_imported(&mut self, lo: u64, hi: u64) {
        match self.imported_seqs.last_mut() {
            Some(last) if last[1] + 1 == lo => last[1] = hi,
            _ => self.imported_seqs.push([lo, hi]),
        }
    }

    /// An actor by id.
    pub fn actor(&self, id: &str) -> Option<&Actor> {
        self.actors.iter().find(|a| a.id == id)
    }

    /// Recomputes roles: the first non-internal actor is the foreman.
    pub fn fix_roles(&mut self) {
        let mut seen_foreman = false;
        for a in &mut self.actors {
            if !a.internal && !seen_foreman {
                a.role = Role::Foreman;
                seen_foreman = true;
            } else {
                a.role = Role::Peer;
            }
        }
    }

    /// Collaboration actors: members of selectors (§5.1).
    pub fn collaborators(&self) -> impl Iterator<Item = &Actor> {
        self.actors.iter().filter(|a| !a.internal)
    }
}
