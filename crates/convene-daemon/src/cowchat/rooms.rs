//! Agents and rooms: `register`, `create_room`, `join_room`, `leave_room`, `list_rooms`,
//! `room_info`, `list_agents`.
//!
//! Mapping: a room is a group whose settings carry `cowchat_room` (the name; the group
//! title is the name too) and `cowchat` (attributes). The name → group map is derived from
//! the engine's committed group state on every lookup, so it cannot drift from the ledger.
//! Joining adds the agent id as an actor (`runtime: cowchat`); leaving removes it.

use convene_core::{Command, Engine, ErrorCode as Core, Group};
use convene_cowchat::{
    parse, CreateRoom, ErrorCode, JoinRoom, ListAgents, Register, RoomRef, WireError,
};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::conn::{Agent, Session};
use super::{wire, ATTRS_KEY, ROOM_KEY, RUNTIME, SERVICE};
use crate::ipc::Trust;

/// The room name of a group, if the group is a Cowchat room.
fn room_name(g: &Group) -> Option<&str> {
    g.settings.extra.get(ROOM_KEY).and_then(Value::as_str)
}

/// A room by id.
pub(super) fn room<'a>(eng: &'a Engine, room_id: &str) -> Result<&'a Group, WireError> {
    eng.group(room_id)
        .filter(|g| room_name(g).is_some())
        .ok_or_else(|| WireError::new(ErrorCode::RoomNotFound, format!("no room {room_id}")))
}

/// A room by id or, when no id is given, by name.
pub(super) fn resolve<'a>(eng: &'a Engine, r: &RoomRef) -> Result<&'a Group, WireError> {
    match (&r.room_id, &r.name) {
        (Some(id), _) => room(eng, id),
        (None, Some(name)) => by_name(eng, name).ok_or_else(|| {
            WireError::new(ErrorCode::RoomNotFound, format!("no room named {name}"))
        }),
        (None, None) => Err(WireError::payload("room_id or name is required")),
    }
}

fn by_name<'a>(eng: &'a Engine, name: &str) -> Option<&'a Group> {
    eng.groups()
        .into_iter()
        .find(|g| room_name(g) == Some(name))
}

fn room_value(g: &Group) -> Value {
    let attrs = g
        .settings
        .extra
        .get(ATTRS_KEY)
        .cloned()
        .unwrap_or_else(|| json!({}));
    json!({
        "room_id": g.group_id,
        "name": room_name(g).unwrap_or_default(),
        "description": g.topic,
        "parent_id": attrs.get("parent_id").cloned().unwrap_or(Value::Null),
        "public": true,
        "ephemeral": false,
        "encrypted": false,
        "created_at": g.created_at,
        "member_count": g.collaborators().count(),
    })
}

fn me(s: &Session) -> Agent {
    s.agent.clone().unwrap_or_else(|| Agent {
        id: String::new(),
        name: String::new(),
    })
}

/// A server-assigned agent id: the name's safe characters plus 10 hex digits of a hash of
/// the time, the process and a counter (unique enough for ids, not a secret).
fn new_agent_id(name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let slug: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(40)
        .collect();
    let slug = if slug.is_empty() {
        "agent".to_string()
    } else {
        slug
    };
    let mut h = Sha256::new();
    h.update(format!("{:?}", std::time::SystemTime::now()));
    h.update(std::process::id().to_le_bytes());
    h.update(N.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    format!("{slug}-{}", &hex::encode(h.finalize())[..10])
}

/// `register`: checks the version (and the key for remote peers), assigns or accepts the
/// agent id, and resumes live pushes for the rooms the agent is already a member of.
pub(super) async fn register(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: Register = parse(payload)?;
    r.validate()?;
    if s.trust == Trust::Remote && r.key.as_deref() != Some(s.face.d.api_key.as_str()) {
        return Err(WireError::new(
            ErrorCode::Unauthorized,
            "remote peers must register with the daemon's API key",
        ));
    }
    let name = r
        .name
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| "agent".into());
    let id = r.agent_id.unwrap_or_else(|| new_agent_id(&name));
    s.face
        .presence
        .lock()
        .entry(id.clone())
        .or_insert_with(|| (name.clone(), 0))
        .1 += 1;
    s.agent = Some(Agent {
        id: id.clone(),
        name: name.clone(),
    });
    // Reconnect: live pushes resume from the current head (no replay yet).
    let member_of: Vec<(String, u64)> = {
        let eng = s.face.d.ledger.engine();
        eng.groups()
            .into_iter()
            .filter(|g| room_name(g).is_some() && g.actor(&id).is_some())
            .map(|g| (g.group_id.clone(), g.last_seq))
            .collect()
    };
    for (gid, head) in &member_of {
        s.subscribe(gid, *head);
    }
    let rooms: Vec<&String> = member_of.iter().map(|(g, _)| g).collect();
    Ok(json!({
        "agent_id": id,
        "name": name,
        "protocol_version": convene_cowchat::PROTOCOL_VERSION,
        "server": "convene",
        "server_version": env!("CARGO_PKG_VERSION"),
        "heartbeat_ms": s.face.d.heartbeat.as_millis() as u64,
        "max_frame_bytes": convene_cowchat::MAX_FRAME_BYTES,
        "rooms": rooms,
    }))
}

/// `create_room`: `group.create` then `group.settings_update` naming the room. The creator
/// does not join implicitly (`join_room` does that).
pub(super) async fn create_room(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let c: CreateRoom = parse(payload)?;
    c.validate()?;
    let face = s.face.clone();
    let _one_at_a_time = face.create.lock().await;
    {
        let eng = face.d.ledger.engine();
        if by_name(&eng, &c.name).is_some() {
            return Err(WireError::new(
                ErrorCode::RoomExists,
                format!("a room named {} exists", c.name),
            ));
        }
        if let Some(p) = &c.parent_id {
            room(&eng, p)?;
        }
    }
    let created = face
        .d
        .ledger
        .execute(Command::GroupCreate {
            by: SERVICE.into(),
            title: c.name.clone(),
            topic: c.description.clone().unwrap_or_default(),
        })
        .await
        .map_err(wire)?;
    let gid = created
        .primary()
        .map(|e| e.group_id.clone())
        .unwrap_or_default();
    let mut patch = Map::new();
    patch.insert(ROOM_KEY.into(), json!(c.name));
    patch.insert(
        ATTRS_KEY.into(),
        json!({"parent_id": c.parent_id, "created_by": me(s).id}),
    );
    face.d
        .ledger
        .execute(Command::GroupSettingsUpdate {
            group_id: gid.clone(),
            by: SERVICE.into(),
            patch,
        })
        .await
        .map_err(wire)?;
    let eng = face.d.ledger.engine();
    Ok(room_value(room(&eng, &gid)?))
}

/// `join_room`: adds the agent as an actor when it is not one yet (idempotent), then
/// pushes the room's events after the join.
pub(super) async fn join_room(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: JoinRoom = parse(payload)?;
    let a = me(s);
    let (gid, member) = {
        let eng = s.face.d.ledger.engine();
        let g = resolve(&eng, &r)?;
        (g.group_id.clone(), g.actor(&a.id).map(|_| g.last_seq))
    };
    let cursor = match member {
        Some(head) => head,
        None => {
            let mut spec = Map::new();
            spec.insert("actor_id".into(), json!(a.id));
            spec.insert("title".into(), json!(a.name));
            spec.insert("runtime".into(), json!(RUNTIME));
            match s
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
                // Another connection of the same agent joined first: already a member.
                Err(e) if e.code == Core::AlreadyExists => s
                    .face
                    .d
                    .ledger
                    .engine()
                    .group(&gid)
                    .map(|g| g.last_seq)
                    .unwrap_or(0),
                Err(e) => return Err(wire(e)),
            }
        }
    };
    s.subscribe(&gid, cursor);
    let eng = s.face.d.ledger.engine();
    let mut v = room_value(room(&eng, &gid)?);
    v["seq"] = json!(cursor);
    v["already_member"] = json!(member.is_some());
    Ok(v)
}

/// `leave_room`: removes the agent's actor and stops pushes.
pub(super) async fn leave_room(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: RoomRef = parse(payload)?;
    let a = me(s);
    let gid = {
        let eng = s.face.d.ledger.engine();
        let g = resolve(&eng, &r)?;
        if g.actor(&a.id).is_none() {
            return Err(WireError::new(
                ErrorCode::NotMember,
                format!("{} is not a member of {}", a.id, g.group_id),
            ));
        }
        g.group_id.clone()
    };
    s.unsubscribe(&gid);
    s.face
        .d
        .ledger
        .execute(Command::ActorRemove {
            group_id: gid.clone(),
            by: SERVICE.into(),
            actor_id: a.id,
        })
        .await
        .map_err(wire)?;
    Ok(json!({"room_id": gid}))
}

/// `list_rooms`: every room with `member_count` and `last_activity` (time of the newest
/// event of its group, or its creation time).
pub(super) async fn list_rooms(s: &Session) -> Result<Value, WireError> {
    let mut rooms: Vec<Value> = {
        let eng = s.face.d.ledger.engine();
        eng.groups()
            .into_iter()
            .filter(|g| room_name(g).is_some())
            .map(room_value)
            .collect()
    };
    let readers = s.face.d.ledger.readers().clone();
    let ids: Vec<String> = rooms
        .iter()
        .map(|r| r["room_id"].as_str().unwrap_or_default().to_string())
        .collect();
    let last = tokio::task::spawn_blocking(move || {
        ids.iter()
            .map(|g| {
                readers
                    .events_before(g, 0, 1, &[])
                    .ok()
                    .and_then(|v| v.into_iter().next())
                    .map(|e| e.ts)
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| WireError::new(ErrorCode::Internal, e.to_string()))?;
    for (r, ts) in rooms.iter_mut().zip(last) {
        r["last_activity"] = ts
            .map(Value::String)
            .unwrap_or_else(|| r["created_at"].clone());
    }
    Ok(json!({"rooms": rooms}))
}

fn members(s: &Session, g: &Group) -> Vec<Value> {
    g.collaborators()
        .map(|a| json!({"agent_id": a.id, "name": a.title, "online": s.face.online(&a.id)}))
        .collect()
}

/// `room_info`: the room and its members.
pub(super) async fn room_info(
    s: &Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: RoomRef = parse(payload)?;
    let eng = s.face.d.ledger.engine();
    let g = resolve(&eng, &r)?;
    let mut v = room_value(g);
    v["members"] = json!(members(s, g));
    v["head_seq"] = json!(g.last_seq);
    Ok(v)
}

/// `list_agents`: members of `room_id`, or every agent connected now.
pub(super) fn list_agents(s: &Session, payload: Map<String, Value>) -> Result<Value, WireError> {
    let l: ListAgents = parse(payload)?;
    if let Some(rid) = &l.room_id {
        let eng = s.face.d.ledger.engine();
        return Ok(json!({"room_id": rid, "agents": members(s, room(&eng, rid)?)}));
    }
    let mut agents: Vec<Value> = s
        .face
        .presence
        .lock()
        .iter()
        .map(|(id, (name, _))| json!({"agent_id": id, "name": name, "online": true}))
        .collect();
    agents.sort_by(|a, b| a["agent_id"].as_str().cmp(&b["agent_id"].as_str()));
    Ok(json!({"agents": agents}))
}
