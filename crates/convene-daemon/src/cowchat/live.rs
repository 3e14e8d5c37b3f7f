//! Live-only state of the face: connections, presence, the advisory turn token, the
//! reconnect window and per-key counters. None of it is in the ledger on purpose: it
//! describes who is connected now, and a restart starts it afresh (agents that were members
//! get the reconnect window from startup, replaying from their saved points: `replay.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::conn::Outbox;
use super::limits::{Bucket, Limits};
use super::{agents, rooms, Face, PRINCIPAL_KEY, RUNTIME};
use convene_cowchat::{ErrorCode, WireError};

/// One open connection of a registered agent.
pub(super) struct ConnInfo {
    pub agent: String,
    pub principal: String,
    pub out: Arc<Outbox>,
    /// The API key presented at `register` (none for a keyless local client): when it no
    /// longer authenticates as `principal` (rotated, removed) the connection is closed.
    pub key: Option<String>,
}

/// A registered agent, while it has connections.
#[derive(Debug, Clone)]
pub(super) struct AgentLive {
    pub name: String,
    pub principal: String,
    pub conns: Vec<u64>,
    pub status: String,
    pub status_detail: Option<String>,
    pub progress: Option<u64>,
    pub last_active: String,
    pub capabilities: Vec<String>,
}

/// An agent whose last connection closed: its rooms' push cursors, for replay.
pub(super) struct Away {
    pub since: Instant,
    pub cursors: HashMap<String, u64>,
}

/// All live state, behind the face's one mutex (held briefly, never across an await).
#[derive(Default)]
pub(super) struct Live {
    pub conns: HashMap<u64, ConnInfo>,
    pub agents: HashMap<String, AgentLive>,
    /// agent id → principal that first registered it (an id is bound to its key), for the
    /// agents connected or away; pruned when the reconnect window runs out (the binding
    /// recorded on actors is read at every `register`).
    pub bound: HashMap<String, String>,
    pub away: HashMap<String, Away>,
    /// room id → current turn holder.
    pub turns: HashMap<String, String>,
    /// room id → seq of the latest message that moved the token (rule 2): a move for an
    /// earlier message, answered later than a concurrent one, is stale.
    pub turn_seqs: HashMap<String, u64>,
    pub buckets: HashMap<String, Bucket>,
    /// principal → its limits as read at its latest `register` (every connection of the
    /// key follows the latest read).
    pub limits: HashMap<String, Limits>,
    next_conn: u64,
}

fn now_ts() -> String {
    convene_core::event::format_ts(time::OffsetDateTime::now_utc())
}

impl Live {
    /// Registers a connection for `agent`; refuses an id bound to another key and a key
    /// over its agent limit. `limits` (just read for the key) become the key's limits.
    #[allow(clippy::too_many_arguments)]
    pub fn attach(
        &mut self,
        agent: &str,
        name: &str,
        principal: &str,
        capabilities: Vec<String>,
        out: Arc<Outbox>,
        limits: &Limits,
    ) -> Result<u64, WireError> {
        if let Some(p) = self.bound.get(agent) {
            if p != principal {
                return Err(WireError::new(
                    ErrorCode::AgentIdTaken,
                    format!("agent id {agent} belongs to another API key"),
                ));
            }
        }
        if !self.agents.contains_key(agent) {
            let n = self
                .agents
                .values()
                .filter(|a| a.principal == principal)
                .count();
            if n >= limits.agents_per_key {
                return Err(WireError::new(
                    ErrorCode::RateLimitAgents,
                    format!(
                        "this API key already has {n} agents connected (limit {})",
                        limits.agents_per_key
                    ),
                ));
            }
        }
        self.bound.insert(agent.to_string(), principal.to_string());
        self.limits.insert(principal.to_string(), *limits);
        self.next_conn += 1;
        let id = self.next_conn;
        self.conns.insert(
            id,
            ConnInfo {
                agent: agent.to_string(),
                principal: principal.to_string(),
                out,
                key: None,
            },
        );
        let a = self
            .agents
            .entry(agent.to_string())
            .or_insert_with(|| AgentLive {
                name: name.to_string(),
                principal: principal.to_string(),
                conns: Vec::new(),
                status: "idle".into(),
                status_detail: None,
                progress: None,
                last_active: now_ts(),
                capabilities: Vec::new(),
            });
        a.name = name.to_string();
        if !capabilities.is_empty() {
            a.capabilities = capabilities;
        }
        a.last_active = now_ts();
        a.conns.push(id);
        Ok(id)
    }

    /// Forgets a connection. Returns true when it was the agent's last one.
    pub fn detach(&mut self, conn: u64, cursors: HashMap<String, u64>) -> bool {
        let Some(c) = self.conns.remove(&conn) else {
            return false;
        };
        let Some(a) = self.agents.get_mut(&c.agent) else {
            return false;
        };
        a.conns.retain(|x| *x != conn);
        if !a.conns.is_empty() {
            return false;
        }
        self.agents.remove(&c.agent);
        self.away.insert(
            c.agent,
            Away {
                since: Instant::now(),
                cursors,
            },
        );
        true
    }

    /// Takes the agents away longer than `window` off the away list (the reaper then drops
    /// their memberships and calls [`Live::unbind_if_gone`]).
    pub fn take_expired(&mut self, window: Duration) -> Vec<String> {
        let gone: Vec<String> = self
            .away
            .iter()
            .filter(|(_, a)| a.since.elapsed() > window)
            .map(|(k, _)| k.clone())
            .collect();
        for g in &gone {
            self.away.remove(g);
        }
        gone
    }

    /// Forgets the live binding of an agent with no connection and no reconnect window left
    /// (its memberships were just dropped), so `bound` holds only agents connected or away.
    /// The binding recorded on its actors, if any remain, stays authoritative at `register`
    /// (`agents::check_claim`).
    pub fn unbind_if_gone(&mut self, agent: &str) {
        if !self.agents.contains_key(agent) && !self.away.contains_key(agent) {
            self.bound.remove(agent);
        }
    }

    /// The replay cursors of an agent back within the reconnect window.
    pub fn come_back(&mut self, agent: &str, window: Duration) -> HashMap<String, u64> {
        match self.away.remove(agent) {
            Some(a) if a.since.elapsed() <= window => a.cursors,
            _ => HashMap::new(),
        }
    }

    /// The push cursors of the agent's connections that are still open (the oldest per
    /// room): a client reconnecting before its old connection's close was noticed resumes
    /// from there rather than from the head.
    pub fn open_cursors(&self, agent: &str) -> HashMap<String, u64> {
        let mut m: HashMap<String, u64> = HashMap::new();
        for c in self
            .agents
            .get(agent)
            .map(|a| a.conns.as_slice())
            .unwrap_or_default()
        {
            if let Some(ci) = self.conns.get(c) {
                for (room, at) in ci.out.cursors.lock().iter() {
                    let v = at.load(std::sync::atomic::Ordering::Relaxed);
                    m.entry(room.clone())
                        .and_modify(|x| *x = (*x).min(v))
                        .or_insert(v);
                }
            }
        }
        m
    }

    /// Every agent's replay points: for a connected agent what its open connections
    /// flushed (the oldest per room), for an agent away the cursors it left with.
    pub fn replay_points(&self) -> super::replay::Points {
        let mut p: super::replay::Points = self
            .away
            .iter()
            .map(|(a, w)| (a.clone(), w.cursors.clone()))
            .collect();
        for a in self.agents.keys() {
            p.insert(a.clone(), self.open_cursors(a));
        }
        p
    }

    /// Notes activity (for `last_active`).
    pub fn touch(&mut self, agent: &str) {
        if let Some(a) = self.agents.get_mut(agent) {
            a.last_active = now_ts();
        }
    }

    /// The limits of `principal` (as read at its latest `register`; `base` before any).
    pub fn limits_of(&self, principal: &str, base: &Limits) -> Limits {
        self.limits.get(principal).copied().unwrap_or(*base)
    }

    /// Takes one message token of `principal`; refused with its rate limit.
    pub fn allow_message(&mut self, principal: &str, base: &Limits) -> Result<(), u32> {
        let l = self.limits_of(principal, base);
        let ok = self
            .buckets
            .entry(principal.to_string())
            .or_insert_with(|| Bucket::full(&l))
            .take(&l);
        if ok {
            Ok(())
        } else {
            Err(l.messages_per_sec)
        }
    }

    /// True when the agent has a connection now.
    pub fn online(&self, agent: &str) -> bool {
        self.agents.contains_key(agent)
    }

    /// The wire `Agent` object.
    pub fn agent_value(&self, id: &str, fallback_name: &str) -> Value {
        match self.agents.get(id) {
            Some(a) => json!({
                "agent_id": id, "name": a.name, "status": a.status,
                "status_detail": a.status_detail, "progress": a.progress, "online": true,
                "last_active": a.last_active, "capabilities": a.capabilities,
            }),
            None => json!({
                "agent_id": id, "name": fallback_name, "status": "offline",
                "status_detail": null, "progress": null, "online": false,
                "last_active": null, "capabilities": [],
            }),
        }
    }

    /// Outboxes of every connection of these agents.
    pub fn outboxes<'a>(&self, agents: impl IntoIterator<Item = &'a str>) -> Vec<Arc<Outbox>> {
        let mut v = Vec::new();
        for a in agents {
            if let Some(al) = self.agents.get(a) {
                for c in &al.conns {
                    if let Some(ci) = self.conns.get(c) {
                        v.push(ci.out.clone());
                    }
                }
            }
        }
        v
    }
}

/// Transient push (typing, presence, turn, room metadata) to these outboxes. Dropped for a
/// connection whose queue is full: these describe the present, the next one supersedes it.
pub(super) fn fan_out(outs: &[Arc<Outbox>], ftype: &str, payload: &Value) {
    for o in outs {
        o.try_frame(ftype, payload.clone());
    }
}

/// The turn order of a room: its connected members, in join order.
pub(super) fn turn_order(face: &Face, gid: &str) -> Vec<String> {
    let members = join_order(face, gid);
    let live = face.live.lock();
    members.into_iter().filter(|m| live.online(m)).collect()
}

/// The room's members in join order, connected or not.
pub(super) fn join_order(face: &Face, gid: &str) -> Vec<String> {
    let eng = face.d.ledger.engine();
    eng.group(gid)
        .map(|g| g.collaborators().map(|a| a.id.clone()).collect())
        .unwrap_or_default()
}

/// Applies a turn rule and pushes `turn_changed` to the room when the holder changed.
/// `actor` joined, sent or disconnected (`reason`).
pub(super) fn turn_event(face: &Face, gid: &str, actor: &str, reason: &str) {
    turn_event_in(face, gid, actor, reason, None, None);
}

/// Rule 2 for the message `seq` sent by `actor`. Concurrent senders' answers (and so their
/// moves) can be handled in any order: the token follows ledger order, so a move for a
/// message older than one that already moved it changes nothing.
pub(super) fn turn_sent(face: &Face, gid: &str, actor: &str, seq: u64) {
    turn_event_in(face, gid, actor, "message_sent", None, Some(seq));
}

/// Rule 3 for a member that was just removed (it left, or its reconnect window ran out):
/// `before` is the room's join order from before the removal, the only one that still
/// says where the removed holder stood.
pub(super) fn turn_after_removal(
    face: &Face,
    gid: &str,
    actor: &str,
    reason: &str,
    before: &[String],
) {
    turn_event_in(face, gid, actor, reason, Some(before), None);
}

/// [`turn_event`]; a removed holder's successor is looked up in `before` when given, else
/// in the room's join order now.
fn turn_event_in(
    face: &Face,
    gid: &str,
    actor: &str,
    reason: &str,
    before: Option<&[String]>,
    seq: Option<u64>,
) {
    let order = turn_order(face, gid);
    let (changed, holder, outs) = {
        let mut live = face.live.lock();
        if let Some(n) = seq {
            let latest = live.turn_seqs.entry(gid.to_string()).or_default();
            if *latest >= n {
                return; // a later message already moved it
            }
            *latest = n;
        }
        let cur = live.turns.get(gid).cloned();
        let next = match reason {
            // Rule 1: the first agent into an empty room holds the token.
            "joined" => match &cur {
                Some(h) if order.contains(h) => Some(h.clone()),
                _ => order.first().cloned(),
            },
            // Rule 2: after a send, the member after the sender in join order.
            "message_sent" => match order.iter().position(|m| m == actor) {
                Some(i) => Some(order[(i + 1) % order.len()].clone()),
                None => cur.clone(),
            },
            // Rule 3: the holder left or disconnected: the next member (the order no longer
            // holds the holder, so continue from its old place).
            _ => match &cur {
                Some(h) if h == actor || !order.contains(h) => match before {
                    Some(all) => next_after_removed(all, actor, &order),
                    None => next_after_removed(&join_order(face, gid), actor, &order),
                },
                _ => cur.clone(),
            },
        };
        let changed = next != cur;
        match &next {
            Some(n) => live.turns.insert(gid.to_string(), n.clone()),
            None => live.turns.remove(gid),
        };
        let outs = if changed {
            live.outboxes(order.iter().map(String::as_str))
        } else {
            Vec::new()
        };
        (changed, next, outs)
    };
    if changed {
        let p = json!({"room_id": gid, "current_turn_holder": holder, "turn_order": order, "reason": reason});
        fan_out(&outs, "turn_changed", &p);
    }
}

/// The member after `gone` in the room's full join order `all`, among those still
/// connected (`order`).
fn next_after_removed(all: &[String], gone: &str, order: &[String]) -> Option<String> {
    let start = all.iter().position(|m| m == gone);
    match start {
        Some(i) => (1..=all.len())
            .map(|k| &all[(i + k) % all.len()])
            .find(|m| order.contains(m))
            .cloned(),
        None => order.first().cloned(),
    }
}

/// The current holder of a room's token.
pub(super) fn turn_holder(face: &Face, gid: &str) -> Option<String> {
    face.live.lock().turns.get(gid).cloned()
}

/// At startup every Cowchat member is "just disconnected": it keeps its rooms for the
/// reconnect window, then the reaper removes it.
pub(super) fn adopt_members_at_start(face: &Face) {
    let members: Vec<(String, String, u64, Option<String>)> = {
        let eng = face.d.ledger.engine();
        eng.groups()
            .into_iter()
            .filter(|g| rooms::is_room(g))
            .flat_map(|g| {
                g.collaborators()
                    .filter(|a| a.runtime == RUNTIME)
                    .map(|a| {
                        let key = a.extra.get(PRINCIPAL_KEY).and_then(Value::as_str);
                        (
                            a.id.clone(),
                            g.group_id.clone(),
                            g.last_seq,
                            key.map(String::from),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    // Where each agent's sockets had got to when the daemon stopped (or at its last save
    // before a crash); a room without a saved point replays from the head at startup.
    let saved = super::replay::load(&face.cfg.home);
    let mut live = face.live.lock();
    for (agent, gid, head, principal) in members {
        // The key the agent joined with keeps its id (members from before this field: unbound).
        if let Some(p) = principal {
            live.bound.entry(agent.clone()).or_insert(p);
        }
        let at = saved
            .get(&agent)
            .and_then(|r| r.get(&gid))
            .map_or(head, |&c| c.min(head));
        live.away
            .entry(agent)
            .or_insert_with(|| Away {
                since: Instant::now(),
                cursors: HashMap::new(),
            })
            .cursors
            .insert(gid, at);
    }
}

/// Every few seconds: agents away longer than the reconnect window leave their rooms.
pub(super) fn spawn_reaper(face: Arc<Face>) {
    tokio::spawn(async move {
        let mut stop = face.d.shutdown_rx();
        let window = face.cfg.reconnect_window;
        let mut tick = tokio::time::interval(
            (window / 4).clamp(Duration::from_millis(100), Duration::from_secs(2)),
        );
        let mut saved = None;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            // Replay points, saved when they moved: a crash loses at most one tick of them.
            let points = face.live.lock().replay_points();
            if saved.as_ref() != Some(&points) {
                face.save_replay_points();
                saved = Some(points);
            }
            let expired = face.live.lock().take_expired(window);
            for agent in expired {
                agents::drop_memberships(&face, &agent).await;
                face.live.lock().unbind_if_gone(&agent);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attach(live: &mut Live, agent: &str, principal: &str) -> Result<u64, WireError> {
        live.attach(
            agent,
            agent,
            principal,
            Vec::new(),
            super::super::conn::Outbox::detached(),
            &Limits::default(),
        )
    }

    #[test]
    fn bindings_are_pruned_once_an_agent_is_neither_connected_nor_away() {
        let mut live = Live::default();
        let a = attach(&mut live, "a", "k1").unwrap();
        let b = attach(&mut live, "b", "k1").unwrap();
        let b2 = attach(&mut live, "b", "k1").unwrap();
        // Bound while connected and while away.
        assert!(live.detach(a, HashMap::new()));
        assert!(!live.detach(b, HashMap::new()));
        live.unbind_if_gone("a");
        live.unbind_if_gone("b");
        assert_eq!(live.bound.len(), 2);
        assert_eq!(
            attach(&mut live, "a", "k2").unwrap_err().code,
            ErrorCode::AgentIdTaken
        );
        // The window ran out for `a`: its binding goes; `b` is still connected.
        assert_eq!(live.take_expired(Duration::ZERO), vec!["a".to_string()]);
        live.unbind_if_gone("a");
        live.unbind_if_gone("b");
        assert_eq!(live.bound.keys().collect::<Vec<_>>(), vec!["b"]);
        // Another key may take the id now (the ledger's recorded binding is checked before
        // this, at register); many ids coming and going leave nothing behind.
        let a2 = attach(&mut live, "a", "k2").unwrap();
        assert!(live.detach(a2, HashMap::new()));
        for i in 0..1000 {
            let id = format!("tmp-{i}");
            let c = attach(&mut live, &id, "k3").unwrap();
            live.detach(c, HashMap::new());
        }
        for id in live.take_expired(Duration::ZERO) {
            live.unbind_if_gone(&id);
        }
        assert!(live.detach(b2, HashMap::new()));
        for id in live.take_expired(Duration::ZERO) {
            live.unbind_if_gone(&id);
        }
        assert!(live.bound.is_empty() && live.away.is_empty() && live.agents.is_empty());
    }
}
