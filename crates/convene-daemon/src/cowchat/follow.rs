//! Follows the ledger's group changes from every face, so that what the Cowchat face derives
//! from membership reacts to a change it did not make itself (the CCCS IPC's `actor_remove`
//! or `group_delete`, an import) as soon as it commits, and to what a kill -9 left half done
//! at start-up: a voter that is gone no longer holds a vote open, a leader that is gone no
//! longer leads, an ephemeral room everyone left is destroyed, a deleted room's votes and
//! tasks are forgotten.
//!
//! The face's own removals ([`super::rooms::remove_member`]) do this work themselves, with the
//! member's name and the right reason; while one is in flight its (room, agent) is marked
//! [`Departing`] and left to it here, so the two never record the same departure twice or
//! race over which reason is recorded.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use convene_core::event::kinds::ACTOR_ADD;

use super::{coord, rooms, Face};

/// Members whose removal by this face is in flight: (room, agent) → how many.
#[derive(Default)]
pub(super) struct Departures(parking_lot::Mutex<HashMap<(String, String), usize>>);

impl Departures {
    /// True while this face is removing `agent` from `room`.
    pub fn contains(&self, room: &str, agent: &str) -> bool {
        self.0
            .lock()
            .contains_key(&(room.to_string(), agent.to_string()))
    }

    /// True while this face is removing any member of `room`.
    fn any_in(&self, room: &str) -> bool {
        self.0.lock().keys().any(|(r, _)| r == room)
    }
}

/// Marks a removal by this face as in flight until dropped (after its departure was fully
/// handled: votes, leadership, an ephemeral room left empty).
pub(super) struct Departing<'a> {
    face: &'a Face,
    key: (String, String),
}

impl<'a> Departing<'a> {
    /// Marks `agent` as leaving `room` through this face.
    pub fn new(face: &'a Face, room: &str, agent: &str) -> Self {
        let key = (room.to_string(), agent.to_string());
        *face.departing.0.lock().entry(key.clone()).or_default() += 1;
        Self { face, key }
    }
}

impl Drop for Departing<'_> {
    fn drop(&mut self) {
        let mut m = self.face.departing.0.lock();
        if let Some(n) = m.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.key);
            }
        }
    }
}

/// At start-up (after the coordination state was rebuilt): settles every room as if each had
/// just changed, then follows the engine's revision from there.
pub(super) async fn start(face: &Arc<Face>) {
    let (all, rev) = {
        let eng = face.d.ledger.engine();
        let all: BTreeSet<String> = eng.groups().iter().map(|g| g.group_id.clone()).collect();
        (all, eng.revision())
    };
    for room in all {
        settle(face, &room).await;
    }
    let face = face.clone();
    tokio::spawn(async move { follow(face, rev).await });
}

/// Settles the groups each new engine revision changed (all of them when the engine cannot
/// tell which), until the daemon stops.
async fn follow(face: Arc<Face>, mut seen: u64) {
    let mut revisions = face.d.ledger.revisions();
    let mut stop = face.d.shutdown_rx();
    loop {
        let changed: BTreeSet<String> = {
            let eng = face.d.ledger.engine();
            let now = eng.revision();
            if now == seen {
                BTreeSet::new()
            } else {
                let ids = match eng.changed_since(seen) {
                    Some(ids) => ids.map(str::to_string).collect(),
                    None => eng.groups().iter().map(|g| g.group_id.clone()).collect(),
                };
                seen = now;
                ids
            }
        };
        for room in changed {
            settle(&face, &room).await;
        }
        tokio::select! {
            r = revisions.changed() => if r.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

/// Brings the face's state of one group in line with the group as committed.
async fn settle(face: &Face, room: &str) {
    enum Seen {
        Deleted,
        NotARoom,
        Room {
            leader_gone: Option<String>,
            empty_ephemeral: bool,
        },
    }
    let seen = {
        let eng = face.d.ledger.engine();
        match eng.group(room) {
            None => Seen::Deleted,
            Some(g) if !rooms::is_room(g) => Seen::NotARoom,
            Some(g) => {
                let leader_gone = face
                    .coord
                    .state
                    .lock()
                    .leader(room)
                    .map(|(id, _)| id.clone())
                    .filter(|id| g.actor(id).is_none() && !face.departing.contains(room, id));
                let empty_ephemeral = rooms::attrs(face, &eng, g).ephemeral
                    && g.collaborators().next().is_none()
                    && !face.departing.any_in(room);
                Seen::Room {
                    leader_gone,
                    empty_ephemeral,
                }
            }
        }
    };
    match seen {
        // Deleted over another face (the face's own destroy forgets the room itself).
        Seen::Deleted => face.coord.state.lock().forget_room(room),
        Seen::NotARoom => {}
        Seen::Room {
            leader_gone,
            empty_ephemeral,
        } => {
            coord::votes::settle_departed(face, room).await;
            if let Some(id) = leader_gone {
                coord::clear_stale_leader(face, room, &id).await;
            }
            if empty_ephemeral && ever_joined(face, room).await {
                rooms::destroy_if_empty_ephemeral(face, room).await;
            }
        }
    }
}

/// True when someone ever joined the room: an ephemeral room is destroyed when everyone who
/// joined has left, never before its first member (the creator does not join implicitly).
async fn ever_joined(face: &Face, room: &str) -> bool {
    let readers = face.d.ledger.readers().clone();
    let gid = room.to_string();
    super::messages::blocking(move || readers.events_after(&gid, 0, 1, &[ACTOR_ADD.to_string()]))
        .await
        .is_ok_and(|v| !v.is_empty())
}
