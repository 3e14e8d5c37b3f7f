//! Follows the ledger's group changes from every face, so that what the Cowchat face derives
//! from membership reacts to a change it did not make itself (the CCCS IPC's `actor_remove`
//! or `group_delete`, an import) as soon as it commits, and to what a kill -9 left half done
//! at start-up: a voter that is gone no longer holds a vote open, a leader that is gone no
//! longer leads or holds the turn token, an ephemeral room everyone left is destroyed, a
//! deleted room's votes, tasks and turn token are forgotten, and a room created, renamed,
//! changed or deleted over another face is pushed as `room_created` / `room_updated` /
//! `room_destroyed` to the connections that see it (a visibility change is `room_created` for
//! those that gain sight of it and `room_destroyed` for those that lose it).
//!
//! The face's own removals ([`super::rooms::remove_member`]) do this work themselves, with the
//! member's name and the right reason; while one is in flight its (room, agent) is marked
//! [`Departing`] and left to it here, so the two never record the same departure twice or
//! race over which reason is recorded.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use convene_core::event::kinds::ACTOR_ADD;
use convene_core::{Engine, Group};
use serde_json::{json, Value};

use super::attrs::Attrs;
use super::{coord, live, rooms, Face, ATTRS_KEY};

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

/// What clients were last shown of each room (name, description, attributes), so a rename,
/// settings change or deletion made through another face is pushed as `room_updated` /
/// `room_destroyed`. The face's own create, rename and destroy record what they push while
/// they hold the rooms lock; the follower compares under the same lock, so nothing is pushed
/// twice.
#[derive(Default)]
pub(super) struct Shown(parking_lot::Mutex<HashMap<String, Shape>>);

struct Shape {
    name: String,
    topic: String,
    settings: Value,
    /// Who may see it (for the push of its deletion, when the group is gone).
    attrs: Arc<Attrs>,
}

impl Shape {
    /// True when clients were shown the same room (the decoded attributes follow `settings`).
    fn same(&self, o: &Shape) -> bool {
        (&self.name, &self.topic, &self.settings) == (&o.name, &o.topic, &o.settings)
    }
}

impl Shown {
    /// Records the room as clients now see it (caller holds the rooms lock).
    pub fn record(&self, face: &Face, eng: &Engine, g: &Group) {
        let shape = shape(face, eng, g);
        self.0.lock().insert(g.group_id.clone(), shape);
    }

    /// Forgets a room this face destroyed (caller holds the rooms lock).
    pub fn forget(&self, room: &str) {
        self.0.lock().remove(room);
    }

    fn rooms(&self) -> Vec<String> {
        self.0.lock().keys().cloned().collect()
    }
}

fn shape(face: &Face, eng: &Engine, g: &Group) -> Shape {
    Shape {
        name: super::names::room_name(g).unwrap_or_default().to_string(),
        topic: g.topic.clone(),
        settings: g.settings.extra.get(ATTRS_KEY).cloned().unwrap_or_default(),
        attrs: rooms::attrs(face, eng, g),
    }
}

/// Pushes a change of `room` this face did not make: `room_created` to the connections that
/// now see a room they did not (a room made over another face, a private room made public),
/// `room_destroyed` to those that no longer see it (deleted, or made private to another key),
/// `room_updated` to those that saw it and still do. `announce` is false at start-up, when
/// the rooms that exist are recorded, not news.
async fn show(face: &Face, room: &str, announce: bool) {
    type Outs = Vec<Arc<super::conn::Outbox>>;
    let _one_at_a_time = face.rooms_lock.lock().await;
    let mut pushes: Vec<(Outs, &str, Value)> = Vec::new();
    {
        let eng = face.d.ledger.engine();
        match eng.group(room) {
            Some(g) if rooms::is_room(g) => {
                let now = shape(face, &eng, g);
                let attrs = now.attrs.clone();
                let was = {
                    let mut shown = face.shown.0.lock();
                    let was = shown.remove(room);
                    let changed = was.as_ref().map(|w| !w.same(&now));
                    shown.insert(room.to_string(), now);
                    was.zip(changed)
                };
                let after = rooms::outboxes_seeing(face, &attrs);
                let value = || rooms::room_value(face, &eng, g);
                match was {
                    None if announce => pushes.push((after, "room_created", value())),
                    None => {}
                    Some((was, changed)) => {
                        let before = rooms::outboxes_seeing(face, &was.attrs);
                        let within = |o: &Arc<super::conn::Outbox>, set: &Outs| {
                            set.iter().any(|x| Arc::ptr_eq(x, o))
                        };
                        let lost: Outs = before
                            .iter()
                            .filter(|o| !within(o, &after))
                            .cloned()
                            .collect();
                        let (kept, gained): (Outs, Outs) =
                            after.into_iter().partition(|o| within(o, &before));
                        if !lost.is_empty() {
                            pushes.push((lost, "room_destroyed", json!({"room_id": room})));
                        }
                        if !gained.is_empty() {
                            pushes.push((gained, "room_created", value()));
                        }
                        if changed && !kept.is_empty() {
                            pushes.push((kept, "room_updated", value()));
                        }
                    }
                }
            }
            _ => {
                if let Some(was) = face.shown.0.lock().remove(room) {
                    pushes.push((
                        rooms::outboxes_seeing(face, &was.attrs),
                        "room_destroyed",
                        json!({"room_id": room}),
                    ));
                }
            }
        }
    }
    for (outs, kind, v) in pushes {
        live::fan_out(&outs, kind, &v);
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
        settle(face, &room, false).await;
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
        // In the order they changed (so pushes follow commit order), each once.
        let changed: Vec<String> = {
            let eng = face.d.ledger.engine();
            let now = eng.revision();
            if now == seen {
                Vec::new()
            } else {
                let ids: Vec<String> = match eng.changed_since(seen) {
                    Some(ids) => ids.map(str::to_string).collect(),
                    // Deleted rooms are no longer among the groups: those shown are checked too.
                    None => eng
                        .groups()
                        .iter()
                        .map(|g| g.group_id.clone())
                        .chain(face.shown.rooms())
                        .collect(),
                };
                seen = now;
                let mut once = HashSet::new();
                ids.into_iter()
                    .filter(|id| once.insert(id.clone()))
                    .collect()
            }
        };
        for room in changed {
            settle(&face, &room, true).await;
        }
        tokio::select! {
            r = revisions.changed() => if r.is_err() { return },
            _ = stop.changed() => return,
        }
    }
}

/// Brings the face's state of one group in line with the group as committed.
async fn settle(face: &Face, room: &str, announce: bool) {
    show(face, room, announce).await;
    enum Seen {
        Deleted,
        NotARoom,
        Room {
            leader_gone: Option<String>,
            holder_gone: Option<String>,
            empty_ephemeral: bool,
        },
    }
    // Read before the engine guard: the coordination state and the live state are never
    // locked before the engine elsewhere (a lock-order inversion with a queued writer).
    let leader = face
        .coord
        .state
        .lock()
        .leader(room)
        .map(|(id, _)| id.clone());
    let holder = live::turn_holder(face, room);
    let seen = {
        let eng = face.d.ledger.engine();
        match eng.group(room) {
            None => Seen::Deleted,
            Some(g) if !rooms::is_room(g) => Seen::NotARoom,
            Some(g) => {
                let gone =
                    |id: &String| g.actor(id).is_none() && !face.departing.contains(room, id);
                Seen::Room {
                    leader_gone: leader.filter(gone),
                    holder_gone: holder.filter(gone),
                    empty_ephemeral: rooms::attrs(face, &eng, g).ephemeral
                        && g.collaborators().next().is_none()
                        && !face.departing.any_in(room),
                }
            }
        }
    };
    match seen {
        // Deleted over another face (the face's own destroy forgets the room itself).
        Seen::Deleted => {
            if let Some(h) = face.hooks.get() {
                h.forget_room(room).await;
            }
            face.coord.state.lock().forget_room(room);
            let mut live = face.live.lock();
            live.turns.remove(room);
            live.turn_seqs.remove(room);
        }
        Seen::NotARoom => {}
        Seen::Room {
            leader_gone,
            holder_gone,
            empty_ephemeral,
        } => {
            coord::votes::settle_departed(face, room).await;
            if let Some(id) = leader_gone {
                coord::clear_stale_leader(face, room, &id).await;
            }
            // Rule 3 as for a holder that left; its place in the join order is gone with it,
            // so the token goes to the first connected member.
            if let Some(id) = holder_gone {
                live::turn_event(face, room, &id, "left");
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
