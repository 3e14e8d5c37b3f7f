//! Coordination frames: sealed votes, leader elections, decisions and tasks.
//!
//! Everything durable is an `x.cowchat.*` ledger event in the room's group (see
//! [`state`] for the kinds); [`State`] is their in-memory projection, rebuilt from the store
//! at startup and updated after each append. Writes go through one lock, so a check and the
//! append it guards are atomic (no double ballot, no two elections); reads take it too,
//! because a push can reach a client before the event it shows is folded. Timers (vote deadlines,
//! the election window) are tokio tasks; at startup a deadline or window that passed while
//! the daemon was down is settled at once. Coordination events brought by `ledger_import` are
//! folded by [`import`] before the import answers. Pushes come from the ledger (see [`push_of`]).

pub(super) mod elections;
mod seal;
pub(crate) mod state;
pub(super) mod tasks;
pub(in super::super) mod votes;

use std::collections::HashSet;
use std::sync::Arc;

use convene_core::Command;
use convene_cowchat::{ErrorCode, WireError};
use parking_lot::Mutex;
use serde_json::Value;

use super::conn::Session;
use super::{rooms, wire, Face, SERVICE};
use crate::ledger::Answer;
use state::State;

/// Events read per page when rebuilding.
const PAGE: usize = 1000;

/// The face's coordination state.
pub(super) struct Coord {
    /// The projection (held briefly, never across an await).
    pub state: Mutex<State>,
    /// Serializes check-then-append of every coordination write.
    pub write: tokio::sync::Mutex<()>,
    sealer: Mutex<Option<Arc<seal::Sealer>>>,
}

impl Coord {
    /// Empty state (filled by [`start`]).
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State::default()),
            write: tokio::sync::Mutex::new(()),
            sealer: Mutex::new(None),
        }
    }
}

/// The ballot sealer, loading (or creating) the key on first use.
fn sealer(face: &Face) -> Result<Arc<seal::Sealer>, WireError> {
    let mut g = face.coord.sealer.lock();
    if let Some(s) = &*g {
        return Ok(s.clone());
    }
    let s = Arc::new(
        seal::Sealer::load(&face.cfg.home)
            .map_err(|e| WireError::new(ErrorCode::Internal, e.to_string()))?,
    );
    *g = Some(s.clone());
    Ok(s)
}

/// Appends one coordination event and folds it into the projection.
async fn append(
    face: &Face,
    room: &str,
    by: &str,
    kind: &str,
    data: Value,
) -> Result<(), WireError> {
    let c = face
        .d
        .ledger
        .execute(Command::AppendExtension {
            group_id: room.to_string(),
            by: by.to_string(),
            kind: kind.to_string(),
            data,
        })
        .await
        .map_err(wire)?;
    if let Some(e) = c.primary() {
        face.coord
            .state
            .lock()
            .apply(room, kind, by, &e.ts, &e.data);
    }
    Ok(())
}

/// Checks that the room exists, the caller's key may see it and `agent` is a member of it.
pub(super) fn check_member(s: &Session, room: &str, agent: &str) -> Result<(), WireError> {
    let eng = s.face.d.ledger.engine();
    rooms::member_room(&s.face, &eng, room, &s.principal, agent).map(|_| ())
}

/// Rebuilds the projection from every room's coordination events (read through the store's
/// index of them, so start-up does not grow with the number of messages), then settles what came
/// due while the daemon was down and arms the remaining timers. Leaders stay: like every
/// member they get the reconnect window from startup, and leadership ends when it runs out
/// (`member_gone`).
pub(super) async fn start(face: &Arc<Face>) {
    let rooms: Vec<String> = {
        let eng = face.d.ledger.engine();
        eng.groups()
            .into_iter()
            .filter(|g| rooms::is_room(g))
            .map(|g| g.group_id.clone())
            .collect()
    };
    let readers = face.d.ledger.readers().clone();
    let t0 = std::time::Instant::now();
    let n_rooms = rooms.len();
    let read = super::messages::blocking(move || {
        let mut st = State::default();
        let mut n = 0usize;
        for gid in &rooms {
            let mut at = 0;
            loop {
                // Only the coordination events (an index of their own): messages and
                // thinking pulses are never read here.
                let page = readers.coordination_after(gid, at, PAGE)?;
                n += page.len();
                for e in &page {
                    if let Ok(v) = serde_json::from_str::<Value>(&e.json) {
                        let data = v.get("data").cloned().unwrap_or(Value::Null);
                        st.apply(gid, &e.kind, &e.by, &e.ts, &data);
                    }
                }
                match page.last() {
                    Some(l) if page.len() == PAGE => at = l.seq,
                    _ => break,
                }
            }
        }
        Ok((st, n))
    })
    .await;
    match read {
        Ok((st, n)) => {
            tracing::info!(
                rooms = n_rooms,
                events = n,
                ms = t0.elapsed().as_millis() as u64,
                "cowchat: votes, elections and tasks rebuilt from the ledger"
            );
            *face.coord.state.lock() = st;
        }
        Err(e) => {
            tracing::warn!(error = %e, "cowchat: could not rebuild votes, elections and tasks");
            return;
        }
    }
    votes::reconcile_departed(face, None).await;
    clear_departed_leaders(face).await;
    votes::arm_all(face);
    elections::arm_all(face);
}

/// Imports events into a group ([`crate::Daemon::import`]) and folds the coordination events
/// it appended. Under the coordination write lock, like every append of this face: each event
/// is folded once, by the command that appended it (this import or [`append`]), in commit
/// order. Events the group already holds are skipped by the engine, so importing an export
/// twice folds nothing twice. Then arms what the new events need (deadlines, the election
/// window) and reveals votes the imported ballots completed, as a restart would.
pub(crate) async fn import(face: &Arc<Face>, group_id: String, events: Vec<Value>) -> Answer {
    let carries = events.iter().any(|e| {
        e.get("kind")
            .and_then(Value::as_str)
            .is_some_and(convene_store::is_coordination_kind)
    });
    let import = Command::Import {
        group_id: group_id.clone(),
        events,
    };
    if !carries {
        return face.d.ledger.execute(import).await;
    }
    let _one = face.coord.write.lock().await;
    let c = face.d.ledger.execute(import).await?;
    // Like the start-up rebuild, only rooms have a projection.
    if !face
        .d
        .ledger
        .engine()
        .group(&group_id)
        .is_some_and(rooms::is_room)
    {
        return Ok(c);
    }
    let (known_votes, election_before) = {
        let mut st = face.coord.state.lock();
        let known: HashSet<String> = st
            .room_votes
            .get(&group_id)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        let before = st.elections.get(&group_id).map(|e| e.ends_at.clone());
        for (e, _) in &c.events {
            if convene_store::is_coordination_kind(&e.kind) {
                st.apply(&group_id, &e.kind, &e.by, &e.ts, &e.data);
            }
        }
        (known, before)
    };
    // `arm_room` closes the votes this settled.
    votes::reconcile_locked(face, Some(&group_id)).await;
    votes::arm_room(face, &group_id, &known_votes);
    elections::arm_room(face, &group_id, election_before.as_deref());
    Ok(c)
}

/// A member (named `name` while it was one) left a room, or its reconnect window ran out:
/// its leadership ends, and the room's open votes no longer wait for it.
pub(super) async fn member_gone(face: &Face, room: &str, agent: &str, name: &str, reason: &str) {
    let why = if reason == "left" {
        "leader left"
    } else {
        "leader disconnected"
    };
    clear_leader(face, room, agent, why).await;
    votes::voter_gone(face, room, agent, name).await;
}

/// Clears every leader that is no longer a member of its room (at start-up): the removal
/// and the clearing are two commits, and a removal over another face is not seen here.
async fn clear_departed_leaders(face: &Face) {
    let gone: Vec<(String, String)> = {
        let st = face.coord.state.lock();
        let eng = face.d.ledger.engine();
        st.leaders
            .iter()
            .filter(|(room, (id, _))| eng.group(room).is_some_and(|g| g.actor(id).is_none()))
            .map(|(room, (id, _))| (room.clone(), id.clone()))
            .collect()
    };
    for (room, id) in gone {
        clear_leader(face, &room, &id, "leader left").await;
    }
}

/// `agent`, about to join `room`, is not a member of it: any leadership of the room it
/// still holds is stale and is cleared first.
pub(super) async fn clear_stale_leader(face: &Face, room: &str, agent: &str) {
    clear_leader(face, room, agent, "leader left").await;
}

/// Appends `x.cowchat.leader.cleared` when `agent` still leads `room`.
async fn clear_leader(face: &Face, room: &str, agent: &str, reason: &str) {
    let _one = face.coord.write.lock().await;
    let leads = face
        .coord
        .state
        .lock()
        .leader(room)
        .is_some_and(|(l, _)| l == agent);
    if !leads {
        return;
    }
    let data = serde_json::json!({"reason": reason, "leader_id": agent});
    if let Err(e) = append(face, room, SERVICE, state::LEADER_CLEARED, data).await {
        tracing::debug!(room, error = %e, "cowchat: could not clear the leader");
        // The room is gone or the ledger stopped: forget the leader anyway.
        face.coord.state.lock().leaders.remove(room);
    }
}

/// The push frame of a coordination event, for agent `me`. Ballots and declines are never
/// pushed. An agent's own actions (vote created, election started, task assigned or
/// updated) are not pushed back to it: its answer carries the same object, and an echo
/// would race with that answer. Server-authored events (result, leader elected or cleared)
/// go to every member.
pub(super) fn push_of(json: &str, me: &str) -> Option<(&'static str, Vec<u8>)> {
    let ev: Value = serde_json::from_str(json).ok()?;
    let kind = ev.get("kind")?.as_str()?;
    let by = ev.get("by")?.as_str()?;
    let room = ev.get("group_id")?.as_str()?;
    let d = ev.get("data")?;
    let own = by == me;
    let server = by == SERVICE;
    let g = |k: &str| d.get(k).cloned().unwrap_or(Value::Null);
    let (t, p) = match kind {
        state::VOTE_CREATED if !own => (
            "vote_created",
            serde_json::json!({
                "vote_id": g("vote_id"), "room_id": room, "title": g("title"),
                "description": g("description"), "options": g("options"),
                "eligible_voters": d.get("eligible_voters").and_then(Value::as_array).map_or(0, Vec::len),
                "eligible_voter_ids": g("eligible_voters"),
                "duration_secs": g("duration_secs"), "deadline": g("deadline"),
                "created_by": g("created_by"), "created_at": ev.get("ts"),
            }),
        ),
        state::VOTE_RESULT if server => {
            let mut p = d.clone();
            p["room_id"] = Value::from(room);
            p["closed_at"] = ev.get("ts").cloned().unwrap_or(Value::Null);
            ("vote_result", p)
        }
        state::ELECTION_STARTED if !own => {
            let mut p = d.clone();
            p["room_id"] = Value::from(room);
            ("election_started", p)
        }
        state::LEADER_ELECTED if server => (
            "leader_elected",
            serde_json::json!({"room_id": room, "leader_id": g("leader_id"), "leader_name": g("leader_name")}),
        ),
        state::LEADER_CLEARED if server => (
            "leader_cleared",
            serde_json::json!({"room_id": room, "reason": g("reason"), "leader_id": g("leader_id")}),
        ),
        state::TASK_ASSIGNED if !own => {
            let mut p = d.clone();
            p["room_id"] = Value::from(room);
            ("task_assigned", p)
        }
        state::TASK_UPDATED if !own => {
            let mut p = d.clone();
            p["room_id"] = Value::from(room);
            p["updated_by"] = Value::from(by);
            ("task_updated", p)
        }
        _ => return None,
    };
    Some((t, serde_json::to_vec(&p).ok()?))
}

/// The registered agent of a session, as (id, name).
fn who(s: &Session) -> (String, String) {
    let id = s.me().to_string();
    let name = s
        .agent
        .as_ref()
        .map(|a| a.name.clone())
        .unwrap_or_else(|| id.clone());
    (id, name)
}

/// The display name of a room member (its actor title), falling back to the id.
fn member_name(face: &Face, room: &str, agent: &str) -> String {
    let eng = face.d.ledger.engine();
    eng.group(room)
        .and_then(|g| g.actor(agent))
        .map(|a| a.title.clone())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| agent.to_string())
}
