//! Rooms: `create_room`, `join_room`, `leave_room`, `rename_room`, `destroy_room`,
//! `list_rooms`, `room_info`.
//!
//! Mapping: a room is a group whose settings carry `cowchat_room` (the name) and `cowchat`
//! (attributes: parent, creator, owning key principal, public/ephemeral/encrypted). A room
//! and its attributes are created by one command, so no group is ever half a room. The name
//! → room map is the face's room directory ([`super::names`]), kept current from the engine's
//! committed state. Joining adds the agent id as an actor (`runtime: cowchat`); leaving
//! removes it.

use std::sync::Arc;

use convene_core::{Command, Engine, ErrorCode as Core, Group};
use convene_cowchat::{
    parse, room_name, CreateRoom, ErrorCode, ListRooms, RenameRoom, RoomRef, WireError,
};
use serde_json::{json, Map, Value};

use super::attrs::Attrs;
use super::conn::{After, Session};
use super::live;
use super::{keys, names, wire, Face, ATTRS_KEY, PRINCIPAL_KEY, ROOM_KEY, RUNTIME, SERVICE};

/// The always-public system room.
pub(super) const LOBBY: &str = "lobby";

/// True when the group is a Cowchat room.
pub(super) fn is_room(g: &Group) -> bool {
    names::room_name(g).is_some()
}

fn name_of(g: &Group) -> &str {
    names::room_name(g).unwrap_or_default()
}

/// The room's attributes (decoded once per room and engine revision; `eng` is the read guard
/// `g` came from).
pub(super) fn attrs(face: &Face, eng: &Engine, g: &Group) -> Arc<Attrs> {
    face.attrs.get(eng, g)
}

/// True for an end-to-end encrypted room (read without decoding all attributes: it is on
/// every send's path).
pub(super) fn is_encrypted(g: &Group) -> bool {
    g.settings
        .extra
        .get(ATTRS_KEY)
        .and_then(|v| v.get("encrypted"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// True when `principal` may see the room.
pub(super) fn visible(face: &Face, eng: &Engine, g: &Group, principal: &str) -> bool {
    attrs(face, eng, g).visible_to(principal)
}

/// A room by id (any visibility: membership checks come after).
pub(super) fn room<'a>(eng: &'a Engine, room_id: &str) -> Result<&'a Group, WireError> {
    eng.group(room_id)
        .filter(|g| is_room(g))
        .ok_or_else(|| WireError::new(ErrorCode::RoomNotFound, format!("no room {room_id}")))
}

/// A room by id that `principal` may see and `agent` is a member of. Membership is by actor
/// id, and an id can be a member without being this key's (an actor added over the CCCS IPC,
/// a member from before ids were recorded with their key): another key's private room is
/// `access_denied` whatever the id.
pub(super) fn member_room<'a>(
    face: &Face,
    eng: &'a Engine,
    room_id: &str,
    principal: &str,
    agent: &str,
) -> Result<&'a Group, WireError> {
    let g = room(eng, room_id)?;
    if !visible(face, eng, g, principal) {
        return Err(WireError::new(
            ErrorCode::AccessDenied,
            "this private room belongs to another API key",
        ));
    }
    if g.actor(agent).is_none() {
        return Err(WireError::new(
            ErrorCode::NotInRoom,
            format!("{agent} is not a member of {room_id}"),
        ));
    }
    Ok(g)
}

/// A room by id or, when no id is given, by name, that `principal` may see. A private room
/// of another key is `access_denied`.
pub(super) fn resolve_visible<'a>(
    face: &Face,
    eng: &'a Engine,
    r: &RoomRef,
    principal: &str,
) -> Result<&'a Group, WireError> {
    let g = match (&r.room_id, &r.name) {
        (Some(id), _) => room(eng, id).or_else(|e| by_name(face, eng, id, principal).ok_or(e))?,
        (None, Some(name)) => by_name(face, eng, name.trim(), principal).ok_or_else(|| {
            WireError::new(ErrorCode::RoomNotFound, format!("no room named {name}"))
        })?,
        (None, None) => return Err(WireError::payload("room_id or name is required")),
    };
    if !visible(face, eng, g, principal) {
        return Err(WireError::new(
            ErrorCode::AccessDenied,
            "this private room belongs to another API key",
        ));
    }
    Ok(g)
}

/// The room named `name` that `principal` may see (through the face's room directory, not
/// a scan of every group): names are unique among the rooms one key can see, so another
/// key's private room of that name is neither found nor an obstacle. Should two visible
/// rooms share it (a public room named like a private room its creator could not see), the
/// key's own room wins, then the earliest.
fn by_name<'a>(face: &Face, eng: &'a Engine, name: &str, principal: &str) -> Option<&'a Group> {
    face.names
        .named(eng, name)
        .into_iter()
        .filter(|g| visible(face, eng, g, principal))
        .min_by_key(|g| attrs(face, eng, g).owner.as_deref() != Some(principal))
}

/// The wire Room object.
pub(super) fn room_value(face: &Face, eng: &Engine, g: &Group) -> Value {
    let a = attrs(face, eng, g);
    json!({
        "room_id": g.group_id,
        "name": name_of(g),
        "description": g.topic,
        "parent_id": a.parent_id,
        "public": a.public || a.system,
        "ephemeral": a.ephemeral,
        "encrypted": a.encrypted,
        "created_by": a.created_by,
        "created_at": g.created_at,
        "member_count": g.collaborators().count(),
    })
}

/// Outboxes of every connection that may see the room.
pub(super) fn visible_outboxes(
    face: &Face,
    eng: &Engine,
    g: &Group,
) -> Vec<Arc<super::conn::Outbox>> {
    outboxes_seeing(face, &attrs(face, eng, g))
}

/// Outboxes of every connection that may see a room with these attributes.
pub(super) fn outboxes_seeing(face: &Face, a: &Attrs) -> Vec<Arc<super::conn::Outbox>> {
    let live = face.live.lock();
    live.conns
        .values()
        .filter(|c| a.visible_to(&c.principal))
        .map(|c| c.out.clone())
        .collect()
}

/// Makes sure the system `lobby` exists (at startup): a room of that name that is not the
/// system one (made while an operator had deleted the lobby, before the name was reserved)
/// does not stand in for it.
pub(super) async fn ensure_lobby(face: &Face) {
    {
        let eng = face.d.ledger.engine();
        if face
            .names
            .named(&eng, LOBBY)
            .into_iter()
            .any(|g| attrs(face, &eng, g).system)
        {
            return;
        }
    }
    let attrs = Attrs {
        public: true,
        system: true,
        created_by: Some("system".into()),
        ..Attrs::default()
    };
    if let Err(e) = face
        .d
        .ledger
        .execute(create_command(LOBBY, "", &attrs))
        .await
    {
        tracing::warn!(error = %e, "could not create the cowchat lobby");
    }
}

fn create_command(name: &str, description: &str, attrs: &Attrs) -> Command {
    let mut settings = Map::new();
    settings.insert(ROOM_KEY.into(), json!(name));
    settings.insert(
        ATTRS_KEY.into(),
        serde_json::to_value(attrs).unwrap_or(Value::Null),
    );
    Command::GroupCreate {
        by: SERVICE.into(),
        title: name.to_string(),
        topic: description.to_string(),
        settings,
    }
}

/// `create_room`: one ledger command creates the group with its room attributes. The
/// creator does not join implicitly. Rooms are private to the creator's key unless
/// `public`.
pub(super) async fn create_room(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let c: CreateRoom = parse(payload)?;
    let name = c.validate()?;
    let face = s.face.clone();
    let max = s.limits().rooms_per_key;
    let _one_at_a_time = face.rooms_lock.lock().await;
    let parent_id = {
        let eng = face.d.ledger.engine();
        // Only a room this key can see takes the name: refusing for another key's private
        // room would tell the caller that it exists. `lobby` is the system room's, even
        // while an operator has deleted it.
        if name == LOBBY || by_name(&face, &eng, &name, &s.principal).is_some() {
            return Err(WireError::new(
                ErrorCode::RoomNameTaken,
                format!("a room named {name} exists"),
            ));
        }
        // Stored as the parent's id even when it was given by name, so the sub-room is
        // found under that id (`list_rooms`, `sub_rooms`).
        let parent_id = match &c.parent_id {
            Some(p) => Some(
                resolve_visible(
                    &face,
                    &eng,
                    &RoomRef {
                        room_id: Some(p.clone()),
                        name: None,
                    },
                    &s.principal,
                )?
                .group_id
                .clone(),
            ),
            None => None,
        };
        let owned = face.names.owned_by(&eng, &s.principal);
        if owned >= max {
            return Err(WireError::new(
                ErrorCode::RateLimitRooms,
                format!("this API key owns {owned} rooms (limit {max})"),
            ));
        }
        parent_id
    };
    let attrs = Attrs {
        parent_id,
        created_by: Some(s.me().to_string()),
        owner: Some(s.principal.clone()),
        public: c.public.unwrap_or(false),
        ephemeral: c.ephemeral.unwrap_or(false),
        encrypted: c.encrypted.unwrap_or(false),
        system: false,
    };
    let created = face
        .d
        .ledger
        .execute(create_command(
            &name,
            c.description.as_deref().unwrap_or_default(),
            &attrs,
        ))
        .await
        .map_err(wire)?;
    let gid = created
        .primary()
        .map(|e| e.group_id.clone())
        .unwrap_or_default();
    let (v, outs) = {
        let eng = face.d.ledger.engine();
        let g = room(&eng, &gid)?;
        face.shown.record(&face, &eng, g);
        (room_value(&face, &eng, g), visible_outboxes(&face, &eng, g))
    };
    let others: Vec<_> = outs
        .into_iter()
        .filter(|o| !Arc::ptr_eq(o, &s.out))
        .collect();
    s.after.push(After::Push(others, "room_created", v.clone()));
    Ok(v)
}

/// `join_room`: adds the agent as an actor, then pushes the room's events after the join.
pub(super) async fn join_room(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: RoomRef = parse(payload)?;
    let me = s.me().to_string();
    let name = s.agent.as_ref().map(|a| a.name.clone()).unwrap_or_default();
    let gid = {
        let eng = s.face.d.ledger.engine();
        let g = resolve_visible(&s.face, &eng, &r, &s.principal)?;
        if g.actor(&me).is_some() {
            return Err(WireError::new(
                ErrorCode::AlreadyInRoom,
                format!("{me} is already a member of {}", g.group_id),
            ));
        }
        g.group_id.clone()
    };
    // Not a member, so not its leader: leadership recorded for it outlived its departure
    // (removed over the CCCS IPC, or a crash before the clearing was recorded).
    super::coord::clear_stale_leader(&s.face, &gid, &me).await;
    let mut spec = Map::new();
    spec.insert("actor_id".into(), json!(me));
    spec.insert("title".into(), json!(name));
    spec.insert("runtime".into(), json!(RUNTIME));
    spec.insert(PRINCIPAL_KEY.into(), json!(s.principal));
    let cursor = match s
        .face
        .d
        .ledger
        .execute(Command::ActorAdd {
            group_id: gid.clone(),
            by: SERVICE.into(),
            spec,
        })
        .await
    {
        Ok(c) => c.primary().map(|e| e.seq).unwrap_or(0),
        Err(e) if e.code == Core::AlreadyExists => {
            return Err(WireError::new(
                ErrorCode::AlreadyInRoom,
                format!("{me} is already a member of {gid}"),
            ))
        }
        Err(e) => return Err(wire(e)),
    };
    s.subscribe(&gid, cursor);
    s.after.push(After::Turn(gid.clone(), me.clone(), "joined"));
    let eng = s.face.d.ledger.engine();
    let mut v = room_value(&s.face, &eng, room(&eng, &gid)?);
    v["seq"] = json!(cursor);
    Ok(v)
}

/// `leave_room`: removes the agent's actor and stops pushes.
pub(super) async fn leave_room(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: RoomRef = parse(payload)?;
    let me = s.me().to_string();
    let gid = {
        let eng = s.face.d.ledger.engine();
        let g = resolve_visible(&s.face, &eng, &r, &s.principal)?;
        if g.actor(&me).is_none() {
            return Err(WireError::new(
                ErrorCode::NotInRoom,
                format!("{me} is not a member of {}", g.group_id),
            ));
        }
        g.group_id.clone()
    };
    s.unsubscribe(&gid);
    if let Some(push) = remove_member(&s.face, &gid, &me, "left").await? {
        s.after.push(push);
    }
    Ok(json!({"room_id": gid}))
}

/// Removes a member (leave, or the reconnect window ran out), passes the turn token on,
/// and removes an ephemeral room its last member left (returning its `room_destroyed`).
pub(super) async fn remove_member(
    face: &Face,
    gid: &str,
    agent: &str,
    reason: &str,
) -> Result<Option<After>, WireError> {
    // Taken before the removal: afterwards the order no longer says who came after `agent`,
    // and its name (the actor title) is gone.
    let before = live::join_order(face, gid);
    // Until this departure is fully handled, the change follower leaves it to this function.
    let _departing = super::follow::Departing::new(face, gid, agent);
    let name = {
        let eng = face.d.ledger.engine();
        eng.group(gid)
            .and_then(|g| g.actor(agent))
            .map(|a| a.title.clone())
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| agent.to_string())
    };
    face.d
        .ledger
        .execute(Command::ActorRemove {
            group_id: gid.to_string(),
            by: SERVICE.into(),
            actor_id: agent.to_string(),
        })
        .await
        .map_err(wire)?;
    live::turn_after_removal(face, gid, agent, reason, &before);
    super::coord::member_gone(face, gid, agent, &name, reason).await;
    let empty_ephemeral = {
        let eng = face.d.ledger.engine();
        eng.group(gid)
            .is_some_and(|g| attrs(face, &eng, g).ephemeral && g.collaborators().next().is_none())
    };
    if empty_ephemeral {
        test_pause(PAUSE_BEFORE_EPHEMERAL_DESTROY).await;
        let _one_at_a_time = face.rooms_lock.lock().await;
        return destroy(face, gid).await;
    }
    Ok(None)
}

/// Debug builds only: milliseconds to wait between an ephemeral room's last member leaving and
/// the room's deletion, so a test can kill -9 the daemon between the two commits.
const PAUSE_BEFORE_EPHEMERAL_DESTROY: &str = "CONVENE_TEST_PAUSE_BEFORE_EPHEMERAL_DESTROY_MS";

/// Waits the milliseconds the environment variable `var` gives, in debug builds (a test's
/// window for a kill -9 between two commits); nothing in release builds.
async fn test_pause(var: &str) {
    if !cfg!(debug_assertions) {
        return;
    }
    if let Some(ms) = std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok()) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// Destroys an ephemeral room nobody is in (any more), pushing `room_destroyed` to everyone
/// who could see it: the change follower's rule for a room whose last member was removed
/// over another face or by a removal whose destruction a kill -9 cut off.
pub(super) async fn destroy_if_empty_ephemeral(face: &Face, gid: &str) {
    let _one_at_a_time = face.rooms_lock.lock().await;
    let empty = {
        let eng = face.d.ledger.engine();
        eng.group(gid).is_some_and(|g| {
            is_room(g) && attrs(face, &eng, g).ephemeral && g.collaborators().next().is_none()
        })
    };
    if !empty {
        return;
    }
    match destroy(face, gid).await {
        Ok(Some(push)) => {
            tracing::info!(
                room = gid,
                "cowchat: destroyed an ephemeral room left empty"
            );
            push.apply(face);
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(room = gid, error = %e, "cowchat: could not destroy an empty ephemeral room")
        }
    }
}

/// Deletes the room's group; returns the `room_destroyed` push for everyone who could see it.
async fn destroy(face: &Face, gid: &str) -> Result<Option<After>, WireError> {
    let outs = {
        let eng = face.d.ledger.engine();
        match eng.group(gid) {
            Some(g) => visible_outboxes(face, &eng, g),
            None => return Ok(None),
        }
    };
    face.d
        .ledger
        .execute(Command::GroupDelete {
            group_id: gid.to_string(),
            by: SERVICE.into(),
        })
        .await
        .map_err(wire)?;
    face.shown.forget(gid);
    {
        let mut live = face.live.lock();
        live.turns.remove(gid);
        live.turn_seqs.remove(gid);
    }
    face.coord.state.lock().forget_room(gid);
    Ok(Some(After::Push(
        outs,
        "room_destroyed",
        json!({"room_id": gid}),
    )))
}

/// Checks the caller may change the room: its owning key and its recorded creator id, and
/// not a system room.
fn check_owner(s: &Session, eng: &Engine, g: &Group) -> Result<(), WireError> {
    let a = attrs(&s.face, eng, g);
    if a.system {
        return Err(WireError::new(
            ErrorCode::AccessDenied,
            "system rooms cannot be renamed or destroyed",
        ));
    }
    let owner_ok = a.owner.as_deref().unwrap_or(keys::PRIMARY) == s.principal;
    if !owner_ok || a.created_by.as_deref() != Some(s.me()) {
        return Err(WireError::new(
            ErrorCode::AccessDenied,
            "only the room's creator (same API key and agent_id) may do this",
        ));
    }
    Ok(())
}

/// `rename_room`: owner only; publishes `room_updated` to everyone who can see the room.
pub(super) async fn rename_room(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: RenameRoom = parse(payload)?;
    let name = room_name(&r.name)?;
    let face = s.face.clone();
    let _one_at_a_time = face.rooms_lock.lock().await;
    // The resolved room's id, never `r.room_id` as given: that may be a room name (resolved
    // by the fallback) that is also the id of a group that is not a room.
    let gid = {
        let eng = face.d.ledger.engine();
        let g = resolve_visible(
            &face,
            &eng,
            &RoomRef {
                room_id: Some(r.room_id.clone()),
                name: None,
            },
            &s.principal,
        )?;
        check_owner(s, &eng, g)?;
        if name == LOBBY
            || by_name(&face, &eng, &name, &s.principal).is_some_and(|o| o.group_id != g.group_id)
        {
            return Err(WireError::new(
                ErrorCode::RoomNameTaken,
                format!("a room named {name} exists"),
            ));
        }
        g.group_id.clone()
    };
    let mut patch = Map::new();
    patch.insert(ROOM_KEY.into(), json!(name));
    face.d
        .ledger
        .execute(Command::GroupSettingsUpdate {
            group_id: gid.clone(),
            by: SERVICE.into(),
            patch,
        })
        .await
        .map_err(wire)?;
    let (v, outs) = {
        let eng = face.d.ledger.engine();
        let g = room(&eng, &gid)?;
        face.shown.record(&face, &eng, g);
        (room_value(&face, &eng, g), visible_outboxes(&face, &eng, g))
    };
    s.after.push(After::Push(outs, "room_updated", v.clone()));
    Ok(v)
}

/// `destroy_room`: owner only; removes the room's group (messages, votes, tasks, pushes)
/// from the active state and publishes `room_destroyed`.
pub(super) async fn destroy_room(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: RoomRef = parse(payload)?;
    let face = s.face.clone();
    let _one_at_a_time = face.rooms_lock.lock().await;
    let gid = {
        let eng = face.d.ledger.engine();
        let g = resolve_visible(&face, &eng, &r, &s.principal)?;
        check_owner(s, &eng, g)?;
        g.group_id.clone()
    };
    if let Some(push) = destroy(&face, &gid).await? {
        s.after.push(push);
    }
    s.unsubscribe(&gid);
    Ok(json!({"room_id": gid}))
}

/// `list_rooms`: the rooms this key may see (optionally the sub-rooms of `parent_id`), with
/// `member_count` and `last_activity` (time of the room's newest ledger event), from the room
/// directory (no scan of every group).
pub(super) async fn list_rooms(
    s: &Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let l: ListRooms = parse(payload)?;
    let mut rooms: Vec<Value> = {
        let eng = s.face.d.ledger.engine();
        s.face
            .names
            .visible(&eng, &s.principal, l.parent_id.as_deref())
            .into_iter()
            .map(|g| room_value(&s.face, &eng, g))
            .collect()
    };
    let readers = s.face.d.ledger.readers().clone();
    let ids: Vec<String> = rooms
        .iter()
        .map(|r| r["room_id"].as_str().unwrap_or_default().to_string())
        .collect();
    let last = super::messages::blocking(move || {
        ids.iter()
            .map(|g| {
                Ok(readers
                    .events_before(g, 0, 1, &[])?
                    .into_iter()
                    .next()
                    .map(|e| e.ts))
            })
            .collect::<Result<Vec<_>, convene_store::StoreError>>()
    })
    .await?;
    for (r, ts) in rooms.iter_mut().zip(last) {
        r["last_activity"] = ts
            .map(Value::String)
            .unwrap_or_else(|| r["created_at"].clone());
    }
    Ok(json!({"rooms": rooms}))
}

/// The members of a room as wire Agent objects.
pub(super) fn members(face: &Face, g: &Group) -> Vec<Value> {
    let live = face.live.lock();
    g.collaborators()
        .map(|a| live.agent_value(&a.id, &a.title))
        .collect()
}

/// `room_info`: the room, its members, its sub-rooms and the turn token.
pub(super) async fn room_info(
    s: &Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: RoomRef = parse(payload)?;
    let (room, agents, subs, gid) = {
        let eng = s.face.d.ledger.engine();
        let g = resolve_visible(&s.face, &eng, &r, &s.principal)?;
        let subs: Vec<Value> = s
            .face
            .names
            .visible(&eng, &s.principal, Some(&g.group_id))
            .into_iter()
            .map(|c| room_value(&s.face, &eng, c))
            .collect();
        (
            room_value(&s.face, &eng, g),
            members(&s.face, g),
            subs,
            g.group_id.clone(),
        )
    };
    Ok(json!({
        "room": room,
        "agents": agents,
        "sub_rooms": subs,
        "current_turn_holder": live::turn_holder(&s.face, &gid),
        "turn_order": live::turn_order(&s.face, &gid),
    }))
}
