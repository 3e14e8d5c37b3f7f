//! Agents: `register` (with reconnect), `list_agents`, `set_presence`, `set_typing`, and
//! what happens when an agent's last connection closes or its reconnect window runs out.

use convene_cowchat::{parse, ListAgents, Register, SetPresence, SetTyping, WireError};
use std::collections::HashMap;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::conn::{After, Agent, Session};
use super::live;
use super::rooms::{self, is_room};
use super::{keys, limits, Face, PRINCIPAL_KEY, RUNTIME};
use convene_cowchat::ErrorCode;

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

/// Rooms the agent is a member of that `principal` may see, with their heads (an id can be
/// a member of another key's private room without being that key's: see
/// [`rooms::member_room`]).
fn visible_rooms_of(face: &Face, agent: &str, principal: &str) -> Vec<(String, u64)> {
    let eng = face.d.ledger.engine();
    face.names
        .groups_of(&eng, agent)
        .into_iter()
        .filter(|g| is_room(g) && rooms::visible(face, &eng, g, principal))
        .map(|g| (g.group_id.clone(), g.last_seq))
        .collect()
}

/// Rooms the agent is a member of, with their heads.
fn rooms_of(face: &Face, agent: &str) -> Vec<(String, u64)> {
    let eng = face.d.ledger.engine();
    face.names
        .groups_of(&eng, agent)
        .into_iter()
        .filter(|g| is_room(g))
        .map(|g| (g.group_id.clone(), g.last_seq))
        .collect()
}

/// Who may register `id`, from the ledger (the live binding is checked in
/// [`live::Live::attach`]). An actor record is authoritative: a Cowchat member carries the
/// key it joined with (`cowchat_principal`), and only that key may claim its id. An actor
/// with no recorded key was added over the CCCS IPC (an operator's agent, a bridge): only
/// the daemon key (`primary`) may claim it, since it can act as any actor over the IPC
/// already; any other key could otherwise post as it wherever it is a member. A Cowchat
/// member from before keys were recorded (`runtime: cowchat`, no key) stays unbound.
fn check_claim(face: &Face, id: &str, principal: &str) -> Result<(), WireError> {
    let eng = face.d.ledger.engine();
    for g in face.names.groups_of(&eng, id) {
        let Some(a) = g.actor(id) else { continue };
        let owner = a.extra.get(PRINCIPAL_KEY).and_then(Value::as_str);
        let ok = match owner {
            Some(p) => p == principal,
            None => a.runtime == RUNTIME || principal == keys::PRIMARY,
        };
        if !ok {
            let why = if owner.is_some() {
                "belongs to another API key"
            } else {
                "is an actor added over the CCCS IPC; only the daemon key may register it"
            };
            return Err(WireError::new(
                ErrorCode::AgentIdTaken,
                format!("agent id {id} {why}"),
            ));
        }
    }
    Ok(())
}

/// `register`: checks the version and the key, binds the agent id to the key, restores
/// the agent's rooms and, back within the reconnect window, replays what it missed.
pub(super) async fn register(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let r: Register = parse(payload)?;
    r.validate()?;
    let principal = keys::principal(&s.face.cfg.home, r.key.as_deref(), s.trust)?;
    let limits = limits::effective(&s.face.cfg.home, &principal, &s.face.cfg.limits).map_err(|e| {
        // Fail closed: the defaults may be far looser than what the operator meant.
        tracing::warn!(principal = %principal, error = %e, "cowchat: invalid limits file; register refused");
        WireError::new(
            ErrorCode::Internal,
            "the limits configured for this API key are invalid; ask the operator to fix them (convene auth show-limits)",
        )
    })?;
    let name = r
        .name
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "agent".into());
    let id = r.agent_id.unwrap_or_else(|| new_agent_id(&name));
    check_claim(&s.face, &id, &principal)?;
    let reconnect = r.reconnect == Some(true);
    let (conn, cursors) = {
        let mut live = s.face.live.lock();
        let open = if reconnect {
            live.open_cursors(&id)
        } else {
            HashMap::new()
        };
        let conn = live.attach(
            &id,
            &name,
            &principal,
            r.capabilities.unwrap_or_default(),
            s.out.clone(),
            &limits,
        )?;
        if let Some(c) = live.conns.get_mut(&conn) {
            c.key = r
                .key
                .as_deref()
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(String::from);
        }
        let mut cursors = live.come_back(&id, s.face.cfg.reconnect_window);
        for (room, at) in open {
            cursors.entry(room).or_insert(at);
        }
        (conn, cursors)
    };
    s.conn_id = Some(conn);
    s.principal = principal;
    s.agent = Some(Agent {
        id: id.clone(),
        name: name.clone(),
    });
    let member_of = visible_rooms_of(&s.face, &id, &s.principal);
    for (gid, head) in &member_of {
        // Back within the window: push from where the last connection stopped.
        s.subscribe(gid, cursors.get(gid).copied().unwrap_or(*head).min(*head));
        s.after.push(After::Turn(gid.clone(), id.clone(), "joined"));
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
        "limits": limits.to_json(),
        "rooms": rooms,
        "replayed": member_of.iter().any(|(g, _)| cursors.contains_key(g)),
    }))
}

/// `list_agents`: members of `room_id`, or the agents connected now that this key may know
/// of: its own, and members of a room it can see (another key's agent elsewhere, with its
/// presence detail and capabilities, is not this key's business).
pub(super) fn list_agents(s: &Session, payload: Map<String, Value>) -> Result<Value, WireError> {
    let l: ListAgents = parse(payload)?;
    if let Some(rid) = &l.room_id {
        let eng = s.face.d.ledger.engine();
        let g = rooms::resolve_visible(
            &s.face,
            &eng,
            &convene_cowchat::RoomRef {
                room_id: Some(rid.clone()),
                name: None,
            },
            &s.principal,
        )?;
        return Ok(json!({"room_id": g.group_id, "agents": rooms::members(&s.face, g)}));
    }
    let seen: std::collections::HashSet<String> = {
        let eng = s.face.d.ledger.engine();
        s.face
            .names
            .visible(&eng, &s.principal, None)
            .into_iter()
            .flat_map(|g| g.collaborators().map(|a| a.id.clone()).collect::<Vec<_>>())
            .collect()
    };
    let live = s.face.live.lock();
    let mut ids: Vec<&String> = live
        .agents
        .iter()
        .filter(|(id, a)| a.principal == s.principal || seen.contains(*id))
        .map(|(id, _)| id)
        .collect();
    ids.sort();
    let agents: Vec<Value> = ids.into_iter().map(|id| live.agent_value(id, id)).collect();
    Ok(json!({"agents": agents}))
}

/// Outboxes of every connection of every member of the agent's rooms that `principal` may see.
fn room_peers(
    face: &Face,
    agent: &str,
    principal: &str,
) -> Vec<std::sync::Arc<super::conn::Outbox>> {
    let mut peers: Vec<String> = {
        let eng = face.d.ledger.engine();
        face.names
            .groups_of(&eng, agent)
            .into_iter()
            .filter(|g| is_room(g) && rooms::visible(face, &eng, g, principal))
            .flat_map(|g| g.collaborators().map(|a| a.id.clone()).collect::<Vec<_>>())
            .collect()
    };
    peers.sort();
    peers.dedup();
    face.live.lock().outboxes(peers.iter().map(String::as_str))
}

/// `set_presence`: updates the agent's presence and tells the members of its rooms.
pub(super) fn set_presence(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let p: SetPresence = parse(payload)?;
    p.validate()?;
    let me = s.me().to_string();
    let name = {
        let mut live = s.face.live.lock();
        let Some(a) = live.agents.get_mut(&me) else {
            return Err(WireError::new(ErrorCode::NotRegistered, "register first"));
        };
        a.status = p.status.clone();
        a.status_detail = p.status_detail.clone();
        a.progress = p.progress;
        a.name.clone()
    };
    let v = json!({"agent_id": me, "agent_name": name, "status": p.status,
        "status_detail": p.status_detail, "progress": p.progress});
    s.after.push(After::Push(
        room_peers(&s.face, &me, &s.principal),
        "presence_update",
        v,
    ));
    Ok(json!({}))
}

/// `set_typing`: tells the room's other members.
pub(super) fn set_typing(s: &mut Session, payload: Map<String, Value>) -> Result<Value, WireError> {
    let t: SetTyping = parse(payload)?;
    let me = s.me().to_string();
    let others: Vec<String> = {
        let eng = s.face.d.ledger.engine();
        let g = rooms::member_room(&s.face, &eng, &t.room_id, &s.principal, &me)?;
        g.collaborators()
            .filter(|a| a.id != me)
            .map(|a| a.id.clone())
            .collect()
    };
    let name = s.agent.as_ref().map(|a| a.name.clone()).unwrap_or_default();
    let outs = s
        .face
        .live
        .lock()
        .outboxes(others.iter().map(String::as_str));
    s.after.push(After::Push(
        outs,
        "typing_indicator",
        json!({"room_id": t.room_id, "agent_id": me, "agent_name": name, "typing": t.typing}),
    ));
    Ok(json!({}))
}

/// The agent's last connection closed: pass its turn tokens on. It stays a member, and
/// keeps any leadership, for the reconnect window (the reaper ends both).
pub(super) async fn went_offline(face: &Face, agent: &str) {
    for (gid, _) in rooms_of(face, agent) {
        live::turn_event(face, &gid, agent, "disconnected");
    }
}

/// The reconnect window ran out: the agent leaves every room.
pub(super) async fn drop_memberships(face: &Face, agent: &str) {
    if face.live.lock().online(agent) {
        return; // came back in the meantime
    }
    for (gid, _) in rooms_of(face, agent) {
        match rooms::remove_member(face, &gid, agent, "disconnected").await {
            Ok(Some(owed)) => owed.apply(face),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(room = %gid, agent, error = %e, "cowchat: dropping a membership failed")
            }
        }
    }
}
